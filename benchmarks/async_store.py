"""AsyncStore against the sync Store called through ``asyncio.to_thread``, on Redis and PostgreSQL.

    .venv/bin/python benchmarks/async_store.py [--tasks 64] [--rounds 20] [--pool 10]

Three measurements per backend, in one run, on the machine's servers, each beside the bare
drivers doing the same I/O (a SET and a GET; an upsert and a SELECT of the same bytes), the floor
of what the store can reach:

- throughput: ``--tasks`` tasks each doing ``--rounds`` put + get of a 100-message checkpoint
  (a key of their own), for the AsyncStore and for the sync Store through ``asyncio.to_thread``
  (the loop's default executor, as a user would), both with ``--pool`` connections;
- the event loop during 1,000 concurrent puts: how late a 1 ms heartbeat wakes at worst (one
  turn of the loop: every step ready in it), with the garbage collector on and off, against
  the bare async driver doing 1,000 concurrent writes on as many connections; and the longest
  single step of the loop, in wall time and in the loop thread's CPU time, with the time a
  garbage collection took inside it (a step's wall time beyond its CPU time is time the
  kernel gave the CPU to another process: the servers share these cores). asyncio debug
  mode's count of slow steps (over 10 ms) of the store's calls is reported too: debug mode
  slows every step;
- one task alone: the median put and get latency, async against the sync Store called
  directly, and the bare drivers' round trip (PING, ``SELECT 1``) and read of the same bytes,
  async against sync: the drivers' own cost of asyncio.
"""

from __future__ import annotations

import argparse
import asyncio
import asyncio.events
import gc
import logging
import statistics
import sys
import time
import uuid
import warnings
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
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


class BareAsync:
    """The bare asyncio driver on ``pool`` connections: ``write(k)`` is a SET (Redis) or an
    upsert (PostgreSQL) of the checkpoint's bytes, ``read(k)`` a GET or a SELECT of them."""

    def __init__(self, backend: str, pool: int) -> None:
        self.backend, self.pool, self.body = backend, pool, payload()

    async def open(self) -> BareAsync:
        if self.backend == "redis":
            import redis.asyncio as aredis

            self.client: Any = aredis.Redis.from_pool(
                aredis.BlockingConnectionPool.from_url(REDIS_URL, max_connections=self.pool)
            )
        else:
            from psycopg_pool import AsyncConnectionPool

            self.apool: Any = AsyncConnectionPool(
                PG_URL,
                min_size=self.pool,
                max_size=self.pool,
                kwargs={"autocommit": True},
                open=False,
            )
            await self.apool.open(wait=True)
            async with self.apool.connection() as conn:
                await conn.execute(
                    "CREATE TABLE IF NOT EXISTS bench_async_floor (k text PRIMARY KEY, v bytea)"
                )
        return self

    async def write(self, key: str) -> None:
        if self.backend == "redis":
            await self.client.set(f"floor-{key}", self.body)
            return
        async with self.apool.connection() as conn:
            await conn.execute(UPSERT, (key, self.body))

    async def read(self, key: str) -> None:
        if self.backend == "redis":
            await self.client.get(f"floor-{key}")
            return
        async with self.apool.connection() as conn:
            await (await conn.execute(SELECT, (key,))).fetchone()

    async def ping(self) -> None:
        """One round trip and nothing else: a PING, a ``SELECT 1``."""
        if self.backend == "redis":
            await self.client.ping()
            return
        async with self.apool.connection() as conn:
            await conn.execute("SELECT 1")

    async def close(self) -> None:
        if self.backend == "redis":
            await self.client.aclose()
        else:
            await self.apool.close()


class BareSync:
    """``BareAsync`` through the synchronous drivers."""

    def __init__(self, backend: str, pool: int) -> None:
        self.backend, self.body = backend, payload()
        if backend == "redis":
            self.client = redis.Redis.from_url(REDIS_URL, max_connections=pool)
        else:
            from psycopg_pool import ConnectionPool

            self.spool = ConnectionPool(
                PG_URL, min_size=pool, max_size=pool, kwargs={"autocommit": True}, open=True
            )

    def write(self, key: str) -> None:
        if self.backend == "redis":
            self.client.set(f"floor-{key}", self.body)
            return
        with self.spool.connection() as conn:
            conn.execute(UPSERT, (key, self.body))

    def read(self, key: str) -> None:
        if self.backend == "redis":
            self.client.get(f"floor-{key}")
            return
        with self.spool.connection() as conn:
            conn.execute(SELECT, (key,)).fetchone()

    def ping(self) -> None:
        if self.backend == "redis":
            self.client.ping()
            return
        with self.spool.connection() as conn:
            conn.execute("SELECT 1")

    def close(self) -> None:
        if self.backend == "redis":
            self.client.close()
        else:
            self.spool.close()


UPSERT = (
    "INSERT INTO bench_async_floor VALUES (%s, %s) ON CONFLICT (k) DO UPDATE SET v = excluded.v"
)
SELECT = "SELECT v FROM bench_async_floor WHERE k = %s"


async def floor_async(backend: str, tasks: int, rounds: int, pool: int) -> float:
    """put + get pairs per second of the bare asyncio driver, ``tasks`` tasks on ``pool``
    connections."""
    bare = await BareAsync(backend, pool).open()

    async def worker(i: int) -> None:
        for _ in range(rounds):
            await bare.write(f"a{i}")
            await bare.read(f"a{i}")

    await worker(0)
    started = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(tasks)))
    elapsed = time.perf_counter() - started
    await bare.close()
    return tasks * rounds / elapsed


async def floor_threads(backend: str, tasks: int, rounds: int, pool: int) -> float:
    """The same through the sync driver and ``asyncio.to_thread``."""
    bare = BareSync(backend, pool)

    def pair(i: int) -> None:
        bare.write(f"t{i}")
        bare.read(f"t{i}")

    async def worker(i: int) -> None:
        for _ in range(rounds):
            await asyncio.to_thread(pair, i)

    await worker(0)
    started = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(tasks)))
    elapsed = time.perf_counter() - started
    bare.close()
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


class Steps:
    """The longest step of the event loop while ``timing()``: its wall time, the loop thread's
    CPU time in it, and the time a garbage collection took inside it (all in ms)."""

    def __init__(self) -> None:
        self.wall = self.cpu = self.collecting = 0.0
        self.what = ""
        self._collected = 0.0

    def _collection(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self._collected += time.perf_counter() - self._started

    @contextmanager
    def timing(self) -> Iterator[Steps]:
        handle = asyncio.events.Handle
        run = handle._run

        def timed(step: Any) -> None:
            collected, cpu, wall = self._collected, time.thread_time(), time.perf_counter()
            run(step)
            wall = (time.perf_counter() - wall) * 1000
            if active and wall > self.wall:  # (the step that ends the timing is not counted)
                self.wall, self.cpu = wall, (time.thread_time() - cpu) * 1000
                self.collecting = (self._collected - collected) * 1000
                self.what = _step_of(step)

        active = True
        handle._run = timed  # type: ignore[method-assign]
        gc.callbacks.append(self._collection)
        try:
            yield self
        finally:
            active = False
            handle._run = run  # type: ignore[method-assign]
            gc.callbacks.remove(self._collection)


def _step_of(handle: Any) -> str:
    """What a loop step ran: a task's coroutine where it was a task's step."""
    callback = handle._callback
    task = getattr(callback, "__self__", None)
    if isinstance(task, asyncio.Task):
        return task.get_coro().__qualname__  # type: ignore[union-attr]
    return getattr(callback, "__qualname__", repr(callback))


async def heartbeat_during(calls: list[Awaitable[Any]], steps: Steps) -> float:
    """The longest a 1 ms heartbeat woke late (ms) while ``calls`` ran concurrently, and the
    longest step of the loop then (``steps``). Making the calls' tasks is this step's, not
    theirs: it comes before both."""
    done = asyncio.Event()
    worst = 0.0

    async def heartbeat() -> None:
        nonlocal worst
        while not done.is_set():
            asked = time.perf_counter()
            await asyncio.sleep(0.001)
            worst = max(worst, (time.perf_counter() - asked - 0.001) * 1000)

    tasks = [asyncio.ensure_future(call) for call in calls]
    with steps.timing():
        beat = asyncio.create_task(heartbeat())
        await asyncio.gather(*tasks)
        done.set()
        await beat
    return worst


@contextmanager
def collector(on: bool) -> Iterator[None]:
    if on:
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


async def longest_stall(
    url: str, options: dict[str, Any], puts: int, *, collect: bool = True
) -> tuple[float, Steps]:
    """The heartbeat's longest delay (ms) during ``puts`` concurrent puts, and the loop's
    longest step then; ``collect``: the garbage collector runs as usual."""
    store = open_async_store(url, **options)
    await store.setup()
    item = checkpoint("stall")
    await store.put(item, key="warm")
    steps = Steps()
    with collector(collect):
        worst = await heartbeat_during([store.put(item, key=f"s{i}") for i in range(puts)], steps)
    await store.close()
    return worst, steps


async def bare_stall(backend: str, puts: int, pool: int) -> float:
    """The heartbeat's longest delay (ms) during ``puts`` concurrent writes of the bare async
    driver on ``pool`` connections (the garbage collector on)."""
    bare = await BareAsync(backend, pool).open()
    await bare.write("warm")
    worst = await heartbeat_during([bare.write(f"s{i}") for i in range(puts)], Steps())
    await bare.close()
    return worst


async def slow_steps(url: str, options: dict[str, Any], puts: int) -> int:
    """How many steps of the store's calls asyncio's debug mode reports slower than 10 ms
    during ``puts`` concurrent puts."""
    loop = asyncio.get_running_loop()
    loop.set_debug(True)
    loop.slow_callback_duration = 0.010
    handler = SlowCallbacks()
    logging.getLogger("asyncio").addHandler(handler)
    store = open_async_store(url, **options)
    await store.setup()
    item = checkpoint("stall")
    await store.put(item, key="warm")
    await asyncio.gather(*(store.put(item, key=f"s{i}") for i in range(puts)))
    await store.close()
    loop.set_debug(False)
    logging.getLogger("asyncio").removeHandler(handler)
    return handler.count


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


async def one_task(url: str, options: dict[str, Any], backend: str, n: int) -> dict[str, float]:
    """Median latencies (ms) of one task: the AsyncStore's put and get and the sync Store's
    called directly, and the bare drivers' round trip (``ping``) and read of the checkpoint's
    bytes, async and sync; in alternating blocks of 10 in the same process (drift on a shared
    machine then moves all alike)."""
    astore = open_async_store(url, **options)
    await astore.setup()
    store = open_store(url, **options)
    abare = await BareAsync(backend, 1).open()
    sbare = BareSync(backend, 1)
    item = checkpoint("one")

    async def blocking(fn: Callable[[], Any]) -> None:
        fn()

    paths: dict[str, Callable[[], Awaitable[Any]]] = {
        "aput": lambda: astore.put(item, key="a"),
        "aget": lambda: astore.get("a"),
        "sput": lambda: blocking(lambda: store.put(item, key="s")),
        "sget": lambda: blocking(lambda: store.get("s")),
        "aping": abare.ping,
        "sping": lambda: blocking(sbare.ping),
        "aread": lambda: abare.read("one"),
        "sread": lambda: blocking(lambda: sbare.read("one")),
    }
    sbare.write("one")
    times: dict[str, list[float]] = {name: [] for name in paths}
    for block in range(n // 10 + 1):
        for name, path in paths.items():
            for _ in range(10):
                started = time.perf_counter()
                await path()
                times[name].append(time.perf_counter() - started)
        if block == 0:  # connections, statements and caches warm: start counting
            times = {name: [] for name in times}
    await astore.close()
    store.close()
    await abare.close()
    sbare.close()
    return {name: median_ms(samples) for name, samples in times.items()}


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
        row["stall_ms"], row["steps"] = fresh(lambda u, o: longest_stall(u, o, args.puts))
        row["stall_nogc_ms"], row["steps_nogc"] = fresh(
            lambda u, o: longest_stall(u, o, args.puts, collect=False)
        )
        row["bare_stall_ms"] = asyncio.run(bare_stall(backend, args.puts, args.pool))
        row["slow_callbacks"] = fresh(lambda u, o: slow_steps(u, o, args.puts))
        row["one"] = fresh(lambda u, o: one_task(u, o, backend, args.single))
    finally:
        drop_floor(backend)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--pool", type=int, default=10)
    parser.add_argument("--puts", type=int, default=1000)
    parser.add_argument("--single", type=int, default=1000)
    parser.add_argument("--only", default="redis,postgres")
    args = parser.parse_args()
    rows = [measure(backend, args) for backend in args.only.split(",")]
    print(
        f"\n{args.tasks} tasks x {args.rounds} rounds of put + get (100 messages), "
        f"{args.pool} connections; {args.puts} concurrent puts; one task: medians of "
        f"{args.single}\n"
    )
    print(
        "| backend | async put+get/s | to_thread put+get/s | async ÷ to_thread | bare drivers: "
        "async ÷ to_thread |"
    )
    print("|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['backend']} | {r['async_tps']:.0f} | {r['threads_tps']:.0f} | "
            f"{r['async_tps'] / r['threads_tps']:.2f}x | {r['floor_async']:.0f} ÷ "
            f"{r['floor_threads']:.0f} = {r['floor_async'] / r['floor_threads']:.2f}x |"
        )
    print(
        "\n| backend | heartbeat delay, gc on / off | bare driver's heartbeat delay | longest "
        "step, gc on: wall / CPU / GC in it | gc off: wall / CPU | debug mode: steps > 10 ms |"
    )
    print("|---|---|---|---|---|---|")
    for r in rows:
        on, off = r["steps"], r["steps_nogc"]
        print(
            f"| {r['backend']} | {r['stall_ms']:.1f} / {r['stall_nogc_ms']:.1f} ms | "
            f"{r['bare_stall_ms']:.1f} ms | {on.wall:.1f} / {on.cpu:.1f} / "
            f"{on.collecting:.1f} ms ({on.what}) | {off.wall:.1f} / {off.cpu:.1f} ms ({off.what}) | "
            f"{r['slow_callbacks']} |"
        )
    print(
        "\n| backend | put: async / sync ms | get: async / sync ms | bare round trip: async / "
        "sync ms | bare read: async / sync ms |"
    )
    print("|---|---|---|---|---|")
    for r in rows:
        cells = [
            f"{o[a]:.3f} / {o[s]:.3f} ({o[a] / o[s]:.2f}x)"
            for o in [r["one"]]
            for a, s in (
                ("aput", "sput"),
                ("aget", "sget"),
                ("aping", "sping"),
                ("aread", "sread"),
            )
        ]
        print(f"| {r['backend']} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
