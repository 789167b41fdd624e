"""PostgreSQL: one table of records with an index per listing filter, on psycopg 3 and its pool.

``setup()`` creates the schema objects by applying ``MIGRATIONS`` in order, each once, recorded
in the ledger table ``LEDGER`` of the same schema (``_postgres_schema.py``).

Growing histories are the Store's segment layer's (``_segments.py``): its pieces are records of
the ``segments`` namespace, the table ``<table>$segments``; ``load_many`` reads several in one
statement. A record that a version before the layer stored in segments has an empty ``body``,
its head in ``head`` and its segments as rows of ``<table>_segments``. Migration step 11
rewrites such records whole and empties that table; until it runs, ``load`` assembles them in
one statement (one snapshot), and a ``save`` over one clears its head (its segment rows, no
longer read, go with the record or with step 11).

The statements are composed in ``_postgres_sql.py``; the pool, the URL options and the read
timeout of every connection are in ``_postgres_connections.py``.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql
from psycopg.errors import TransactionRollback, UndefinedColumn, UndefinedTable
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolClosed, PoolTimeout

from .._bridge import await_only, bridged
from ..errors import (
    ConflictError,
    StoreClosedError,
    StoreNotFoundError,
)
from ._base import (
    Closable,
    Query,
    Record,
    Summary,
    closed_error,
    plan_save,
    revision_refused,
    translate_errors,
)
from ._legacy import whole_body
from ._postgres_connections import (
    DEFAULT_READ_TIMEOUT,
    AsyncPool,
    CannotConnectError,
    TimedConnection,
    conninfo,
    make_pool,
    unbounded,
)
from ._postgres_schema import (
    LEDGER,
    MAX_TABLE_NAME,
    MIGRATIONS,
    migrate,
    object_names,
)
from ._postgres_sql import COLUMNS, scan_statement, statements
from ._url_options import DEFAULT_TABLE, EVERY, SCHEMES

__all__ = [
    "DEFAULT_READ_TIMEOUT",
    "DEFAULT_TABLE",
    "LEDGER",
    "MIGRATIONS",
    "PostgresBackend",
    "TimedConnection",
]

Connection = psycopg.Connection[TupleRow]

# Connection loss, admin shutdown, pool timeouts, serialization failures and deadlocks are all
# OperationalError subclasses; every other driver error is a bug or a misconfiguration.
TRANSIENT: tuple[type[BaseException], ...] = (psycopg.OperationalError, PoolTimeout)
FATAL: tuple[type[BaseException], ...] = (psycopg.Error,)


NAME = "postgres"
OPTIONS = SCHEMES[NAME]


class PostgresBackend(Closable):
    name = NAME
    segment_inline_bytes = 2048
    segment_max_pieces = 1024
    """Each put of a growing history rewrites the record row with its inline history, and
    each row version stays in the table until vacuum, in TOAST once the row outgrows ~2 KB;
    a merged piece leaves its pieces so too. ``load_many`` reads a record's pieces in one
    statement, so they are a run, never merged below 1,024: checkpointing after every
    message to 1,000 stored 1.56 MB so (2.9-3.0 MB at 4 KiB inline and 16 pieces merged,
    1.62-1.80 MB at 1-1.5 KiB inline, 1.63 MB at 3 KiB), at the same time per put."""

    def __init__(
        self,
        pool: ConnectionPool[Any],
        *,
        schema: str = "public",
        table: str = DEFAULT_TABLE,
        owns_pool: bool = False,
        _namespace: bool = False,
    ) -> None:
        OPTIONS.check("schema", schema)
        if not _namespace:
            OPTIONS.check("table", table)
        self.pool = pool
        self.schema = schema
        self.table = table
        self._owns_pool = owns_pool
        self._siblings: dict[str, PostgresBackend] = {}
        self._siblings_lock = threading.Lock()
        self._names = object_names(schema, table)
        self._sql = statements(self._names)

    @classmethod
    def from_url(
        cls, url: str, *, client: Any = None, asynchronous: bool = False, **options: Any
    ) -> PostgresBackend:
        """``postgresql://user@host:port/db?schema=..&table=..&min_size=..&max_size=..``
        ``&pool_timeout=..&read_timeout=..`` (``SCHEMES["postgres"]``); other query parameters
        go to libpq. Keywords override the URL. ``read_timeout`` (seconds,
        ``DEFAULT_READ_TIMEOUT`` unless given; ``0``: no limit) bounds each wait for the
        server's reply. With a ready pool (``client=``, which you own and close), the URL gives
        only ``schema`` and ``table``. ``asynchronous``: see ``from_url_async``."""
        given = OPTIONS.read(url, options, client=client, driver_url=EVERY)
        pool: Any = client
        if client is None:
            pool = make_pool(conninfo(given), **given.connection, asynchronous=asynchronous)
        if isinstance(pool, AsyncConnectionPool):
            pool = AsyncPool(pool)
        return cls(pool, **given.store, owns_pool=client is None)

    @classmethod
    def from_url_async(cls, url: str, **options: Any) -> PostgresBackend:
        """The backend an ``AsyncStore`` runs: ``from_url``'s, on psycopg's
        ``AsyncConnectionPool`` (``client=``: one of yours), awaited on the store's loop."""
        return cls.from_url(url, asynchronous=True, **options)

    @property
    def max_connections(self) -> int:
        """The most connections the pool opens."""
        return int(self.pool.max_size)

    # -- schema --------------------------------------------------------------------------

    def setup(self) -> None:
        """Create the schema, the table and everything else ``MIGRATIONS`` lists; idempotent,
        and brings a store made by an older library up to date."""
        # no read timeout: building an index on a big table may take minutes
        with self._connection("setup") as conn, unbounded(conn):
            migrate(conn, self.schema, self.table, MIGRATIONS, self._names)

    # -- records -------------------------------------------------------------------------

    def load(self, key: str) -> Record | None:
        with self._connection("load") as conn:
            row = conn.execute(self._sql.load, (key,), binary=True).fetchone()
        return None if row is None else _record(row)

    def load_many(self, keys: Sequence[str]) -> list[Record | None]:
        with self._connection("load") as conn:
            rows = conn.execute(self._sql.load_many, (list(keys),), binary=True).fetchall()
        found = {row[0]: _record(row) for row in rows}
        return [found.get(key) for key in keys]

    def in_old_layout(self, key: str) -> bool:
        with self._connection("load") as conn:
            row = conn.execute(_OLD_LAYOUT.format(self._sql.table), (key,)).fetchone()
        return row is not None and bool(row[0])

    def head(self, key: str) -> Summary | None:
        with self._connection("head") as conn:
            row = conn.execute(self._sql.head, (key,)).fetchone()
        return None if row is None else Summary(*row)

    def save(
        self, record: Record, *, expect_revision: int | None = None, create_only: bool = False
    ) -> Summary:
        key = record.key
        if create_only or expect_revision is not None:
            # A conditional write (the segment layer writes its pieces and commits appends
            # with one) is one statement; refused, the locked path below says why.
            with self._connection("save") as conn:
                done = self._write(conn, record, None if create_only else expect_revision)
            if done is not None:
                return done
        with self._connection("save") as conn, conn.transaction():
            # Two rounds: an INSERT that meets a key created since our read (ON CONFLICT DO
            # NOTHING waits for the creator to commit) reads it again, now locked.
            for _ in range(2):
                row = conn.execute(self._sql.lock_row, (key,)).fetchone()
                current = None if row is None else Summary(*row)
                planned = plan_save(  # raises if refused; the revision comes from the write
                    current, record, expect_revision=expect_revision, create_only=create_only
                )
                over = None if current is None else current.revision
                done = self._write(conn, Record(planned, record.body), over)
                if done is not None:
                    return done
        raise ConflictError(
            f"key {key!r} was created and deleted by others while this write ran; "
            "nothing was written",
            key=key,
        )

    def _write(self, conn: Connection, record: Record, over: int | None) -> Summary | None:
        """``record`` as a new key (``over`` is ``None``) or over the stored record at
        revision ``over``; ``None`` if the key exists, or is not at ``over``, or its owner
        refuses it."""
        s = record.summary
        size = s.size or len(record.body)
        params = dict(zip(COLUMNS, s.row(), strict=True))
        params.update(size=size, revision=over, body=record.body)
        statement = self._sql.insert if over is None else self._sql.update
        row = conn.execute(statement, params).fetchone()
        return None if row is None else s.revised(owner=row[1], revision=row[0], size=size)

    def drop(self, key: str, *, expect_revision: int | None = None) -> bool:
        with self._connection("drop") as conn:
            if expect_revision is None:
                return conn.execute(self._sql.delete, (key,)).rowcount == 1
            if conn.execute(self._sql.delete_at, (key, expect_revision)).rowcount == 1:
                return True
            row = conn.execute(self._sql.revision, (key,)).fetchone()
        found = None if row is None else row[0]
        raise revision_refused(key, expect_revision, found, "nothing was deleted")

    def scan(self, query: Query) -> list[Summary]:
        if any("\x00" in v for v in (query.owner, query.agent_id, query.phase, query.prefix) if v):
            return []  # PostgreSQL text cannot hold NUL, so no stored value matches
        statement, params = scan_statement(query, self._sql)
        with self._connection("scan") as conn:
            rows = conn.execute(statement, params).fetchall()
        return [Summary(*row) for row in rows]

    # -- lifecycle -----------------------------------------------------------------------

    def namespace(self, name: str) -> PostgresBackend:
        sibling = self._siblings.get(name)
        if sibling is None:
            # Same pool, its own table (created here: setup() is idempotent and cheap), named
            # with a "$" that the table of a store cannot hold, so that no store's table is
            # ever another store's namespace. No lock held across the setup: two first uses
            # both set up (the migration ledger makes that safe), and under AsyncStore a
            # task waiting on a lock would stop the event loop.
            sibling = PostgresBackend(
                self.pool,
                schema=self.schema,
                table=_namespace_table(self.table, name),
                _namespace=True,
            )
            sibling.setup()
            with self._siblings_lock:
                sibling = self._siblings.setdefault(name, sibling)
        return sibling

    def namespace_exists(self, name: str) -> bool:
        """Whether ``namespace(name)`` has made its table (opening it does), without making
        it: a read such as ``Store.claims()`` then needs no CREATE privilege."""
        if name in self._siblings:
            return True
        table = sql.Identifier(self.schema, _namespace_table(self.table, name)).as_string(None)
        with self._connection("scan") as conn:
            row = conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()
        return row is not None and row[0] is not None

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
        direct = {**(kwargs or {}), "connect_timeout": 2}
        try:
            if bridged():  # on the loop of an AsyncStore: never block it
                await_only(await_only(psycopg.AsyncConnection.connect(conninfo, **direct)).close())
            else:
                psycopg.connect(conninfo, **direct).close()
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
                raise closed_error(self.name, operation)
            try:
                with self.pool.connection() as conn:
                    try:
                        yield conn
                    except psycopg.OperationalError as exc:
                        # The session may be half-broken; closing it makes the pool replace it.
                        if not isinstance(exc, TransactionRollback):
                            conn.close()
                        raise
            except CannotConnectError as exc:
                raise exc.store_error(operation) from exc
            except PoolTimeout as exc:
                raise PoolTimeout(f"{exc}{self._why_no_connection()}") from exc
            except PoolClosed as exc:
                raise StoreClosedError(
                    f"postgres {operation} failed: its connection pool is closed",
                    backend=self.name,
                    operation=operation,
                ) from exc
            except (UndefinedTable, UndefinedColumn) as exc:
                older = isinstance(exc, UndefinedColumn) or any(
                    f'{self.table}_{name}"' in str(exc) for name in ("segments", "revision_seq")
                )
                missing = (
                    "predates this library's schema; upgrade it"
                    if older
                    else "does not exist; create it once"
                )
                raise StoreNotFoundError(
                    f"postgres {operation} failed: {self._where} {missing} "
                    "with store.setup() (or `agent-checkpoint setup --store URL`)"
                ) from exc


_OLD_LAYOUT = sql.SQL("SELECT head IS NOT NULL AND octet_length(body) = 0 FROM {} WHERE key = %s")


def _record(row: Any) -> Record:
    n = len(COLUMNS)
    return Record(Summary(*row[:n]), bytes(whole_body(*row[n:])))


def _namespace_table(table: str, name: str) -> str:
    """``<table>$<name>``, cut (with a hash of the whole) to leave room for the names derived
    from a table's name under PostgreSQL's 63-byte limit."""
    full = f"{table}${name}"
    if len(full.encode()) <= MAX_TABLE_NAME:
        return full
    room = MAX_TABLE_NAME - len(name.encode()) - 10  # "~", 8 hex digits, "$"
    cut = table.encode()[:room].decode(errors="ignore")
    return f"{cut}~{hashlib.sha256(table.encode()).hexdigest()[:8]}${name}"
