"""The byte format of a history kept in pieces (the segment layer, ``_segments.py``, writes
and reads it; the appender and the growth tests build on ``chain`` and ``assemble``).

A record whose history is stored in pieces is a *layout record*: its body starts with
``MAGIC`` (a NUL byte: no JSON text or sealed container starts with one), then one line of
manifest, then the envelope's head (the history array's contents cut out at ``GAP``), then the
newest history content kept *inline*::

    \\0ACS1\\n{"s":[["<id>",<size>],...],"d":"<digest>","h":<head length>}\\n<head><inline>

Older history content lives in *pieces*: immutable records in the backend's ``segments``
namespace under ``<key>#<id>``. Pieces written one after another and never merged form a
*run*, named ``<run>.0``, ``<run>.1``, ...: the manifest then says ``"r":["<run>",<count>]``
instead of listing them (``"s"``), so it stays a few bytes however long the history grows (a
reader before this form finds no ``"s"`` and reports the record unreadable, never wrong). The assembled bytes are the head with the pieces' contents and
then the inline content joined into its gap, byte for byte what a full write stores.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

import orjson
import xxhash

from ._codec import GAP

__all__ = ["MAGIC", "Chunk", "Layout", "Split", "assemble", "chain", "merge", "merge_start"]

MAGIC = b"\x00ACS1\n"

Chunk = bytes | memoryview
"""History content: bytes, or a view into a record's body (never copied until assembled)."""


# Immutable values made on every put, as named tuples: a third of a frozen dataclass's cost.
class Split(NamedTuple):
    """A record in pieces: ``head`` holds one ``GAP``; ``segment`` is history content written
    now; ``digest`` is the chain over every stored segment, this one included."""

    head: bytes
    segment: Chunk
    digest: str


def chain(previous: str, segment: Chunk) -> str:
    """The digest after appending ``segment`` to a record whose digest was ``previous``."""
    h = xxhash.xxh3_128(previous.encode())
    h.update(b"|")
    h.update(segment)
    return h.hexdigest()


def merge(segments: Sequence[Chunk]) -> bytes:
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


def assemble(head: bytes, segments: Iterable[Chunk]) -> bytes:
    """The record's bytes: the head with the non-empty segments joined into its gap, copied
    once (a history may be megabytes)."""
    before, _, after = head.partition(GAP)
    parts: list[Chunk] = [before]
    for segment in segments:
        if segment:
            parts += (b",", segment) if len(parts) > 1 else (segment,)
    parts.append(after)
    return b"".join(parts)


class Layout(NamedTuple):
    """A layout record's parts: ``pieces`` as ``(id, size)`` oldest first, ``head`` with one
    ``GAP``, ``inline`` the newest history content, ``digest`` the chain over the history;
    ``run``, when not empty, says the pieces are ``<run>.0`` to ``<run>.<count - 1>``, stored
    without their sizes (0 here)."""

    pieces: tuple[tuple[str, int], ...]
    head: bytes
    inline: Chunk
    digest: str
    run: str = ""

    def pack(self) -> bytes:
        listed: dict[str, object] = (
            {"r": [self.run, len(self.pieces)]}
            if self.run
            else {"s": [list(p) for p in self.pieces]}
        )
        manifest = orjson.dumps({**listed, "d": self.digest, "h": len(self.head)})
        return b"".join((MAGIC, manifest, b"\n", self.head, self.inline))

    def grown(self, keep: int, size: int, *, fresh: str, as_run: bool) -> tuple[Layout, str]:
        """This layout with its pieces from ``keep`` on and its inline content merged into one
        new piece of ``size`` bytes (the caller writes it), and that piece's id. ``as_run``:
        the next piece of the run, or the first of a new run ``fresh`` names when no piece is
        kept; otherwise (or when kept pieces are not a whole run) the piece ``fresh``."""
        kept = self.pieces[:keep]
        if not as_run or (kept and not (self.run and keep == len(self.pieces))):
            return Layout((*kept, (fresh, size)), self.head, b"", self.digest), fresh
        run = self.run if kept else fresh
        piece = f"{run}.{keep}"
        return Layout((*kept, (piece, size)), self.head, b"", self.digest, run), piece

    @staticmethod
    def unpack(body: bytes) -> Layout | None:
        """The layout of ``body``; ``None`` for a plain record (or bytes that only start like
        a layout record: the codec then reports them unreadable)."""
        if not body.startswith(MAGIC):
            return None
        end = body.find(b"\n", len(MAGIC))
        if end < 0:
            return None
        try:
            manifest = orjson.loads(body[len(MAGIC) : end])
            if "r" in manifest:
                run, count = str(manifest["r"][0]), int(manifest["r"][1])
                pieces = tuple((f"{run}.{i}", 0) for i in range(count))
            else:
                run, pieces = "", tuple((str(i), int(n)) for i, n in manifest["s"])
            start, cut = end + 1, int(manifest["h"])
            digest = str(manifest["d"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, IndexError):
            return None
        head = body[start : start + cut]
        if not 0 <= cut <= len(body) - start or head.count(GAP) != 1:
            return None
        # not copied: the inline part may be megabytes, and assembling copies it once
        return Layout(pieces, head, memoryview(body)[start + cut :], digest, run)

    def assemble(self, contents: Iterable[Chunk]) -> bytes:
        """The record's bytes: the pieces' ``contents``, then the inline content."""
        return assemble(self.head, (*contents, self.inline))
