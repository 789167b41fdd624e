"""What only an ``AsyncStore`` can get wrong, with real tasks on the real servers: a put
cancelled at each of its awaits, a thousand conditional puts at once, more tasks than
connections, a server restarted under load."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Awaitable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from support.postgres_server import throwaway_server, unique_schema, with_query
from support.redis_server import RedisServer, need_redis_server
from support.store_urls import store_url

from agent_checkpoint import Message, RunCheckpoint
from agent_checkpoint._async_store import AsyncStore, open_async_store
from agent_checkpoint._bridge import Bridge
from agent_checkpoint._envelope import conversation_of
from agent_checkpoint.errors import (
    BackendUnavailableError,
    ConflictError,
    InvalidArgumentError,
    StoreClosedError,
)

pytestmark = pytest.mark.filterwarnings("ignore::agent_checkpoint.backends.VolatileRedisWarning")

T = TypeVar("T")
NATIVE = ["redis", "postgres"]  # the backends whose drivers are asyncio-native


def run(coroutine: Coroutine[Any, Any, T], limit: float = 120) -> T:
    """Run on a fresh loop; ``limit`` bounds a hang (a deadlock fails, it does not stall)."""
    return asyncio.run(asyncio.wait_for(coroutine, limit))


@pytest.fixture(params=NATIVE)
def native(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    with store_url(request.param, request, tmp_path) as found:
        yield found


def history(n: int, size: int = 9000) -> tuple[Message, ...]:
    """``n`` messages of ``size`` characters: every append moves history into a piece."""
    return tuple(
        Message("user" if i % 2 else "assistant", f"{i:05d} " + "x" * size) for i in range(n)
    )


def conversation(n: int) -> RunCheckpoint:
    return RunCheckpoint.new("task", history(n), run_id="r")


# -- cancellation ------------------------------------------------------------------------


class CancelAt(Bridge):
    """Cancels the task of the bridged call at its ``at``-th driver await (0: never), and
    counts them."""

    def __init__(self, limit: int, at: int = 0) -> None:
        super().__init__(limit)
        self.at = at
        self.seen = 0

    async def awaited(self, awaitable: Awaitable[T]) -> T:
        self.seen += 1
        if self.seen == self.at:
            task = asyncio.current_task()
            assert task is not None
            task.cancel()
        return await awaitable


async def put_cancelled_at(store: AsyncStore, item: RunCheckpoint, at: int) -> bool:
    """Put ``item`` with the put's task cancelled at its ``at``-th await; whether it ran to
    the end (no cancellation reached it)."""
    store._runner = CancelAt(store._runner.limit, at)  # type: ignore[attr-defined]
    try:
        await asyncio.create_task(store.put(item, key="k"))
    except asyncio.CancelledError:
        return False
    finally:
        store._runner = Bridge(store._runner.limit)  # type: ignore[attr-defined]
    return True


def test_a_put_cancelled_at_any_await_leaves_the_old_or_the_new_history(
    native: tuple[str, dict[str, Any]],
) -> None:
    url, options = native

    async def scenario() -> int:
        async with open_async_store(url, **options) as store:
            await store.setup()
            await store.put(conversation(3), key="k")
            counting = CancelAt(10)
            store._runner = counting  # type: ignore[assignment]
            await store.put(conversation(4), key="k")  # an append that writes a piece
            awaits = counting.seen
            assert awaits >= 2  # the piece, then the record that commits it
            length = 4
            for at in range(1, awaits + 2):
                before = conversation(length)
                after = conversation(length + 1)
                finished = await put_cancelled_at(store, after, at)
                got = await store.get("k")
                assert got is not None
                assert got.history in (before.history, after.history), at
                assert finished <= (got.history == after.history)  # a finished put landed
                # whatever the cancellation left, the next put lands and reads back whole,
                # here and in a store that never saw this one's memory
                length = len(got.history) + 1
                await store.put(conversation(length), key="k")
                async with open_async_store(url, **options) as other:
                    fresh = await other.get("k")
                    assert fresh is not None and fresh.history == conversation(length).history
                report = await store.verify()
                assert report.unreadable == [] and report.stale == [] and report.unlisted == []
            return awaits

    assert run(scenario()) >= 2


# -- concurrency ---------------------------------------------------------------------------


async def increment(store: AsyncStore, key: str, worker: int) -> int:
    """Append one message naming ``worker`` to ``key``'s history on the revision read; a
    lost race reads again. Returns the conflicts met."""
    conflicts = 0
    while True:
        record = await store.get_record(key)
        assert record is not None
        current = conversation_of(store.store.decode(record))
        extended = current.evolve(history=(*current.history, Message("user", f"w{worker}")))
        try:
            await store.put(extended, key=key, if_revision=record.summary.revision)
        except ConflictError:
            conflicts += 1
            continue
        return conflicts


@pytest.mark.slow
def test_a_thousand_conditional_puts_on_a_hundred_keys_lose_no_update(
    native: tuple[str, dict[str, Any]],
) -> None:
    url, options = native

    async def scenario() -> int:
        async with open_async_store(url, **options) as store:
            await store.setup()
            start = RunCheckpoint.new("count", (), run_id="r")
            for k in range(100):
                await store.put(start, key=f"k{k}")
            conflicts = await asyncio.gather(
                *(increment(store, f"k{w % 100}", w) for w in range(1000))
            )
            for k in range(100):
                got = await store.get(f"k{k}")
                assert got is not None
                assert sorted(m.content for m in got.history) == sorted(
                    f"w{w}" for w in range(k, 1000, 100)
                )
            return sum(conflicts)

    assert run(scenario(), limit=300) > 0  # the puts did race, and none was lost


def test_more_tasks_than_connections_wait_for_one_and_all_finish(
    native: tuple[str, dict[str, Any]],
) -> None:
    url, options = native
    options = {**options, **({"max_connections": 2} if "prefix" in options else {"max_size": 2})}

    async def scenario() -> None:
        async with open_async_store(url, **options) as store:
            await store.setup()
            assert store.backend.max_connections == 2

            async def one(i: int) -> int:
                await store.put(conversation(1 + i % 3), key=f"t{i}")
                got = await store.get(f"t{i}")
                assert got is not None
                return len(got.history)

            lengths = await asyncio.gather(*(one(i) for i in range(200)))
            assert lengths == [1 + i % 3 for i in range(200)]

    run(scenario())


def test_calls_leave_nothing_for_the_garbage_collector(
    native: tuple[str, dict[str, Any]],
) -> None:
    """A call's cursors, connections and pipelines are freed when it returns: left in
    reference cycles, they would wait for the garbage collector, whose passes run on the
    event loop and grow with what they find."""
    url, options = native

    async def scenario() -> list[str]:
        async with open_async_store(url, **options) as store:
            await store.setup()
            big = RunCheckpoint.new("task", (Message("user", "x" * 100_000),), run_id="b")
            await store.put(big, key="big")
            for n in (3, 4):  # connections open, statements and scripts known to the server
                await store.put(conversation(n), key="k")
                await store.get("k")
            gc.collect()
            gc.set_debug(gc.DEBUG_SAVEALL)  # what a pass finds in cycles stays in gc.garbage
            try:
                for n in range(5, 25):
                    await store.put(conversation(n), key="k")  # an append
                    await store.put(conversation(n), key="k")  # the same again
                    await store.put(big, key="big")  # a record stored apart on Redis
                    got = await store.get("k")
                    assert got is not None and len(got.history) == n
                gc.collect()
                return sorted({type(found).__qualname__ for found in gc.garbage})
            finally:
                gc.set_debug(0)
                gc.garbage.clear()

    assert run(scenario()) == []


# -- a server restarted under load ---------------------------------------------------------


async def writers_through(store: AsyncStore, restart: Any, *, tasks: int = 8) -> dict[str, int]:
    """``tasks`` writers put distinct keys while ``restart()`` runs twice (in a thread: it
    blocks); returns what was acknowledged (key -> history length)."""
    acknowledged: dict[str, int] = {}
    failures: list[BaseException] = []
    stop = asyncio.Event()

    async def writer(w: int) -> None:
        i = 0
        while not stop.is_set():
            key, n = f"w{w}-{i}", 1 + i % 4
            try:
                await store.put(conversation(n), key=key)
            except BackendUnavailableError as exc:  # retries ran out while the server was down
                failures.append(exc)
            else:
                acknowledged[key] = n
            i += 1

    async def progress(more: int) -> None:
        target = len(acknowledged) + more
        while len(acknowledged) < target:
            await asyncio.sleep(0.01)

    running = [asyncio.create_task(writer(w)) for w in range(tasks)]
    await progress(40)
    await asyncio.to_thread(restart)
    await progress(40)  # the same store recovers: no reopening
    await asyncio.to_thread(restart)
    await progress(40)
    stop.set()
    await asyncio.gather(*running)
    assert all("redis" in str(f) or "postgres" in str(f) for f in failures)
    return acknowledged


async def all_there(url: str, options: dict[str, Any], acknowledged: dict[str, int]) -> None:
    async with open_async_store(url, **options) as fresh:
        for key, n in acknowledged.items():
            got = await fresh.get(key)
            assert got is not None and got.history == conversation(n).history, key


@pytest.mark.slow
def test_acknowledged_writes_survive_a_redis_restart_under_load() -> None:
    need_redis_server()
    with RedisServer(appendonly=True) as server:
        options = {"prefix": "restart"}

        async def scenario() -> None:
            async with open_async_store(server.url, **options) as store:
                acknowledged = await writers_through(store, lambda: server.restart(down_for=0.3))
            await all_there(server.url, options, acknowledged)

        run(scenario(), limit=240)


@pytest.mark.slow
def test_acknowledged_writes_survive_a_postgres_restart_under_load() -> None:
    with throwaway_server() as server:
        url = with_query(server.url, schema=unique_schema())

        async def scenario() -> None:
            async with open_async_store(url) as store:
                await store.setup()
                acknowledged = await writers_through(store, server.restart)
            await all_there(url, {}, acknowledged)

        run(scenario(), limit=240)


def test_an_asyncio_redis_client_of_yours_is_used_within_its_pool_and_left_open() -> None:
    import uuid

    import redis.asyncio as aredis
    from support.services import REDIS_URL

    async def scenario() -> None:
        # a bound of its own: redis-py's default differs by version (2**31 in 5.0, 100 in 8.1)
        client = aredis.Redis.from_url(REDIS_URL, max_connections=12)
        prefix = f"yours-{uuid.uuid4().hex[:8]}"
        try:
            async with open_async_store(REDIS_URL, prefix=prefix, client=client) as store:
                await asyncio.gather(*(store.put(conversation(1), key=f"k{i}") for i in range(50)))
                limit = store._runner.limit  # type: ignore[attr-defined]
                assert limit == client.connection_pool.max_connections == 12  # its pool's bound
                assert len((await store.list(limit=100)).items) == 50
            assert await client.ping()  # the store closed; the client is yours
            keys = [k async for k in client.scan_iter(match="{" + prefix + "}*")]
            await client.delete(*keys)
        finally:
            await client.aclose()

    run(scenario())


# -- opening -------------------------------------------------------------------------------


def test_a_store_opens_off_the_loop_on_its_first_call_and_says_what_went_wrong(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "store"

    async def scenario() -> None:
        store = open_async_store(str(folder))
        assert not folder.exists()  # nothing done on the loop yet
        first = conversation(1)
        await store.put(first, key="k")
        assert folder.is_dir() and (await store.get("k")) == first
        await store.close()
        with pytest.raises(StoreClosedError):
            await store.get("k")

        refused = open_async_store(str(tmp_path / "other"), no_such_option=1)
        with pytest.raises(InvalidArgumentError, match="no_such_option"):  # as open_store does
            await refused.open()
        with pytest.raises(InvalidArgumentError, match="no_such_option"):  # as open_store does
            await refused.get("k")  # tried again, refused again
        await refused.close()

        never = open_async_store(str(tmp_path / "never"))
        await never.close()
        assert never.closed and not (tmp_path / "never").exists()
        with pytest.raises(StoreClosedError):
            await never.put(conversation(1), key="k")

    run(scenario())
