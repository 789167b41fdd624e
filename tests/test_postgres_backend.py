"""The PostgreSQL backend against the real server: conformance, listing at scale, injection,
setup and its migration ledger (and upgrades), histories stored in segments, schema isolation.
Fault tests live in test_postgres_faults.py."""

from __future__ import annotations

import base64
import os
import re
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
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
from agent_checkpoint._codec import encode_parts
from agent_checkpoint._model import Message, RunCheckpoint
from agent_checkpoint._segment_format import Layout
from agent_checkpoint._segments import PIECES, Segmented
from agent_checkpoint.backends import Query, Record, Summary
from agent_checkpoint.backends import _postgres as postgres
from agent_checkpoint.backends import _postgres_schema as postgres_schema
from agent_checkpoint.backends._postgres import LEDGER, MIGRATIONS, PostgresBackend, TimedConnection
from agent_checkpoint.backends._postgres_sql import scan_statement
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


@contextmanager
def refusing(store: Store) -> Iterator[None]:
    """The server's port starts refusing: the pool's sessions are closed and new ones go to a
    closed port (a request waits half a second for one, not the pool's timeout)."""
    pool = postgres_of(store).pool
    conninfo, timeout = pool.conninfo, pool.timeout
    with refused_port() as port:
        pool.conninfo, pool.timeout = make_conninfo(conninfo, port=port), 0.5
        pool.drain()
        try:
            yield
        finally:
            pool.conninfo, pool.timeout = conninfo, timeout


class TestPostgresStore(StoreConformance, ClaimsConformance, EncryptionConformance):
    """The backend as a Store opens it: growing histories go through the segment layer."""

    @pytest.fixture
    def store(self, schema: str) -> Iterator[Store]:
        with open_pg(schema) as store:
            store.setup()
            yield store

    def break_connection(self, store: Store) -> AbstractContextManager[None]:
        return refusing(store)


class TestPostgresStoreInPieces(StoreConformance, AppendingConformance):
    """The segment layer at its lowest thresholds: every put past the first moves history
    into pieces on the server, and merges them."""

    @pytest.fixture
    def store(self, schema: str) -> Iterator[Store]:
        with open_pg(schema) as store:
            store.setup()
            with in_pieces(store) as pieces:
                yield pieces

    def break_connection(self, store: Store) -> AbstractContextManager[None]:
        return refusing(store)


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
            safe = checkpoint(text="safe")
            store.put(safe, key="k")
            # past the inline threshold: the history's pieces go to the segments namespace
            grown = safe.evolve(history=(*safe.history, Message("user", "s" * 20_000)))
            store.put(grown, key="k")
            got = store.get("k")
            assert got is not None and got.history[0].content == "safe 0" and got == grown
        tables = admin.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            (weird_schema,),
        ).fetchall()
        pieces = f"{weird_table}$segments"
        assert sorted(t for (t,) in tables) == sorted(
            [weird_table, f"{weird_table}_segments", pieces, f"{pieces}_segments", LEDGER]
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
        backend = postgres_of(store)
        record = Record(Summary("k", "r", 1, None, None, None, None, 0, 2, 0), b"{}")
        attempts: list[tuple[str, Callable[[], object]]] = [
            ("save", lambda: store.put(checkpoint(), key="k")),  # a first put creates: no read
            ("load", lambda: store.get("k")),
            ("scan", lambda: store.list()),
            ("load", lambda: store.delete("k")),
            ("save", lambda: backend.save(record)),
            ("drop", lambda: backend.drop("k")),
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


def test_setup_makes_the_pieces_table_so_writers_and_readers_need_no_ddl(
    admin: Admin, schema: str
) -> None:
    with open_pg(schema) as store:
        store.setup()
        backend = postgres_of(store)
        assert backend.namespace_exists(PIECES)  # made by setup, not by a first long history
    assert ledger(admin, schema, "agent_checkpoints$segments") == [
        (version, name) for version, name, _ in MIGRATIONS
    ]


def test_a_growing_history_is_a_run_of_pieces_kept_in_their_rows(admin: Admin, schema: str) -> None:
    """Checkpoint after every message: the pieces are a run (the record names it in a few
    bytes), never merged below the run's length, and each piece stays in its row (no TOAST,
    whose dead versions only VACUUM reclaims), so the tables hold about the history's bytes."""
    history: list[Message] = []
    with open_pg(schema) as store:
        store.setup()
        for i in range(500):
            history.append(Message("user" if i % 2 else "assistant", f"step {i} " * 90))
            store.put(RunCheckpoint.new("task", tuple(history), run_id="r"), key="k")
        raw = postgres_of(store).load("k")
        assert raw is not None
        layout = Layout.unpack(raw.body)
        assert layout is not None and layout.run and len(layout.pieces) > 16
        assert len(raw.body) - len(layout.head) - len(layout.inline) < 200  # the manifest
        whole = len(store.get_record("k").body)  # type: ignore[union-attr]
    for table in ("agent_checkpoints", "agent_checkpoints$segments"):
        storage, toast = admin.execute(
            "SELECT a.attstorage, pg_relation_size(c.reltoastrelid) FROM pg_attribute a "
            "JOIN pg_class c ON c.oid = a.attrelid WHERE a.attrelid = %s::regclass "
            "AND a.attname = 'body'",
            (sql.Identifier(schema, table).as_string(None),),
        ).fetchone()
        assert (storage, toast) == ("m", 0), table
    with open_pg(schema) as reader:
        got = reader.get("k")
        assert got is not None and got.history == tuple(history)
    stored = admin.execute(
        "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n "
        "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'",
        (schema,),
    ).fetchone()[0]
    # ~16 KB each for the empty tables and indexes; pieces merged 16 at a time and the record
    # row in TOAST stored 2.3x the history (benchmarks/README.md, "PostgreSQL stored bytes")
    assert stored < 1.4 * whole + 256 * 1024


def test_a_role_that_may_only_read_reads_long_histories_and_lists(
    admin: Admin, schema: str
) -> None:
    history = [Message("user", f"message {i} " * 40) for i in range(200)]  # ~100 KB, pieces
    with open_pg(schema) as store:
        store.setup()
        for n in (100, 150, 200):  # appends past 4 KiB inline: the history is in pieces
            store.put(RunCheckpoint.new("task", history[:n], run_id="r"), key="k")
    grants = "GRANT USAGE ON SCHEMA {s} TO {r}; GRANT SELECT ON ALL TABLES IN SCHEMA {s} TO {r}"
    with a_role(admin, schema, grants) as url, open_pg(schema, url) as store:
        got = store.get("k")  # opens the pieces' namespace: reads only, no CREATE
        assert got is not None and got.history == tuple(history)
        assert [s.key for s in store.list().items] == ["k"]


@contextmanager
def a_role(admin: Admin, schema: str, grants: str) -> Iterator[str]:
    """A new login role with ``grants`` (``{s}``: the schema, ``{r}``: the role) on
    ``schema``, as the URL a store opens with; dropped with what it owns afterwards."""
    role = f"ac_role_{uuid.uuid4().hex[:8]}"
    admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    try:
        admin.execute(sql.SQL(grants).format(s=sql.Identifier(schema), r=sql.Identifier(role)))
        yield _address(user=role)
    finally:
        admin.execute(sql.SQL("DROP OWNED BY {r}; DROP ROLE {r}").format(r=sql.Identifier(role)))


def test_a_role_that_does_not_own_an_older_ledger_still_sets_up_a_namespace(
    admin: Admin, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ledger an older library made has no ``older_ok`` column, and only its owner may add
    one: an application's role that writes and claims, but does not own the ledger, still
    sets up the claims' namespace on first use; its steps record no flag, and the owner's next
    setup that applies a step adds the column."""
    with open_pg(schema) as store:
        store.setup()
        store.put(checkpoint("r"), key="k")
    ledger_table = sql.Identifier(schema, LEDGER)
    admin.execute(sql.SQL("ALTER TABLE {} DROP COLUMN older_ok").format(ledger_table))
    grants = (
        "GRANT USAGE, CREATE ON SCHEMA {s} TO {r}; GRANT ALL ON ALL TABLES IN SCHEMA {s} TO {r};"
        " GRANT ALL ON ALL SEQUENCES IN SCHEMA {s} TO {r}"
    )
    with a_role(admin, schema, grants) as url:
        with open_pg(schema, url) as store:
            claim = store.claim("k", "worker-1", ttl=60)  # opens the claims' namespace
            assert [c.worker for c in store.claims()] == ["worker-1"]
            claim.release()
        assert ledger(admin, schema, "agent_checkpoints$leases") == [
            (v, n) for v, n, _ in MIGRATIONS
        ]
        with monkeypatch.context() as m, open_pg(schema) as newer:
            m.setattr(postgres, "MIGRATIONS", (*MIGRATIONS, FUTURE))
            newer.setup()  # the owner, applying a step: it adds the column, and flags the step
    flags = admin.execute(
        sql.SQL(
            "SELECT version, older_ok FROM {} WHERE table_name = %s AND older_ok IS NOT NULL"
        ).format(ledger_table),
        ("agent_checkpoints",),
    ).fetchall()
    assert flags == [(FUTURE[0], True)]


def test_setup_brings_the_claims_table_up_to_date_and_makes_none_for_a_store_without_claims(
    admin: Admin, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``setup`` (which an operator runs with a role that may change the schema) brings every
    table of the store up to date, the claims' too: a role that may not then never needs to
    when it opens them. A store that never had a claim gets no claims table."""
    leases = "agent_checkpoints$leases"
    with open_pg(schema) as store:
        store.setup()
        store.put(checkpoint("r"), key="k")
        assert ledger(admin, schema, leases) == []
        store.setup()
        assert ledger(admin, schema, leases) == []  # none made
    with monkeypatch.context() as m, open_pg(schema) as older:
        m.setattr(postgres, "MIGRATIONS", MIGRATIONS[:10])
        older.claim("k", "worker-1", ttl=60).release()  # a claims table at step 10
    assert len(ledger(admin, schema, leases)) == 10
    with open_pg(schema) as store:
        store.setup()
    assert ledger(admin, schema, leases) == [(v, n) for v, n, _ in MIGRATIONS]


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
        # a step that did not say whether older libraries may use the table
        refused = r"newer than this one .* step 99 \(from the future\) refuses"
        with pytest.raises(BackendError, match=refused):
            store.setup()
        # nor could it: a ledger without the column
        admin.execute(
            sql.SQL("ALTER TABLE {} DROP COLUMN older_ok").format(sql.Identifier(schema, LEDGER))
        )
        with pytest.raises(BackendError, match=refused):
            store.setup()


FUTURE = (len(MIGRATIONS) + 1, "a step from the future", ("SELECT 1",))


def migrated_by_a_newer_library(
    schema: str, monkeypatch: pytest.MonkeyPatch, *, refuses_older: bool
) -> None:
    """The table, and its namespace of claims, set up by a library with one step more than
    this one, which records whether libraries without it may use the table."""
    with monkeypatch.context() as m, open_pg(schema) as newer:
        m.setattr(postgres, "MIGRATIONS", (*MIGRATIONS, FUTURE))
        if refuses_older:
            m.setattr(postgres_schema, "REFUSES_OLDER", frozenset({FUTURE[0]}))
        newer.setup()
        newer.put(checkpoint("r", text="by the newer library"), key="k")
        assert newer.claim("k", "worker-1", ttl=60) is not None


def test_going_back_from_a_newer_library_keeps_the_table_and_its_namespaces_working(
    admin: Admin, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    migrated_by_a_newer_library(schema, monkeypatch, refuses_older=False)
    assert ledger(admin, schema)[-1] == FUTURE[:2]
    with open_pg(schema) as store:
        store.setup()  # nothing to apply, nothing refused
        got = store.get("k")
        assert got is not None and got.history[0].content == "by the newer library 0"
        assert store.put(checkpoint("r", text="by this library"), key="k").revision > 1
        assert [c.worker for c in store.claims()] == ["worker-1"]  # the claims' namespace
    assert ledger(admin, schema)[-1] == FUTURE[:2]


def test_a_newer_step_that_refuses_older_libraries_is_refused_by_setup_and_namespaces(
    admin: Admin, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    migrated_by_a_newer_library(schema, monkeypatch, refuses_older=True)
    refused = rf"step {FUTURE[0]} \(a step from the future\) refuses libraries without it"
    with open_pg(schema) as store:
        with pytest.raises(BackendError, match=refused):
            store.setup()
        with pytest.raises(BackendError, match=refused):
            postgres_of(store).namespace("leases")


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
        history = grow(store, 3, key="old")
        got = store.get("old")
        assert got is not None and got.history == history
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


def test_the_listing_indexes_shrink_when_they_lose_the_key_and_list_the_same(
    admin: Admin, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def pages(store: Store, **filters: Any) -> list[list[str]]:
        out: list[list[str]] = []
        after = None
        while True:
            page = store.backend.scan(Query(limit=7, after=after, **filters))
            out.append([s.key for s in page])
            if len(page) < 7:
                return out
            after = (page[-1].saved_at, page[-1].key)

    def listings(store: Store) -> list[list[list[str]]]:
        return [
            pages(store),
            pages(store, oldest_first=True),
            pages(store, owner="owner3"),
            pages(store, agent_id="agent2", saved_before=BASE + 150),
            pages(store, failed=True, saved_since=BASE + 40),
        ]

    def index_bytes() -> dict[str, int]:
        rows = admin.execute(
            "SELECT c.relname, pg_relation_size(c.oid) FROM pg_index i "
            "JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_class t ON t.oid = i.indrelid "
            "JOIN pg_namespace n ON n.oid = t.relnamespace "
            "WHERE n.nspname = %s AND t.relname = 'agent_checkpoints'",
            (schema,),
        ).fetchall()
        return {name.removeprefix("agent_checkpoints_"): size for name, size in rows}

    with open_pg(schema) as store:
        with monkeypatch.context() as m:
            m.setattr(postgres, "MIGRATIONS", MIGRATIONS[:8])  # the step before this one
            store.setup()
        for i in range(1200):  # keys as long as a LangGraph lineage's, three to a millisecond
            record = scale_record(i)
            key = f"langgraph/thread-{i * 7919 % 1200:05d}/ns/m/lineage-{i:040d}"
            store.backend.save(replace(record, summary=replace(record.summary, key=key)))
        before, wide = listings(store), index_bytes()
        store.setup()
        assert (9, "listing indexes without the key") in ledger(admin, schema)
        assert listings(store) == before
        narrow = index_bytes()
    assert sum(len(page) for page in before[0]) == 1200
    for name in ("newest_idx", "owner_idx", "agent_idx", "failed_idx"):
        assert narrow[name] * 2 <= wide[name], (name, wide[name], narrow[name])


def test_a_row_past_2_kb_keeps_its_key_and_run_id_in_the_row(
    admin: Admin, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row past ~2 KB (a piece of a growing history, whose body is MAIN) used to move its
    key and run id out to TOAST: TOAST rows and TOAST index entries for every such row, and
    a TOAST read for each. Since step 10 they stay in the row; rows written before it read as
    they did."""

    def toast_rows() -> int:
        toast = admin.execute(
            "SELECT reltoastrelid::regclass::text FROM pg_class WHERE oid = %s::regclass",
            (sql.Identifier(schema, "agent_checkpoints").as_string(None),),
        ).fetchone()
        assert toast is not None
        row = admin.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.SQL(toast[0])))
        return int(row.fetchone()[0])  # type: ignore[index]

    def piece(i: int) -> Record:
        key = f"langgraph/thread-00001/ns/m/lineage-0#{uuid.uuid4().hex[:16]}.{i}"
        body = base64.b64encode(os.urandom(2400))  # past 2 KB, and compression cannot help
        summary = Summary(key, f"run-{uuid.uuid4().hex}", BASE + i, None, None, None, None, 1,
                          len(body), 0)  # fmt: skip
        return Record(summary, body)

    with open_pg(schema) as store:
        with monkeypatch.context() as m:
            m.setattr(postgres, "MIGRATIONS", MIGRATIONS[:9])  # the step before this one
            store.setup()
        old = [piece(i) for i in range(10)]
        for record in old:
            store.backend.save(record)
        moved_out = toast_rows()
        assert moved_out >= 10  # at least the key of each
        store.setup()
        assert (10, "short text kept in the row") in ledger(admin, schema)
        new = [piece(i) for i in range(10, 20)]
        for record in new:
            store.backend.save(record)
        assert toast_rows() == moved_out  # the rows written since added none
        for record in old + new:
            loaded = store.backend.load(record.key)
            assert loaded is not None and loaded.body == record.body
            assert loaded.summary.run_id == record.summary.run_id


# -- growing histories: the store's segment layer, and what older versions stored ------------


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


def in_pieces(store: Store) -> Store:
    """A store on the same backend whose segment layer moves all history into pieces and
    merges them past four."""
    return Store(Segmented(postgres_of(store), inline_bytes=0, max_segments=4))


def postgres_of(store: Store) -> PostgresBackend:
    backend = getattr(store.backend, "inner", store.backend)
    assert isinstance(backend, PostgresBackend)
    return backend


def whole_bytes(ckpt: RunCheckpoint, saved_at: int) -> bytes:
    """What a full write of ``ckpt`` stores."""
    return orjson.dumps({"format": "conversation-v1", "data": ckpt.to_json(), "savedAt": saved_at})


def rows(admin: Admin, schema: str, table: str, key: str | None = None) -> int:
    query = sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(schema, table))
    if key is not None:
        query += sql.SQL(" WHERE key = %s")
    row = admin.execute(query, () if key is None else (key,)).fetchone()
    assert row is not None
    return int(row[0])


def legacy_rows(admin: Admin, schema: str, key: str | None = None) -> int:
    """Rows of the segments table of the versions before the segment layer."""
    return rows(admin, schema, "agent_checkpoints_segments", key)


def piece_rows(admin: Admin, schema: str) -> int:
    """Records of the segment layer's ``segments`` namespace."""
    return rows(admin, schema, "agent_checkpoints$segments")


def stored_row(admin: Admin, schema: str, key: str) -> tuple[Any, ...]:
    row = admin.execute(
        sql.SQL("SELECT body, head, digest, segments FROM {} WHERE key = %s").format(
            sql.Identifier(schema, "agent_checkpoints")
        ),
        (key,),
    ).fetchone()
    assert row is not None
    return tuple(row)


def store_in_old_segments(
    admin: Admin, schema: str, key: str, ckpt: RunCheckpoint, *, revision: int = 7
) -> bytes:
    """``key`` as the versions before the segment layer stored a growing history, written
    row by row: an empty ``body``, the envelope's head (history cut out at a NUL) with the
    digest of its segments and their count on the record row, and the segments as rows of
    ``<table>_segments``, several appends joined by commas in one row and an empty row left
    by a merge. Returns the bytes a full write would have stored."""
    doc = {"format": "conversation-v1", "data": ckpt.to_json(), "savedAt": 1000}
    head, _ = encode_parts(doc, [])
    messages = [orjson.dumps(m.to_json()) for m in ckpt.history]
    assert len(messages) == 4
    data = [messages[0] + b"," + messages[1], b"", messages[2], messages[3]]
    whole = whole_bytes(ckpt, 1000)
    owner = ckpt.identity.principal if ckpt.identity is not None else None
    admin.execute(
        sql.SQL(
            "INSERT INTO {} (key, run_id, saved_at, owner, message_count, size, revision, body,"
            " head, digest, segments) VALUES (%s, %s, 1000, %s, 4, %s, %s, '', %s, 'd', 4)"
        ).format(sql.Identifier(schema, "agent_checkpoints")),
        (key, ckpt.run_id, owner, len(whole), revision, head),
    )
    for seq, segment in enumerate(data):
        admin.execute(
            sql.SQL("INSERT INTO {} (key, seq, data) VALUES (%s, %s, %s)").format(
                sql.Identifier(schema, "agent_checkpoints_segments")
            ),
            (key, seq, segment),
        )
    return whole


def test_a_growing_history_keeps_its_pieces_in_the_segments_namespace_table(
    store: Store, admin: Admin, schema: str
) -> None:
    assert not hasattr(store.backend, "append")  # the Store's segment layer does it
    history = grow(store, 120)  # ~27 KB of history: past the inline threshold
    got = store.get("k")
    assert got is not None and got.history == history
    assert piece_rows(admin, schema) >= 1 and legacy_rows(admin, schema) == 0
    assert store.delete("k") and piece_rows(admin, schema) == 0


def test_past_the_segment_limit_every_put_reads_back_as_a_full_write(
    store: Store, admin: Admin, schema: str
) -> None:
    pieces = in_pieces(store)
    base = checkpoint("r")
    history: tuple[Message, ...] = ()
    for i in range(40):
        # Every seventh put adds no message; sizes vary.
        if i % 7 != 3:
            history = (*history, Message("user", f"m{i} " + "z" * (i * 97 % 1500)))
        ckpt = base.evolve(history=history)
        summary = pieces.put(ckpt, key="k")
        record = store.get_record("k")  # another store: nothing remembered
        assert record is not None and record.body == whole_bytes(ckpt, summary.saved_at)
        assert record.summary == summary and summary.size == len(record.body)
        assert 1 <= piece_rows(admin, schema) <= 4  # merged, and none left behind
    assert store.head("k").revision == 40  # type: ignore[union-attr]
    assert store.forget_older_than(summary.saved_at + 1).forgotten == 1
    assert piece_rows(admin, schema) == 0


def statements_of(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The statements every session sends from now on (each one round trip)."""
    statements: list[bytes] = []
    execute = TimedConnection.execute

    def counted(conn: TimedConnection, query: Any, *args: Any, **kwargs: Any) -> Any:
        statements.append(query)
        return execute(conn, query, *args, **kwargs)

    monkeypatch.setattr(TimedConnection, "execute", counted)
    return statements


def test_a_get_reads_all_pieces_of_a_history_in_one_statement(
    store: Store, admin: Admin, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pieces = in_pieces(store)
    ckpt = checkpoint("r", messages=8)
    for i in range(1, 9):
        pieces.put(ckpt.evolve(history=ckpt.history[:i]), key="k")
    assert piece_rows(admin, schema) >= 3
    statements = statements_of(monkeypatch)
    assert store.get("k") == ckpt
    assert len(statements) == 2  # the layout record, then every piece at once
    assert b"ANY(" in statements[1]


def test_a_put_of_one_more_message_is_one_statement(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    history = grow(store, 5)
    statements = statements_of(monkeypatch)
    grown = (*history, Message("assistant", "one more"))
    store.put(checkpoint("r").evolve(history=grown), key="k")
    assert len(statements) == 1  # the conditional write of the record, nothing read first
    got = store.get("k")
    assert got is not None and got.history == grown


def test_load_many_answers_each_key_in_order(store: Store) -> None:
    backend = postgres_of(store)
    for key in ("a", "b"):
        store.put(checkpoint(key), key=key)
    got = backend.load_many(["b", "missing", "a", "b"])
    assert [None if r is None else r.key for r in got] == ["b", None, "a", "b"]
    assert got[2] == backend.load("a") and backend.load_many([]) == []


@contextmanager
def before_the_fold(schema: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    """A store whose table has every step before step 11, which folds the segments of the
    versions before the segment layer into their records."""
    with open_pg(schema) as store:
        with monkeypatch.context() as m:
            m.setattr(postgres, "MIGRATIONS", MIGRATIONS[:10])
            store.setup()
        yield store


def test_a_record_stored_in_segments_by_an_older_version_reads_overwrites_and_drops(
    admin: Admin, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ckpt = checkpoint("r", messages=4, principal="al")
    with before_the_fold(schema, monkeypatch) as store:
        whole = store_in_old_segments(admin, schema, "k", ckpt)
        record = store.get_record("k")
        assert record is not None and record.body == whole
        assert record.summary.revision == 7 and record.summary.owner == "al"
        assert store.get("k") == ckpt
        assert postgres_of(store).load_many(["k"])[0] == record
        # The next put (one more message) is a whole write that clears the head, after which
        # the old segment rows are not read; refused (on a revision it does not have), it
        # leaves the record as it was.
        grown = ckpt.evolve(history=(*ckpt.history, Message("assistant", "one more")))
        with pytest.raises(ConflictError):
            store.put(grown, key="k", if_revision=6)
        assert store.get_record("k") == record
        summary = store.put(grown, key="k", if_revision=7)
        assert summary.revision == 8
        assert stored_row(admin, schema, "k")[1:] == (None, None, None)
        assert store.get_record("k").body == whole_bytes(grown, summary.saved_at)  # type: ignore[union-attr]
        assert store.get("k") == grown
        with pytest.raises(OwnershipConflictError):
            store.put(checkpoint("r", principal="mallory"), key="k")

        store_in_old_segments(admin, schema, "gone", ckpt)
        assert store.delete("gone") and store.get("gone") is None
        store_in_old_segments(admin, schema, "old", ckpt)
        assert store.forget_older_than(1001).forgotten == 1  # retention, oldest first
        assert legacy_rows(admin, schema, "gone") == legacy_rows(admin, schema, "old") == 0
        assert [s.key for s in store.list()] == ["k"]
        store.setup()  # step 11: the rows the overwrite left go too
        assert legacy_rows(admin, schema) == 0 and store.get("k") == grown


def test_a_whole_write_by_an_older_library_over_a_split_record_reads_back_as_written(
    admin: Admin, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with before_the_fold(schema, monkeypatch) as store:
        store_in_old_segments(admin, schema, "k", checkpoint("r", messages=4))
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
        store.setup()  # step 11 leaves a record with a body as it is
        assert store.get("k") == got and legacy_rows(admin, schema) == 0
        grown = checkpoint("r", messages=5)
        store.put(grown, key="k")
        assert store.get("k") == grown


def test_step_11_folds_old_segments_into_their_records_and_drops_their_foreign_key(
    admin: Admin, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every record the versions before the segment layer stored in segments reads the same
    bytes after the fold as before it (one missing a segment stays unreadable), nothing else
    changes, and a delete no longer runs the segments table's foreign key trigger. The table
    stays, empty, for the statements of versions before step 11 still running."""
    table = sql.Identifier(schema, "agent_checkpoints")
    segs = sql.Identifier(schema, "agent_checkpoints_segments")

    def foreign_keys() -> int:
        row = admin.execute(
            "SELECT count(*) FROM pg_constraint WHERE contype = 'f' AND confrelid = %s::regclass",
            (table.as_string(None),),
        ).fetchone()
        return int(row[0])  # type: ignore[index]

    ckpt = checkpoint("r", messages=4, principal="al")
    with before_the_fold(schema, monkeypatch) as store:
        store_in_old_segments(admin, schema, "k", ckpt)
        store_in_old_segments(admin, schema, "lost", checkpoint("r", messages=4))
        admin.execute(sql.SQL("DELETE FROM {} WHERE key = 'lost' AND seq = 2").format(segs))
        # a head with no gap to fill: the segments follow it (``join_parts``)
        admin.execute(
            sql.SQL(
                "INSERT INTO {} (key, run_id, saved_at, message_count, size, revision, body, head,"
                " digest, segments) VALUES ('nogap', 'r', 1000, 0, 3, 1, '', 'ab', 'd', 1)"
            ).format(table)
        )
        admin.execute(sql.SQL("INSERT INTO {} VALUES ('nogap', 0, 'c')").format(segs))
        store.put(checkpoint("plain", messages=3), key="plain")
        before = {key: store.get_record(key) for key in ("k", "lost", "nogap", "plain")}
        assert foreign_keys() == 1 and legacy_rows(admin, schema) == 8
        store.setup()
        assert ledger(admin, schema)[-1] == (11, "old segments folded into their records")
        assert {key: store.get_record(key) for key in before} == before
        assert before["nogap"].body == b"abc"  # type: ignore[union-attr]
        for key in ("k", "lost", "nogap"):
            assert stored_row(admin, schema, key)[1:] == (None, None, None)
        with pytest.raises(UnreadableEnvelopeError):
            store.get("lost")
        assert store.get("k") == ckpt
        assert foreign_keys() == 0 and legacy_rows(admin, schema) == 0
        # the statements of the versions before step 11 that name the table still run
        old_load = sql.SQL(
            "SELECT body, CASE WHEN octet_length(t.body) > 0 THEN NULL ELSE ARRAY(SELECT s.data"
            " FROM {} s WHERE s.key = t.key ORDER BY s.seq) END FROM {} t WHERE t.key = 'k'"
        ).format(segs, table)
        assert admin.execute(old_load).fetchone() == (before["k"].body, None)  # type: ignore[union-attr]
        old_update = sql.SQL(
            "WITH new AS (UPDATE {} SET revision = revision + 1 WHERE key = 'plain'"
            " RETURNING key, revision), old AS (DELETE FROM {} WHERE key IN (SELECT key FROM new))"
            " SELECT revision FROM new"
        ).format(table, segs)
        assert admin.execute(old_update).fetchone() is not None
        assert store.delete("k") and store.get("k") is None
        store.setup()  # and again: nothing left to apply
        assert len(ledger(admin, schema)) == len(MIGRATIONS)


def test_a_record_missing_an_old_segment_reads_unreadable_not_shorter(
    store: Store, admin: Admin, schema: str
) -> None:
    store_in_old_segments(admin, schema, "k", checkpoint("r", messages=4))
    admin.execute(
        sql.SQL("DELETE FROM {} WHERE key = 'k' AND seq = 2").format(
            sql.Identifier(schema, "agent_checkpoints_segments")
        )
    )
    record = store.get_record("k")
    assert record is not None and b"\x00" in record.body
    with pytest.raises(UnreadableEnvelopeError):
        store.get("k")


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


def test_a_record_stored_in_segments_before_compressed_segments_upgrades_and_keeps_growing(
    admin: Admin, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # history segments with default storage (and the revision sequence, without which
    # nothing is written)
    previous = (*MIGRATIONS[:3], REVISIONS)
    assert [v for v, _, _ in previous] == [1, 2, 3, 7]
    storage = sql.SQL(
        "SELECT attstorage FROM pg_attribute WHERE attrelid = %s::regclass AND attname = 'data'"
    )
    segs = f'"{schema}".agent_checkpoints_segments'
    ckpt = checkpoint("r", messages=4)
    with open_pg(schema) as store:
        with monkeypatch.context() as m:
            m.setattr(postgres, "MIGRATIONS", previous)
            store.setup()
        whole = store_in_old_segments(admin, schema, "k", ckpt)
        assert admin.execute(storage, (segs,)).fetchone() == ("x",)
        with monkeypatch.context() as m:
            m.setattr(postgres, "MIGRATIONS", MIGRATIONS[:10])  # up to the fold
            store.setup()
        assert admin.execute(storage, (segs,)).fetchone() == ("m",)
        assert store.get_record("k").body == whole  # type: ignore[union-attr]
        store.setup()
        assert ledger(admin, schema) == [(v, n) for v, n, _ in MIGRATIONS]
        assert store.get_record("k").body == whole  # type: ignore[union-attr]
        assert legacy_rows(admin, schema) == 0
        history = ckpt.history
        for i in range(60):  # the segment layer takes over from the next put on
            history = (*history, Message("user", f"new {i} " + "n" * 500))
            done = store.put(ckpt.evolve(history=history), key="k")
        assert done.revision == 67 and legacy_rows(admin, schema) == 0
        assert piece_rows(admin, schema) >= 1
        record = store.get_record("k")
        assert record is not None
        assert record.body == whole_bytes(ckpt.evolve(history=history), done.saved_at)
        store.setup()
        assert len(ledger(admin, schema)) == len(MIGRATIONS)
    with open_pg(schema) as other:  # a store that remembers nothing reads the same bytes
        again = other.get_record("k")
        assert again is not None and again.body == record.body


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
