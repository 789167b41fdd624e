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
index, ``_disk_marks.py`` the key locks and the pending marks, ``_disk_folder.py`` what may be
opened as a store; this module orders the steps.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from .._container import is_container
from ._base import Closable, Query, Record, Summary, closed_error, plan_drop, plan_save
from ._disk_files import (
    RecordFiles,
    file_name,
    is_record_file,
    parse_record,
)
from ._disk_folder import access, check_root, refuse_nested, translated
from ._disk_index import SummaryIndex
from ._disk_marks import Marks
from ._url_options import SCHEMES

__all__ = ["DiskBackend", "file_name"]

_CLOSE_WAIT = 30.0
"""Seconds ``close`` waits for operations under way in other threads."""

_KEPT_MARKS = 8
"""Pending marks one backend keeps after its writes (``Marks.written``); a listing reads the file of
each mark it finds, so they are few."""

P = ParamSpec("P")
R = TypeVar("R")


def _translating(operation: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    def decorate(method: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(method)
        def run(*args: P.args, **kwargs: P.kwargs) -> R:
            backend = args[0]
            assert isinstance(backend, DiskBackend)
            with backend._in_use(operation), translated(operation):
                return method(*args, **kwargs)

        return run

    return decorate


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
            with access(self.root):
                refuse_nested(self.root)
        self._files = RecordFiles(self.root, fsync=fsync)
        locks = self.root / "locks"
        self._floor_lock = locks / "floor.lock"
        self._guard = threading.Lock()
        self._users = threading.Condition()  # operations under way: ``_in_use``
        self._busy = 0
        self._siblings: dict[str, DiskBackend] = {}
        index = self.root / "index.sqlite3"
        with translated("open"), access(self.root):  # _access sees the raw errors
            check_root(self.root, create)
            self._files.records.mkdir(parents=True, exist_ok=True)
            locks.mkdir(exist_ok=True)
            fresh = not index.exists()
            self._index = SummaryIndex(index, durable=fsync)
        self._marks = Marks(self._files, self._index, locks, _KEPT_MARKS)
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

    # -- the contract --------------------------------------------------------------------

    @_translating("load")
    def load(self, key: str) -> Record | None:
        return self._files.load(key)

    @_translating("load")
    def in_old_layout(self, key: str) -> bool:
        found = self._files.read(key)
        return found is not None and found[1] is not None

    @_translating("head")
    def head(self, key: str) -> Summary | None:
        found = self._files.read(key)
        return found[0].summary if found is not None else None

    @_translating("save")
    def save(
        self, record: Record, *, expect_revision: int | None = None, create_only: bool = False
    ) -> Summary:
        key = record.key
        with self._marks.locked(key):
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
            self._marks.mark(key)
            self._files.write(key, summary, record.body, end=end)
            self._marks.written(key, summary, replaced=current is not None)
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
        with self._marks.locked(key):
            current = self._current(key)[0]
            if not plan_drop(key, None if current is None else current.revision, expect_revision):
                return False
            assert current is not None
            self._marks.mark(key)
            # The floor first: a kill between the two leaves the record and a higher floor.
            self._files.raise_floor(current.revision, self._floor_lock)
            self._files.remove(key)
            self._marks.written(key, None, replaced=True)
            self._files.prune_segments(key, None)
            return True

    @_translating("forget")
    def forget(self, key: str) -> None:
        """Remove ``key``'s record file and index entry without raising the floor
        (``Forgetting``: for keys never written again, such as the segment layer's pieces)."""
        with self._marks.locked(key):
            if self._current(key)[0] is None:
                return
            self._marks.mark(key)
            self._files.remove(key)
            self._marks.written(key, None, replaced=True)
            self._files.prune_segments(key, None)

    @_translating("scan")
    def scan(self, query: Query) -> list[Summary]:
        self._marks.reconcile()
        return self._index.scan(query)

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

    # -- maintenance ---------------------------------------------------------------------

    def iter_records(self) -> Iterator[Record]:
        """Every record file, in no particular order (for verification and rebuilds)."""
        with translated("iter_records"):
            yield from self._files.every()

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
            with self._marks.locked(key):
                found, last, _ = self._files.state(key)
                if found is None and path.exists():  # still the tombstone
                    self._files.raise_floor(last, self._floor_lock)
                    path.unlink()
                    folded = True
        if folded:
            self._files.fsync_dir(self._files.records)

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
        with contextlib.suppress(OSError, sqlite3.Error):
            self._marks.settle_all()
        self._index.close()
