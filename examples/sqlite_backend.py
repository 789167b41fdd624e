"""A checkpoint backend on SQLite, written as a third party would write one (docs/backends.md).

It implements the five record operations (``load``, ``head``, ``save``, ``drop``, ``scan``),
``close``, and ``namespace(name)``, which claims and growing histories use. Everything else
(checkpoints, retries, cursors, retention, claims, histories stored in pieces) the ``Store``
derives from them::

    from agent_checkpoint import open_store
    from examples.sqlite_backend import register

    register()  # sqlite://PATH now opens a SqliteBackend
    with open_store("sqlite://checkpoints.db") as store:
        ...

Each record is one row: the ``Summary`` fields as columns and the body as a blob. A table
``revisions`` keeps, per table, the highest revision ever issued, so that a key deleted and
written again starts past every revision it had (the store-wide counter of ``save``'s rule).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from agent_checkpoint import ConflictError, Query, Record, Summary, register_backend
from agent_checkpoint.backends import plan_save, translate_errors

COLUMNS = (
    "key, run_id, saved_at, owner, agent_id, failure_phase, failure_iteration, "
    "message_count, size, revision"
)


class _Connection:
    """One sqlite3 connection, its lock and its closed flag, shared by a backend and its
    namespaces."""

    def __init__(self, path: str, timeout: float) -> None:
        # isolation_level=None: no implicit transactions; every write opens its own
        with translate_errors("sqlite", "open", transient=(), fatal=(sqlite3.Error,)):
            self.db = sqlite3.connect(
                path, timeout=timeout, isolation_level=None, check_same_thread=False
            )
        self.lock = threading.Lock()
        self.closed = False


class SqliteBackend:
    name = "sqlite"

    def __init__(
        self, path: str | _Connection, *, table: str = "checkpoints", timeout: float = 5.0
    ) -> None:
        self._shared = path if isinstance(path, _Connection) else _Connection(path, timeout)
        self._table = table
        self._quoted = f'"{table}"'
        self._create()

    @classmethod
    def from_url(cls, url: str, **options: Any) -> SqliteBackend:
        """``sqlite://PATH``: ``sqlite://checkpoints.db`` (relative), ``sqlite:///abs/path.db``,
        ``sqlite://:memory:``. Options: ``table``, ``timeout`` (seconds to wait for a lock)."""
        return cls(url.removeprefix("sqlite://"), **options)

    @property
    def closed(self) -> bool:
        return self._shared.closed

    def namespace(self, name: str) -> SqliteBackend:
        return SqliteBackend(self._shared, table=f"{self._table}__{name}")

    def close(self) -> None:
        if not self._shared.closed:
            self._shared.closed = True
            self._shared.db.close()

    # -- the five record operations --------------------------------------------------------

    def load(self, key: str) -> Record | None:
        with self._session("load") as db:
            row = db.execute(
                f"SELECT {COLUMNS}, body FROM {self._quoted} WHERE key = ?", (key,)
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
            (last,) = db.execute(
                "SELECT last FROM revisions WHERE tbl = ?", (self._table,)
            ).fetchone()
            revision = current.revision + 1 if current is not None else last + 1
            summary = plan_save(
                current,
                record,
                expect_revision=expect_revision,
                create_only=create_only,
                revision=revision,
            )
            marks = ", ".join("?" * 11)
            db.execute(
                f"INSERT OR REPLACE INTO {self._quoted} ({COLUMNS}, body) VALUES ({marks})",
                (*summary.row(), record.body),
            )
            db.execute(
                "UPDATE revisions SET last = MAX(last, ?) WHERE tbl = ?", (revision, self._table)
            )
        return summary

    def drop(self, key: str, *, expect_revision: int | None = None) -> bool:
        with self._transaction("drop") as db:
            current = self._head(db, key)
            if expect_revision is not None and (
                current is None or current.revision != expect_revision
            ):
                found = "no record" if current is None else f"revision {current.revision}"
                raise ConflictError(
                    f"key {key!r} is at {found}, not revision {expect_revision}; nothing was deleted",
                    key=key,
                )
            db.execute(f"DELETE FROM {self._quoted} WHERE key = ?", (key,))
        return current is not None

    def scan(self, query: Query) -> list[Summary]:
        where = ["1 = 1"]
        args: list[object] = []
        for condition, value in (
            ("owner = ?", query.owner),
            ("agent_id = ?", query.agent_id),
            ("failure_phase = ?", query.phase),
            ("saved_at < ?", query.saved_before),
            ("saved_at >= ?", query.saved_since),
        ):
            if value is not None:
                where.append(condition)
                args.append(value)
        if query.failed is not None:
            where.append(f"failure_phase IS {'NOT ' if query.failed else ''}NULL")
        if query.prefix is not None:  # every character literal: no LIKE, no GLOB
            where.append("substr(key, 1, ?) = ?")
            args += [len(query.prefix), query.prefix]
        direction = "ASC" if query.oldest_first else "DESC"
        if query.after is not None:  # strictly after (saved_at, key) in the listing's order
            saved, key = query.after
            where.append(
                f"(saved_at {'>' if query.oldest_first else '<'} ? OR (saved_at = ? AND key > ?))"
            )
            args += [saved, saved, key]
        sql = (
            f"SELECT {COLUMNS} FROM {self._quoted} WHERE {' AND '.join(where)} "
            f"ORDER BY saved_at {direction}, key ASC LIMIT ?"
        )
        with self._session("scan") as db:
            return [Summary(*row) for row in db.execute(sql, (*args, query.limit))]

    # -- plumbing --------------------------------------------------------------------------

    def _head(self, db: sqlite3.Connection, key: str) -> Summary | None:
        row = db.execute(f"SELECT {COLUMNS} FROM {self._quoted} WHERE key = ?", (key,)).fetchone()
        return None if row is None else Summary(*row)

    @contextmanager
    def _session(self, operation: str) -> Iterator[sqlite3.Connection]:
        """The connection, for one statement or transaction at a time; sqlite3's errors
        become the library's (a locked or busy database is transient: the Store retries)."""
        with (
            self._shared.lock,
            translate_errors(
                self.name, operation, transient=(sqlite3.OperationalError,), fatal=(sqlite3.Error,)
            ),
        ):
            yield self._shared.db

    @contextmanager
    def _transaction(self, operation: str) -> Iterator[sqlite3.Connection]:
        """A write transaction: IMMEDIATE takes the write lock at once, so that the read and
        the write inside it are one atomic step, also against other processes."""
        with self._session(operation) as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:  # a refusal, or a COMMIT that could not take its lock
                    db.execute("ROLLBACK")
                raise

    def _create(self) -> None:
        with self._transaction("setup") as db:
            db.execute(
                f"CREATE TABLE IF NOT EXISTS {self._quoted} (key TEXT PRIMARY KEY, run_id TEXT, "
                "saved_at INTEGER, owner TEXT, agent_id TEXT, failure_phase TEXT, "
                "failure_iteration INTEGER, message_count INTEGER, size INTEGER, "
                "revision INTEGER, body BLOB)"
            )
            db.execute(
                f'CREATE INDEX IF NOT EXISTS "{self._table}_order" ON {self._quoted} (saved_at, key)'
            )
            db.execute("CREATE TABLE IF NOT EXISTS revisions (tbl TEXT PRIMARY KEY, last INTEGER)")
            db.execute("INSERT OR IGNORE INTO revisions VALUES (?, 0)", (self._table,))


def register(scheme: str = "sqlite") -> None:
    """Make ``open_store(f"{scheme}://PATH")`` open a ``SqliteBackend`` (``sqlite`` is also the
    built-in backend's scheme, which this replaces, hence ``replace=True``)."""
    register_backend(scheme, f"{__name__}:SqliteBackend", replace=True)
