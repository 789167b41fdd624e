"""PostgreSQL's listing indexes with and without the key column (migration 9): the same rows in
two schemas, one set up to step 8 (``(saved_at DESC, key)``, ``(owner, saved_at DESC, key)``,
...) and one to the current step (``(saved_at DESC)``, ``(owner, saved_at DESC)``, ...), then
each listing and a put timed in alternating rounds (medians), and each index's size.

Rows are loaded as a LangGraph saver's lineages look (60-byte keys, one owner in ten, one
agent in ``--agents``), eight writers at once, and ANALYZEd.

    python benchmarks/pg_indexes.py [--rows 100000] [--rounds 8]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import servers

from agent_checkpoint import Store, open_store
from agent_checkpoint.backends import Query, Record, Summary
from agent_checkpoint.backends import _postgres as postgres
from agent_checkpoint.testing import checkpoint

BASE = 1_700_000_000_000


def record(i: int, rows: int, agents: int) -> Record:
    summary = Summary(
        key=f"langgraph/thread-{i * 7919 % rows:06d}//m/lineage-{i:032d}",
        run_id=f"r{i}",
        saved_at=BASE + i // 3,
        owner=f"owner{i % 10}",
        agent_id=f"langgraph:thread-{i % agents}",
        failure_phase=None,
        failure_iteration=None,
        message_count=2,
        size=0,
        revision=0,
    )
    return Record(summary, b'{"format":"conversation-v1"}')


def loaded(cleanup: servers.Cleanup, steps: Any, rows: int, agents: int) -> tuple[Store, str]:
    schema = servers.pg_schema(cleanup, "bench_idx_")
    store = open_store(f"{servers.PG_URL}?schema={schema}", max_size=8)
    cleanup.add(f"close the store on {schema}", store.close)
    saved, postgres.MIGRATIONS = postgres.MIGRATIONS, steps
    try:
        store.setup()
    finally:
        postgres.MIGRATIONS = saved
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(store.backend.save, (record(i, rows, agents) for i in range(rows))))
    with servers.pg_connect() as conn:
        conn.execute(f'ANALYZE "{schema}".agent_checkpoints')
    return store, schema


def index_mb(schema: str) -> dict[str, float]:
    with servers.pg_connect() as conn:
        found = conn.execute(
            "SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind = 'i' AND c.relname LIKE 'agent\\_checkpoints\\_%%'",
            (schema,),
        ).fetchall()
    return {name.removeprefix("agent_checkpoints_"): size / 1e6 for name, size in found}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--agents", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    if (problem := servers.pg_check()) is not None:
        sys.exit(f"no PostgreSQL: {problem}")
    cleanup = servers.Cleanup()
    stores: dict[str, Store] = {}
    schemas: dict[str, str] = {}
    try:
        for label, steps in (("with key", postgres.MIGRATIONS[:8]), ("without", None)):
            servers.log(f"loading {args.rows:,} rows, indexes {label} ...")
            store, schema = loaded(cleanup, steps or postgres.MIGRATIONS, args.rows, args.agents)
            stores[label], schemas[label] = store, schema
        cursors = {label: s.list(limit=100).cursor for label, s in stores.items()}
        put = checkpoint("a put")
        ops: dict[str, Callable[[Store, str], object]] = {
            "newest 100": lambda s, _: s.list(limit=100),
            "page 2 (cursor)": lambda s, label: s.list(limit=100, cursor=cursors[label]),
            "owner (1 in 10), 100": lambda s, _: s.list(owner="owner3", limit=100),
            f"agent (1 in {args.agents:,}), 50": lambda s, _: s.list(
                agent_id="langgraph:thread-7", limit=50
            ),
            "oldest first 100 (retention)": lambda s, _: s.backend.scan(
                Query(limit=100, oldest_first=True, saved_before=BASE + args.rows // 6)
            ),
            "put (a new key)": lambda s, _: s.put(put, key=f"p-{uuid.uuid4().hex}"),
        }
        times: dict[tuple[str, str], list[float]] = {(o, lb): [] for o in ops for lb in stores}
        for round_ in range(args.rounds):
            for op, fn in ops.items():
                order = list(stores.items())
                for label, store in order if round_ % 2 else reversed(order):
                    fn(store, label)
                    for _ in range(40):
                        begun = time.perf_counter()
                        fn(store, label)
                        times[(op, label)].append(time.perf_counter() - begun)
        print(f"{args.rows:,} rows, medians of {40 * args.rounds} calls each (ms)\n")
        print("| operation | indexes with the key | without | ratio |")
        print("|---|---|---|---|")
        for op in ops:
            wide, narrow = (1e3 * statistics.median(times[(op, lb)]) for lb in stores)
            print(f"| {op} | {wide:.3f} | {narrow:.3f} | {narrow / wide:.2f}x |")
        sizes = {label: index_mb(schema) for label, schema in schemas.items()}
        print("\n| index | MB with the key | MB without | ratio |")
        print("|---|---|---|---|")
        for name in ("newest_idx", "owner_idx", "agent_idx"):
            wide, narrow = sizes["with key"][name], sizes["without"][name]
            print(f"| {name} | {wide:.2f} | {narrow:.2f} | {narrow / wide:.2f}x |")
    finally:
        cleanup.run()


if __name__ == "__main__":
    main()
