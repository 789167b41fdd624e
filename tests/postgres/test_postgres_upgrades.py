"""PostgreSQL upgrades of stores made by earlier versions: the previous ledger, the revision
sequence, the listing indexes, and rows past 2 KB."""

from __future__ import annotations

import base64
import os
import uuid
from dataclasses import replace
from typing import Any

import pytest
from psycopg import sql
from support.postgres_store import (
    BASE,
    Admin,
    grow,
    ledger,
    open_pg,
    scale_record,
)

from agent_checkpoint import Store
from agent_checkpoint.backends import Query, Record, Summary
from agent_checkpoint.backends import _postgres as postgres
from agent_checkpoint.backends._postgres import MIGRATIONS
from agent_checkpoint.errors import StoreNotFoundError
from agent_checkpoint.testing import (
    checkpoint,
    stamped,
)


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
