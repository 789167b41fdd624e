"""Faults between the Redis backend and its server: resets, refusals, an exhausted retry budget
and a server killed and restarted. No acknowledged write may be lost, and what surfaces after
retries give up is the library's error naming the backend and the operation."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest
import redis
from support.fault_load import (
    CountingBackend,
    WriterLoop,
    assert_nothing_acknowledged_was_lost,
    count_faults,
    resets_and_refusals,
)
from support.faultproxy import FaultProxy
from support.redis_server import RedisServer, need_redis_server
from support.services import REDIS_URL, service_missing

from agent_checkpoint import Store, open_store
from agent_checkpoint._store import RetryPolicy
from agent_checkpoint.backends._redis import RedisBackend
from agent_checkpoint.errors import BackendUnavailableError
from agent_checkpoint.testing import checkpoint

pytestmark = pytest.mark.filterwarnings("ignore::agent_checkpoint.backends.VolatileRedisWarning")


@pytest.fixture(scope="module")
def shared() -> Iterator[redis.Redis]:
    r = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
    try:
        r.ping()
    except redis.RedisError as exc:
        service_missing("redis", f"{REDIS_URL}: {exc}")
    yield r
    r.close()


@pytest.fixture
def prefix(shared: redis.Redis) -> Iterator[str]:
    name = f"test-{uuid.uuid4().hex}"
    yield name
    keys = list(shared.scan_iter(match="{" + name + "}*", count=1000))
    if keys:
        shared.delete(*keys)


@pytest.fixture
def proxy(shared: redis.Redis) -> Iterator[FaultProxy]:
    target = shared.connection_pool.connection_kwargs
    p = FaultProxy(target["host"], target["port"])
    yield p
    p.close()


PUT = ("load", "save")
"""What a put makes: over the store's segment layer, a put of a key it has not written reads
the record it replaces (the pieces of a long history go when it does), then saves."""


def writer_store(url: str, prefix: str) -> tuple[Store, CountingBackend]:
    counting = count_faults(RedisBackend.from_url(url, prefix=prefix))
    return Store(counting), counting  # type: ignore[arg-type]


def test_resets_and_refusals_mid_load_lose_no_acknowledged_write(
    proxy: FaultProxy, prefix: str
) -> None:
    host, port = proxy.address
    store, counting = writer_store(f"redis://{host}:{port}/0", prefix)
    with store, open_store(REDIS_URL, prefix=prefix) as reader:
        loop = WriterLoop(store)
        loop.during(lambda: resets_and_refusals(loop, proxy, between=50, after=20))
        assert counting.transient > 0, "the faults never reached the writers"
        assert_nothing_acknowledged_was_lost(loop, reader, "redis", operations=PUT)
        assert len({s.key for s in reader.iter_summaries()}) >= len(loop.acked)


def test_an_exhausted_retry_budget_raises_the_library_error_with_the_driver_cause(
    proxy: FaultProxy, prefix: str
) -> None:
    host, port = proxy.address
    brief = RetryPolicy(attempts=3, initial=0.01, maximum=0.02, deadline=2.0)
    with open_store(f"redis://{host}:{port}/0", prefix=prefix, retry=brief) as store:
        store.put(checkpoint(), key="before")
        calls: list[tuple[str, Callable[[], object]]] = [
            ("save", lambda: store.put(checkpoint(), key="during", create_only=True)),
            ("save", lambda: store.put(checkpoint(), key="during")),  # new to it: a create
            ("load", lambda: store.get("before")),
            ("scan", lambda: store.list()),
            ("drop", lambda: store.delete("before")),  # its layout is remembered: no read
            ("drop", lambda: store.backend.drop("before")),
        ]
        with proxy.refusing():
            for operation, call in calls:
                with pytest.raises(BackendUnavailableError) as caught:
                    call()
                assert (caught.value.backend, caught.value.operation) == ("redis", operation)
                assert f"redis {operation} failed" in str(caught.value)
                assert isinstance(caught.value.__cause__, redis.exceptions.ConnectionError)
        assert store.get("before") is not None


def test_acknowledged_writes_survive_a_server_killed_and_restarted() -> None:
    need_redis_server()
    with RedisServer(appendonly=True) as server:
        store, counting = writer_store(server.url, "restart")
        with store:
            loop = WriterLoop(store)

            def faults() -> None:
                loop.acked_after(100)
                server.restart(down_for=0.5)  # SIGKILL: no shutdown, only the fsynced AOF
                loop.acked_after(100)
                server.restart(down_for=0.1)
                loop.acked_after(100)

            loop.during(faults)
        assert counting.transient > 0, "the restarts never reached the writers"
        with open_store(server.url, prefix="restart") as reader:
            assert_nothing_acknowledged_was_lost(loop, reader, "redis", operations=PUT)
