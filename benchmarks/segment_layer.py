"""The store-side segment layer against a backend's own ``Appending``, in one run.

Issue 14 keeps a backend's own primitive for growing histories only where the generic path
(``_segments.Segmented`` over the five record operations) costs more per put. This measures,
on Redis and PostgreSQL (the machine's servers), S3 (a SeaweedFS started here), fsspec's
memory filesystem and the memory backend, both paths side by side: checkpointing after every message to N messages (total seconds, and the last tenth's
seconds per put against the first tenth's: flat is ~1), then a get of the N-message
checkpoint (median of 20). Alternating rounds; medians of ``--rounds``.

    .venv/bin/python benchmarks/segment_layer.py [--n 1000] [--rounds 3] [--only redis,s3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import servers
from workload import conversation, ours

from agent_checkpoint import Store, open_store
from agent_checkpoint._model import RunCheckpoint
from agent_checkpoint._segments import Segmented

_S3: list[Any] = []  # the run's SeaweedFS and its client, started on first use


def _open(backend: str, cleanup: servers.Cleanup) -> tuple[Store, Callable[[], None]]:
    if backend == "memory":
        store = open_store("memory://")
        return store, store.close
    if backend == "s3":
        if not _S3:
            server = servers.start_s3(cleanup)
            _S3.extend((server, server.client()))
            cleanup.add("close the S3 client", _S3[1].close)
        client, bucket = _S3[1], servers.unique("seg-")
        client.create_bucket(Bucket=bucket)
        store = open_store(f"s3://{bucket}/p", client=client)

        def drop_bucket() -> None:
            store.close()
            servers.s3_drop_bucket(client, bucket)

        return store, drop_bucket
    if backend == "fsspec":
        root = "/" + servers.unique("seg-")
        store = open_store(f"fsspec+memory://{root}")

        def drop_root() -> None:
            store.close()
            servers.fsspec_drop(servers.memory_fs(), root)

        return store, drop_root
    if backend == "redis":
        prefix = servers.unique("seg-")
        store = open_store(f"{servers.REDIS_URL}?prefix={prefix}")
        client = servers.redis_client()

        def clean() -> None:
            store.close()
            servers.redis_delete(client, "{" + servers.redis_glob_escape(prefix) + "*")

        return store, clean
    schema = servers.unique("seg_")
    store = open_store(f"{servers.PG_URL}?schema={schema}")
    store.setup()

    def drop() -> None:
        store.close()
        with servers.pg_connect() as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    return store, drop


def _grow(store: Store, history: list[object], n: int) -> tuple[float, float]:
    base = RunCheckpoint.new("bench", (), run_id="r")
    times = []
    for i in range(1, n + 1):
        ckpt = base.evolve(history=tuple(history[:i]))  # type: ignore[arg-type]
        start = time.perf_counter()
        store.put(ckpt, key="k")
        times.append(time.perf_counter() - start)
    tenth = max(n // 10, 1)
    return sum(times), statistics.mean(times[-tenth:]) / statistics.mean(times[:tenth])


def _get(store: Store) -> float:
    times = []
    for _ in range(20):
        start = time.perf_counter()
        store.get("k")
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default="memory,redis,postgres")
    parser.add_argument("--inline", type=int, default=None, help="the layer's inline_bytes")
    args = parser.parse_args()
    history = ours(conversation(args.n))
    print("| backend | path | puts to N, s | last/first tenth | get, ms |")
    print("|---|---|---|---|---|")
    cleanup = servers.Cleanup()
    try:
        _run(args, history, cleanup)
    finally:
        cleanup.run()


def _run(args: argparse.Namespace, history: list[object], cleanup: servers.Cleanup) -> None:
    for backend in args.only.split(","):
        rows: dict[str, list[tuple[float, float, float]]] = {"own": [], "segment layer": []}
        for _ in range(args.rounds):
            for path in rows:
                store, clean = _open(backend, cleanup)
                try:
                    if path == "segment layer" and not isinstance(store._records, Segmented):
                        options = {} if args.inline is None else {"inline_bytes": args.inline}
                        store = Store(Segmented(store.backend, **options))
                    elif path == "own" and isinstance(store._records, Segmented):
                        continue  # no primitive of its own: the layer is its only path
                    total, slope = _grow(store, history, args.n)
                    rows[path].append((total, slope, _get(store)))
                finally:
                    clean()
        for path, found in rows.items():
            if found:
                total, slope, get = (statistics.median(col) for col in zip(*found, strict=True))
                print(f"| {backend} | {path} | {total:.2f} | {slope:.2f} | {get * 1000:.2f} |")


if __name__ == "__main__":
    main()
