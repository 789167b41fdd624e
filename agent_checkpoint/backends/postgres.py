"""PostgreSQL: one table of records with an index per listing filter, on psycopg 3 and its pool.

``setup()`` creates the schema objects by applying ``MIGRATIONS`` in order, each once, recorded
in the ledger table ``LEDGER`` of the same schema.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import sql
from psycopg.errors import TransactionRollback, UndefinedTable
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

from ..errors import BackendError, ConflictError, InvalidKeyError
from .base import Query, Record, Summary, plan_save, translate_errors

__all__ = ["DEFAULT_TABLE", "LEDGER", "MIGRATIONS", "PostgresBackend"]

DEFAULT_TABLE = "agent_checkpoints"
LEDGER = "agent_checkpoint_migrations"

Connection = psycopg.Connection[TupleRow]

# Connection loss, admin shutdown, pool timeouts, serialization failures and deadlocks are all
# OperationalError subclasses; every other driver error is a bug or a misconfiguration.
TRANSIENT: tuple[type[BaseException], ...] = (psycopg.OperationalError, PoolTimeout)
FATAL: tuple[type[BaseException], ...] = (psycopg.Error,)

# Index names are derived from the table name, so it must leave room under NAMEDATALEN (63).
MAX_TABLE_NAME = 48
MAX_SCHEMA_NAME = 63

_COLUMNS = (
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

MIGRATIONS: tuple[tuple[int, str, tuple[str, ...]], ...] = (
    (
        1,
        "records table",
        (
            # COLLATE "C": keys order by code point, as Python sorts str, whatever the database
            # locale, so keyset cursors agree with every other backend.
            """CREATE TABLE IF NOT EXISTS {table} (
                key text COLLATE "C" PRIMARY KEY,
                run_id text NOT NULL,
                saved_at bigint NOT NULL,
                owner text,
                agent_id text,
                failure_phase text,
                failure_iteration bigint,
                message_count bigint NOT NULL,
                size bigint NOT NULL,
                revision bigint NOT NULL,
                body bytea NOT NULL
            )""",
        ),
    ),
    (
        2,
        "listing indexes",
        (
            # Plain CREATE INDEX: steps run inside a transaction, where CONCURRENTLY is refused.
            "CREATE INDEX IF NOT EXISTS {newest_idx} ON {table} (saved_at DESC, key)",
            "CREATE INDEX IF NOT EXISTS {oldest_idx} ON {table} (saved_at, key)",
            "CREATE INDEX IF NOT EXISTS {owner_idx} ON {table} (owner, saved_at DESC, key)",
            "CREATE INDEX IF NOT EXISTS {agent_idx} ON {table} (agent_id, saved_at DESC, key)",
            "CREATE INDEX IF NOT EXISTS {failed_idx} ON {table} (saved_at DESC, key)"
            " WHERE failure_phase IS NOT NULL",
        ),
    ),
)

_URL_OPTIONS = ("schema", "table", "min_size", "max_size", "pool_timeout")


class PostgresBackend:
    name = "postgres"

    def __init__(
        self,
        pool: ConnectionPool[Connection],
        *,
        schema: str = "public",
        table: str = DEFAULT_TABLE,
        owns_pool: bool = False,
    ) -> None:
        _check_name("schema", schema, MAX_SCHEMA_NAME)
        _check_name("table", table, MAX_TABLE_NAME)
        self.pool = pool
        self.schema = schema
        self.table = table
        self._owns_pool = owns_pool
        self._closed = False
        self._siblings: dict[str, PostgresBackend] = {}
        self._siblings_lock = threading.Lock()
        t = sql.Identifier(schema, table)
        self._names = {
            "table": t,
            **{
                f"{n}_idx": sql.Identifier(f"{table}_{n}_idx")
                for n in ("newest", "oldest", "owner", "agent", "failed")
            },
        }
        self._ledger = sql.Identifier(schema, LEDGER)
        cols = sql.SQL(", ").join(map(sql.Identifier, _COLUMNS))
        self._cols = cols
        self._head = sql.SQL("SELECT {} FROM {} WHERE key = %s").format(cols, t)
        self._lock_row = self._head + sql.SQL(" FOR UPDATE")
        self._load = sql.SQL("SELECT {}, body FROM {} WHERE key = %s").format(cols, t)
        self._insert = sql.SQL(
            "INSERT INTO {} ({}, body) VALUES ({}) ON CONFLICT (key) DO NOTHING"
        ).format(t, cols, sql.SQL(", ").join([sql.Placeholder()] * (len(_COLUMNS) + 1)))
        self._update = sql.SQL("UPDATE {} SET ({}, body) = ({}) WHERE key = %s").format(
            t,
            sql.SQL(", ").join(map(sql.Identifier, _COLUMNS[1:])),
            sql.SQL(", ").join([sql.Placeholder()] * len(_COLUMNS)),
        )
        self._delete = sql.SQL("DELETE FROM {} WHERE key = %s").format(t)
        self._delete_at = self._delete + sql.SQL(" AND revision = %s")
        self._revision = sql.SQL("SELECT revision FROM {} WHERE key = %s").format(t)

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        schema: str | None = None,
        table: str | None = None,
        min_size: int | None = None,
        max_size: int | None = None,
        pool_timeout: float | None = None,
    ) -> PostgresBackend:
        """``postgresql://user@host:port/db?schema=..&table=..&min_size=..&max_size=..&pool_timeout=..``;
        other query parameters go to libpq. Keywords override the URL."""
        parts = urlsplit(url)
        params = parse_qsl(parts.query, keep_blank_values=True)
        ours = {k: v for k, v in params if k in _URL_OPTIONS}
        libpq = [(k, v) for k, v in params if k not in _URL_OPTIONS]
        conninfo = urlunsplit(parts._replace(query=urlencode(libpq)))
        schema = schema if schema is not None else ours.get("schema", "public")
        table = table if table is not None else ours.get("table", DEFAULT_TABLE)
        _check_name("schema", schema, MAX_SCHEMA_NAME)
        _check_name("table", table, MAX_TABLE_NAME)
        min_conns = min_size if min_size is not None else int(ours.get("min_size", 1))
        max_conns = max_size if max_size is not None else int(ours.get("max_size", 10))
        # autocommit: a single-statement read is one round trip; writes open explicit transactions.
        kwargs: dict[str, Any] = {"autocommit": True}
        if not any(k == "connect_timeout" for k, _ in libpq):
            kwargs["connect_timeout"] = 5  # libpq waits forever by default
        pool: ConnectionPool[Connection] = ConnectionPool(
            conninfo,
            kwargs=kwargs,
            min_size=min_conns,
            max_size=max(max_conns, min_conns),
            # Bounds the wait for a healthy connection; the Store's retry policy governs the rest.
            timeout=pool_timeout
            if pool_timeout is not None
            else float(ours.get("pool_timeout", 5)),
            check=ConnectionPool.check_connection,
            open=False,
            name="agent-checkpoint",
        )
        pool.open(wait=False)
        return cls(pool, schema=schema, table=table, owns_pool=True)

    # -- schema --------------------------------------------------------------------------

    def setup(self) -> None:
        lock = sql.SQL("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))")
        lock_key = f"agent_checkpoint setup {self.schema}"
        with self._connection("setup") as conn:
            # One advisory lock per schema serialises concurrent setups, schema creation included.
            with conn.transaction():
                conn.execute(lock, (lock_key,))
                found = conn.execute(
                    "SELECT 1 FROM pg_namespace WHERE nspname = %s", (self.schema,)
                )
                if found.fetchone() is None:
                    conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(self.schema)))
                conn.execute(
                    sql.SQL(
                        "CREATE TABLE IF NOT EXISTS {} (table_name text NOT NULL, "
                        "version integer NOT NULL, name text NOT NULL, "
                        "applied_at timestamptz NOT NULL DEFAULT now(), "
                        "PRIMARY KEY (table_name, version))"
                    ).format(self._ledger)
                )
                newest = conn.execute(
                    sql.SQL("SELECT max(version) FROM {} WHERE table_name = %s").format(
                        self._ledger
                    ),
                    (self.table,),
                ).fetchone()
            latest = MIGRATIONS[-1][0]
            if newest is not None and newest[0] is not None and newest[0] > latest:
                raise BackendError(
                    f"postgres setup refused: {self._where} is at schema version {newest[0]}, "
                    f"newer than this agent-checkpoint knows ({latest}); upgrade the library",
                    backend=self.name,
                    operation="setup",
                )
            for version, title, statements in MIGRATIONS:
                with conn.transaction():
                    conn.execute(lock, (lock_key,))
                    applied = conn.execute(
                        sql.SQL("SELECT 1 FROM {} WHERE table_name = %s AND version = %s").format(
                            self._ledger
                        ),
                        (self.table, version),
                    ).fetchone()
                    if applied is not None:
                        continue
                    for statement in statements:
                        conn.execute(sql.SQL(statement).format(**self._names))
                    conn.execute(
                        sql.SQL(
                            "INSERT INTO {} (table_name, version, name) VALUES (%s, %s, %s)"
                        ).format(self._ledger),
                        (self.table, version, title),
                    )

    # -- records -------------------------------------------------------------------------

    def load(self, key: str) -> Record | None:
        with self._connection("load") as conn:
            row = conn.execute(self._load, (key,), binary=True).fetchone()
        return None if row is None else Record(Summary(*row[:-1]), bytes(row[-1]))

    def head(self, key: str) -> Summary | None:
        with self._connection("head") as conn:
            row = conn.execute(self._head, (key,)).fetchone()
        return None if row is None else Summary(*row)

    def save(
        self, record: Record, *, expect_revision: int | None = None, create_only: bool = False
    ) -> Summary:
        with self._connection("save") as conn, conn.transaction():
            # Two rounds: an INSERT that meets a key created since our read (ON CONFLICT DO
            # NOTHING waits for the creator to commit) reads it again, now locked.
            for _ in range(2):
                row = conn.execute(self._lock_row, (record.key,)).fetchone()
                current = None if row is None else Summary(*row)
                summary = plan_save(
                    current, record, expect_revision=expect_revision, create_only=create_only
                )
                values = (
                    summary.run_id,
                    summary.saved_at,
                    summary.owner,
                    summary.agent_id,
                    summary.failure_phase,
                    summary.failure_iteration,
                    summary.message_count,
                    summary.size,
                    summary.revision,
                    record.body,
                )
                if current is not None:
                    conn.execute(self._update, (*values, record.key))
                    return summary
                if conn.execute(self._insert, (record.key, *values)).rowcount == 1:
                    return summary
        raise ConflictError(
            f"key {record.key!r} was created and deleted by others while this write ran; "
            "nothing was written",
            key=record.key,
        )

    def drop(self, key: str, *, expect_revision: int | None = None) -> bool:
        with self._connection("drop") as conn:
            if expect_revision is None:
                return conn.execute(self._delete, (key,)).rowcount == 1
            if conn.execute(self._delete_at, (key, expect_revision)).rowcount == 1:
                return True
            row = conn.execute(self._revision, (key,)).fetchone()
        shown = "does not exist" if row is None else f"is at revision {row[0]}"
        raise ConflictError(
            f"key {key!r} {shown}, not revision {expect_revision}; nothing was deleted",
            key=key,
            expected=expect_revision,
            found=None if row is None else row[0],
        )

    def scan(self, query: Query) -> list[Summary]:
        if any("\x00" in v for v in (query.owner, query.agent_id, query.phase) if v):
            return []  # PostgreSQL text cannot hold NUL, so no stored value matches
        statement, params = self._scan_statement(query)
        with self._connection("scan") as conn:
            rows = conn.execute(statement, params).fetchall()
        return [Summary(*row) for row in rows]

    def _scan_statement(self, query: Query) -> tuple[sql.Composed, list[Any]]:
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
            self._cols,
            self._names["table"],
            sql.SQL("WHERE ") + sql.SQL(" AND ").join(where) if where else sql.SQL(""),
            sql.SQL(order),
        )
        params.append(query.limit)
        return statement, params

    # -- lifecycle -----------------------------------------------------------------------

    def namespace(self, name: str) -> PostgresBackend:
        with self._siblings_lock:
            sibling = self._siblings.get(name)
            if sibling is None:
                # Same pool, its own table (created here: setup() is idempotent and cheap).
                sibling = PostgresBackend(
                    self.pool, schema=self.schema, table=f"{self.table}_{name}"
                )
                sibling.setup()
                self._siblings[name] = sibling
            return sibling

    def close(self) -> None:
        if not self._closed and self._owns_pool:
            self.pool.close()
        self._closed = True

    def _why_no_connection(self) -> str:
        # The pool only logs why its connection attempts fail; one direct attempt recovers the
        # reason (a wrong database, role or password) for the error the user finally sees.
        conninfo, kwargs = self.pool.conninfo, self.pool.kwargs
        if callable(conninfo) or callable(kwargs):
            return ""
        try:
            psycopg.connect(conninfo, **{**(kwargs or {}), "connect_timeout": 2}).close()
        except psycopg.Error as exc:
            return f"; connecting directly failed: {' '.join(str(exc).split())}"
        return ""

    @property
    def _where(self) -> str:
        return f"table {self.schema}.{self.table}"

    @contextmanager
    def _connection(self, operation: str) -> Iterator[Connection]:
        with translate_errors(self.name, operation, transient=TRANSIENT, fatal=FATAL):
            if self._closed:
                raise BackendError(
                    f"postgres {operation} failed: the backend is closed",
                    backend=self.name,
                    operation=operation,
                )
            try:
                with self.pool.connection() as conn:
                    try:
                        yield conn
                    except psycopg.OperationalError as exc:
                        # The session may be half-broken; closing it makes the pool replace it.
                        if not isinstance(exc, TransactionRollback):
                            conn.close()
                        raise
            except PoolTimeout as exc:
                raise PoolTimeout(f"{exc}{self._why_no_connection()}") from exc
            except PoolClosed as exc:
                raise BackendError(
                    f"postgres {operation} failed: its connection pool is closed",
                    backend=self.name,
                    operation=operation,
                ) from exc
            except UndefinedTable as exc:
                raise BackendError(
                    f"postgres {operation} failed: {self._where} does not exist; create it once "
                    "with store.setup() (or `agent-checkpoint setup --store URL`)",
                    backend=self.name,
                    operation=operation,
                ) from exc


def _check_name(what: str, value: str, limit: int) -> None:
    if not value or "\x00" in value or len(value.encode()) > limit:
        raise InvalidKeyError(
            f"postgres {what} name must be 1-{limit} bytes without NUL, got {value!r}"
        )
