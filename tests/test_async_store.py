"""``AsyncStore`` on every backend, each on its real server: the shipped suites run unchanged
through ``BlockingStore``, and what only an async store can get wrong (the event loop, tasks,
cancellation) is tested here with real tasks."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from psycopg.conninfo import make_conninfo
from support.closed_port import refused_port
from support.store_urls import store_url

from agent_checkpoint._async_store import open_async_store
from agent_checkpoint._home import home
from agent_checkpoint.testing import (
    BlockingStore,
    ClaimsConformance,
    EncryptionConformance,
    StoreConformance,
    checkpoint,
)

pytestmark = pytest.mark.filterwarnings("ignore::agent_checkpoint.backends.VolatileRedisWarning")

BACKENDS = ["memory", "disk", "redis", "postgres", "s3", "fsspec"]


@pytest.fixture(params=BACKENDS)
def backend_url(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[str, dict[str, Any]]]:
    with store_url(request.param, request, tmp_path) as found:
        yield found


class TestAsyncStore(StoreConformance, ClaimsConformance, EncryptionConformance):
    """The shipped suites against ``AsyncStore`` on each backend."""

    @pytest.fixture
    def store(self, backend_url: tuple[str, dict[str, Any]]) -> Iterator[Any]:
        url, options = backend_url
        with BlockingStore(open_async_store(url, **options)) as store:
            store.setup()
            yield store

    def break_connection(self, store: Any) -> AbstractContextManager[None]:
        """The asyncio drivers' connections go to a closed port: their faults must reach the
        caller as the library's errors, as the sync drivers' do."""
        backend = store.async_store.store.backend
        if backend.name == "redis":
            return refusing_redis(store, backend)
        if backend.name == "postgres":
            return refusing_postgres(store, backend)
        pytest.skip(
            f"{backend.name}: the async store runs the sync backend on threads, so its driver "
            "faults are the sync store's (tests/test_s3_backend.py's fault tests for S3; "
            "memory, disk and fsspec's memory filesystem have no connection to break)"
        )


def on_driver_loop(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine of a driver's pool on the loop the pool lives on (``_home.py``)."""
    return asyncio.run_coroutine_threadsafe(coroutine, home()).result()


@contextmanager
def refusing_redis(store: Any, backend: Any) -> Iterator[None]:
    pool = backend._client.target.connection_pool
    port = pool.connection_kwargs["port"]
    with refused_port() as closed:
        pool.connection_kwargs["port"] = closed
        on_driver_loop(pool.disconnect())
        pool.reset()
        try:
            yield
        finally:
            pool.connection_kwargs["port"] = port
            pool.reset()


@contextmanager
def refusing_postgres(store: Any, backend: Any) -> Iterator[None]:
    pool = backend.pool.target
    conninfo, timeout = pool.conninfo, pool.timeout
    with refused_port() as port:
        pool.conninfo, pool.timeout = make_conninfo(conninfo, port=port), 0.5
        on_driver_loop(pool.drain())
        try:
            yield
        finally:
            pool.conninfo, pool.timeout = conninfo, timeout


@pytest.mark.parametrize("first", [True, False], ids=["first-command", "later-command"])
def test_a_redis_connection_dropped_under_a_command_is_retried_not_leaked(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first: bool
) -> None:
    """redis-py's asyncio client can drop a connection (after another one failed) just as a
    command takes it, and the command then writes to a closed socket: an ``AttributeError``
    inside redis-py (seen with its cluster client and concurrent writers, also on a store's
    first command, the durability check). Nothing was sent: the store retries it as the lost
    connection it is, and never hands the caller an ``AttributeError``."""
    from redis.asyncio.connection import Connection

    sent = Connection._send_packed_command
    dropped: list[int] = []

    async def drop_once(self: Connection, command: Any) -> None:
        if not dropped:
            dropped.append(1)
            self._writer = None  # as a concurrent disconnect leaves it
        await sent(self, command)

    with (
        store_url("redis", request, tmp_path) as (url, options),
        BlockingStore(open_async_store(url, **options)) as store,
    ):
        if not first:
            store.put(checkpoint("before"), key="before")
        monkeypatch.setattr(Connection, "_send_packed_command", drop_once)
        store.put(checkpoint("through a dropped connection"), key="k")
        monkeypatch.undo()
        got = store.get("k")
    assert dropped == [1]
    assert got is not None and got.run_id == "through a dropped connection"


def test_one_async_store_serves_one_asyncio_run_after_another(
    backend_url: tuple[str, dict[str, Any]],
) -> None:
    """A script or a test suite that calls ``asyncio.run`` more than once with one store: the
    asyncio drivers' connections belong to the loop that made them, and that loop is closed
    when the next call comes. Redis raised RuntimeError('Event loop is closed') from the first
    call on the new loop, outside the error tree; closing on a later loop raised it too, on
    Redis and PostgreSQL."""
    import asyncio

    url, options = backend_url
    store = open_async_store(url, **options)
    first, second = checkpoint("r1"), checkpoint("r2")

    async def setup_and_put() -> None:
        await store.setup()
        await store.put(first, key="k1")

    async def read_then_write() -> tuple[Any, Any]:
        found = await store.get("k1")
        summary = await store.put(second, key="k2")
        return found, summary

    asyncio.run(setup_and_put())
    found, summary = asyncio.run(read_then_write())
    assert found is not None and found.run_id == "r1" and summary.revision >= 1
    assert asyncio.run(store.get("k2")) is not None  # a third loop
    asyncio.run(store.close())
    assert store.closed
    if url.startswith("memory://"):
        return  # each memory:// store is its own
    with BlockingStore(open_async_store(url, **options)) as again:
        assert sorted(s.key for s in again.list()) == ["k1", "k2"]
