"""AsyncStore against the sync Store called through ``asyncio.to_thread``, on Redis and PostgreSQL.

    .venv/bin/python benchmarks/async_store.py [--tasks 64] [--rounds 20] [--pool 10]

Three measurements per backend, in one run, on the machine's servers:

- throughput: ``--tasks`` tasks each doing ``--rounds`` put + get of a 100-message checkpoint
  (a key of their own), for the AsyncStore and for the sync Store through ``asyncio.to_thread``
  (the loop's default executor, as a user would), both with ``--pool`` connections;
- the longest event-loop stall during 1,000 concurrent puts: a heartbeat task asks for a
  1 ms sleep over and over and records how late it wakes (asyncio debug mode's slow-callback
  log is on too, and its count reported);
- one task alone: the median put and get latency, async against the sync Store called directly.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import time
import uuid
import warnings
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import psycopg
import redis
import workload
from ours import FIRST
from servers import PG_URL, REDIS_URL

from agent_checkpoint import RunCheckpoint, open_store
from agent_checkpoint._async_store import open_async_store

warnings.simplefilter("ignore")  # the machine's Redis keeps nothing on disk: said once is enough


def checkpoint(run: str) -> RunCheckpoint:
    history = workload.ours(workload.conversation(100))
    return RunCheckpoint.new(FIRST, history, run_id=run, last_completed_iteration=25)


def urls(backend: str, pool: int) -> tuple[str, dict[str, Any], Callable[[], None]]:
    """The store URL, its pool options for both stores, and how to remove what it held."""
    if backend == "redis":
        prefix = f"bench-async-{uuid.uuid4().hex[:8]}"

        def drop_redis() -> None:
            client = redis.Redis.from_url(REDIS_URL)
            keys = list(client.scan_iter(match="{" + prefix + "}*", count=1000))
            if keys:
                client.delete(*keys)
            client.close()

        return REDIS_URL, {"prefix": prefix, "max_connections": pool}, drop_redis
    schema = f"bench_async_{uuid.uuid4().hex[:8]}"

    def drop_pg() -> None:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    return f"{PG_URL}?schema={schema}", {"max_size": pool, "min_size": pool}, drop_pg


async def throughput_async(url: str, options: dict[str, Any], tasks: int, rounds: int) -> float:
    store = open_async_store(url, **options)
    await store.setup()
    item = checkpoint("async")

    async def worker(i: int) -> None:
        for _ in range(rounds):
            await store.put(item, key=f"a{i}")
            got = await store.get(f"a{i}")
            assert got is not None

    await worker(0)  # connections and statements warm
    started = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(tasks)))
    elapsed = time.perf_counter() - started
    await store.close()
    return tasks * rounds / elapsed


async def throughput_threads(url: str, options: dict[str, Any], tasks: int, rounds: int) -> float:
    sync_options = dict(options)
    store = open_store(url, **sync_options)
    store.setup()
    item = checkpoint("threads")

    async def worker(i: int) -> None:
        for _ in range(rounds):
            await asyncio.to_thread(store.put, item, key=f"t{i}")
            got = await asyncio.to_thread(store.get, f"t{i}")
            assert got is not None

    await worker(0)
    started = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(tasks)))
    elapsed = time.perf_counter() - started
    store.close()
    return tasks * rounds / elapsed


class SlowCallbacks(logging.Handler):
    """Counts asyncio debug mode's reports of a slow step of one of the store's calls (the
    benchmark's own steps, such as creating the 1,000 tasks, are not the store's)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "took" in message and "_async_store.py" in message:
            self.count += 1


async def longest_stall(
    url: str, options: dict[str, Any], puts: int, *, debug: bool
) -> tuple[float, int]:
    """The longest a 1 ms heartbeat woke late (ms) during ``puts`` concurrent puts, and, with
    ``debug`` (asyncio's debug mode, which slows every step), how many steps of the store's
    calls it reported slower than 10 ms."""
    loop = asyncio.get_running_loop()
    loop.set_debug(debug)
    loop.slow_callback_duration = 0.010
    handler = SlowCallbacks()
    logging.getLogger("asyncio").addHandler(handler)
    store = open_async_store(url, **options)
    await store.setup()
    item = checkpoint("stall")
    await store.put(item, key="warm")
    done = asyncio.Event()
    worst = 0.0

    async def heartbeat() -> None:
        nonlocal worst
        while not done.is_set():
            asked = time.perf_counter()
            await asyncio.sleep(0.001)
            worst = max(worst, (time.perf_counter() - asked - 0.001) * 1000)

    calls = [asyncio.create_task(store.put(item, key=f"s{i}")) for i in range(puts)]
    beat = asyncio.create_task(heartbeat())  # from here on: the store's work, not ours
    await asyncio.gather(*calls)
    done.set()
    await beat
    await store.close()
    loop.set_debug(False)
    logging.getLogger("asyncio").removeHandler(handler)
    return worst, handler.count


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


async def one_task_async(url: str, options: dict[str, Any], n: int) -> tuple[float, float]:
    store = open_async_store(url, **options)
    await store.setup()
    item = checkpoint("one")
    puts, gets = [], []
    for _ in range(n):
        started = time.perf_counter()
        await store.put(item, key="one")
        puts.append(time.perf_counter() - started)
        started = time.perf_counter()
        await store.get("one")
        gets.append(time.perf_counter() - started)
    await store.close()
    return median_ms(puts), median_ms(gets)


def one_task_sync(url: str, options: dict[str, Any], n: int) -> tuple[float, float]:
    store = open_store(url, **options)
    store.setup()
    item = checkpoint("one")
    puts, gets = [], []
    for _ in range(n):
        started = time.perf_counter()
        store.put(item, key="one")
        puts.append(time.perf_counter() - started)
        started = time.perf_counter()
        store.get("one")
        gets.append(time.perf_counter() - started)
    store.close()
    return median_ms(puts), median_ms(gets)


def measure(backend: str, args: argparse.Namespace) -> dict[str, Any]:
    row: dict[str, Any] = {"backend": backend}

    def fresh(run: Callable[[str, dict[str, Any]], Awaitable[Any]]) -> Any:
        url, options, drop = urls(backend, args.pool)
        try:
            return asyncio.run(run(url, options))  # type: ignore[arg-type]
        finally:
            drop()

    row["async_tps"] = fresh(lambda u, o: throughput_async(u, o, args.tasks, args.rounds))
    row["threads_tps"] = fresh(lambda u, o: throughput_threads(u, o, args.tasks, args.rounds))
    row["stall_ms"], _ = fresh(lambda u, o: longest_stall(u, o, args.puts, debug=False))
    _, row["slow_callbacks"] = fresh(lambda u, o: longest_stall(u, o, args.puts, debug=True))
    row["async_put"], row["async_get"] = fresh(lambda u, o: one_task_async(u, o, args.single))

    url, options, drop = urls(backend, args.pool)
    try:
        row["sync_put"], row["sync_get"] = one_task_sync(url, options, args.single)
    finally:
        drop()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--pool", type=int, default=10)
    parser.add_argument("--puts", type=int, default=1000)
    parser.add_argument("--single", type=int, default=300)
    parser.add_argument("--only", default="redis,postgres")
    args = parser.parse_args()
    rows = [measure(backend, args) for backend in args.only.split(",")]
    print(
        f"\n{args.tasks} tasks x {args.rounds} rounds of put + get (100 messages), "
        f"{args.pool} connections\n"
    )
    print(
        "| backend | async put+get/s | to_thread put+get/s | async ÷ to_thread | longest stall "
        "in 1,000 concurrent puts | callbacks > 10 ms | one task: put async / sync ms | "
        "get async / sync ms |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['backend']} | {r['async_tps']:.0f} | {r['threads_tps']:.0f} | "
            f"{r['async_tps'] / r['threads_tps']:.2f}x | {r['stall_ms']:.1f} ms | "
            f"{r['slow_callbacks']} | {r['async_put']:.3f} / {r['sync_put']:.3f} "
            f"({r['async_put'] / r['sync_put']:.2f}x) | {r['async_get']:.3f} / "
            f"{r['sync_get']:.3f} ({r['async_get'] / r['sync_get']:.2f}x) |"
        )


if __name__ == "__main__":
    main()
