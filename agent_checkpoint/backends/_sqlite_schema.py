"""The SQLite backend's schema: its migration steps and the ledger that applies each once.

``MIGRATIONS`` is ordered and append-only. Opening a file (or ``setup()``) applies the steps its
ledger lacks, in order, in one ``BEGIN IMMEDIATE`` transaction, so two processes opening a new
file at once set it up once. A file whose ledger names a step this library does not know was
made by a newer library: it is refused, naming the file and the step, before anything is read
or written; so is a file that holds tables but no ledger (another program's database).

Every namespace (claims, the segment layer's pieces) lives in the same two tables, told apart
by the ``ns`` column (``""`` for the store's own records); ``revisions`` holds one counter per
namespace, at or above every revision ever issued there, so a key deleted and written again
starts past every revision it had.
"""

from __future__ import annotations

import sqlite3

from ..errors import StoreConfigurationError
from ._disk_index import transaction

__all__ = ["LEDGER", "MIGRATIONS", "migrate"]

LEDGER = "agent_checkpoint_migrations"

Step = tuple[int, str, tuple[str, ...]]

MIGRATIONS: tuple[Step, ...] = (
    (
        1,
        "records, listing index and revision counters",
        (
            # BINARY collation: keys order by their UTF-8 bytes, which is code point order, as
            # Python sorts str, so keyset cursors agree with every other backend.
            """CREATE TABLE IF NOT EXISTS records (
                ns TEXT NOT NULL,
                key TEXT NOT NULL,
                run_id TEXT NOT NULL,
                saved_at INTEGER NOT NULL,
                owner TEXT,
                agent_id TEXT,
                failure_phase TEXT,
                failure_iteration INTEGER,
                message_count INTEGER NOT NULL,
                size INTEGER NOT NULL,
                revision INTEGER NOT NULL,
                body BLOB NOT NULL,
                PRIMARY KEY (ns, key)
            )""",
            "CREATE INDEX IF NOT EXISTS records_newest ON records (ns, saved_at DESC, key)",
            "CREATE INDEX IF NOT EXISTS records_owner ON records (ns, owner, saved_at DESC, key)",
            "CREATE INDEX IF NOT EXISTS records_agent ON records (ns, agent_id, saved_at DESC, key)",
            "CREATE TABLE IF NOT EXISTS revisions (ns TEXT PRIMARY KEY, last INTEGER NOT NULL)",
        ),
    ),
)


def migrate(db: sqlite3.Connection, path: str, steps: tuple[Step, ...] = MIGRATIONS) -> None:
    """Bring the file at ``path`` up to ``steps`` in one write transaction, or refuse a file a
    newer library made. ``db`` is in autocommit mode (``isolation_level=None``)."""
    latest = steps[-1][0]
    if _applied(db) == {step[0] for step in steps}:  # the common case: no write lock taken
        return
    with transaction(db):
        db.execute(  # the first step's tables and this one commit together
            f"CREATE TABLE IF NOT EXISTS {LEDGER} (version INTEGER PRIMARY KEY, "
            "name TEXT NOT NULL, applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)"
        )
        applied = _applied(db)
        if not applied:
            _check_empty(db, path)
        _check_newer(db, path, latest)
        for version, name, statements in steps:
            if version in applied:
                continue
            for statement in statements:
                db.execute(statement)
            db.execute(f"INSERT INTO {LEDGER} (version, name) VALUES (?, ?)", (version, name))


def _applied(db: sqlite3.Connection) -> set[int]:
    """The versions the ledger records; empty for a new file. Refuses a newer file first."""
    try:
        rows = db.execute(f"SELECT version FROM {LEDGER}").fetchall()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return set()
        raise
    return {int(version) for (version,) in rows}


def _check_newer(db: sqlite3.Connection, path: str, latest: int) -> None:
    """Refuse the file if its ledger holds a step newer than ``latest``."""
    newer = db.execute(
        f"SELECT version, name FROM {LEDGER} WHERE version > ? ORDER BY version", (latest,)
    ).fetchall()
    if newer:
        version, name = newer[0]
        raise StoreConfigurationError(
            f"sqlite store {path!r} was made by a newer agent-checkpoint (schema step {version}, "
            f"{name!r}; this version knows steps up to {latest}): upgrade agent-checkpoint to "
            "open it",
            backend="sqlite",
            operation="open",
        )


def _check_empty(db: sqlite3.Connection, path: str) -> None:
    """Refuse a file without a ledger that holds tables: another program's database."""
    others = db.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name != ? ORDER BY name",
        (LEDGER,),
    ).fetchall()
    if others:
        raise StoreConfigurationError(
            f"sqlite file {path!r} is not an agent-checkpoint store: it holds other tables "
            f"({', '.join(name for (name,) in others[:5])}) and no {LEDGER} table",
            backend="sqlite",
            operation="open",
        )
