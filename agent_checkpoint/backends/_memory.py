"""The reference backend: records in a dict, two sorted indexes. Lives as long as the process.

It has the five record operations and ``namespace``, nothing more: growing histories are
stored in pieces by the Store's segment layer (``_segments.py``), as on any such backend.

A counter of writes per backend (namespace) stays at or above every revision issued, so a
key created (or created again after a delete) starts past every revision it ever had."""

from __future__ import annotations

import bisect
import itertools
import threading
from typing import Any

from ._base import Closable, Query, Record, Summary, is_after, matches, plan_drop, plan_save
from ._url_options import SCHEMES


class MemoryBackend(Closable):
    name = "memory"

    def __init__(self) -> None:
        self._records: dict[str, Record] = {}
        self._newest: list[tuple[int, str]] = []  # (-saved_at, key)
        self._oldest: list[tuple[int, str]] = []  # (saved_at, key)
        self._lock = threading.Lock()
        self._namespaces: dict[str, MemoryBackend] = {}
        self._sequence = 0  # at least every revision issued

    @classmethod
    def from_url(cls, url: str, **options: Any) -> MemoryBackend:
        SCHEMES["memory"].read(url, options)  # it takes none: one meant for another store
        return cls()

    def load(self, key: str) -> Record | None:
        with self._lock:
            return self._records.get(key)

    def head(self, key: str) -> Summary | None:
        record = self._records.get(key)
        return record.summary if record is not None else None

    def save(
        self, record: Record, *, expect_revision: int | None = None, create_only: bool = False
    ) -> Summary:
        with self._lock:
            current = self.head(record.key)
            summary = plan_save(
                current,
                record,
                expect_revision=expect_revision,
                create_only=create_only,
                revision=self._next(current),
            )
            self._store(current, Record(summary, record.body))
            return summary

    def _next(self, current: Summary | None) -> int:
        """The next write's revision: one more than the live record's, else past everything."""
        return current.revision + 1 if current is not None else self._sequence + 1

    def _store(self, current: Summary | None, record: Record) -> None:
        self._sequence = max(self._sequence + 1, record.summary.revision)
        if current is not None:
            self._unindex(current)
        self._records[record.key] = record
        bisect.insort(self._newest, (-record.summary.saved_at, record.key))
        bisect.insort(self._oldest, (record.summary.saved_at, record.key))

    def drop(self, key: str, *, expect_revision: int | None = None) -> bool:
        with self._lock:
            current = self.head(key)
            if not plan_drop(key, None if current is None else current.revision, expect_revision):
                return False
            assert current is not None
            self._unindex(current)
            del self._records[key]
            return True

    def _unindex(self, summary: Summary) -> None:
        for index, entry in (
            (self._newest, (-summary.saved_at, summary.key)),
            (self._oldest, (summary.saved_at, summary.key)),
        ):
            i = bisect.bisect_left(index, entry)
            del index[i]

    def scan(self, query: Query) -> list[Summary]:
        with self._lock:
            index = self._oldest if query.oldest_first else self._newest
            start = 0
            if query.after is not None:
                saved, key = query.after
                position = (saved, key) if query.oldest_first else (-saved, key)
                start = bisect.bisect_right(index, position)
            out: list[Summary] = []
            for _, key in itertools.islice(index, start, None):  # no copy of the whole index
                summary = self._records[key].summary
                if is_after(summary, query) and matches(summary, query):
                    out.append(summary)
                    if len(out) >= query.limit:
                        break
            return out

    def namespace(self, name: str) -> MemoryBackend:
        with self._lock:
            return self._namespaces.setdefault(name, MemoryBackend())

    def close(self) -> None:
        self._closed = True
