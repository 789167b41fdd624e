"""PostgreSQL statements of the backend, composed once per table (``Statements``) and
rendered to bytes, plus the listing statement each query composes (``scan_statement``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg import sql

from ._base import Query

__all__ = ["COLUMNS", "Statements", "render", "scan_statement", "statements"]

COLUMNS = (
    "key",
    "run_id",
    "saved_at",
    "owner",
    "agent_id",
    "failure_phase",
    "failure_iteration",
    "message_count",
    "size",
    "revision",
)


@dataclass(frozen=True)
class Statements:
    """Every fixed statement of one table's backend."""

    table: sql.Composable
    cols: sql.Composed
    head: bytes
    lock_row: bytes
    load: bytes
    load_many: bytes
    insert: bytes
    update: bytes
    delete: bytes
    delete_at: bytes
    revision: bytes


def statements(names: dict[str, sql.Composable]) -> Statements:
    """The statements for the objects ``names`` (``postgres_schema.object_names``) holds."""
    t, segs = names["table"], names["segments"]
    cols = sql.SQL(", ").join(map(sql.Identifier, COLUMNS))
    head = render(sql.SQL("SELECT {} FROM {} WHERE key = %s").format(cols, t))
    lock_row = render(sql.SQL("SELECT {} FROM {} WHERE key = %s FOR UPDATE").format(cols, t))
    # One statement, so one snapshot: the head of a record stored in segments by an older
    # version (an empty body) and its segments always belong together.
    load = sql.SQL(
        "SELECT {}, body, head, segments, CASE WHEN octet_length(t.body) > 0 THEN NULL "
        "ELSE ARRAY(SELECT s.data FROM {} s WHERE s.key = t.key ORDER BY s.seq) END "
        "FROM {} t WHERE t.key "
    ).format(cols, segs, t)
    insert, update = _writes(t, names["revisions_name"])
    delete_any = sql.SQL("DELETE FROM {} WHERE key = %s").format(t)
    return Statements(
        table=t,
        cols=cols,
        head=head,
        lock_row=lock_row,
        load=render(load + sql.SQL("= %s")),
        load_many=render(load + sql.SQL("= ANY(%s)")),
        insert=insert,
        update=update,
        delete=render(delete_any),
        delete_at=render(delete_any + sql.SQL(" AND revision = %s")),
        revision=render(sql.SQL("SELECT revision FROM {} WHERE key = %s").format(t)),
    )


def _writes(t: sql.Composable, revisions: sql.Composable) -> tuple[bytes, bytes]:
    """The insert of a new key and the conditional update of a stored one."""
    # Every write moves the revision sequence on, so it stays at or above every revision
    # issued: a new key takes its next value, a stored one goes up by one.
    written = (*COLUMNS, "body")
    insert = render(
        sql.SQL(
            "INSERT INTO {} ({}) VALUES ({}) ON CONFLICT (key) DO NOTHING RETURNING revision, owner"
        ).format(
            t,
            sql.SQL(", ").join(map(sql.Identifier, written)),
            sql.SQL(", ").join(
                sql.SQL("nextval({})").format(revisions) if c == "revision" else sql.Placeholder(c)
                for c in written
            ),
        )
    )
    # The write over the stored record at %(revision)s, owner write-once, as one statement:
    # it applies on that revision or changes nothing. It clears the head of a record an older
    # version stored in segments; that record's segment rows are no longer read, and go with
    # migration step 11 (or with the record, while their foreign key lasts).
    replaced = [c for c in written if c not in ("key", "owner", "revision")]
    update = render(
        sql.SQL(
            """UPDATE {t} SET ({cols}) = ({values}), owner = COALESCE(owner, %(owner)s::text),
                revision = revision + 1, head = NULL, digest = NULL, segments = NULL
            FROM (SELECT nextval({revisions})) moved
            WHERE key = %(key)s AND revision = %(revision)s
                AND (owner IS NULL OR %(owner)s::text IS NULL OR owner = %(owner)s::text)
            RETURNING revision, owner"""
        ).format(
            t=t,
            revisions=revisions,
            cols=sql.SQL(", ").join(map(sql.Identifier, replaced)),
            values=sql.SQL(", ").join(map(sql.Placeholder, replaced)),
        )
    )
    return insert, update


def scan_statement(query: Query, statements: Statements) -> tuple[sql.Composed, list[Any]]:
    """The listing ``query`` as one statement and its parameters."""
    where: list[sql.Composable] = []
    params: list[Any] = []

    def when(clause: str, *values: Any) -> None:
        where.append(sql.SQL(clause))
        params.extend(values)

    if query.owner is not None:
        when("owner = %s", query.owner)
    if query.agent_id is not None:
        when("agent_id = %s", query.agent_id)
    if query.failed is not None:
        when("failure_phase IS NOT NULL" if query.failed else "failure_phase IS NULL")
    if query.phase is not None:
        when("failure_phase = %s", query.phase)
    if query.prefix:
        when("starts_with(key, %s)", query.prefix)  # not LIKE: no character is a wildcard
    if query.saved_before is not None:
        when("saved_at < %s", query.saved_before)
    if query.saved_since is not None:
        when("saved_at >= %s", query.saved_since)
    if query.after is not None:
        saved, key = query.after
        if query.oldest_first:
            when("(saved_at, key) > (%s, %s)", saved, key)
        else:
            # Mixed directions rule out a row comparison; the redundant bound lets the
            # index scan start at the cursor instead of filtering from the top.
            when("saved_at <= %s AND (saved_at < %s OR key > %s)", saved, saved, key)
    order = "saved_at, key" if query.oldest_first else "saved_at DESC, key"
    statement = sql.SQL("SELECT {} FROM {} {} ORDER BY {} LIMIT %s").format(
        statements.cols,
        statements.table,
        sql.SQL("WHERE ") + sql.SQL(" AND ").join(where) if where else sql.SQL(""),
        sql.SQL(order),
    )
    params.append(query.limit)
    return statement, params


def render(statement: sql.Composable) -> bytes:
    """A statement as bytes, composed once: psycopg caches what it derives from a bytes query
    (its placeholders, the prepared statement), while a ``Composed`` is rendered again on
    every execution (0.04 ms for a long statement)."""
    return statement.as_bytes(None)
