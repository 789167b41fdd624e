"""What an ``AgentCheckpointSaver`` knows of the threads it read and wrote (``Known``): the
lineage each thread's next put extends, the checkpoints the graph asked for by id (a step
from one may branch the thread) and the threads read empty (a run's first put checks them).
Bounded, least recently used first out; one lock, never held across I/O."""

from __future__ import annotations

import threading
from collections import OrderedDict

from agent_checkpoint import Record

from ._langgraph_lineage import Lineage
from ._langgraph_records import Key

__all__ = ["Known"]

_ASKED = 4096  # checkpoints read by id (time travel) a saver remembers
_EMPTY_READS = 16384  # threads a saver remembers reading empty (a run's first put checks it)


class Known:
    """A saver's knowledge of its threads, shared by its sync and async methods."""

    __slots__ = ("_asked", "_capacity", "_empty", "_lineages", "_lock")

    def __init__(self, capacity: int) -> None:
        self._lock = threading.Lock()
        self._lineages: OrderedDict[Key, Lineage] = OrderedDict()
        self._asked: OrderedDict[tuple[Key, str], None] = OrderedDict()
        self._empty: OrderedDict[Key, None] = OrderedDict()
        self._capacity = capacity

    def lineage(self, thread: Key) -> Lineage | None:
        with self._lock:
            return self._lineages.get(thread)

    def noticed(self, thread: Key, record: Record) -> Lineage | None:
        """What this saver knows of the thread, if it is that lineage at that revision. A
        newer write seen (another writer's) makes it forget what it knew: its next put reads
        the thread again, and continues it where the graph now is."""
        known = self.lineage(thread)
        if known is None:
            return None
        if known.key == record.key:
            if known.revision == record.summary.revision:
                return known
            self.forget(thread)
        elif record.summary.run_id > (known.latest or ""):
            self.forget(thread)
        return None

    def remember(self, thread: Key, lineage: Lineage) -> None:
        with self._lock:
            self._lineages[thread] = lineage
            self._lineages.move_to_end(thread)
            while len(self._lineages) > self._capacity:
                self._lineages.popitem(last=False)

    def forget(self, thread: Key) -> None:
        with self._lock:
            self._lineages.pop(thread, None)

    def forget_thread(self, thread_id: str) -> None:
        with self._lock:
            for known in [t for t in self._lineages if t.thread == thread_id]:
                del self._lineages[known]

    def forget_all(self) -> None:
        with self._lock:
            self._lineages.clear()

    def ask(self, thread: Key, checkpoint_id: str) -> None:
        with self._lock:
            self._asked[(thread, checkpoint_id)] = None
            self._asked.move_to_end((thread, checkpoint_id))
            while len(self._asked) > _ASKED:
                self._asked.popitem(last=False)

    def was_asked(self, thread: Key, checkpoint_id: str) -> bool:
        with self._lock:
            return (thread, checkpoint_id) in self._asked

    def saw_empty(self, thread: Key) -> None:
        """Remember that the thread was read with no checkpoint: a put with no parent is then
        a run starting it, refused once another run has. Not forgotten at a later read: two
        runs through this saver may both have read it empty."""
        with self._lock:
            self._empty[thread] = None
            self._empty.move_to_end(thread)
            while len(self._empty) > _EMPTY_READS:
                self._empty.popitem(last=False)

    def read_empty(self, thread: Key) -> bool:
        with self._lock:
            return thread in self._empty
