"""The PostgreSQL backend against the real server: conformance, listing at scale, injection,
setup and its migration ledger (and upgrades), histories stored in segments, schema isolation.
Fault tests live in test_postgres_faults.py."""

from __future__ import annotations

import itertools
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import orjson
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.errors import UndefinedTable
from psycopg_pool import ConnectionPool
from support.closed_port import refused_port
from support.postgres_server import unique_schema, with_query
from support.services import POSTGRES_URL, service_missing

from agent_checkpoint import Store, open_store
from agent_checkpoint.backends import postgres
from agent_checkpoint.backends.base import Query, Record, Summary
from agent_checkpoint.backends.postgres import LEDGER, MIGRATIONS, PostgresBackend
from agent_checkpoint.backends.postgres_sql import scan_statement
from agent_checkpoint.backends.segments import Appending, Split, assemble, chain
from agent_checkpoint.errors import (
    BackendError,
    BackendUnavailableError,
    ConflictError,
    InvalidKeyError,
    OwnershipConflictError,
    StoreClosedError,
    StoreNotFoundError,
    UnreadableEnvelopeError,
)
from agent_checkpoint.model import Message, RunCheckpoint
from agent_checkpoint.testing import (
    AppendingConformance,
    ClaimsConformance,
    EncryptionConformance,
    StoreConformance,
    checkpoint,
    stamped,
)

REVISIONS = next(step for step in MIGRATIONS if step[1] == "revision sequence")

Admin = psycopg.Connection[Any]


@pytest.fixture(scope="session")
def admin() -> Iterator[Admin]:
    try:
        conn = psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=3)
    except psycopg.Error as exc:
        service_missing("postgres", f"{POSTGRES_URL}: {exc}")
    with conn:
        yield conn


def drop_schema(admin: Admin, name: str) -> None:
    admin.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture
def schema(admin: Admin) -> Iterator[str]:
    name = unique_schema()
    yield name
    drop_schema(admin, name)


def open_pg(schema: str, url: str = POSTGRES_URL, **options: Any) -> Store:
    return open_store(with_query(url, schema=schema), **options)


def ledger(admin: Admin, schema: str, table: str = "agent_checkpoints") -> list[tuple[int, str]]:
    rows = admin.execute(
        sql.SQL("SELECT version, name FROM {} WHERE table_name = %s ORDER BY version").format(
            sql.Identifier(schema, LEDGER)
        ),
        (table,),
    ).fetchall()
    return [(v, n) for v, n in rows]


class TestPostgresStore(
    StoreConformance, ClaimsConformance, EncryptionConformance, AppendingConformance
):
    @pytest.fixture
    def store(self, schema: str) -> Iterator[Store]:
        with open_pg(schema) as store:
            store.setup()
            yield store

    @contextmanager
    def break_connection(self, store: Store) -> Iterator[None]:
        """The server's port starts refusing: the pool's sessions are closed and new ones go
        to a closed port (a request waits half a second for one, not the pool's timeout)."""
        assert isinstance(store.backend, PostgresBackend)
        pool = store.backend.pool
        conninfo, timeout = pool.conninfo, pool.timeout
        with refused_port() as port:
            pool.conninfo, pool.timeout = make_conninfo(conninfo, port=port), 0.5
            pool.drain()
            try:
                yield
            finally:
                pool.conninfo, pool.timeout = conninfo, timeout


# -- listing at scale -------------------------------------------------------------------

N = 10_000
BASE = 1_700_000_000_000


def scale_record(i: int) -> Record:
    """Three records per millisecond, keys shuffled against time so ties test key order."""
    phase = "tool" if i % 5 == 0 else "llm" if i % 5 == 1 else None
    summary = Summary(
        key=f"run-{(i * 7919) % N:05d}",
        run_id=f"r{i}",
        saved_at=BASE + i // 3,
        owner=f"owner{i % 10}",
        agent_id=f"agent{i % 7}",
        failure_phase=phase,
        failure_iteration=i if phase else None,
        message_count=2,
        size=0,
        revision=0,
    )
    return Record(summary, b'{"format":"conversation-v1"}')


def newest_first(summaries: list[Summary]) -> list[str]:
    return [s.key for s in sorted(summaries, key=lambda s: (-s.saved_at, s.key))]


@pytest.fixture(scope="module")
def big(admin: Admin) -> Iterator[tuple[Store, list[Summary]]]:
    """A store of ``N`` records, and their stored summaries."""
    name = unique_schema("ac_scale")
    store = open_pg(name, max_size=8)
    store.setup()
    records = [scale_record(i) for i in range(N)]
    with ThreadPoolExecutor(8) as pool:
        saved = list(pool.map(store.backend.save, records))  # index rows: bodies unread
    admin.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(name, "agent_checkpoints")))
    yield store, saved
    store.close()
    drop_schema(admin, name)


class TestListingAtScale:
    def test_newest_100_of_10000_are_exactly_the_newest_in_order(
        self, big: tuple[Store, list[Summary]]
    ) -> None:
        store, saved = big
        page = store.list(limit=100)
        assert [s.key for s in page] == newest_first(saved)[:100]

    def test_paging_all_10000_while_a_writer_adds_newer_records_has_no_repeats_or_gaps(
        self, big: tuple[Store, list[Summary]]
    ) -> None:
        store, saved = big
        stop = threading.Event()
        started = threading.Event()
        written: list[str] = []

        def writer() -> None:
            j = 0
            while not stop.is_set():
                key = f"new-{j:05d}"
                newer = Summary(key, "new", BASE + N + j, None, None, None, None, 0, 0, 0)
                store.backend.save(Record(newer, b"{}"))
                written.append(key)
                started.set()
                j += 1

        thread = threading.Thread(target=writer)
        thread.start()
        try:
            assert started.wait(30)
            seen: list[str] = []
            cursor = None
            while True:
                page = store.list(limit=500, cursor=cursor)
                seen.extend(s.key for s in page)
                if page.cursor is None:
                    break
                cursor = page.cursor
        finally:
            stop.set()
            thread.join()
        assert len(seen) == len(set(seen))
        assert [k for k in seen if not k.startswith("new-")] == newest_first(saved)
        assert written
        for key in written:
            store.delete(key)

    @pytest.mark.parametrize(
        "filters",
        [
            {"owner": "owner3"},
            {"agent_id": "agent5"},
            {"failed": True},
            {"failed": False},
            {"phase": "llm"},
            {"owner": "owner1", "failed": True, "before": BASE + 2000},
            {"since": BASE + 1000, "before": BASE + 1500},
        ],
    )
    def test_filtered_paging_matches_the_filter_applied_to_everything(
        self, big: tuple[Store, list[Summary]], filters: dict[str, Any]
    ) -> None:
        store, saved = big

        def keep(s: Summary) -> bool:
            return (
                filters.get("owner", s.owner) == s.owner
                and filters.get("agent_id", s.agent_id) == s.agent_id
                and filters.get("failed", s.failed) == s.failed
                and filters.get("phase", s.failure_phase) == s.failure_phase
                and s.saved_at < filters.get("before", s.saved_at + 1)
                and s.saved_at >= filters.get("since", s.saved_at)
            )

        listed = [s.key for s in store.iter_summaries(page_size=300, **filters)]
        assert listed == newest_first([s for s in saved if keep(s)])
        assert listed

    def test_oldest_first_pages_run_by_saved_at_then_key(
        self, big: tuple[Store, list[Summary]]
    ) -> None:
        store, saved = big
        seen: list[str] = []
        after: tuple[int, str] | None = None
        while True:
            page = store.backend.scan(Query(oldest_first=True, after=after, limit=700))
            if not page:
                break
            seen.extend(s.key for s in page)
            after = (page[-1].saved_at, page[-1].key)
        assert seen == [s.key for s in sorted(saved, key=lambda s: (s.saved_at, s.key))]

    @pytest.mark.parametrize(
        "query",
        [
            Query(limit=101),
            Query(owner="owner3", limit=101),
            Query(agent_id="agent2", limit=101),
            Query(failed=True, limit=101),
            Query(phase="tool", limit=101),
            Query(after=(BASE + 2000, "run-05000"), limit=101),
            Query(owner="owner3", after=(BASE + 2000, "run-05000"), limit=101),
            Query(saved_before=BASE + 1000, oldest_first=True, limit=101),
            Query(oldest_first=True, after=(BASE + 500, "run-05000"), limit=101),
        ],
        ids=repr,
    )
    def test_each_listing_shape_reads_an_index_in_order(
        self, big: tuple[Store, list[Summary]], admin: Admin, query: Query
    ) -> None:
        store, _ = big
        assert isinstance(store.backend, PostgresBackend)
        statement, params = scan_statement(query, store.backend._sql)
        plan = "\n".join(
            row[0] for row in admin.execute(sql.SQL("EXPLAIN ") + statement, params).fetchall()
        )
        # An Incremental Sort only orders rows of equal saved_at the index already delivers.
        full_sort = re.search(r"(?<!Incremental )Sort  \(", plan)
        assert "Index" in plan and "Seq Scan" not in plan and not full_sort, plan


# -- keys, order, injection -------------------------------------------------------------

INJECTIONS = [
    "'; DROP TABLE agent_checkpoints; --",
    "x' OR '1'='1",
    '"); DELETE FROM agent_checkpoints; --',
    "1; TRUNCATE agent_checkpoint_migrations",
    "\\'; SELECT pg_sleep(10); --",
    "$$; DROP SCHEMA public CASCADE; $$",
    "/* comment */ --",
    "%s",
    "%(key)s",
    "$1",
    "{table}",
    "%",
    "_",
    "*",
    "a?c[de]*",
    "{hash}:tag",
    "../../etc/passwd",
    "..\\..\\boot.ini",
    "prefix/../other/key",
    "/absolute/path",
    "%2e%2e%2f",
    "key%00nul",
    "E'\\x41'",
]


def test_injection_strings_are_plain_keys_owners_and_agents(admin: Admin, schema: str) -> None:
    with open_pg(schema) as store, open_pg(schema + "_n") as neighbour:
        store.setup()
        neighbour.setup()
        neighbour.put(checkpoint("bystander"), key="bystander")
        store.put(stamped(checkpoint("plain", principal="alice", agent="a"), 1), key="plain")
        for n, text in enumerate(INJECTIONS, start=2):
            summary = store.put(
                stamped(checkpoint("r", principal=text, agent=text, failed=text, text=text), n),
                key=text,
            )
            assert (summary.key, summary.owner, summary.agent_id) == (text, text, text)
        for text in INJECTIONS:
            got = store.get(text)
            assert got is not None and got.history[0].content == f"{text} 0"
            assert [s.key for s in store.list(owner=text)] == [text]
            assert [s.key for s in store.list(agent_id=text)] == [text]
            assert [s.key for s in store.list(phase=text)] == [text]
        assert sorted(s.key for s in store.iter_summaries()) == sorted([*INJECTIONS, "plain"])
        for wildcard in ["' OR 1=1 --", "%%", "%a%", ".*", "*a*", "owner\x00"]:
            assert store.list(owner=wildcard).items == []
            assert store.list(agent_id=wildcard).items == []
        for text in INJECTIONS:
            assert store.delete(text) is True
        assert [s.key for s in store.list()] == ["plain"]
        assert [s.key for s in neighbour.list()] == ["bystander"]
        assert len(ledger(admin, schema)) == len(MIGRATIONS)
    drop_schema(admin, schema + "_n")


def test_schema_and_table_names_are_quoted_not_interpolated(admin: Admin) -> None:
    weird_schema = 'ac_x"; DROP SCHEMA public CASCADE; --' + uuid.uuid4().hex[:6]
    weird_table = "t'); DELETE FROM pg_class; --"
    try:
        with open_pg(weird_schema, table=weird_table) as store:
            store.setup()
            store.put(checkpoint(text="safe"), key="k")
            got = store.get("k")
            assert got is not None and got.history[0].content == "safe 0"
        tables = admin.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            (weird_schema,),
        ).fetchall()
        assert sorted(t for (t,) in tables) == sorted(
            [weird_table, f"{weird_table}_segments", LEDGER]
        )
        public = admin.execute("SELECT 1 FROM pg_namespace WHERE nspname = 'public'").fetchone()
        assert public is not None
    finally:
        drop_schema(admin, weird_schema)


def test_keys_order_by_code_point_like_python_even_under_a_linguistic_collation(
    admin: Admin,
) -> None:
    # A database whose default collation sorts "a" < "B" < "é" < "Z" (ICU en-US); the keyset
    # order must still be Python's str order, as on every other backend.
    database = f"ac_icu_{uuid.uuid4().hex[:10]}"
    try:
        admin.execute(
            sql.SQL(
                "CREATE DATABASE {} TEMPLATE template0 LOCALE_PROVIDER icu "
                "ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'"
            ).format(sql.Identifier(database))
        )
    except psycopg.Error as exc:
        pytest.skip(f"this server cannot create an ICU database: {exc}")
    url = POSTGRES_URL.rsplit("/", 1)[0] + "/" + database
    keys = ["a", "B", "_x", "é", "e", "Z", "ä", "😀", "日本", "ｚ", "ß", "a b", "a-b", "A", "~"]
    try:
        with open_pg("public", url=url) as store:
            store.setup()
            for key in keys:
                store.put(stamped(checkpoint(key), 1000), key=key)
            assert [s.key for s in store.list()] == sorted(keys)
            paged = [s.key for s in store.iter_summaries(page_size=2)]
            assert paged == sorted(keys)
            oldest = store.backend.scan(Query(oldest_first=True, after=(1000, "a"), limit=50))
            assert [s.key for s in oldest] == [k for k in sorted(keys) if k > "a"]
    finally:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database))
        )


# -- racing creators --------------------------------------------------------------------


def race(store: Store, writes: int, **put: Any) -> tuple[list[int], list[BaseException]]:
    """``writes`` threads putting the same fresh key at once; the revisions they got, and errors."""
    barrier = threading.Barrier(writes)
    revisions: list[int] = []
    errors: list[BaseException] = []

    def write(i: int) -> None:
        barrier.wait()
        try:
            revisions.append(store.put(checkpoint(text=f"w{i}"), key="fresh", **put).revision)
        except BaseException as exc:  # judged by the caller
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return revisions, errors


def test_racing_creators_of_a_new_key_all_land_one_after_another(schema: str) -> None:
    with open_pg(schema) as store:
        store.setup()
        revisions, errors = race(store, 8)
        assert errors == []
        # the first lands at the revision sequence's next value (a creator that lost the race
        # for the row has taken one too, so it need not be 1); each later one adds one
        first = min(revisions)
        assert first >= 1 and sorted(revisions) == list(range(first, first + 8))
        assert store.head("fresh").revision == first + 7  # type: ignore[union-attr]


def test_racing_create_only_writers_of_a_new_key_have_one_winner(schema: str) -> None:
    with open_pg(schema) as store:
        store.setup()
        revisions, errors = race(store, 8, create_only=True)
        assert len(revisions) == 1 and revisions[0] >= 1  # the sequence's value it took
        assert len(errors) == 7 and all(isinstance(e, ConflictError) for e in errors)
        got = store.get("fresh")
        assert got is not None and store.head("fresh").revision == revisions[0]  # type: ignore[union-attr]


# -- setup and its ledger ---------------------------------------------------------------


def test_operations_before_setup_ask_for_setup_instead_of_a_raw_driver_error(schema: str) -> None:
    with open_pg(schema) as store:
        attempts: list[tuple[str, Callable[[], object]]] = [
            ("save", lambda: store.put(checkpoint(), key="k")),
            ("load", lambda: store.get("k")),
            ("scan", lambda: store.list()),
            ("drop", lambda: store.delete("k")),
        ]
        for operation, call in attempts:
            with pytest.raises(StoreNotFoundError) as caught:
                call()
            message = str(caught.value)
            assert "setup()" in message and f"postgres {operation}" in message
            assert isinstance(caught.value.__cause__, UndefinedTable)


def test_setup_is_idempotent_and_the_ledger_lists_each_step_once(admin: Admin, schema: str) -> None:
    with open_pg(schema) as store:
        store.setup()
        store.put(checkpoint(text="kept"), key="k")
        store.setup()
        store.setup()
        got = store.get("k")
        assert got is not None and got.history[0].content == "kept 0"
    assert ledger(admin, schema) == [(version, name) for version, name, _ in MIGRATIONS]


def test_concurrent_setups_both_succeed_and_apply_each_step_once(admin: Admin, schema: str) -> None:
    stores = [open_pg(schema), open_pg(schema)]
    barrier = threading.Barrier(len(stores))
    errors: list[BaseException] = []

    def run(store: Store) -> None:
        barrier.wait()
        try:
            store.setup()
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert errors == []
        assert ledger(admin, schema) == [(version, name) for version, name, _ in MIGRATIONS]
        stores[0].put(checkpoint(text="one"), key="k")
        got = stores[1].get("k")
        assert got is not None and got.history[0].content == "one 0"
    finally:
        for s in stores:
            s.close()


def test_setup_refuses_a_table_migrated_by_a_newer_library(admin: Admin, schema: str) -> None:
    with open_pg(schema) as store:
        store.setup()
        admin.execute(
            sql.SQL("INSERT INTO {} (table_name, version, name) VALUES (%s, %s, %s)").format(
                sql.Identifier(schema, LEDGER)
            ),
            ("agent_checkpoints", 99, "from the future"),
        )
        with pytest.raises(BackendError, match="newer than this agent-checkpoint"):
            store.setup()


def test_two_tables_in_one_schema_keep_separate_ledgers(admin: Admin, schema: str) -> None:
    with open_pg(schema) as first, open_pg(schema, table="other_checkpoints") as second:
        first.setup()
        second.setup()
        first.put(checkpoint(text="first"), key="k")
        assert second.get("k") is None
    steps = [(version, name) for version, name, _ in MIGRATIONS]
    assert ledger(admin, schema) == steps
    assert ledger(admin, schema, "other_checkpoints") == steps


# -- options and lifecycle --------------------------------------------------------------


def test_a_schema_store_is_isolated_from_another_schema(admin: Admin, schema: str) -> None:
    other = schema + "_b"
    try:
        with open_pg(schema) as a, open_pg(other) as b:
            a.setup()
            b.setup()
            a.put(checkpoint(principal="alice", text="in a"), key="same")
            b.put(checkpoint(principal="bob", text="in b"), key="same")
            assert a.owner("same") == "alice" and b.owner("same") == "bob"
            assert a.delete("same") is True
            got = b.get("same")
            assert got is not None and got.history[0].content == "in b 0"
            assert a.list().items == [] and [s.key for s in b.list()] == ["same"]
    finally:
        drop_schema(admin, other)


def test_url_options_name_the_table_and_keywords_override_them(admin: Admin) -> None:
    in_url, in_keyword = unique_schema(), unique_schema()
    url = with_query(POSTGRES_URL, schema=in_url, table="runs", application_name="ac-test")
    try:
        with open_store(url, schema=in_keyword, max_size=2) as store:
            store.setup()
            store.put(checkpoint(), key="k")
            backend = store.backend
            assert isinstance(backend, PostgresBackend)
            assert (backend.schema, backend.table) == (in_keyword, "runs")
            with backend.pool.connection() as conn:
                name = conn.execute("SHOW application_name").fetchone()
            assert name == ("ac-test",)
        found = admin.execute(
            "SELECT table_schema FROM information_schema.tables WHERE table_name = 'runs' "
            "AND table_schema IN (%s, %s)",
            (in_url, in_keyword),
        ).fetchall()
        assert found == [(in_keyword,)]
    finally:
        drop_schema(admin, in_keyword)
        drop_schema(admin, in_url)


def test_libpq_options_with_spaces_reach_the_server(schema: str) -> None:
    url = with_query(POSTGRES_URL, options="-c application_name=ac_probe")
    with open_pg(schema, url=url) as store:
        backend = store.backend
        assert isinstance(backend, PostgresBackend)
        with backend.pool.connection() as conn:
            row = conn.execute("SHOW application_name").fetchone()
        assert row == ("ac_probe",)


def test_names_postgres_cannot_hold_are_refused_up_front() -> None:
    for schema, table in [("s", "t" * 49), ("", "t"), ("nul\x00", "t"), ("s", "")]:
        with pytest.raises(InvalidKeyError):
            open_pg(schema, table=table)


def test_an_injected_pool_stays_open_after_close(schema: str) -> None:
    pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
        POSTGRES_URL, min_size=1, max_size=2, open=False
    )
    pool.open()
    try:
        store = Store(PostgresBackend(pool, schema=schema))
        store.setup()
        store.put(checkpoint(), key="k")
        store.close()
        store.close()
        with pool.connection() as conn:
            count = conn.execute(
                sql.SQL("SELECT count(*) FROM {}").format(
                    sql.Identifier(schema, "agent_checkpoints")
                )
            ).fetchone()
        assert count == (1,)
    finally:
        pool.close()


def test_a_closed_store_raises_a_library_error_at_once(schema: str) -> None:
    store = open_pg(schema)
    store.setup()
    store.close()
    store.close()
    with pytest.raises(StoreClosedError, match="closed store") as caught:
        store.get("k")
    assert not isinstance(caught.value, BackendUnavailableError)  # never retried
    with pytest.raises(StoreClosedError, match="postgres head on a closed store"):
        store.backend.head("k")  # the backend itself refuses, not only the Store


def _address(user: str | None = None, database: str | None = None, port: int | None = None) -> str:
    parts = urlsplit(POSTGRES_URL)
    netloc = f"{user or parts.username or 'postgres'}@{parts.hostname}:{port or parts.port or 5432}"
    return urlunsplit(parts._replace(netloc=netloc, path=f"/{database or parts.path[1:]}"))


@pytest.mark.parametrize(
    ("url", "error", "message"),
    [
        (_address(database="ac_no_such_database"), StoreNotFoundError,
         'database "ac_no_such_database" does not exist'),
        (_address(user="ac_no_such_role"), InvalidKeyError, 'role "ac_no_such_role" does not exist'),
        (_address(port=1), BackendError, "Connection refused"),  # nothing listens on port 1
    ],
)  # fmt: skip
def test_a_connection_retrying_cannot_fix_fails_at_once_naming_why(
    url: str, error: type[Exception], message: str
) -> None:
    """A wrong database, role or port is not retried: the first failed connection attempt
    ends the operation (the pool does not wait out its timeout, the Store does not retry)."""
    with open_store(url) as store, pytest.raises(error) as caught:
        store.list()
    assert not isinstance(caught.value, BackendUnavailableError)
    assert str(caught.value).startswith("postgres scan failed: cannot connect") and message in str(
        caught.value
    )
    assert store.backend.pool.get_stats()["connections_num"] <= 2  # type: ignore[attr-defined]


def store_as_before(admin: Admin, schema: str, store: Store, *, revision: int) -> None:
    """Key ``old`` as a previous library stored it: the whole record in ``body``, no segments."""
    old = stamped(checkpoint("old", text="before the upgrade"), 1000)
    body, _ = store._codec.encode(old, "old")
    admin.execute(
        sql.SQL(
            "INSERT INTO {} (key, run_id, saved_at, message_count, size, revision, body) "
            "VALUES ('old', 'old', 1000, 2, %s, %s, %s)"
        ).format(sql.Identifier(schema, "agent_checkpoints")),
        (len(body), revision, body),
    )


def test_setup_upgrades_a_store_made_by_the_previous_ledger(
    admin: Admin, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    previous = MIGRATIONS[:2]  # the steps the library had before history segments
    with open_pg(schema) as store:
        with monkeypatch.context() as m:
            m.setattr(postgres, "MIGRATIONS", previous)
            store.setup()
        assert ledger(admin, schema) == [(version, name) for version, name, _ in previous]
        store_as_before(admin, schema, store, revision=1)
        with pytest.raises(StoreNotFoundError, match=r"predates .* store\.setup\(\)"):
            store.get("old")
        store.setup()
        assert ledger(admin, schema) == [(version, name) for version, name, _ in MIGRATIONS]
        got = store.get("old")
        assert got is not None and got.history[0].content == "before the upgrade 0"
        grow(store, 3, key="old")
        assert segment_rows(admin, schema, "old") == 1  # three appends joined into one row
        store.setup()  # and again: nothing left to apply
        assert len(ledger(admin, schema)) == len(MIGRATIONS)


def test_a_store_made_before_the_revision_sequence_upgrades_and_never_repeats_a_revision(
    admin: Admin, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_pg(schema) as store:
        with monkeypatch.context() as m:
            m.setattr(postgres, "MIGRATIONS", MIGRATIONS[:6])
            store.setup()
        store_as_before(admin, schema, store, revision=41)
        with pytest.raises(StoreNotFoundError, match=r"predates .* store\.setup\(\)"):
            store.put(checkpoint("new"), key="new")
        store.setup()
        assert store.put(checkpoint("new"), key="new").revision > 41
        assert store.put(checkpoint("old"), key="old").revision > 41


# -- histories stored in segments -------------------------------------------------------


@pytest.fixture
def store(schema: str) -> Iterator[Store]:
    with open_pg(schema) as s:
        s.setup()
        yield s


def grow(
    store: Store, count: int, *, key: str = "k", principal: str | None = None
) -> tuple[Message, ...]:
    """Checkpoint under ``key`` after every message, ``count`` times; the last history."""
    base = checkpoint("r", principal=principal)
    history: tuple[Message, ...] = ()
    for i in range(count):
        history = (*history, Message("user", f"message {i} " + "x" * 200))
        store.put(base.evolve(history=history), key=key)
    return history


def one_row_per_append(store: Store, max_segments: int | None = None) -> PostgresBackend:
    """The store's backend, set to store each append as its own row (and to merge at
    ``max_segments`` rows, when given): the shapes that joining rows otherwise hides."""
    backend = store.backend
    assert isinstance(backend, PostgresBackend)
    backend.chunk_bytes = 0
    if max_segments is not None:
        backend.max_segments = max_segments
    return backend


def segment_sizes(admin: Admin, schema: str, key: str) -> list[int]:
    query = sql.SQL("SELECT octet_length(data) FROM {} WHERE key = %s ORDER BY seq").format(
        sql.Identifier(schema, "agent_checkpoints_segments")
    )
    return [int(n) for (n,) in admin.execute(query, (key,)).fetchall()]


def whole_bytes(ckpt: RunCheckpoint, saved_at: int) -> bytes:
    """What a full write of ``ckpt`` stores."""
    return orjson.dumps({"format": "conversation-v1", "data": ckpt.to_json(), "savedAt": saved_at})


def segment_rows(admin: Admin, schema: str, key: str | None = None) -> int:
    table = sql.Identifier(schema, "agent_checkpoints_segments")
    if key is None:
        row = admin.execute(sql.SQL("SELECT count(*) FROM {}").format(table)).fetchone()
    else:
        query = sql.SQL("SELECT count(*) FROM {} WHERE key = %s").format(table)
        row = admin.execute(query, (key,)).fetchone()
    assert row is not None
    return int(row[0])


def stored_row(admin: Admin, schema: str, key: str) -> tuple[Any, ...]:
    row = admin.execute(
        sql.SQL(
            "SELECT body, head, digest, segments, size, revision FROM {} WHERE key = %s"
        ).format(sql.Identifier(schema, "agent_checkpoints")),
        (key,),
    ).fetchone()
    assert row is not None
    return tuple(row)


def snapshot(admin: Admin, schema: str) -> list[Any]:
    """Every row of the store's two tables, for proving that nothing changed."""
    return [
        admin.execute(
            sql.SQL("SELECT * FROM {} ORDER BY 1, 2").format(sql.Identifier(schema, table))
        ).fetchall()
        for table in ("agent_checkpoints", "agent_checkpoints_segments")
    ]


def test_a_growing_history_appends_one_segment_row_per_put_and_merges_when_full(
    store: Store, admin: Admin, schema: str
) -> None:
    assert isinstance(store.backend, Appending)
    backend = one_row_per_append(store)
    grow(store, 10)
    assert segment_rows(admin, schema, "k") == 10  # one small row per put, not a rewrite
    body, head, digest, count, size, revision = stored_row(admin, schema, "k")
    assert (body, count, revision) == (b"", 10, 10) and digest
    assert b"message 0" not in head and b"\x00" in head
    got = store.get_record("k")
    assert got is not None and got.summary.size == len(got.body) == size

    history = grow(store, backend.max_segments + 5)
    # The first put of the new history wrote it whole; the put after the record reached
    # max_segments rows merged them into one on the server and added its own, then 4 appends.
    assert segment_rows(admin, schema, "k") == 6
    back = store.get("k")
    assert back is not None and back.history == history
    assert store.delete("k")
    assert segment_rows(admin, schema) == 0


def test_appends_join_onto_the_last_row_up_to_chunk_bytes(
    store: Store, admin: Admin, schema: str
) -> None:
    backend = store.backend
    assert isinstance(backend, PostgresBackend)
    history = grow(store, 60)  # messages of ~240 bytes
    sizes = segment_sizes(admin, schema, "k")
    assert 1 < len(sizes) < 10 and max(sizes) <= backend.chunk_bytes
    assert stored_row(admin, schema, "k")[3] == len(sizes)
    back = store.get("k")
    assert back is not None and back.history == history
    # A big message gets a row of its own: nothing is joined past chunk_bytes.
    big = (*history, Message("user", "y" * backend.chunk_bytes))
    store.put(checkpoint("r").evolve(history=big), key="k")
    after = segment_sizes(admin, schema, "k")
    assert after[:-1] == sizes and after[-1] > backend.chunk_bytes
    back = store.get("k")
    assert back is not None and back.history == big


@pytest.mark.parametrize("chunk_bytes", [0, 4096])
def test_appends_past_max_segments_read_back_as_a_full_write(
    store: Store, admin: Admin, schema: str, chunk_bytes: int
) -> None:
    backend = one_row_per_append(store, max_segments=5)
    backend.chunk_bytes = chunk_bytes
    base = checkpoint("r")
    history: tuple[Message, ...] = ()
    counts = []
    for i in range(40):
        # Every seventh put adds no message (an empty segment); sizes vary around the limit.
        if i % 7 != 3:
            history = (*history, Message("user", f"m{i} " + "z" * (i * 97 % 1500)))
        ckpt = base.evolve(history=history)
        summary = store.put(ckpt, key="k")
        counts.append(segment_rows(admin, schema, "k"))
        record = store.get_record("k")
        assert record is not None and record.body == whole_bytes(ckpt, summary.saved_at)
        assert record.summary == summary and summary.size == len(record.body)
        assert stored_row(admin, schema, "k")[3] == counts[-1]
    assert max(counts) <= backend.max_segments
    assert any(b < a for a, b in itertools.pairwise(counts))  # merges happened
    assert store.head("k").revision == 40  # type: ignore[union-attr]  # never a rewrite


def test_retention_removes_the_segments_of_a_record(
    store: Store, admin: Admin, schema: str
) -> None:
    one_row_per_append(store)
    grow(store, 5, principal="al")
    old = store.head("k")
    time.sleep(0.01)  # the young record is saved in a later millisecond
    grow(store, 3, key="young")
    assert old is not None and segment_rows(admin, schema) == 8
    assert store.forget_older_than(old.saved_at + 1).forgotten == 1
    assert segment_rows(admin, schema) == segment_rows(admin, schema, "young") == 3


def test_a_whole_write_over_a_record_in_segments_removes_its_segments(
    store: Store, admin: Admin, schema: str
) -> None:
    one_row_per_append(store)
    grow(store, 6)
    stored = store.get_record("k")
    assert stored is not None
    store.put_record(stored)  # as copy and migrate write: whole bytes
    assert segment_rows(admin, schema) == 0
    assert stored_row(admin, schema, "k") == (stored.body, None, None, None, len(stored.body), 7)
    again = store.get_record("k")
    assert again is not None and again.body == stored.body and again.summary.revision == 7


def summary(key: str, size: int, *, saved_at: int = 1000, owner: str | None = None) -> Summary:
    return Summary(key, "run", saved_at, owner, "agent", None, None, 1, size, 0)


def split_of(head: bytes, *segments: bytes) -> tuple[Split, int]:
    """The split whose last segment is ``segments[-1]``, and the assembled size after it."""
    digest = ""
    for segment in segments:
        digest = chain(digest, segment)
    return Split(head, segments[-1], digest), len(assemble(head, list(segments)))


def test_a_whole_write_by_an_older_library_over_a_split_record_reads_back_as_written(
    store: Store, admin: Admin, schema: str
) -> None:
    history = grow(store, 4)
    replaced = stamped(checkpoint("r", text="written by the previous version"), 5)
    body, _ = store._codec.encode(replaced, "k")
    admin.execute(  # the previous library's UPDATE: it knows nothing of head and segments
        sql.SQL(
            "UPDATE {} SET body = %s, size = %s, revision = revision + 1 WHERE key = 'k'"
        ).format(sql.Identifier(schema, "agent_checkpoints")),
        (body, len(body)),
    )
    got = store.get("k")
    assert got is not None and got.history[0].content == "written by the previous version 0"
    # The store's tail is stale (the revision moved on): no append, a full write that clears
    # the old segments.
    history = (*history, Message("user", "one more"))
    store.put(checkpoint("r").evolve(history=history), key="k")
    assert segment_rows(admin, schema) == 1
    back = store.get("k")
    assert back is not None and back.history == history


def test_an_append_whose_reply_was_lost_is_not_applied_twice(
    store: Store, admin: Admin, schema: str
) -> None:
    backend = store.backend
    assert isinstance(backend, PostgresBackend)
    first, size = split_of(b'{"h":[\x00]}', b"1")
    body = assemble(first.head, [first.segment])
    assert backend.save_split(Record(summary("k", size), body), first).revision == 1
    second, size = split_of(b'{"h":[\x00],"n":2}', b"1", b"2")
    grown = summary("k", size, saved_at=2000)
    landed = backend.append(grown, second, base_revision=1, base_digest=first.digest)
    assert landed is not None and (landed.revision, landed.size) == (2, size)
    before = snapshot(admin, schema)
    # The retry of the same append, as after a lost reply: refused, and nothing changes.
    assert backend.append(grown, second, base_revision=1, base_digest=first.digest) is None
    assert snapshot(admin, schema) == before
    loaded = backend.load("k")
    assert loaded is not None and loaded.body == b'{"h":[1,2],"n":2}'
    assert loaded.summary == landed
    assert [s.key for s in backend.scan(Query(saved_since=2000))] == ["k"]


def fill(
    backend: PostgresBackend, segments: list[bytes], *, owner: str | None = None
) -> tuple[Split, int]:
    """Store ``segments`` under ``k``: a split write of the first, then an append of each
    other; the last split and the record's revision."""
    split, size = split_of(b"[\x00]", *segments[:1])
    whole = Record(summary("k", size, owner=owner), assemble(b"[\x00]", segments[:1]))
    backend.save_split(whole, split)
    for n in range(2, len(segments) + 1):
        base = split_of(b"[\x00]", *segments[: n - 1])[0].digest
        split, size = split_of(b"[\x00]", *segments[:n])
        landed = backend.append(summary("k", size), split, base_revision=n - 1, base_digest=base)
        assert landed is not None and landed.revision == n
    return split, len(segments)


def test_an_append_to_a_full_record_merges_its_rows_on_the_server(
    store: Store, admin: Admin, schema: str
) -> None:
    backend = one_row_per_append(store, max_segments=6)
    # Empty segments are kept out of the join, exactly as assemble does.
    segments = [b"0", b"", b"2", b"3", b"", b"5", b"6", b"7", b"", b"", b"10", b"11", b"12"]
    rows = []
    for n in range(1, len(segments) + 1):
        fill_to = segments[:n]
        if n == 1:
            fill(backend, fill_to)
        else:
            base = split_of(b"[\x00]", *segments[: n - 1])[0].digest
            split, size = split_of(b"[\x00]", *fill_to)
            landed = backend.append(
                summary("k", size), split, base_revision=n - 1, base_digest=base
            )
            assert landed is not None and (landed.revision, landed.size) == (n, size)
        rows.append(segment_rows(admin, schema, "k"))
        loaded = backend.load("k")
        assert loaded is not None and loaded.body == assemble(b"[\x00]", fill_to)
        assert stored_row(admin, schema, "k")[3] == rows[-1] <= backend.max_segments
    # Empty segments take no row; the append after the sixth row merges to one plus its own.
    assert rows == [1, 1, 2, 3, 3, 4, 5, 6, 6, 6, 2, 3, 4]
    assert segment_sizes(admin, schema, "k")[0] == len(b"0,2,3,5,6,7")


def test_a_refused_append_to_a_full_record_changes_nothing(
    store: Store, admin: Admin, schema: str
) -> None:
    backend = one_row_per_append(store, max_segments=4)
    segments = [b"1", b"2", b"3", b"4"]
    last, revision = fill(backend, segments, owner="al")
    split, size = split_of(b"[\x00]", *segments, b"5")
    before = snapshot(admin, schema)
    for base_revision, base_digest in (
        (revision - 1, last.digest),
        (revision, chain("", b"other")),
        (revision + 1, last.digest),
    ):
        refused = backend.append(
            summary("k", size), split, base_revision=base_revision, base_digest=base_digest
        )
        assert refused is None
    with pytest.raises(OwnershipConflictError):
        backend.append(
            summary("k", size, owner="mallory"),
            split,
            base_revision=revision,
            base_digest=last.digest,
        )
    assert snapshot(admin, schema) == before
    landed = backend.append(
        summary("k", size), split, base_revision=revision, base_digest=last.digest
    )
    assert landed is not None and segment_rows(admin, schema, "k") == 2
    loaded = backend.load("k")
    assert loaded is not None and loaded.body == b"[1,2,3,4,5]"


def test_a_full_record_missing_a_row_is_not_merged_but_rewritten(
    store: Store, admin: Admin, schema: str
) -> None:
    backend = one_row_per_append(store, max_segments=4)
    base = checkpoint("r")
    history = grow(store, 4)
    admin.execute(
        sql.SQL("DELETE FROM {} WHERE key = 'k' AND seq = 1").format(
            sql.Identifier(schema, "agent_checkpoints_segments")
        )
    )
    before = snapshot(admin, schema)
    last = split_of(b"[\x00]", b"x")[0]
    row = stored_row(admin, schema, "k")
    refused = backend.append(summary("k", 1), last, base_revision=row[5], base_digest=row[2])
    assert refused is None and snapshot(admin, schema) == before  # no merge over a hole
    # The Store's put falls back to a full write, which repairs the record.
    history = (*history, Message("user", "after the hole"))
    summary_ = store.put(base.evolve(history=history), key="k")
    assert segment_rows(admin, schema, "k") == 1
    back = store.get("k")
    assert back is not None and back.history == history and summary_.revision == row[5] + 1


def test_the_upgrade_drops_the_oldest_first_index_and_retention_still_runs_oldest_first(
    admin: Admin, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    indexes = "SELECT indexname FROM pg_indexes WHERE schemaname = %s ORDER BY 1"
    with open_pg(schema) as store:
        with monkeypatch.context() as m:
            # the steps before it; and the revision sequence, without which nothing is written
            m.setattr(postgres, "MIGRATIONS", (*MIGRATIONS[:5], REVISIONS))
            store.setup()
        assert ("agent_checkpoints_oldest_idx",) in admin.execute(indexes, (schema,)).fetchall()
        for i, key in enumerate(["c", "a", "b", "d"]):
            store.put(stamped(checkpoint(key), 1000 + (i // 2)), key=key)  # two ties
        store.setup()
        assert ("agent_checkpoints_oldest_idx",) not in admin.execute(indexes, (schema,)).fetchall()
        oldest = store.backend.scan(Query(oldest_first=True, limit=10))
        assert [(s.saved_at, s.key) for s in oldest] == [
            (1000, "a"),
            (1000, "c"),
            (1001, "b"),
            (1001, "d"),
        ]
        assert store.forget_older_than(1001, limit=1).forgotten == 1  # "a": oldest, then key
        assert sorted(s.key for s in store.list()) == ["b", "c", "d"]


def test_a_record_written_before_compressed_segments_upgrades_and_keeps_growing(
    admin: Admin, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # history segments, one row per append, default storage (and the revision sequence,
    # without which nothing is written)
    previous = (*MIGRATIONS[:3], REVISIONS)
    assert [v for v, _, _ in previous] == [1, 2, 3, 7]
    storage = sql.SQL(
        "SELECT attstorage FROM pg_attribute WHERE attrelid = %s::regclass AND attname = 'data'"
    )
    segs = f'"{schema}".agent_checkpoints_segments'
    history: tuple[Message, ...] = ()
    base = checkpoint("r")
    with open_pg(schema) as store:
        with monkeypatch.context() as m:
            m.setattr(postgres, "MIGRATIONS", previous)
            store.setup()
        for i in range(5):  # rows as the previous library wrote them: one per append
            history = (*history, Message("user", f"old {i} " + "o" * 3000))
            store.put(base.evolve(history=history), key="k")
        assert segment_rows(admin, schema, "k") == 5
        assert ledger(admin, schema) == [(v, n) for v, n, _ in previous]
        assert admin.execute(storage, (segs,)).fetchone() == ("x",)
        old = store.get_record("k")

        store.setup()
        assert ledger(admin, schema) == [(v, n) for v, n, _ in MIGRATIONS]
        assert admin.execute(storage, (segs,)).fetchone() == ("m",)
        assert store.get_record("k") == old
        for i in range(5):  # appends onto the rows written before the upgrade
            history = (*history, Message("user", f"new {i} " + "n" * 500))
            ckpt = base.evolve(history=history)
            done = store.put(ckpt, key="k")
        assert done.revision == 10 and segment_rows(admin, schema, "k") == 6
        record = store.get_record("k")
        assert record is not None and record.body == whole_bytes(ckpt, done.saved_at)
        store.setup()
        assert len(ledger(admin, schema)) == len(MIGRATIONS)
    with open_pg(schema) as other:  # a store without the tail reads the same bytes
        again = other.get_record("k")
        assert again is not None and again.body == record.body


def test_a_record_missing_a_segment_reads_unreadable_not_shorter(
    store: Store, admin: Admin, schema: str
) -> None:
    one_row_per_append(store)
    grow(store, 3)
    admin.execute(
        sql.SQL("DELETE FROM {} WHERE key = 'k' AND seq = 2").format(
            sql.Identifier(schema, "agent_checkpoints_segments")
        )
    )
    record = store.get_record("k")
    assert record is not None and b"\x00" in record.body
    with pytest.raises(UnreadableEnvelopeError):
        store.get("k")


def test_owner_and_agent_indexes_hold_only_runs_that_have_one(
    admin: Admin, schema: str, store: Store
) -> None:
    store.put(checkpoint("a", principal="alice", agent="planner"), key="a")
    store.put(checkpoint("b"), key="b")
    definitions = dict(
        admin.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s", (schema,)
        ).fetchall()
    )
    assert "WHERE (owner IS NOT NULL)" in definitions["agent_checkpoints_owner_idx"]
    assert "WHERE (agent_id IS NOT NULL)" in definitions["agent_checkpoints_agent_idx"]
    assert [s.key for s in store.list(owner="alice")] == ["a"]
    assert [s.key for s in store.list(agent_id="planner")] == ["a"]
    assert sorted(s.key for s in store.list()) == ["a", "b"]


def test_claims_never_touch_a_store_whose_table_looks_like_their_namespace(schema: str) -> None:
    """Claims of the store on table ``T`` live in a table no store can be opened on."""
    with (
        open_pg(schema, table="runs") as store,
        open_pg(schema, table="runs_leases") as neighbour,
    ):
        store.setup()
        neighbour.setup()
        store.put(checkpoint("r"), key="r")
        neighbour.put(checkpoint("bystander"), key="r")
        store.claim("r", "w1", ttl=30).release()
        got = neighbour.get("r")
        assert got is not None and got.run_id == "bystander"
        assert [s.key for s in neighbour.list()] == ["r"]
    with pytest.raises(InvalidKeyError, match=r"without NUL or \$"):
        open_pg(schema, table="runs$leases")


def test_a_long_table_name_keeps_its_claims_table_within_the_name_limit(schema: str) -> None:
    table = "t" * 48
    with open_pg(schema, table=table) as store:
        store.setup()
        store.put(checkpoint("r"), key="r")
        with store.claim("r", "w1", ttl=30):
            assert [c.worker for c in store.claims()] == ["w1"]
        assert store.claims() == []


def test_listing_claims_of_a_store_that_never_had_one_creates_no_table(
    admin: Admin, schema: str
) -> None:
    """``claims()`` is a read: an operator with a role that may not CREATE can run it."""

    def tables() -> list[str]:
        rows = admin.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY 1", (schema,)
        )
        return [row[0] for row in rows.fetchall()]

    with open_pg(schema) as store:
        store.setup()
        store.put(checkpoint("r", failed="llm"), key="r")
        before = tables()
        assert store.claims() == []
        assert tables() == before
        claim = store.claim("r", "w1", ttl=30)
        assert [c.worker for c in store.claims()] == ["w1"]
        made = [t for t in tables() if t not in before]  # by the first claim
        assert made and all("$leases" in t for t in made)
        claim.release()
    with open_pg(schema) as again:  # a new store object finds the existing table
        assert again.claims() == []
        again.claim("r", "w2", ttl=30)
        assert [c.worker for c in again.claims()] == ["w2"]
