"""What a durable commit costs in section (b) on PostgreSQL: a checkpoint after every message
up to N, by our store and by the append-only floor (one INSERT of a row per message), each with
the server's default ``synchronous_commit=on`` and with ``off``, the libpq option a store URL
passes through (``?options=-c%20synchronous_commit%3Doff``). With ``off``, a commit returns
before its WAL reaches the disk: a crash of the server (not of the agent) can lose the last
commits, up to ~0.6 s of them at the default ``wal_writer_delay``; nothing is ever corrupted.

Each variant runs ``--rounds`` times, alternating, in a fresh schema; the table gives medians.

    python benchmarks/pg_commit.py [--n 1000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

sys.path.insert(0, str(Path(__file__).resolve().parent))

import servers
import workload
from ours import FIRST  # the first message of every run the harness stores

from agent_checkpoint import RunCheckpoint, open_store

ASYNC = "-c synchronous_commit=off"


def ours(n: int, options: str) -> float:
    messages = workload.ours(workload.conversation(n))
    checkpoints = [
        RunCheckpoint.new(FIRST, messages[: i + 1], run_id="run-k", last_completed_iteration=i // 4)
        for i in range(n)
    ]
    schema = servers.unique("bench_commit_")
    extra = f"&options={quote(options)}" if options else ""
    try:
        with open_store(f"{servers.PG_URL}?schema={schema}{extra}") as store:
            store.setup()
            started = time.perf_counter()
            for checkpoint in checkpoints:  # built beforehand: only the store call is timed
                store.put(checkpoint, key="k")
            return time.perf_counter() - started
    finally:
        with servers.pg_connect() as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def floor(n: int, options: str) -> float:
    import orjson

    rows = [orjson.dumps(workload.message_json(t)) for t in workload.conversation(n)]
    schema = servers.unique("bench_commit_")
    with servers.pg_connect() as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
    try:
        with servers.pg_connect(options=f"-c search_path={schema} {options}") as conn:
            conn.execute("CREATE TABLE messages (key text, seq integer, body bytea NOT NULL, "
                         "PRIMARY KEY (key, seq))")  # fmt: skip
            insert = "INSERT INTO messages (key, seq, body) VALUES (%s, %s, %s)"
            started = time.perf_counter()
            for seq, data in enumerate(rows):
                conn.execute(insert, ("k", seq, data))
            return time.perf_counter() - started
    finally:
        with servers.pg_connect() as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if reason := servers.pg_check():
        print(f"PostgreSQL unavailable: {reason}", file=sys.stderr)
        return 1
    variants: dict[tuple[str, str], Callable[[int, str], float]] = {
        ("floor (append-only INSERT)", ""): floor,
        ("floor (append-only INSERT)", ASYNC): floor,
        ("ours", ""): ours,
        ("ours", ASYNC): ours,
    }
    totals: dict[tuple[str, str], list[float]] = {variant: [] for variant in variants}
    for _ in range(args.rounds):
        for (name, options), run in variants.items():
            totals[(name, options)].append(run(args.n, options))
    print(f"A checkpoint after every message up to N = {args.n:,} on PostgreSQL "
          f"(median of {args.rounds} rounds, s)\n")  # fmt: skip
    print("| target | synchronous_commit | total s | ÷ floor (same setting) |")
    print("|---|---|---|---|")
    for (name, options), times in totals.items():
        setting = "off" if options else "on (default)"
        base = statistics.median(totals[("floor (append-only INSERT)", options)])
        ratio = "" if name.startswith("floor") else f"{statistics.median(times) / base:.2f}x"
        print(f"| {name} | {setting} | {statistics.median(times):.3f} | {ratio} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
