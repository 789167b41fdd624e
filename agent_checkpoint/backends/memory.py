"""The reference backend: records in a dict, two sorted indexes. Lives as long as the process."""

from __future__ import annotations

import bisect
import threading
from dataclasses import replace
from typing import Any

from ..errors import ConflictError
from .base import Query, Record, Summary, is_after, matches, plan_save


class MemoryBackend:
    name = "memory"

    def __init__(self) -> None:
        self._records: dict[str, Record] = {}
        self._newest: list[tuple[int, str]] = []  # (-saved_at, key)
        self._oldest: list[tuple[int, str]] = []  # (saved_at, key)
        self._lock = threading.Lock()
        self._namespaces: dict[str, MemoryBackend] = {}

    @classmethod
    def from_url(cls, url: str, **options: Any) -> MemoryBackend:
        return cls()

    def load(self, key: str) -> Record | None:
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
                current, record, expect_revision=expect_revision, create_only=create_only
            )
            if current is not None:
                self._unindex(current)
            self._records[record.key] = replace(record, summary=summary)
            bisect.insort(self._newest, (-summary.saved_at, summary.key))
            bisect.insort(self._oldest, (summary.saved_at, summary.key))
            return summary

    def drop(self, key: str, *, expect_revision: int | None = None) -> bool:
        with self._lock:
            current = self.head(key)
            if current is None:
                if expect_revision is not None:
                    raise ConflictError(f"key {key!r} does not exist", key=key)
                return False
            if expect_revision is not None and current.revision != expect_revision:
                raise ConflictError(
                    f"key {key!r} is at revision {current.revision}, not {expect_revision}",
                    key=key,
                )
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
            for _, key in index[start:]:
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
        pass
