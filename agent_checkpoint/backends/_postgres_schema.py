"""The PostgreSQL backend's schema: its migration steps and the ledger that applies each once.

``MIGRATIONS`` is ordered and append-only: a store created by an older library is brought up to
date by running ``setup()`` again, which applies the steps its ledger lacks, in order, each in
its own transaction under an advisory lock per schema (so concurrent setups are safe).

A table a newer library migrated is used as it is, unless a step this library does not know
refuses older libraries (``REFUSES_OLDER``, recorded in the ledger as each step is applied):
going back to this version after a newer one ran ``setup``, or opened a store's namespace
(which sets it up), keeps working.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from ..errors import BackendError
from ._url_options import MAX_SCHEMA_NAME, MAX_TABLE_NAME

__all__ = [
    "LEDGER",
    "MAX_SCHEMA_NAME",
    "MAX_TABLE_NAME",
    "MIGRATIONS",
    "REFUSES_OLDER",
    "migrate",
    "object_names",
]

LEDGER = "agent_checkpoint_migrations"


Step = tuple[int, str, tuple[str, ...]]

MIGRATIONS: tuple[Step, ...] = (
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
    (
        3,
        "history segments",
        (
            # A record stored in segments (see _segments.py) has an empty ``body``, its head in
            # ``head``, the digest of its segments in ``digest`` and their count in
            # ``segments``; the three are NULL for a record stored whole. A non-empty ``body``
            # always wins, so a whole write by an older library (which sets ``body`` alone)
            # still reads back as written. Nullable without a default: no table rewrite.
            "ALTER TABLE {table} ADD COLUMN IF NOT EXISTS head bytea",
            "ALTER TABLE {table} ADD COLUMN IF NOT EXISTS digest text",
            "ALTER TABLE {table} ADD COLUMN IF NOT EXISTS segments integer",
            # The foreign key removes a record's segments with it (drop, retention); a whole
            # write over a split record deletes them in its own transaction.
            """CREATE TABLE IF NOT EXISTS {segments} (
                key text COLLATE "C" NOT NULL REFERENCES {table} (key) ON DELETE CASCADE,
                seq integer NOT NULL,
                data bytea NOT NULL,
                PRIMARY KEY (key, seq)
            )""",
        ),
    ),
    (
        4,
        "compressed segments",
        (
            # Segment rows hold a few messages each (appends join onto the last row up to
            # ``chunk_bytes``). MAIN keeps them compressed inside the row instead of moving them
            # out to TOAST, so updating the last row is a heap-only update whose old version
            # its page reclaims without VACUUM; MAIN values still go out of line past a page.
            # Both settings apply to values written from now on; stored values read as before.
            "ALTER TABLE {segments} ALTER COLUMN data SET STORAGE MAIN",
        ),
    ),
    (
        5,
        "partial owner and agent indexes",
        (
            # Only rows with an owner (an agent) are ever looked up by it: a run without one
            # need not add an entry to these indexes on every put. Every put moves saved_at,
            # so each index entry it adds stays until VACUUM.
            "DROP INDEX IF EXISTS {owner_idx_in_schema}",
            "CREATE INDEX {owner_idx} ON {table} (owner, saved_at DESC, key)"
            " WHERE owner IS NOT NULL",
            "DROP INDEX IF EXISTS {agent_idx_in_schema}",
            "CREATE INDEX {agent_idx} ON {table} (agent_id, saved_at DESC, key)"
            " WHERE agent_id IS NOT NULL",
        ),
    ),
    (
        6,
        "no oldest-first index",
        (
            # Oldest first (retention) reads the newest-first index backwards, ordering ties
            # by key with an incremental sort of each tie, so the second B-tree on saved_at
            # only cost every put one more index entry (which stays until VACUUM).
            "DROP INDEX IF EXISTS {oldest_idx_in_schema}",
        ),
    ),
    (
        7,
        "revision sequence",
        (
            # Every write moves this sequence on, so it stays at or above every revision
            # issued; a new key (or one deleted) takes its next value, so a key never repeats a
            # revision it had (a stale compare-and-swap or retention pass cannot mistake the
            # new record for the old). It starts past every revision already stored.
            "CREATE SEQUENCE IF NOT EXISTS {revisions} AS bigint",
            "SELECT setval({revisions_name}, m) FROM (SELECT max(revision) AS m FROM {table}) t"
            " WHERE m >= 1",
        ),
    ),
    (
        8,
        "bodies kept in the row",
        (
            # MAIN keeps a body compressed inside its row, out of line only past a page, so a
            # growing history's pieces (a namespace table, ~2 KB each) and short records are
            # one heap tuple each, and a rewritten row's old version is reclaimed by its page
            # without VACUUM: a checkpoint after every message to 1,000 stored 1.47 MB so and
            # 1.58 MB in TOAST. Applies to values written from now on.
            "ALTER TABLE {table} ALTER COLUMN body SET STORAGE MAIN",
        ),
    ),
    (
        9,
        "listing indexes without the key",
        (
            # Every put adds an entry to each listing index that holds its row (it moves
            # saved_at, so no update is heap-only), and a rewritten row's old entries stay until
            # VACUUM. Without the key an entry is 2-3x smaller (100,000 rows with 60-byte keys:
            # newest 10.2 -> 3.9 MB, owner 11.0 -> 5.5 MB); the listings still read in order
            # from the index and sort only rows that tie on saved_at by key (an incremental
            # sort), and a keyset cursor bounds the index scan on saved_at. Rebuilding takes a
            # lock that holds writes for the build (docs/operations.md).
            "DROP INDEX IF EXISTS {newest_idx_in_schema}",
            "CREATE INDEX {newest_idx} ON {table} (saved_at DESC)",
            "DROP INDEX IF EXISTS {owner_idx_in_schema}",
            "CREATE INDEX {owner_idx} ON {table} (owner, saved_at DESC) WHERE owner IS NOT NULL",
            "DROP INDEX IF EXISTS {agent_idx_in_schema}",
            "CREATE INDEX {agent_idx} ON {table} (agent_id, saved_at DESC)"
            " WHERE agent_id IS NOT NULL",
            "DROP INDEX IF EXISTS {failed_idx_in_schema}",
            "CREATE INDEX {failed_idx} ON {table} (saved_at DESC) WHERE failure_phase IS NOT NULL",
        ),
    ),
    (
        10,
        "short text kept in the row",
        (
            # A row past ~2 KB (a piece of a growing history) is made smaller by moving its
            # EXTENDED columns out of line first: with the body MAIN (step 8), that was the key
            # and the run id, ~50 bytes each, two TOAST rows and two TOAST index entries per
            # piece (a checkpoint after every message to 1,000: 1,068 of them, 144 KB of the
            # 2.15 MB stored), and a TOAST read for each. MAIN keeps them in the row, out of
            # line only where a row could not fit a page otherwise. Applies to rows written
            # from now on.
            "ALTER TABLE {table} ALTER COLUMN key SET STORAGE MAIN,"
            " ALTER COLUMN run_id SET STORAGE MAIN, ALTER COLUMN owner SET STORAGE MAIN,"
            " ALTER COLUMN agent_id SET STORAGE MAIN, ALTER COLUMN failure_phase SET STORAGE MAIN",
        ),
    ),
    (
        11,
        "old segments folded into their records",
        (
            # A record that a version before the segment layer stored in segments (step 3) is
            # rewritten whole: its head with the segments joined into the gap (a NUL), as a
            # read assembles it; one missing a segment keeps its head alone, which reads
            # unreadable, as before. Then the segments table is made anew, empty and without
            # its foreign key: that key's trigger ran on every delete of a record, and a write
            # no longer deletes segment rows. The table stays for versions before this step
            # still running, whose statements name it.
            """UPDATE {table} t SET
                body = CASE WHEN f.n = t.segments THEN (CASE WHEN f.gap = 0
                    THEN t.head || f.joined
                    ELSE substring(t.head FROM 1 FOR f.gap - 1) || f.joined
                        || substring(t.head FROM f.gap + 1) END)
                    ELSE t.head END,
                head = NULL, digest = NULL, segments = NULL
            FROM (SELECT r.key, position(decode('00', 'hex') IN r.head) AS gap,
                    (SELECT count(*) FROM {segments} s WHERE s.key = r.key) AS n,
                    coalesce((SELECT string_agg(s.data, ','::bytea ORDER BY s.seq)
                        FROM {segments} s WHERE s.key = r.key AND octet_length(s.data) > 0),
                        ''::bytea) AS joined
                FROM {table} r WHERE r.head IS NOT NULL AND octet_length(r.body) = 0) f
            WHERE t.key = f.key""",
            "DROP TABLE {segments}",
            """CREATE TABLE {segments} (
                key text COLLATE "C" NOT NULL,
                seq integer NOT NULL,
                data bytea NOT NULL,
                PRIMARY KEY (key, seq)
            )""",
        ),
    ),
)


REFUSES_OLDER: frozenset[int] = frozenset({7})
"""The steps a library that lacks them must not use a table through. Every other step leaves
a table that the libraries before it read and write correctly, so that going back past it is
safe; a new step belongs here when it does not (it renames or repurposes a column, or a write
that ignores it would break a promise). Step 7: without the revision sequence, a deleted key's
next record could repeat a revision."""


def object_names(schema: str, table: str) -> dict[str, sql.Composable]:
    """The identifiers the steps' ``{placeholders}`` stand for."""
    return {
        "table": sql.Identifier(schema, table),
        "segments": sql.Identifier(schema, f"{table}_segments"),
        "revisions": sql.Identifier(schema, f"{table}_revision_seq"),
        # setval() takes the sequence's name as text (a regclass)
        "revisions_name": sql.Literal(
            sql.Identifier(schema, f"{table}_revision_seq").as_string(None)
        ),
        **{
            f"{n}_idx": sql.Identifier(f"{table}_{n}_idx")
            for n in ("newest", "oldest", "owner", "agent", "failed")
        },
        # An index lives in its table's schema: DROP INDEX must name that schema.
        **{
            f"{n}_idx_in_schema": sql.Identifier(schema, f"{table}_{n}_idx")
            for n in ("newest", "oldest", "owner", "agent", "failed")
        },
    }


def migrate(
    conn: psycopg.Connection[Any],
    schema: str,
    table: str,
    steps: tuple[Step, ...],
    names: dict[str, sql.Composable],
) -> None:
    """Create ``schema`` and the ledger if missing, then apply the ``steps`` not yet applied to
    ``table``, in order. A table a newer library migrated is left as it is, or refused if a
    step newer than ``steps`` refuses older libraries (``REFUSES_OLDER``)."""
    lock = sql.SQL("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))")
    lock_key = f"agent_checkpoint setup {schema}"
    ledger = sql.Identifier(schema, LEDGER)
    latest = steps[-1][0]
    if _up_to_date(conn, ledger, schema, table, steps):
        return
    # One advisory lock per schema serialises concurrent setups, schema creation included.
    with conn.transaction():
        conn.execute(lock, (lock_key,))
        found = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,))
        if found.fetchone() is None:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (table_name text NOT NULL, "
                "version integer NOT NULL, name text NOT NULL, "
                "applied_at timestamptz NOT NULL DEFAULT now(), "
                "older_ok boolean, PRIMARY KEY (table_name, version))"
            ).format(ledger)
        )
        says = _ledger_says_older_ok(conn, ledger)
        newest = conn.execute(
            sql.SQL("SELECT max(version) FROM {} WHERE table_name = %s").format(ledger), (table,)
        ).fetchone()
    if newest is not None and newest[0] is not None and newest[0] > latest:
        _check_newer(conn, ledger, schema, table, latest)
        return
    columns = "table_name, version, name, older_ok" if says else "table_name, version, name"
    record = sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
        ledger, sql.SQL(columns), sql.SQL(", ").join([sql.Placeholder()] * (4 if says else 3))
    )
    for version, title, statements in steps:
        with conn.transaction():
            conn.execute(lock, (lock_key,))
            applied = conn.execute(
                sql.SQL("SELECT 1 FROM {} WHERE table_name = %s AND version = %s").format(ledger),
                (table, version),
            ).fetchone()
            if applied is not None:
                continue
            for statement in statements:
                conn.execute(sql.SQL(statement).format(**names))
            flag = (version not in REFUSES_OLDER,) if says else ()
            conn.execute(record, (table, version, title, *flag))


def _up_to_date(
    conn: psycopg.Connection[Any],
    ledger: sql.Identifier,
    schema: str,
    table: str,
    steps: tuple[Step, ...],
) -> bool:
    """Whether ``table`` has every one of ``steps`` (or a newer library's, checked): asked by
    every process opening a namespace, so two reads, no lock, no DDL."""
    latest = steps[-1][0]
    exists = conn.execute("SELECT to_regclass(%s)", (ledger.as_string(conn),)).fetchone()
    if exists is None or exists[0] is None:
        return False
    done = conn.execute(
        sql.SQL("SELECT count(*), max(version) FROM {} WHERE table_name = %s").format(ledger),
        (table,),
    ).fetchone()
    if done is not None and tuple(done) == (len(steps), latest):
        return True
    if done is not None and done[1] is not None and done[1] > latest:
        _check_newer(conn, ledger, schema, table, latest)
        return True  # a newer library applied every step this one knows before its own
    return False


def _ledger_says_older_ok(conn: psycopg.Connection[Any], ledger: sql.Identifier) -> bool:
    """Whether the ledger has its ``older_ok`` column (whether libraries without a step may
    use the table; NULL where a library before the column applied the step), adding it to a
    ledger an older library made. A role that does not own the ledger cannot add it: its
    steps then record nothing (so libraries without them refuse the table), and the owner's
    next setup that applies a step adds the column."""
    found = conn.execute(
        "SELECT 1 FROM pg_attribute WHERE attrelid = %s::regclass AND attname = 'older_ok'"
        " AND NOT attisdropped",
        (ledger.as_string(conn),),
    ).fetchone()
    if found is not None:
        return True
    try:
        with conn.transaction():  # a savepoint: a refusal leaves the setup's transaction usable
            conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN older_ok boolean").format(ledger))
    except psycopg.errors.InsufficientPrivilege:
        return False
    return True


def _check_newer(
    conn: psycopg.Connection[Any], ledger: sql.Identifier, schema: str, table: str, latest: int
) -> None:
    """Refuse ``table`` if a step newer than ``latest`` (the newest this library knows)
    refuses libraries without it, or did not say whether it does."""
    newer = "SELECT version, name FROM {} WHERE table_name = %s AND version > %s"
    try:
        refusing = conn.execute(
            sql.SQL(newer + " AND older_ok IS NOT TRUE ORDER BY version").format(ledger),
            (table, latest),
        ).fetchone()
    except psycopg.errors.UndefinedColumn:  # no step has said: the first refuses
        refusing = conn.execute(
            sql.SQL(newer + " ORDER BY version").format(ledger), (table, latest)
        ).fetchone()
    if refusing is not None:
        raise BackendError(
            f"postgres setup refused: table {schema}.{table} was migrated by an "
            f"agent-checkpoint newer than this one (which knows steps 1-{latest}), and its "
            f"step {refusing[0]} ({refusing[1]}) refuses libraries without it; upgrade the "
            "library",
            backend="postgres",
            operation="setup",
        )
