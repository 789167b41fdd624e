"""The disk backend's SQLite index (``_disk.py`` keeps it in line with the record files): the
summaries listing reads, and the ``pending`` table of keys whose write has not finished (or
whose last write kept its mark, ``_disk.py``): a listing reads their summaries from their files.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_random_exponential

from ._base import Query, Summary

__all__ = [
    "COLUMNS",
    "SummaryIndex",
    "busy",
    "listing_conditions",
    "listing_order",
    "patiently",
    "transaction",
]

WAL_PAGES = 128
"""Pages the index's WAL holds before SQLite copies them into the database (each checkpoint
syncs twice), and the size it is then cut back to."""

PAGE_SIZE = 1024
"""The page size of a new index (SQLite's default, 4 KiB, is what older stores keep). A put
rewrites about five pages (its summary and the listing indexes' entries), and its commit
appends them whole to the WAL: with these, ``WAL_PAGES`` holds as many puts in a quarter of
the bytes (128 KiB)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS summaries (
    key TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    saved_at INTEGER NOT NULL,
    owner TEXT,
    agent_id TEXT,
    failure_phase TEXT,
    failure_iteration INTEGER,
    message_count INTEGER NOT NULL,
    size INTEGER NOT NULL,
    revision INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS by_newest ON summaries (saved_at DESC, key);
CREATE INDEX IF NOT EXISTS by_owner ON summaries (owner, saved_at DESC, key);
CREATE INDEX IF NOT EXISTS by_agent ON summaries (agent_id, saved_at DESC, key);
CREATE INDEX IF NOT EXISTS by_failed ON summaries (saved_at DESC, key)
    WHERE failure_phase IS NOT NULL;
CREATE TABLE IF NOT EXISTS pending (key TEXT PRIMARY KEY);
"""
COLUMNS = (
    "key, run_id, saved_at, owner, agent_id, failure_phase, failure_iteration, "
    "message_count, size, revision"
)


BUSY_TIMEOUT = 60.0
"""Seconds a statement waits for another connection's lock before it gives up."""


def busy(exc: BaseException) -> bool:
    """SQLite's "database is locked" (``SQLITE_BUSY``): another connection holds the lock."""
    return isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc)


# Switching a new database to WAL skips the busy handler (SQLite returns SQLITE_BUSY at once),
# so processes opening a fresh store together retry it; 6 racing processes hit it in 11 of 60
# rounds, as a raw sqlite3 error.
patiently = Retrying(
    retry=retry_if_exception(busy),
    wait=wait_random_exponential(multiplier=0.01, max=0.2),
    stop=stop_after_delay(BUSY_TIMEOUT),
    reraise=True,
)


def listing_conditions(query: Query) -> tuple[list[str], list[Any]]:
    """The SQL conditions (and their arguments) that select ``query``'s summaries from a table
    of ``COLUMNS``, its keyset cursor included; the SQLite store's table reads them too."""
    where: list[str] = []
    args: list[Any] = []
    for column, value in (
        ("owner", query.owner),
        ("agent_id", query.agent_id),
        ("failure_phase", query.phase),
    ):
        if value is not None:
            where.append(f"{column} = ?")
            args.append(value)
    if query.failed is not None:
        where.append("failure_phase IS NOT NULL" if query.failed else "failure_phase IS NULL")
    if query.prefix:
        # substr, not LIKE or GLOB: no character of the prefix is a wildcard
        where.append("substr(key, 1, ?) = ?")
        args.extend((len(query.prefix), query.prefix))
    if query.saved_before is not None:
        where.append("saved_at < ?")
        args.append(query.saved_before)
    if query.saved_since is not None:
        where.append("saved_at >= ?")
        args.append(query.saved_since)
    if query.after is not None:
        saved, key = query.after
        op = ">" if query.oldest_first else "<"
        where.append(f"(saved_at {op} ? OR (saved_at = ? AND key > ?))")
        args.extend((saved, saved, key))
    return where, args


def listing_order(query: Query) -> str:
    """The listing's ORDER BY: newest (or oldest) first, ties by key."""
    return "saved_at ASC, key ASC" if query.oldest_first else "saved_at DESC, key ASC"


@contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[None]:
    """The block's statements as one transaction, taking the write lock at its start; rolled
    back whole if the block raises (a power loss or a kill leaves none of it either)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:  # some errors (a full disk) have SQLite roll back itself
            db.execute("ROLLBACK")
        raise


class SummaryIndex:
    """The index database at ``path``, created if missing, one connection per thread."""

    def __init__(self, path: Path, *, durable: bool = True) -> None:
        self.path = path
        self.durable = durable
        """``False`` (a store opened with ``fsync=False``): no commit is synced, not even
        ``mark_pending``'s, as no record file is."""
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._guard = threading.Lock()
        self.db().executescript(_SCHEMA)

    def db(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(
                self.path,
                timeout=BUSY_TIMEOUT,
                isolation_level=None,
                check_same_thread=False,
            )
            conn.execute(f"PRAGMA page_size={PAGE_SIZE}")  # only a new database takes it
            patiently(conn.execute, "PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={'NORMAL' if self.durable else 'OFF'}")
            # Left at SQLite's defaults the WAL grows to 4 MiB and stays that size, three
            # times the records of a 1,000-message conversation, while the store is open.
            page = conn.execute("PRAGMA page_size").fetchone()[0]
            conn.execute(f"PRAGMA wal_autocheckpoint={WAL_PAGES}")
            conn.execute(f"PRAGMA journal_size_limit={WAL_PAGES * page}")
            self._local.conn = conn
            with self._guard:
                self._connections.append(conn)
        return conn

    def is_pending(self, key: str) -> bool:
        return (
            self.db().execute("SELECT 1 FROM pending WHERE key = ?", (key,)).fetchone() is not None
        )

    def mark_pending(self, key: str, settled: Iterable[tuple[str, Summary | None]] = ()) -> None:
        """Mark ``key`` mid-write, durably, and in the same transaction store the summaries of
        ``settled`` (keys whose marks were kept, read again from their files under their
        locks) and clear their marks. Other commits are not synced (``NORMAL``: a power loss
        may take the last of them), so this one must be: after a power loss it is what makes
        the next listing read the key's summary from its record file again. Marks are only
        ever made here, so a mark present in the index is on the disk (a store opened with
        ``fsync=False`` promises nothing after a power loss, its marks included)."""
        db = self.db()
        if self.durable:
            db.execute("PRAGMA synchronous=FULL")
        try:
            with transaction(db):
                db.execute("INSERT OR IGNORE INTO pending (key) VALUES (?)", (key,))
                self._settled(db, settled)
        finally:
            if self.durable:
                db.execute("PRAGMA synchronous=NORMAL")

    def settle(self, settled: Iterable[tuple[str, Summary | None]]) -> None:
        """Store the summaries of ``settled`` and clear their marks, in one transaction."""
        db = self.db()
        with transaction(db):
            self._settled(db, settled)

    def pending(self) -> list[str]:
        return [k for (k,) in self.db().execute("SELECT key FROM pending")]

    def update(self, key: str, summary: Summary | None, *, keep_mark: bool = False) -> None:
        """Store ``key``'s summary (``None``: remove it) and clear its pending mark, in one
        transaction; with ``keep_mark``, leave the mark (the next write of the key then need
        not sync one again; ``mark_pending`` or a listing's reconciliation clears it)."""
        db = self.db()
        if keep_mark:
            self._store(db, key, summary)  # one statement: its own transaction
            return
        with transaction(db):
            self._store(db, key, summary)
            db.execute("DELETE FROM pending WHERE key = ?", (key,))

    def _settled(
        self, db: sqlite3.Connection, settled: Iterable[tuple[str, Summary | None]]
    ) -> None:
        for key, summary in settled:
            self._store(db, key, summary)
            db.execute("DELETE FROM pending WHERE key = ?", (key,))

    @staticmethod
    def _store(db: sqlite3.Connection, key: str, summary: Summary | None) -> None:
        if summary is None:
            db.execute("DELETE FROM summaries WHERE key = ?", (key,))
        else:
            db.execute(
                f"INSERT OR REPLACE INTO summaries ({COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?)",
                summary.row(),
            )

    def scan(self, query: Query) -> list[Summary]:
        where, args = listing_conditions(query)
        sql = f"SELECT {COLUMNS} FROM summaries"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += f" ORDER BY {listing_order(query)} LIMIT ?"
        args.append(query.limit)
        return [Summary(*row) for row in self.db().execute(sql, args)]

    def replace_all(self, summaries: list[Summary]) -> None:
        """Make ``summaries`` the whole index, with nothing pending."""
        rows = [summary.row() for summary in summaries]
        db = self.db()
        with transaction(db):
            db.execute("DELETE FROM summaries")
            db.execute("DELETE FROM pending")
            db.executemany(
                f"INSERT OR REPLACE INTO summaries ({COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?)", rows
            )

    def close(self) -> None:
        with self._guard:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        self._local = threading.local()
