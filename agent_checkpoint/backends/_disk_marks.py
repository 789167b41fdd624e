"""The disk backend's key locks and the pending marks of its writes (``_disk.py`` orders the
steps of a write; this module keeps the index in line with the record files around them).

A key's lock is one of 256 striped lock files, held with ``flock``. A write marks its key
pending in the index (a synced commit) before it changes the record file; a write that
replaced a record keeps its key's mark afterwards (the key is likely written again soon, and
that write then syncs nothing in the index), at most ``kept`` of them, the older ones settled
in the next synced commit. A mark whose writer died is reconciled from the file before a
listing.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ._base import Summary
from ._disk_files import RecordFiles
from ._disk_index import SummaryIndex

__all__ = ["Marks"]

_LOCK_STRIPES = 256


class Marks:
    """The locks of a store's keys (under ``locks``) and the marks its writes keep."""

    def __init__(self, files: RecordFiles, index: SummaryIndex, locks: Path, kept: int) -> None:
        self._files = files
        self._index = index
        self._locks = locks
        self._kept_most = kept
        self._guard = threading.Lock()
        self._kept: dict[str, None] = {}  # keys whose marks this backend left, oldest first

    @contextmanager
    def locked(self, key: str, *, blocking: bool = True) -> Iterator[bool]:
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

    def reconcile(self) -> None:
        """Bring index entries of keys whose writer died mid-write in line with their files."""
        for key in self._index.pending():
            with self.locked(key, blocking=False) as held:
                if held:  # a live writer holds it otherwise, and will finish the job itself
                    self._index.update(key, self._filed(key))

    def _filed(self, key: str) -> Summary | None:
        """The summary ``key``'s record file holds (``None``: none, or a tombstone)."""
        found = self._files.read(key)
        summary = found[0].summary if found is not None else None
        return summary if summary is not None and summary.run_id else None

    def mark(self, key: str) -> None:
        """Mark ``key`` pending, durably, before its record file changes (the caller holds its
        lock): already done if its mark is there (kept by its last write, see ``_settle``)."""
        if self._index.durable and self._index.is_pending(key):
            return
        with contextlib.ExitStack() as held:
            self._index.mark_pending(key, self._settle(key, held, self._kept_most - 1))

    def _settle(
        self, key: str, held: contextlib.ExitStack, keep: int
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
            if held.enter_context(self.locked(other, blocking=False)):
                settled.append((other, self._filed(other)))
                with self._guard:
                    self._kept.pop(other, None)
        return settled

    def written(self, key: str, summary: Summary | None, *, replaced: bool) -> None:
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

    def settle_all(self) -> None:
        """Settle every mark this backend kept (a listing would otherwise read their files)."""
        with contextlib.ExitStack() as held:
            if settled := self._settle("", held, keep=0):
                self._index.settle(settled)
