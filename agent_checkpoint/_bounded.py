"""A thread-safe map of values newest used kept, within a byte budget and a count: the
segment layer keeps the pieces it wrote or read, and the layouts it committed or read, in
one each (``_segments.py``)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["Bounded"]

V = TypeVar("V")


class Bounded(Generic[V]):
    """At most ``limit`` bytes of values (as ``put`` sizes them) and ``count`` of them; the
    least recently used go first. A value over a quarter of ``limit`` is not kept: one must
    not push out everything else."""

    def __init__(self, limit: int, count: int | None = None) -> None:
        self.limit = limit
        self.count = count
        self._held: OrderedDict[str, tuple[V, int]] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def __contains__(self, key: str) -> bool:
        with self._lock:
            return key in self._held

    def get(self, key: str) -> V | None:
        with self._lock:
            held = self._held.get(key)
            if held is None:
                return None
            self._held.move_to_end(key)
            return held[0]

    def put(
        self, key: str, value: V, size: int, *, unless: Callable[[V], bool] | None = None
    ) -> None:
        """Keep ``value`` under ``key``, replacing what is there unless ``unless`` says so of
        it (checked under the same lock)."""
        if size > self.limit // 4:
            return
        with self._lock:
            held = self._held.get(key)
            if held is not None:
                if unless is not None and unless(held[0]):
                    return
                self._size -= held[1]
            self._held[key] = (value, size)
            self._held.move_to_end(key)
            self._size += size
            while self._size > self.limit or (
                self.count is not None and len(self._held) > self.count
            ):
                self._size -= self._held.popitem(last=False)[1][1]

    def pop(self, key: str) -> None:
        with self._lock:
            held = self._held.pop(key, None)
            if held is not None:
                self._size -= held[1]
