"""PostgreSQL setup and its migration ledger: each step once, concurrent setups, tables
migrated by a newer library, and separate ledgers per table."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from psycopg import sql
from psycopg.errors import UndefinedTable
from support.postgres_store import (
    FUTURE,
    Admin,
    ledger,
    open_pg,
    postgres_of,
)

from agent_checkpoint import Store
from agent_checkpoint._model import Message, RunCheckpoint
from agent_checkpoint._segment_format import Layout
from agent_checkpoint._segments import PIECES
from agent_checkpoint.backends import Record, Summary
from agent_checkpoint.backends import _postgres as postgres
from agent_checkpoint.backends import _postgres_schema as postgres_schema
from agent_checkpoint.backends._postgres import LEDGER, MIGRATIONS
from agent_checkpoint.errors import (
    BackendError,
    StoreNotFoundError,
)
from agent_checkpoint.testing import checkpoint

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
    # row in TOAST stored 2.3x the history (benchmarks/README.md at 0d6dfa6, "PostgreSQL stored bytes")
    assert stored < 1.4 * whole + 256 * 1024


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
