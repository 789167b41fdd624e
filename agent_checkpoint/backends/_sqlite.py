"""The embedded backend: records and the listing index in one SQLite file (``sqlite://PATH``).

The standard library's ``sqlite3``, no other dependency. The file is in WAL mode with
``synchronous=FULL`` (each commit is synced before it is acknowledged); a writer waits up to
``timeout`` seconds for another's lock (``busy_timeout``), after which the Store retries the
operation as a transient fault. Every write is one ``BEGIN IMMEDIATE`` transaction: the read of
the current revision and the write that depends on it are one atomic step, also against other
processes writing the same file.

Growing histories are stored in pieces by the Store's segment layer (``_segments.py``): the
pieces are rows of the ``segments`` namespace, the head's row is the commit point, and a put's
new piece, head row and dropped pieces are one transaction (``grouped``): one sync per put. Claims use
the ``claims`` namespace. Namespaces share the file's tables (``_sqlite_schema.py``), told apart
by a column, so one file holds a whole store.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import unquote, urlsplit

from ..errors import InvalidKeyError, StoreNotFoundError
from ._base import Query, Record, Summary, closed_error, plan_drop, plan_save
from ._base import translate_errors as _translate
from ._disk_index import COLUMNS, listing_conditions, listing_order, patiently, transaction
from ._sqlite_schema import migrate
from ._url_options import SCHEMES

__all__ = ["SqliteBackend"]

DEFAULT_TIMEOUT = 5.0


class _Connection:
    """One sqlite3 connection, its lock and its closed flag, shared by a backend and its
    namespaces."""

    def __init__(self, path: str, timeout: float) -> None:
        self.path = path
        # isolation_level=None: no implicit transactions; every write opens its own
        with _translate("sqlite", "open", transient=(), fatal=(sqlite3.Error,)):
            self.db = sqlite3.connect(
                path, timeout=timeout, isolation_level=None, check_same_thread=False
            )
            try:
                # a new file's switch to WAL skips the busy handler: retried while locked
                patiently(self.db.execute, "PRAGMA journal_mode=WAL")
                self.db.execute("PRAGMA synchronous=FULL")
                migrate(self.db, path)
            except BaseException:
                self.db.close()
                raise
        self.lock = threading.RLock()  # re-entered by the writes of a group
        self.closed = False
        self.grouping = False
        """In a ``grouped()`` transaction: writes join it instead of opening their own."""


class SqliteBackend:
    name = "sqlite"
    makes_store_on_open = True
    """Opening makes the file; ``create=False`` refuses a path where there is none."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        timeout: float = DEFAULT_TIMEOUT,
        create: bool = True,
        _shared: _Connection | None = None,
        _ns: str = "",
    ) -> None:
        path = os.fspath(path)
        if _shared is None:
            if not path:
                raise InvalidKeyError("a sqlite store needs a file path: sqlite://PATH")
            if not create and path != ":memory:" and not os.path.isfile(path):
                raise StoreNotFoundError(f"no sqlite store at {path!r}")
            _shared = _Connection(path, timeout)
        self._shared = _shared
        self._ns = _ns
        self._namespaces: dict[str, SqliteBackend] = {}

    @classmethod
    def from_url(cls, url: str, **options: Any) -> SqliteBackend:
        """``sqlite://checkpoints.db`` (relative to the working folder), ``sqlite:///abs/x.db``.
        Options: ``timeout`` (seconds a write waits for another's lock), ``create``."""
        given = SCHEMES["sqlite"].read(url, options)
        parts = urlsplit(url)
        path = unquote(parts.netloc + parts.path)
        return cls(path, **given.store)

    @property
    def path(self) -> str:
        return self._shared.path

    @property
    def closed(self) -> bool:
        return self._shared.closed

    def namespace(self, name: str) -> SqliteBackend:
        with self._shared.lock:
            found = self._namespaces.get(name)
            if found is None:
                ns = f"{self._ns}/{name}" if self._ns else name
                found = SqliteBackend(self.path, _shared=self._shared, _ns=ns)
                self._namespaces[name] = found
            return found

    def setup(self) -> None:
        """Apply the schema steps the file lacks (opening did already); idempotent."""
        with self._session("setup") as db:
            migrate(db, self.path)

    def close(self) -> None:
        with self._shared.lock:
            if not self._shared.closed:
                self._shared.closed = True
                self._shared.db.close()

    # -- the five record operations --------------------------------------------------------

    def load(self, key: str) -> Record | None:
        with self._session("load") as db:
            row = db.execute(
                f"SELECT {COLUMNS}, body FROM records WHERE ns = ? AND key = ?", (self._ns, key)
            ).fetchone()
        return None if row is None else Record(Summary(*row[:-1]), row[-1])

    def head(self, key: str) -> Summary | None:
        with self._session("head") as db:
            return self._head(db, key)

    def save(
        self, record: Record, *, expect_revision: int | None = None, create_only: bool = False
    ) -> Summary:
        with self._transaction("save") as db:
            current = self._head(db, record.key)
            found = db.execute("SELECT last FROM revisions WHERE ns = ?", (self._ns,)).fetchone()
            last = 0 if found is None else int(found[0])
            revision = current.revision + 1 if current is not None else last + 1
            summary = plan_save(
                current,
                record,
                expect_revision=expect_revision,
                create_only=create_only,
                revision=revision,
            )
            db.execute(
                f"INSERT OR REPLACE INTO records (ns, {COLUMNS}, body) "
                f"VALUES ({', '.join('?' * 12)})",
                (self._ns, *summary.row(), record.body),
            )
            db.execute(
                "INSERT INTO revisions (ns, last) VALUES (?, ?) "
                "ON CONFLICT (ns) DO UPDATE SET last = MAX(last, excluded.last)",
                (self._ns, revision),
            )
        return summary

    def drop(self, key: str, *, expect_revision: int | None = None) -> bool:
        with self._transaction("drop") as db:
            current = self._head(db, key)
            found = None if current is None else current.revision
            if not plan_drop(key, found, expect_revision):
                return False
            db.execute("DELETE FROM records WHERE ns = ? AND key = ?", (self._ns, key))
        return True

    def scan(self, query: Query) -> list[Summary]:
        where, args = listing_conditions(query)
        sql = (
            f"SELECT {COLUMNS} FROM records WHERE {' AND '.join(['ns = ?', *where])} "
            f"ORDER BY {listing_order(query)} LIMIT ?"
        )
        with self._session("scan") as db:
            return [Summary(*row) for row in db.execute(sql, (self._ns, *args, query.limit))]

    # -- plumbing --------------------------------------------------------------------------

    def _head(self, db: sqlite3.Connection, key: str) -> Summary | None:
        row = db.execute(
            f"SELECT {COLUMNS} FROM records WHERE ns = ? AND key = ?", (self._ns, key)
        ).fetchone()
        return None if row is None else Summary(*row)

    @contextmanager
    def _session(self, operation: str) -> Iterator[sqlite3.Connection]:
        """The connection, for one statement or transaction at a time; sqlite3's errors
        become the library's (a locked or busy database is transient: the Store retries)."""
        with self._shared.lock:
            if self._shared.closed:
                raise closed_error(self.name, operation)
            with _translate(
                self.name, operation, transient=(sqlite3.OperationalError,), fatal=(sqlite3.Error,)
            ):
                yield self._shared.db

    @contextmanager
    def _transaction(self, operation: str) -> Iterator[sqlite3.Connection]:
        """A write transaction: IMMEDIATE takes the write lock at once, so that the read and
        the write inside it are one atomic step, also against other processes. Inside
        ``grouped()``, the group's transaction."""
        with self._session(operation) as db:
            if self._shared.grouping:
                yield db
                return
            with transaction(db):
                yield db

    @contextmanager
    def grouped(self) -> Iterator[None]:
        """The writes inside (of this backend and its namespaces, from this thread) are one
        transaction: all of them land, with one sync, or none. The segment layer puts a new
        piece, the head's row that refers to it and the drops of the pieces it replaced so."""
        shared = self._shared
        with self._session("save") as db:
            if shared.grouping:  # nested: the outer group's
                yield
                return
            with transaction(db):
                shared.grouping = True
                try:
                    yield
                finally:
                    shared.grouping = False
