"""PostgreSQL under faults: connections reset and refused through a TCP fault proxy, and a
throwaway server restarted and stopped, while writers run. No acknowledged write may be lost, and
what fails must fail as the library's error naming postgres and the operation."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from support.faultproxy import FaultProxy
from support.postgres_server import (
    PostgresServer,
    throwaway_server,
    unique_schema,
    with_address,
    with_query,
)
from support.services import POSTGRES_URL, service_missing

from agent_checkpoint import Store, open_async_store, open_store
from agent_checkpoint._store import RetryPolicy
from agent_checkpoint._store_types import NO_RETRY
from agent_checkpoint.backends import Record
from agent_checkpoint.backends._postgres import LEDGER
from agent_checkpoint.backends._postgres_connections import DEFAULT_READ_TIMEOUT, ReadTimeoutError
from agent_checkpoint.errors import BackendUnavailableError
from agent_checkpoint.testing import BlockingStore, checkpoint

SMALL_BUDGET = RetryPolicy(attempts=2, initial=0.01, maximum=0.05, deadline=5)


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    """Wait for progress the test needs; a bound on a hang, not a speed assertion."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.01)


class Writers:
    """Threads putting distinct keys in a loop, recording what was acknowledged and what raised."""

    def __init__(self, store: Store, count: int = 2, prefix: str = "w") -> None:
        self.store = store
        self.acknowledged: dict[str, str] = {}
        self.failures: list[BaseException] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._run, args=(f"{prefix}{n}",)) for n in range(count)
        ]

    def _run(self, prefix: str) -> None:
        i = 0
        while not self._stop.is_set():
            key, text = f"{prefix}-{i}", f"payload {prefix} {i}"
            try:
                self.store.put(checkpoint(key, text=text), key=key)
            except BaseException as exc:  # judged by the test
                with self._lock:
                    self.failures.append(exc)
            else:
                with self._lock:
                    self.acknowledged[key] = text
            i += 1

    def __enter__(self) -> Writers:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join()

    def progress(self, more: int, what: str) -> None:
        target = len(self.acknowledged) + more
        wait_until(lambda: len(self.acknowledged) >= target, what)


def assert_all_stored(store: Store, acknowledged: dict[str, str]) -> None:
    assert acknowledged
    for key, text in acknowledged.items():
        got = store.get(key)
        assert got is not None, f"acknowledged write {key!r} was lost"
        assert got.history[0].content == f"{text} 0"


def assert_library_errors(failures: list[BaseException], operations: set[str]) -> None:
    for exc in failures:
        assert isinstance(exc, BackendUnavailableError), repr(exc)
        assert exc.backend == "postgres" and exc.operation in operations
        assert str(exc).startswith(f"postgres {exc.operation} failed")
        assert isinstance(exc.__cause__, psycopg.Error)


# -- through the fault proxy ------------------------------------------------------------


@pytest.fixture
def schema() -> Iterator[str]:
    try:
        admin = psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=3)
    except psycopg.Error as exc:
        service_missing("postgres", f"{POSTGRES_URL}: {exc}")
    name = unique_schema("ac_fault")
    with admin:
        yield name
        admin.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture
def proxy() -> Iterator[FaultProxy]:
    parts = POSTGRES_URL.split("@")[-1].split("/")[0]
    host, _, port = parts.partition(":")
    proxy = FaultProxy(host or "127.0.0.1", int(port or 5432))
    yield proxy
    proxy.close()


def direct(schema: str) -> Store:
    store = open_store(with_query(POSTGRES_URL, schema=schema))
    store.setup()
    return store


def proxied(proxy: FaultProxy, schema: str, **options: Any) -> Store:
    url = with_address(POSTGRES_URL, *proxy.address)
    return open_store(with_query(url, schema=schema), **options)


def test_resets_and_refusals_mid_load_lose_no_acknowledged_write(
    proxy: FaultProxy, schema: str
) -> None:
    with direct(schema) as check, proxied(proxy, schema, max_size=4) as store:
        with Writers(store) as writers:
            writers.progress(30, "writes before the faults")
            proxy.reset_all()
            writers.progress(30, "writes after a reset")
            with proxy.refusing():
                time.sleep(0.5)
            writers.progress(30, "writes after refused connections")
            proxy.reset_all()
            writers.progress(30, "writes after a second reset")
        assert_all_stored(check, writers.acknowledged)
        assert_library_errors(writers.failures, {"save"})


def test_a_reset_connection_is_replaced_not_handed_out_again(
    proxy: FaultProxy, schema: str
) -> None:
    direct(schema).close()
    with proxied(proxy, schema, min_size=1, max_size=1, retry=NO_RETRY) as store:
        store.put(checkpoint(text="before"), key="k")
        proxy.reset_all()
        time.sleep(0.2)  # let the proxy's loop deliver the resets
        got = store.get("k")  # with no retries: only a checked, fresh connection can answer
        assert got is not None and got.history[0].content == "before 0"


def test_refusal_longer_than_the_retry_budget_raises_backend_unavailable(
    proxy: FaultProxy, schema: str
) -> None:
    direct(schema).close()
    with proxied(proxy, schema, retry=SMALL_BUDGET, pool_timeout=0.5) as store:
        replaced = store.put(checkpoint(text="landed"), key="k")
        with proxy.refusing():
            time.sleep(0.2)
            attempts: list[tuple[str, Callable[[], object]]] = [
                # the segment layer remembers what this store wrote under "k": a put over
                # it is one write, with no read of the record it replaces
                ("save", lambda: store.put(checkpoint(text="lost"), key="k")),
                ("save", lambda: store.backend.save(Record(replaced, b"{}"))),
                ("load", lambda: store.get("k")),
                ("scan", lambda: store.list()),
            ]
            for operation, call in attempts:
                with pytest.raises(BackendUnavailableError) as caught:
                    call()
                assert_library_errors([caught.value], {operation})
                assert isinstance(caught.value.__cause__, psycopg.OperationalError)
        # Healed: the same backend recovers its pool. psycopg_pool retries a connection after
        # 1, 2, 4... s of failures, so how soon depends on how long the refusals lasted.
        healed = Store(store.backend)
        recovered: list[Any] = []

        def reads() -> bool:
            try:
                recovered.append(healed.get("k"))
            except BackendUnavailableError:
                return False
            return True

        wait_until(reads, "the pool to connect again")
        assert recovered[-1] is not None and recovered[-1].history[0].content == "landed 0"


def test_a_server_that_stops_answering_times_out_instead_of_hanging(
    proxy: FaultProxy, schema: str
) -> None:
    """A network that swallows traffic must not hang the agent: every wait for a reply ends
    after ``read_timeout`` and, once the budget is spent, raises the library's error."""
    direct(schema).close()
    # no retries: a retry would wait for a new session the blackhole swallows as well
    with proxied(proxy, schema, read_timeout=1, retry=NO_RETRY, max_size=1) as store:
        store.put(checkpoint(text="kept"), key="k")
        proxy.blackhole = True
        try:
            with pytest.raises(BackendUnavailableError) as caught:
                store.get("k")
        finally:
            proxy.heal()
        assert_library_errors([caught.value], {"load"})
        assert "within 1 s (read_timeout)" in str(caught.value)
        assert isinstance(caught.value.__cause__, ReadTimeoutError)
        got = Store(store.backend).get("k")  # healed: under the default budget, fresh sessions
        assert got is not None and got.history[0].content == "kept 0"


def locked_row(schema: str, key: str) -> psycopg.Connection[Any]:
    """An admin session holding the record row's lock in an open transaction."""
    admin = psycopg.connect(POSTGRES_URL)
    table = sql.Identifier(schema, "agent_checkpoints")
    admin.execute(sql.SQL("SELECT 1 FROM {} WHERE key = %s FOR UPDATE").format(table), (key,))
    return admin


def opened(kind: str, url: str, **options: Any) -> Any:
    """A store on ``url``: the ``Store``, or an ``AsyncStore`` (psycopg's async pool) through
    its synchronous face."""
    if kind == "sync":
        return open_store(url, **options)
    return BlockingStore(open_async_store(url, **options))


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("write", ["rewrite", "append"])
def test_a_write_queued_behind_a_lock_is_cancelled_after_read_timeout(
    schema: str, write: str, kind: str
) -> None:
    """A put stuck behind a lock that a forgotten session holds gives up after
    ``read_timeout``, and its statement is cancelled on the server, so it does not apply
    later, when the lock is released, behind the caller's back. An append (the segment
    layer's conditional save of the record) queues on the same lock as a rewrite."""
    direct(schema).close()
    url = with_query(POSTGRES_URL, schema=schema, read_timeout="2")
    with opened(kind, url, retry=NO_RETRY) as store:
        store.put(checkpoint(text="first", messages=4), key="k")
        before = store.head("k")
        then = (
            checkpoint(text="second")
            if write == "rewrite"
            else checkpoint(text="first", messages=5)
        )
        admin = locked_row(schema, "k")
        try:
            with pytest.raises(BackendUnavailableError, match=r"read_timeout"):
                store.put(then, key="k")
        finally:
            admin.rollback()
            admin.close()
        time.sleep(0.5)  # a statement still queued on the lock would have applied by now
        assert store.head("k") == before
        got = store.get("k")
        assert got is not None and [m.content for m in got.history][-1] == "first 3"
        store.put(then, key="k")  # the lock is gone: the same write goes through
        assert store.get("k") == then


@pytest.mark.parametrize(
    ("given", "bound"), [(None, DEFAULT_READ_TIMEOUT), ("7.5", 7.5), ("0", None)]
)
def test_read_timeout_from_the_url_bounds_every_connection(
    schema: str, given: str | None, bound: float | None
) -> None:
    """The default bounds every wait; ``read_timeout=0`` means no bound at all."""
    url = with_query(POSTGRES_URL, schema=schema)
    store = open_store(url if given is None else with_query(url, read_timeout=given))
    with store, store.backend.pool.connection() as conn:  # type: ignore[attr-defined]
        assert conn.read_timeout == bound


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_setup_is_not_bound_by_read_timeout(schema: str, kind: str) -> None:
    """Schema changes may wait on a lock or build an index for longer than a read may take."""
    direct(schema).close()
    admin = psycopg.connect(POSTGRES_URL)
    ledger = sql.Identifier(schema, LEDGER)  # setup reads it first, so it waits for the lock
    admin.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(ledger))
    release = threading.Timer(3, admin.rollback)
    release.start()
    try:
        url = with_query(POSTGRES_URL, schema=schema, read_timeout="1")
        with opened(kind, url, retry=NO_RETRY) as store:
            store.setup()  # waits for the lock, past read_timeout
            store.put(checkpoint(text="after"), key="k")
            assert store.get("k") is not None
    finally:
        release.join()
        admin.close()


# -- a throwaway server, restarted and stopped ------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    with throwaway_server() as server:
        yield server


def test_acknowledged_writes_survive_a_server_restart(server: PostgresServer) -> None:
    url = with_query(server.url, schema=unique_schema())
    reads: list[BaseException] = []
    stop = threading.Event()
    with open_store(url) as store:
        store.setup()

        def reader() -> None:
            while not stop.is_set():
                try:
                    store.list(limit=5)
                    store.get("w0-0")
                except BaseException as exc:  # judged below
                    reads.append(exc)

        thread = threading.Thread(target=reader)
        with Writers(store) as writers:
            thread.start()
            writers.progress(30, "writes before the restart")
            server.restart()
            writers.progress(30, "writes after the restart")
        stop.set()
        thread.join()
    server.restart()  # and once more, with nothing connected
    with open_store(url) as fresh:
        assert_all_stored(fresh, writers.acknowledged)
    assert_library_errors(writers.failures, {"save"})
    assert_library_errors(reads, {"scan", "load"})


def test_a_server_down_longer_than_the_budget_raises_then_recovers(
    server: PostgresServer,
) -> None:
    url = with_query(server.url, schema=unique_schema(), pool_timeout=0.5)
    with open_store(url, retry=SMALL_BUDGET) as store:
        store.setup()
        store.put(checkpoint(text="kept"), key="k")
        server.stop()
        try:
            with pytest.raises(BackendUnavailableError) as caught:
                store.put(checkpoint(text="refused"), key="k")
            assert_library_errors([caught.value], {"save"})  # over what it wrote: no read
        finally:
            server.start()
        got = Store(store.backend).get("k")
        assert got is not None and got.history[0].content == "kept 0"
