"""A folder on disk: one file per record, an SQLite index beside them (POSIX).

Layout under the root folder::

    records/<name>     one JSON header line (the summary), a newline, then the stored bytes,
                       or for a split record its head (see ``segments.py``)
    segments/<name>/   a split record's history, ``<generation>``: one data file that appends
                       grow, written and fsynced before the record file that refers to it;
                       the record's header says how many of its bytes are committed
    locks/<n>.lock     256 striped lock files; ``flock`` serialises writers of one key
    index.sqlite3      summaries for listing, plus a ``pending`` table of keys mid-write
    _<namespace>/      the same layout again for the Store's bookkeeping (claims)

A write takes the key's lock, reads the current header from the record file (the source of
truth, never the index), marks the key pending in the index, writes a temp file, fsyncs it,
renames it over the record and fsyncs the folder, then updates the index and clears the mark
in one transaction. A process killed at any instant leaves the old or the new file (rename is
atomic), and a pending mark that outlived its writer is reconciled from the file before the
next listing. The index is rebuilt from the records when it is missing (``rebuild_index``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import sqlite3
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson

from ..errors import BackendError, ConflictError
from .base import Query, Record, Summary, plan_save
from .segments import GAP, assemble, plan_append, plan_split
from .segments import Split as SegmentSplit

_LOCK_STRIPES = 256
_SAFE = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"
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
_COLUMNS = (
    "key, run_id, saved_at, owner, agent_id, failure_phase, failure_iteration, "
    "message_count, size, revision"
)


def file_name(key: str) -> str:
    """A file name no key can escape the folder with: a readable, percent-encoded prefix and a
    hash of the whole key, so long keys and keys differing only by case stay distinct."""
    readable = urllib.parse.quote(key, safe=_SAFE)[:120]
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:20]
    return f"{readable}~{digest}"


def _header(summary: Summary, split: dict[str, Any] | None = None) -> bytes:
    fields: dict[str, Any] = {
        "key": summary.key,
        "runId": summary.run_id,
        "savedAt": summary.saved_at,
        "owner": summary.owner,
        "agentId": summary.agent_id,
        "failurePhase": summary.failure_phase,
        "failureIteration": summary.failure_iteration,
        "messageCount": summary.message_count,
        "revision": summary.revision,
    }
    if split is not None:
        fields["split"] = split
    return orjson.dumps(fields)


Split = dict[str, Any]
"""A split record's header part: generation, segment count, digest, assembled size, and the
committed length of the generation's data file (``len``; absent in the older layout of one
file per segment, ``<generation>-<index>``, which is still read, and rewritten on the next
put)."""


def _parse(key: str, data: bytes) -> tuple[Record, Split | None]:
    """The record in a file's bytes (for a split record, its head) and its split header. A file
    whose header does not parse is still returned, whole, so the codec reports it unreadable
    rather than absent."""
    head, sep, body = data.partition(b"\n")
    try:
        h: dict[str, Any] = orjson.loads(head) if sep else {}
        split = h.get("split")
        summary = Summary(
            key=h["key"],
            run_id=h["runId"],
            saved_at=h["savedAt"],
            owner=h["owner"],
            agent_id=h["agentId"],
            failure_phase=h["failurePhase"],
            failure_iteration=h["failureIteration"],
            message_count=h["messageCount"],
            size=split["size"] if split else len(body),
            revision=h["revision"],
        )
    except (orjson.JSONDecodeError, TypeError, KeyError):
        return Record(Summary(key, "", 0, None, None, None, None, 0, len(data), 0), data), None
    return Record(summary, body), split


def _row(summary: Summary) -> tuple[Any, ...]:
    return (
        summary.key,
        summary.run_id,
        summary.saved_at,
        summary.owner,
        summary.agent_id,
        summary.failure_phase,
        summary.failure_iteration,
        summary.message_count,
        summary.size,
        summary.revision,
    )


class DiskBackend:
    name = "disk"

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.root = Path(root)
        self.fsync = fsync
        self._records = self.root / "records"
        self._segments = self.root / "segments"
        self._locks = self.root / "locks"
        try:
            self._records.mkdir(parents=True, exist_ok=True)
            self._segments.mkdir(exist_ok=True)
            self._locks.mkdir(exist_ok=True)
        except OSError as exc:
            raise BackendError(
                f"disk store at {self.root} cannot be created: {exc}",
                backend="disk",
                operation="open",
            ) from exc
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._guard = threading.Lock()
        self._siblings: dict[str, DiskBackend] = {}
        fresh = not (self.root / "index.sqlite3").exists()
        self._db().executescript(_SCHEMA)
        if fresh and any(self._records.iterdir()):
            self.rebuild_index()

    @classmethod
    def from_url(cls, url: str, **options: Any) -> DiskBackend:
        if url.startswith("file://"):
            path = urllib.parse.unquote(urllib.parse.urlsplit(url).path)
        else:
            path = url  # a bare path, taken as written
        return cls(os.path.expanduser(path), **options)

    # -- plumbing ------------------------------------------------------------------------

    def _db(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(
                self.root / "index.sqlite3",
                timeout=60,
                isolation_level=None,
                check_same_thread=False,
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
            with self._guard:
                self._connections.append(conn)
        return conn

    def _path(self, key: str) -> Path:
        return self._records / file_name(key)

    @contextmanager
    def _locked(self, key: str, *, blocking: bool = True) -> Iterator[bool]:
        stripe = int(hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:8], 16)
        path = self._locks / f"{stripe % _LOCK_STRIPES:03d}.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    def _read(self, key: str) -> tuple[Record, Split | None] | None:
        try:
            data = self._path(key).read_bytes()
        except FileNotFoundError:
            return None
        return _parse(key, data)

    def _assembled(self, record: Record, split: Split | None) -> Record | None:
        """The record with its history put back; ``None`` if its data file is gone (a full
        write replaced it since the record file was read: read again)."""
        if split is None:
            return record
        folder = self._segments / file_name(record.key)
        try:
            if "len" not in split:  # the older layout: one file per segment
                segments = [
                    (folder / f"{split['gen']}-{i}").read_bytes() for i in range(split["segs"])
                ]
                return Record(record.summary, assemble(record.body, segments))
            with open(folder / str(split["gen"]), "rb") as f:
                data = f.read(split["len"])
        except FileNotFoundError:
            return None
        if len(data) < split["len"]:
            return record  # a truncated data file: the head alone reads as unreadable
        before, _, after = record.body.partition(GAP)
        return Record(record.summary, before + data + after)

    def _load(self, key: str) -> Record | None:
        found = self._read(key)
        while found is not None:
            record = self._assembled(*found)
            if record is not None:
                return record
            again = self._read(key)
            if again is not None and again[1] == found[1]:
                return found[0]  # the record still refers to it: lost, so it reads unreadable
            found = again  # a full write replaced the data file between the two reads
        return None

    def _write(self, key: str, header: bytes, body: bytes) -> None:
        """Replace the record file atomically: temp file, fsync, rename, folder fsync."""
        target = self._path(key)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(header + b"\n" + body)
                f.flush()
                if self.fsync:
                    os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        self._fsync_dir(self._records)

    def _write_data(self, key: str, gen: int, data: bytes) -> None:
        """Create generation ``gen``'s data file holding ``data``, durably."""
        folder = self._segments / file_name(key)
        if not folder.is_dir():
            folder.mkdir(exist_ok=True)
            self._fsync_dir(self._segments)
        with open(folder / str(gen), "wb") as f:
            f.write(data)
            f.flush()
            if self.fsync:
                os.fsync(f.fileno())
        self._fsync_dir(folder)

    def _extend_data(self, key: str, gen: int, at: int, data: bytes) -> None:
        """Write ``data`` at byte ``at`` of a data file, over any torn tail an interrupted
        append left past the committed length, and make it durable."""
        fd = os.open(self._segments / file_name(key) / str(gen), os.O_WRONLY)
        try:
            view = memoryview(data)
            while view:
                written = os.pwrite(fd, view, at)
                view, at = view[written:], at + written
            if self.fsync:
                os.fsync(fd)
        finally:
            os.close(fd)

    def _prune_segments(self, key: str, keep_gen: int | None) -> None:
        """Remove segment files no record file refers to (older generations, or all)."""
        folder = self._segments / file_name(key)
        if not folder.exists():
            return
        for path in folder.iterdir():
            if keep_gen is None or path.name.split("-", 1)[0] != str(keep_gen):
                path.unlink(missing_ok=True)
        if keep_gen is None:
            with contextlib.suppress(OSError):
                folder.rmdir()

    def _fsync_dir(self, folder: Path) -> None:
        if self.fsync:
            fd = os.open(folder, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def _mark_pending(self, key: str) -> None:
        self._db().execute("INSERT OR IGNORE INTO pending (key) VALUES (?)", (key,))

    def _index(self, key: str, summary: Summary | None) -> None:
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        try:
            if summary is None:
                db.execute("DELETE FROM summaries WHERE key = ?", (key,))
            else:
                db.execute(
                    f"INSERT OR REPLACE INTO summaries ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?)",
                    _row(summary),
                )
            db.execute("DELETE FROM pending WHERE key = ?", (key,))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def _reconcile(self) -> None:
        """Bring index entries of keys whose writer died mid-write in line with their files."""
        pending = [k for (k,) in self._db().execute("SELECT key FROM pending")]
        for key in pending:
            with self._locked(key, blocking=False) as held:
                if held:  # a live writer holds it otherwise, and will finish the job itself
                    found = self._read(key)
                    summary = found[0].summary if found is not None else None
                    self._index(key, summary if summary is not None and summary.run_id else None)

    # -- the contract --------------------------------------------------------------------

    def load(self, key: str) -> Record | None:
        return self._load(key)

    def head(self, key: str) -> Summary | None:
        found = self._read(key)
        return found[0].summary if found is not None else None

    def save(
        self, record: Record, *, expect_revision: int | None = None, create_only: bool = False
    ) -> Summary:
        key = record.key
        with self._locked(key):
            summary = plan_save(
                self.head(key), record, expect_revision=expect_revision, create_only=create_only
            )
            self._mark_pending(key)
            self._write(key, _header(summary), record.body)
            self._index(key, summary)
            self._prune_segments(key, None)
            return summary

    def save_split(
        self,
        record: Record,
        split: SegmentSplit,
        *,
        expect_revision: int | None = None,
        create_only: bool = False,
    ) -> Summary:
        key = record.key
        with self._locked(key):
            summary = plan_split(
                self.head(key), record, expect_revision=expect_revision, create_only=create_only
            )
            gen = summary.revision
            self._mark_pending(key)
            # The data first: the record file that refers to it is the commit point.
            self._write_data(key, gen, split.segment)
            meta = {
                "gen": gen,
                "segs": 1,
                "digest": split.digest,
                "size": summary.size,
                "len": len(split.segment),
            }
            self._write(key, _header(summary, meta), split.head)
            self._index(key, summary)
            self._prune_segments(key, gen)
            return summary

    def append(
        self, summary: Summary, split: SegmentSplit, *, base_revision: int, base_digest: str
    ) -> Summary | None:
        key = summary.key
        with self._locked(key):
            found = self._read(key)
            if found is None or found[1] is None:
                return None
            current, meta = found[0], found[1]
            if (
                current.summary.revision != base_revision
                or meta["digest"] != base_digest
                or "len" not in meta  # the older layout: the full write that follows converts it
            ):
                return None
            planned = plan_append(current.summary, summary, base_revision=base_revision)
            self._mark_pending(key)
            added = b"," + split.segment if meta["len"] and split.segment else split.segment
            if added:
                self._extend_data(key, meta["gen"], meta["len"], added)
            grown = {
                **meta,
                "segs": meta["segs"] + 1,
                "digest": split.digest,
                "size": planned.size,
                "len": meta["len"] + len(added),
            }
            self._write(key, _header(planned, grown), split.head)
            self._index(key, planned)
            return planned

    def drop(self, key: str, *, expect_revision: int | None = None) -> bool:
        with self._locked(key):
            current = self.head(key)
            if expect_revision is not None:
                found = current.revision if current is not None else None
                if found != expect_revision:
                    raise ConflictError(
                        f"key {key!r} is at {'no record' if found is None else f'revision {found}'}, "
                        f"not revision {expect_revision}; nothing was deleted",
                        key=key,
                    )
            if current is None:
                return False
            self._mark_pending(key)
            self._path(key).unlink(missing_ok=True)
            self._fsync_dir(self._records)
            self._index(key, None)
            self._prune_segments(key, None)
            return True

    def scan(self, query: Query) -> list[Summary]:
        self._reconcile()
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
        order = "saved_at ASC, key ASC" if query.oldest_first else "saved_at DESC, key ASC"
        sql = f"SELECT {_COLUMNS} FROM summaries"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += f" ORDER BY {order} LIMIT ?"
        args.append(query.limit)
        return [Summary(*row) for row in self._db().execute(sql, args)]

    # -- maintenance ---------------------------------------------------------------------

    def iter_records(self) -> Iterator[Record]:
        """Every record file, in no particular order (for verification and rebuilds)."""
        for path in self._records.iterdir():
            if path.name.startswith("."):
                continue
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                continue
            record, split = _parse(path.name, data)
            assembled = self._assembled(record, split)
            if assembled is None:  # rewritten meanwhile: read it again
                assembled = self._load(record.summary.key)
            if assembled is not None:
                yield assembled

    def rebuild_index(self) -> int:
        """Recreate the index from the record files; return how many records it holds."""
        rows = []
        for path in self._records.iterdir():
            if not path.name.startswith("."):
                with contextlib.suppress(FileNotFoundError):
                    record, _ = _parse(path.name, path.read_bytes())
                    if record.summary.run_id:
                        rows.append(_row(record.summary))
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute("DELETE FROM summaries")
            db.execute("DELETE FROM pending")
            db.executemany(
                f"INSERT OR REPLACE INTO summaries ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?)", rows
            )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return len(rows)

    def namespace(self, name: str) -> DiskBackend:
        with self._guard:
            sibling = self._siblings.get(name)
            if sibling is None:
                sibling = self._siblings[name] = DiskBackend(
                    self.root / f"_{name}", fsync=self.fsync
                )
            return sibling

    def close(self) -> None:
        for sibling in list(self._siblings.values()):
            sibling.close()
        with self._guard:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        self._local = threading.local()
