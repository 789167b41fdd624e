"""PostgreSQL growing histories: the store's segment layer on PostgreSQL, and the segments older
versions stored (step 11 folds them into their records)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import orjson
import pytest
from psycopg import sql
from support.postgres_store import (
    REVISIONS,
    Admin,
    grow,
    in_pieces,
    ledger,
    open_pg,
    postgres_of,
)

from agent_checkpoint import Store, migrate_records
from agent_checkpoint._codec import encode_parts
from agent_checkpoint._model import Message, RunCheckpoint
from agent_checkpoint.backends import Query
from agent_checkpoint.backends import _postgres as postgres
from agent_checkpoint.backends._postgres import MIGRATIONS, TimedConnection
from agent_checkpoint.errors import (
    ConflictError,
    OwnershipConflictError,
    UnreadableEnvelopeError,
)
from agent_checkpoint.testing import (
    checkpoint,
    stamped,
)

# -- growing histories: the store's segment layer, and what older versions stored ------------


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


def test_migrate_rewrites_records_stored_in_segments_by_an_older_version_whole(
    admin: Admin, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where step 11 has not run (a role that may not run setup), ``migrate`` rewrites them."""
    with before_the_fold(schema, monkeypatch) as store:
        store.put(checkpoint("plain", messages=3), key="plain")
        ckpt = checkpoint("r", messages=4, principal="al")
        whole = store_in_old_segments(admin, schema, "k", ckpt)
        assert store.in_old_layout("k") and not store.in_old_layout("plain")
        report = migrate_records(store)
        assert (report.upgraded, report.current, report.failed) == (1, 1, [])
        assert stored_row(admin, schema, "k")[1:] == (None, None, None)
        migrated = store.get_record("k")
        assert migrated is not None and migrated.body == whole
        assert (migrated.summary.revision, migrated.summary.owner) == (8, "al")
        assert not store.in_old_layout("k") and store.get("k") == ckpt


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
