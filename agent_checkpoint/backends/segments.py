"""History stored in segments: the optional ``Appending`` capability.

An agent that checkpoints after every iteration writes a history that only grows. A backend
with this capability keeps a record as a *head* (the envelope with the history array's contents
cut out at a NUL byte, which JSON text never contains) and a list of *segments* (pieces of the
history array's contents, messages joined by commas). A put that extends the previous revision
then writes only the new messages and the new head, so checkpointing N messages one by one
costs O(N) bytes and time in total, not O(N^2).

The extension is proven, not assumed: each stored record carries ``digest``, a hash chain over
its segments (``chain``), and ``append`` applies only when the stored revision and digest are
the ones the writer extended; otherwise it changes nothing and returns ``None``, and the writer
falls back to a full write. ``load`` always returns the assembled bytes, identical to what a
full write would have stored, so readers, ``copy``, ``migrate`` and the CLI never see segments.

A backend that keeps segments as separate pieces (list elements, rows) declares
``max_segments``: an append that would exceed it first merges the stored segments into one on
the server, in the same atomic step, so a growing history never goes back through the client
and a read fetches at most ``max_segments`` pieces. The disk backend appends to one data file
and has no such limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol, runtime_checkable

import xxhash

from ..codec import GAP
from .base import Record, Summary, plan_save

__all__ = [
    "GAP",
    "Appending",
    "Collecting",
    "Split",
    "assemble",
    "chain",
    "merge",
    "merge_start",
    "plan_append",
    "plan_split",
]


@dataclass(frozen=True, slots=True)
class Split:
    """A record in pieces: ``head`` holds one ``GAP``; ``segment`` is history content written
    now; ``digest`` is the chain over every stored segment, this one included."""

    head: bytes
    segment: bytes
    digest: str


def chain(previous: str, segment: bytes) -> str:
    """The digest after appending ``segment`` to a record whose digest was ``previous``."""
    h = xxhash.xxh3_128(previous.encode())
    h.update(b"|")
    h.update(segment)
    return h.hexdigest()


def merge(segments: list[bytes]) -> bytes:
    """Segments joined into one: the history array's contents they hold, in order."""
    return b",".join(s for s in segments if s)


def merge_start(sizes: Sequence[int], limit: int) -> int:
    """Where the segments to merge start, for a record holding ``sizes`` (oldest first) that
    must make room for one more under ``limit``: the newest run of at least two segments, each
    earlier segment joining it while it is no larger than the run so far. A history grown one
    message at a time then holds segments whose sizes grow geometrically towards the oldest,
    so a byte is merged again only when the run has caught up with it, and the segment
    count stays under the limit without rewriting the whole history on every merge."""
    start = max(min(len(sizes), limit) - 2, 0)
    run = sum(sizes[start:])
    while start > 0 and sizes[start - 1] <= run:
        start -= 1
        run += sizes[start]
    return start


def assemble(head: bytes, segments: list[bytes]) -> bytes:
    """The record's bytes: the head with the non-empty segments joined into its gap."""
    before, _, after = head.partition(GAP)
    return before + merge(segments) + after


def plan_split(
    current: Summary | None,
    record: Record,
    *,
    expect_revision: int | None,
    create_only: bool,
    revision: int | None = None,
) -> Summary:
    """``plan_save`` for ``save_split``, whose ``record.body`` is empty: the assembled bytes are
    never built for a split write, and ``record.summary.size`` is their size."""
    planned = plan_save(
        current,
        record,
        expect_revision=expect_revision,
        create_only=create_only,
        revision=revision,
    )
    return replace(planned, size=record.summary.size)


def plan_append(
    current: Summary | None, summary: Summary, *, base_revision: int, revision: int | None = None
) -> Summary:
    """``plan_save``'s rules for an append over ``base_revision``; ``summary.size`` is kept."""
    planned = plan_save(
        current,
        Record(summary, b""),
        expect_revision=base_revision,
        create_only=False,
        revision=revision,
    )
    return replace(planned, size=summary.size)


@runtime_checkable
class Appending(Protocol):
    """Optional: records stored as a head plus history segments (see the module docstring)."""

    def save_split(
        self,
        record: Record,
        split: Split,
        *,
        expect_revision: int | None = None,
        create_only: bool = False,
    ) -> Summary:
        """``save``, storing ``split`` as the record's head and only segment. ``record.body`` is
        empty: ``record.summary.size`` is the size of the assembled bytes (``plan_split``)."""
        ...

    def append(
        self, summary: Summary, split: Split, *, base_revision: int, base_digest: str
    ) -> Summary | None:
        """Atomically, if the stored record is at ``base_revision`` with ``base_digest``: apply
        ``plan_append``, replace the head, append ``split.segment`` (merging the stored
        segments first where a ``max_segments`` limit requires it) and store ``split.digest``.
        Otherwise change nothing and return ``None``: a refused append means another write
        came between, never that the record holds too many segments. ``summary.size`` is the
        assembled size after the append."""
        ...


@runtime_checkable
class Collecting(Protocol):
    """Optional: segments kept as objects of their own, which a writer that died between
    uploading a segment and committing its record leaves behind, referenced by no record."""

    def collect_orphans(self, *, delete: bool = False, grace: float = 300.0) -> int:
        """How many segment objects older than ``grace`` seconds no record refers to; with
        ``delete``, remove them. Younger ones may belong to a write still in flight."""
        ...
