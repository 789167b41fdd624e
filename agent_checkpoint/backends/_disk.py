"""A folder on disk: one file per record, an SQLite index beside them (POSIX).

Layout under the root folder::

    records/<name>     one JSON header line (the summary), a newline, then the stored bytes
                       (and, for a small record, newer frames of the same form after them);
                       a deleted key's file is removed (stores of earlier versions left a
                       tombstone line holding its last revision: read, and folded into the
                       floor by ``collect_orphans``)
    revision-floor     the highest revision a deleted key had; a key with no record file
                       starts past it, so a key's revisions never repeat (``FLOOR_FILE``)
    locks/<n>.lock     256 striped lock files; ``flock`` serialises writers of one key
    index.sqlite3      summaries for listing, plus a ``pending`` table of keys mid-write
    _<namespace>/      the same layout again for the Store's bookkeeping: claims, and the
                       pieces of long histories (the Store's segment layer, ``_segments.py``)
    segments/<name>/   read only: the history data files of records that version 0.4 stored
                       split; a write or delete of such a record removes them

A write takes the key's lock, reads the current header from the record file (the source of
truth, never the index), marks the key pending in the index (a synced commit: the only one),
writes the record (a temp file, fsynced, renamed over the record file, the folder fsynced; or,
for a small record rewritten, a frame appended to its file and fsynced: ``_disk_files.py``),
then updates the index and clears the mark in one transaction. A process killed at any
instant leaves the old or the new record (rename is atomic; a torn frame is not read), and a
pending mark that outlived its writer (or a power loss that took the index's last commits) is
reconciled from the file before the next listing. A write that replaced a record keeps its
key's mark instead (a conversation is checkpointed again and again: its next write finds the
mark on the disk and syncs nothing in the index); a backend keeps at most ``_KEPT_MARKS`` of
them, settling older ones in its next synced commit and all of them on ``close``. The index
is rebuilt from the records when it is missing (``rebuild_index``).

``_disk_files.py`` holds the file format and the file writes, ``_disk_index.py`` the SQLite
index; this module takes the locks and orders the steps.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import os
import sqlite3
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from .._container import is_container
from ..errors import (
    BackendError,
    BackendUnavailableError,
    InvalidKeyError,
    StoreNotFoundError,
)
from ._base import Closable, Query, Record, Summary, closed_error, plan_drop, plan_save
from ._disk_files import (
    RecordFiles,
    file_name,
    is_record_file,
    is_tombstone,
    parse_record,
)
from ._disk_index import SummaryIndex, busy
from ._url_options import SCHEMES

__all__ = ["DiskBackend", "file_name"]

_LOCK_STRIPES = 256

_CLOSE_WAIT = 30.0
"""Seconds ``close`` waits for operations under way in other threads."""

_KEPT_MARKS = 8
"""Pending marks one backend keeps after its writes (``_written``); a listing reads the file of
each mark it finds, so they are few."""

_REBUILD = (
    "; the store's index.sqlite3 cannot be read: move it aside and the store rebuilds it from "
    "the record files"
)

P = ParamSpec("P")
R = TypeVar("R")


@contextmanager
def _translated(operation: str) -> Iterator[None]:
    """The file system's and SQLite's errors as the library's: a lock another process held
    past the busy timeout is transient (the Store retries it), anything else is not."""
    try:
        yield
    except (OSError, sqlite3.Error) as exc:
        hint = _REBUILD if type(exc) is sqlite3.DatabaseError else ""  # "not a database"
        raise (BackendUnavailableError if busy(exc) else BackendError)(
            f"disk {operation} failed: {type(exc).__name__}: {exc}{hint}",
            backend="disk",
            operation=operation,
        ) from exc


def _translating(operation: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    def decorate(method: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(method)
        def run(*args: P.args, **kwargs: P.kwargs) -> R:
            backend = args[0]
            assert isinstance(backend, DiskBackend)
            with backend._in_use(operation), _translated(operation):
                return method(*args, **kwargs)

        return run

    return decorate


@contextmanager
def _access(root: Path) -> Iterator[None]:
    """A store this user may not read and write, refused as such: the index is SQLite in WAL
    mode, which writes beside the database (and a listing settles pending marks) even to
    read."""
    try:
        yield
    except (PermissionError, sqlite3.OperationalError) as exc:
        if isinstance(exc, sqlite3.OperationalError) and "readonly" not in str(exc):
            raise
        raise InvalidKeyError(
            f"disk store {os.path.abspath(root)!r} cannot be opened by this user: "
            f"{getattr(exc, 'strerror', None) or exc}; a disk store needs read and write "
            "access to its folder, even to list or read (its index is SQLite in WAL mode)"
        ) from exc


def _refuse_nested(root: Path) -> None:
    """A store's folder holds its records, index and namespaces (claims live in ``_leases``):
    a store opened inside another's folder could share or clobber those files."""
    parent = root.absolute().parent
    if (parent / "index.sqlite3").is_file() and (parent / "records").is_dir():
        raise InvalidKeyError(
            f"{str(root)!r} is inside the disk store at {str(parent)!r}: a store's folder "
            "belongs to that store; choose a folder outside it"
        )


_STORE_FILES = frozenset({"records", "locks", "index.sqlite3", "index.sqlite3-wal",
                          "index.sqlite3-shm", "index.sqlite3-journal"})  # fmt: skip
"""What a store's folder holds while a process makes it (another may be making it too)."""


def _check_root(root: Path, create: bool) -> None:
    """Refuse a root that is not a folder, one that holds other files and no store (a store
    made there would mix its files with them: ``--store .`` in a project), and without
    ``create`` one that holds no store."""
    where = os.path.abspath(root)
    for path in (root, *root.parents):
        if path.exists():
            if not path.is_dir():
                raise InvalidKeyError(
                    f"disk store {where!r}: {str(path)!r} is a file, not a folder"
                )
            break
    if (root / "records").is_dir() or (root / "index.sqlite3").exists():
        return
    if create and root.is_dir() and (others := sorted(set(os.listdir(root)) - _STORE_FILES)):
        shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
        raise InvalidKeyError(
            f"disk store {where!r}: the folder holds other files ({shown}) and no checkpoint "
            "store; a store needs a folder of its own: give a new or empty one"
        )
    if create:
        return
    why = "holds no checkpoint store" if root.is_dir() else "does not exist"
    raise StoreNotFoundError(
        f"no store at {where!r}: the folder {why}; nothing was created (put, save or setup "
        "create a store)"
    )


class DiskBackend(Closable):
    name = "disk"
    makes_store_on_open = True
    """Opening makes the folder; ``create=False`` refuses a folder that holds no store."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        fsync: bool = True,
        create: bool = True,
        _namespace: bool = False,
    ) -> None:
        self.root = Path(root)
        if not _namespace:
            with _access(self.root):
                _refuse_nested(self.root)
        self._files = RecordFiles(self.root, fsync=fsync)
        self._locks = self.root / "locks"
        self._floor_lock = self._locks / "floor.lock"
        self._guard = threading.Lock()
        self._users = threading.Condition()  # operations under way: ``_in_use``
        self._busy = 0
        self._siblings: dict[str, DiskBackend] = {}
        self._kept: dict[str, None] = {}  # keys whose marks this backend left, oldest first
        index = self.root / "index.sqlite3"
        with _translated("open"), _access(self.root):  # _access sees the raw errors
            _check_root(self.root, create)
            self._files.records.mkdir(parents=True, exist_ok=True)
            self._locks.mkdir(exist_ok=True)
            fresh = not index.exists()
            self._index = SummaryIndex(index, durable=fsync)
        if fresh and any(self._files.records.iterdir()):
            self.rebuild_index()

    @property
    def fsync(self) -> bool:
        """Whether writes are fsynced (``False`` trades crash safety for speed, for tests)."""
        return self._files.fsync

    @fsync.setter
    def fsync(self, value: bool) -> None:
        self._files.fsync = value
        self._index.durable = value  # connections opened from now on

    @classmethod
    def from_url(cls, url: str, **options: Any) -> DiskBackend:
        if url.startswith("file://"):
            path = urllib.parse.unquote(urllib.parse.urlsplit(url).path)
        else:
            path = url  # a bare path, taken as written
        return cls(os.path.expanduser(path), **SCHEMES["disk"].read(url, options).store)

    # -- plumbing ------------------------------------------------------------------------

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

    def _reconcile(self) -> None:
        """Bring index entries of keys whose writer died mid-write in line with their files."""
        for key in self._index.pending():
            with self._locked(key, blocking=False) as held:
                if held:  # a live writer holds it otherwise, and will finish the job itself
                    self._index.update(key, self._filed(key))

    def _filed(self, key: str) -> Summary | None:
        """The summary ``key``'s record file holds (``None``: none, or a tombstone)."""
        found = self._files.read(key)
        summary = found[0].summary if found is not None else None
        return summary if summary is not None and summary.run_id else None

    def _mark(self, key: str) -> None:
        """Mark ``key`` pending, durably, before its record file changes (the caller holds its
        lock): already done if its mark is there (kept by its last write, see ``_settle``)."""
        if self._index.durable and self._index.is_pending(key):
            return
        with contextlib.ExitStack() as held:
            self._index.mark_pending(key, self._settle(key, held))

    def _settle(
        self, key: str, held: contextlib.ExitStack, keep: int = _KEPT_MARKS - 1
    ) -> list[tuple[str, Summary | None]]:
        """The keys but the newest ``keep`` whose marks this backend kept (``key`` aside),
        with the summaries their files hold, each locked in ``held`` (a key a writer holds is
        left for later): storing them and clearing their marks in one commit is safe, synced
        or not (lost, it leaves marks, which a listing reconciles)."""
        with self._guard:
            self._kept.pop(key, None)
            over = list(self._kept)[: max(0, len(self._kept) - keep)]
        settled = []
        for other in over:
            if held.enter_context(self._locked(other, blocking=False)):
                settled.append((other, self._filed(other)))
                with self._guard:
                    self._kept.pop(other, None)
        return settled

    def _written(self, key: str, summary: Summary | None, *, replaced: bool) -> None:
        """The index after a write of ``key`` (its lock held): a key that was replaced is
        likely written again soon (a conversation checkpointed after each message), so its
        mark stays, and that write syncs no new one; a new or removed key's mark is cleared."""
        keep = replaced and summary is not None and self._index.durable
        self._index.update(key, summary, keep_mark=keep)
        with self._guard:
            if keep:
                self._kept[key] = None
            else:
                self._kept.pop(key, None)

    # -- the contract --------------------------------------------------------------------

    @_translating("load")
    def load(self, key: str) -> Record | None:
        return self._files.load(key)

    @_translating("head")
    def head(self, key: str) -> Summary | None:
        found = self._files.read(key)
        return found[0].summary if found is not None else None

    @_translating("save")
    def save(
        self, record: Record, *, expect_revision: int | None = None, create_only: bool = False
    ) -> Summary:
        key = record.key
        with self._locked(key):
            found, last, end = self._files.state(key)
            current = found[0].summary if found is not None else None
            if found is None:  # a new key, or one deleted: past every revision it had
                last = max(last, self._files.floor())
            if found is not None and is_container(found[0].body) != is_container(record.body):
                # Sealed bytes over plain ones (rekey, or encryption turned on), or back: the
                # file is replaced, so no frame of the other kind stays readable beside them.
                end = None
            summary = plan_save(
                current,
                record,
                expect_revision=expect_revision,
                create_only=create_only,
                revision=last + 1,
            )
            self._mark(key)
            self._files.write(key, summary, record.body, end=end)
            self._written(key, summary, replaced=current is not None)
            self._files.prune_segments(key, None)
            return summary

    def _current(self, key: str) -> tuple[Summary | None, int, int | None]:
        """The key's summary (``None`` for no record), the last revision it had (its
        tombstone's, for a deleted key) and where a frame may be appended to its file; the
        caller holds the key's lock."""
        found, last, end = self._files.state(key)
        return (found[0].summary if found is not None else None), last, end

    @_translating("drop")
    def drop(self, key: str, *, expect_revision: int | None = None) -> bool:
        with self._locked(key):
            current = self._current(key)[0]
            if not plan_drop(key, None if current is None else current.revision, expect_revision):
                return False
            assert current is not None
            self._mark(key)
            # The floor first: a kill between the two leaves the record and a higher floor.
            self._files.raise_floor(current.revision, self._floor_lock)
            self._files.remove(key)
            self._written(key, None, replaced=True)
            self._files.prune_segments(key, None)
            return True

    @_translating("forget")
    def forget(self, key: str) -> None:
        """Remove ``key``'s record file and index entry without raising the floor
        (``Forgetting``: for keys never written again, such as the segment layer's pieces)."""
        with self._locked(key):
            if self._current(key)[0] is None:
                return
            self._mark(key)
            self._files.remove(key)
            self._written(key, None, replaced=True)
            self._files.prune_segments(key, None)

    @_translating("scan")
    def scan(self, query: Query) -> list[Summary]:
        self._reconcile()
        return self._index.scan(query)

    # -- maintenance ---------------------------------------------------------------------

    def iter_records(self) -> Iterator[Record]:
        """Every record file, in no particular order (for verification and rebuilds)."""
        with _translated("iter_records"):
            for path in self._files.records.iterdir():
                if not is_record_file(path.name):
                    continue
                try:
                    data = path.read_bytes()
                except FileNotFoundError:
                    continue
                if is_tombstone(data):
                    continue
                record, split = parse_record(path.name, data)
                assembled = self._files.assembled(record, split)
                if assembled is None:  # rewritten meanwhile: read it again
                    assembled = self._files.load(record.summary.key)
                if assembled is not None:
                    yield assembled

    @_translating("rebuild_index")
    def rebuild_index(self) -> int:
        """Recreate the index from the record files; return how many records it holds."""
        summaries = []
        for path in self._files.records.iterdir():
            if is_record_file(path.name):
                with contextlib.suppress(FileNotFoundError):
                    record, _ = parse_record(path.name, path.read_bytes())
                    if record.summary.run_id:  # a tombstone or a garbled header has none
                        summaries.append(record.summary)
        self._index.replace_all(summaries)
        return len(summaries)

    @_translating("verify")
    def collect_orphans(self, *, delete: bool = False, grace: float = 300.0) -> int:
        """Temp files older than ``grace`` seconds (what writers killed mid-write leave), and
        version 0.4's history data files no record file refers to; with ``delete``, remove
        them, and the tombstones of earlier versions' deletes too, each folded into the floor
        first (those are not counted: nothing was lost or left mid-write). (The Store's
        segment layer collects its own pieces.)"""
        found = self._files.orphans(grace)
        if delete:
            self._fold_tombstones()
            for path in found:
                path.unlink(missing_ok=True)
            for folder in self._files.legacy_folders():
                with contextlib.suppress(OSError):
                    folder.rmdir()  # only if empty
        return len(found)

    def _fold_tombstones(self) -> None:
        """Remove the tombstone files of earlier versions, raising the floor past each one's
        revision first (under its key's lock: a write may have replaced it meanwhile)."""
        folded = False
        tombstones = self._files.tombstones()
        if tombstones:  # one write of the floor for all of them, checked again under each lock
            self._files.raise_floor(max(r for _, _, r in tombstones), self._floor_lock)
        for key, path, _ in tombstones:
            with self._locked(key):
                found, last, _ = self._files.state(key)
                if found is None and path.exists():  # still the tombstone
                    self._files.raise_floor(last, self._floor_lock)
                    path.unlink()
                    folded = True
        if folded:
            self._files.fsync_dir(self._files.records)

    @_translating("namespace")
    def namespace(self, name: str) -> DiskBackend:
        with self._guard:
            sibling = self._siblings.get(name)
            if sibling is None:
                sibling = self._siblings[name] = DiskBackend(
                    self.root / f"_{name}", fsync=self.fsync, _namespace=True
                )
            return sibling

    def namespace_exists(self, name: str) -> bool:
        """Whether ``namespace(name)`` has made its folder (opening it does), without making
        it: a read such as ``Store.claims()`` then leaves the store folder as it was."""
        return name in self._siblings or (self.root / f"_{name}").is_dir()

    @contextmanager
    def _in_use(self, operation: str) -> Iterator[None]:
        """An operation of this backend's, which ``close`` waits for: closing the index's
        SQLite connections while another thread runs a statement on one crashes the
        process (sqlite3 segfaults), not only the statement."""
        with self._users:
            if self._closed:
                raise closed_error("disk", operation)
            self._busy += 1
        try:
            yield
        finally:
            with self._users:
                self._busy -= 1
                if not self._busy:
                    self._users.notify_all()

    def close(self) -> None:
        """Refuse new operations, wait for those under way (at most ``_CLOSE_WAIT`` s: one
        waiting on another process's lock may not end), then settle the kept marks and close
        the index. If some are still running then, the index's connections are left for
        the garbage collector rather than closed under them."""
        with self._users:
            self._closed = True
            idle = self._users.wait_for(lambda: not self._busy, timeout=_CLOSE_WAIT)
        for sibling in list(self._siblings.values()):
            sibling.close()
        if not idle:
            return
        with contextlib.suppress(OSError, sqlite3.Error), contextlib.ExitStack() as held:
            # the marks this backend kept, settled (a listing would otherwise read their files)
            if settled := self._settle("", held, keep=0):
                self._index.settle(settled)
        self._index.close()
