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


# -- the floor: the bare drivers doing one write and one read of the same bytes ----------------


def payload() -> bytes:
    import orjson

    return orjson.dumps(checkpoint("floor").to_json())


async def floor_async(backend: str, tasks: int, rounds: int, pool: int) -> float:
    """put + get pairs per second of the bare asyncio driver: a SET and a GET (Redis), an
    upsert and a SELECT (PostgreSQL) of the checkpoint's bytes, ``tasks`` tasks on ``pool``
    connections."""
    body = payload()
    if backend == "redis":
        import redis.asyncio as aredis

        client = aredis.Redis.from_pool(
            aredis.BlockingConnectionPool.from_url(REDIS_URL, max_connections=pool)
        )

        async def pair(i: int) -> None:
            await client.set(f"floor-async-{i}", body)
            await client.get(f"floor-async-{i}")

        closing: Any = client.aclose
    else:
        from psycopg_pool import AsyncConnectionPool

        apool = AsyncConnectionPool(
            PG_URL, min_size=pool, max_size=pool, kwargs={"autocommit": True}, open=False
        )
        await apool.open(wait=True)
        async with apool.connection() as conn:
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS bench_async_floor (k text PRIMARY KEY, v bytea)"
            )

        async def pair(i: int) -> None:
            async with apool.connection() as conn:
                await conn.execute(
                    "INSERT INTO bench_async_floor VALUES (%s, %s) ON CONFLICT (k) DO UPDATE "
                    "SET v = excluded.v",
                    (f"a{i}", body),
                )
            async with apool.connection() as conn:
                cur = await conn.execute("SELECT v FROM bench_async_floor WHERE k = %s", (f"a{i}",))
                await cur.fetchone()

        closing = apool.close

    async def worker(i: int) -> None:
        for _ in range(rounds):
            await pair(i)

    await worker(0)
    started = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(tasks)))
    elapsed = time.perf_counter() - started
    await closing()
    return tasks * rounds / elapsed


async def floor_threads(backend: str, tasks: int, rounds: int, pool: int) -> float:
    """The same through the sync driver and ``asyncio.to_thread``."""
    body = payload()
    if backend == "redis":
        client = redis.Redis.from_url(REDIS_URL, max_connections=pool)

        def pair(i: int) -> None:
            client.set(f"floor-sync-{i}", body)
            client.get(f"floor-sync-{i}")

        closing: Callable[[], None] = client.close
    else:
        from psycopg_pool import ConnectionPool

        spool = ConnectionPool(
            PG_URL, min_size=pool, max_size=pool, kwargs={"autocommit": True}, open=True
        )

        def pair(i: int) -> None:
            with spool.connection() as conn:
                conn.execute(
                    "INSERT INTO bench_async_floor VALUES (%s, %s) ON CONFLICT (k) DO UPDATE "
                    "SET v = excluded.v",
                    (f"t{i}", body),
                )
            with spool.connection() as conn:
                conn.execute("SELECT v FROM bench_async_floor WHERE k = %s", (f"t{i}",)).fetchone()

        closing = spool.close

    async def worker(i: int) -> None:
        for _ in range(rounds):
            await asyncio.to_thread(pair, i)

    await worker(0)
    started = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(tasks)))
    elapsed = time.perf_counter() - started
    closing()
    return tasks * rounds / elapsed


def drop_floor(backend: str) -> None:
    if backend == "redis":
        client = redis.Redis.from_url(REDIS_URL)
        keys = list(client.scan_iter(match="floor-*", count=1000))
        if keys:
            client.delete(*keys)
        client.close()
    else:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute("DROP TABLE IF EXISTS bench_async_floor")


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


async def one_task(url: str, options: dict[str, Any], n: int) -> tuple[float, ...]:
    """Median put and get latency (ms) of one task: the AsyncStore's, and the sync Store's
    called directly, in alternating blocks of 50 in the same process (drift on a shared
    machine then moves both alike). Returns async put, async get, sync put, sync get."""
    astore = open_async_store(url, **options)
    await astore.setup()
    store = open_store(url, **options)
    item = checkpoint("one")
    times: dict[str, list[float]] = {"aput": [], "aget": [], "sput": [], "sget": []}
    for block in range(n // 50 + 1):
        for _ in range(50):
            started = time.perf_counter()
            await astore.put(item, key="a")
            times["aput"].append(time.perf_counter() - started)
            started = time.perf_counter()
            await astore.get("a")
            times["aget"].append(time.perf_counter() - started)
        for _ in range(50):
            started = time.perf_counter()
            store.put(item, key="s")
            times["sput"].append(time.perf_counter() - started)
            started = time.perf_counter()
            store.get("s")
            times["sget"].append(time.perf_counter() - started)
        if block == 0:  # connections, statements and caches warm: start counting
            times = {name: [] for name in times}
    await astore.close()
    store.close()
    return tuple(median_ms(times[name]) for name in ("aput", "aget", "sput", "sget"))


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
    try:
        sizes = (args.tasks, args.rounds, args.pool)
        row["floor_async"] = asyncio.run(floor_async(backend, *sizes))
        row["floor_threads"] = asyncio.run(floor_threads(backend, *sizes))
    finally:
        drop_floor(backend)
    row["stall_ms"], _ = fresh(lambda u, o: longest_stall(u, o, args.puts, debug=False))
    _, row["slow_callbacks"] = fresh(lambda u, o: longest_stall(u, o, args.puts, debug=True))
    latencies = fresh(lambda u, o: one_task(u, o, args.single))
    row["async_put"], row["async_get"], row["sync_put"], row["sync_get"] = latencies
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--pool", type=int, default=10)
    parser.add_argument("--puts", type=int, default=1000)
    parser.add_argument("--single", type=int, default=500)
    parser.add_argument("--only", default="redis,postgres")
    args = parser.parse_args()
    rows = [measure(backend, args) for backend in args.only.split(",")]
    print(
        f"\n{args.tasks} tasks x {args.rounds} rounds of put + get (100 messages), "
        f"{args.pool} connections\n"
    )
    print(
        "| backend | async put+get/s | to_thread put+get/s | async ÷ to_thread | bare drivers: "
        "async ÷ to_thread | longest stall in 1,000 concurrent puts | callbacks > 10 ms | "
        "one task: put async / sync ms | get async / sync ms |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['backend']} | {r['async_tps']:.0f} | {r['threads_tps']:.0f} | "
            f"{r['async_tps'] / r['threads_tps']:.2f}x | {r['floor_async']:.0f} ÷ "
            f"{r['floor_threads']:.0f} = {r['floor_async'] / r['floor_threads']:.2f}x | "
            f"{r['stall_ms']:.1f} ms | "
            f"{r['slow_callbacks']} | {r['async_put']:.3f} / {r['sync_put']:.3f} "
            f"({r['async_put'] / r['sync_put']:.2f}x) | {r['async_get']:.3f} / "
            f"{r['sync_get']:.3f} ({r['async_get'] / r['sync_get']:.2f}x) |"
        )


if __name__ == "__main__":
    main()
