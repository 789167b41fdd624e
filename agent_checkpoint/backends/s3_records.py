"""The record objects of an S3 store, for ``S3Backend``: a record read whole with its segments
(those written last come from memory), a record's header and ETag (from its metadata or its
first bytes), and the header and ETag of the last write of each key, remembered so that the
next write over it needs no read.
"""

from __future__ import annotations

import base64
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from ..errors import BackendError
from .base import Record
from .objects import PEEK, Current, Layout, RecentSegments, extends, is_grave, segments_of
from .s3_bucket import NAME, Bucket
from .segments import assemble

READS = 32
"""Attempts to read a record while writers replace it (and delete its segments)."""

REMEMBERED = 256
"""Keys whose last write a backend remembers (header and ETag), to write again without a read."""


@dataclass(frozen=True)
class Known:
    """A record's header fields and ETag, as last written or read, and its inline history
    content (``None`` if the record holds some that was not read)."""

    fields: dict[str, Any]
    etag: str
    inline: bytes | None = b""

    @property
    def segments(self) -> list[list[Any]] | None:
        return segments_of(self.fields)

    def extends(self, revision: int, digest: str) -> bool:
        return extends(self.fields, revision, digest)


def inline_size(fields: dict[str, Any]) -> int:
    """How many of a record object's last bytes are inline history content (``"inl"``): the
    newest messages, which follow the content of every listed segment."""
    size = fields.get("inl")
    return size if isinstance(size, int) and size > 0 else 0


def cut(fields: dict[str, Any], body: bytes) -> tuple[bytes, bytes]:
    """A record object's bytes after its header line, as its head and its inline content."""
    size = inline_size(fields)
    return (body[:-size], body[-size:]) if size else (body, b"")


def pack(fields: dict[str, Any]) -> str:
    """Header fields as the ``ac`` metadata value that mirrors them."""
    return base64.urlsafe_b64encode(orjson.dumps(fields)).decode()


def unpack(packed: str) -> dict[str, Any]:
    fields: dict[str, Any] = orjson.loads(base64.urlsafe_b64decode(packed))
    return fields


class Records:
    """Reads of the records under ``layout`` in ``bucket``, and the memory of the last writes
    (``remember``, ``recall``, ``forget``) and of the segments written last (``recent``)."""

    def __init__(self, bucket: Bucket, layout: Layout, recent_bytes: int) -> None:
        self.bucket = bucket
        self.layout = layout
        self.recent = RecentSegments(recent_bytes)
        self._remembered: OrderedDict[str, Known] = OrderedDict()
        self._lock = threading.Lock()

    def load(self, name: str, operation: str) -> Record | None:
        path = self.layout.record_path(name)
        for _ in range(READS):
            got = self.bucket.get(path, operation)
            if got is None:
                return None
            data, etag = got
            fields, body = self.layout.split(data, path, operation)
            if is_grave(fields):
                return None
            record = Record(self.layout.current(fields, name, operation).summary, body)
            segs = segments_of(fields)
            if segs is None:
                return record
            head, inline = cut(fields, body)
            parts = self.read_segments(name, [sid for sid, _ in segs], operation)
            if all(part is not None for part in parts):
                held = [part for part in parts if part is not None]
                return Record(record.summary, assemble(head, [*held, inline]))
            # A segment is gone: a write that replaced this record since deletes the segments
            # it no longer refers to. If the record is still the one read, it was lost: the
            # head alone does not decode, so the record reads as unreadable, not as absent.
            again = self.known(name, operation)
            if again is not None and again.etag == etag:
                return record
            if again is None or is_grave(again.fields):
                return None
        raise BackendError(
            f"{NAME} record {name!r} changed under {READS} attempts to read it",
            backend=NAME,
            operation=operation,
        )

    def read_segments(self, name: str, sids: list[str], operation: str) -> list[bytes | None]:
        """The segments' bytes, in order (``None`` for one that is gone). Ids are never
        reused, so those this backend wrote and still holds come from memory; the others are
        fetched in parallel."""
        paths = [self.layout.segment_path(name, sid) for sid in sids]
        parts = [self.recent.get(path) for path in paths]
        unread = [i for i, part in enumerate(parts) if part is None]

        def fetch(i: int) -> bytes | None:
            got = self.bucket.get(paths[i], operation)
            return None if got is None else got[0]

        for i, part in zip(unread, self.bucket.map(fetch, unread, segments=True), strict=True):
            parts[i] = part
        return parts

    def fetch(self, name: str, operation: str) -> Current | None:
        """The live record's summary, token and ETag: from its metadata, else its header."""
        known = self.known(name, operation)
        if known is None or is_grave(known.fields):
            return None
        return self.layout.current(known.fields, name, operation, known.etag)

    def fetch_many(self, names: Sequence[str], operation: str) -> list[Current | None]:
        return self.bucket.map(lambda name: self.fetch(name, operation), names)

    def known(self, name: str, operation: str) -> Known | None:
        """The record's header fields and ETag: from its metadata (one HEAD), else from its
        header. Its inline content is not read."""
        got = self.bucket.head(self.layout.record_path(name), operation)
        if got is None:
            return None
        metadata, etag = got
        packed = metadata.get("ac")
        if packed is None:
            return self.header(name, operation)
        return Known(unpack(packed), etag, None)

    def header(self, name: str, operation: str, *, inline: bool = False) -> Known | None:
        """The record's header and ETag, read from the object itself: one ranged GET, which
        holds the whole of most records' heads. With ``inline``, its inline content too."""
        path = self.layout.record_path(name)
        got = self.bucket.get(path, operation, first=PEEK)
        whole = got is not None and len(got[0]) < PEEK
        if got is not None and not whole and b"\n" not in got[0]:
            got, whole = self.bucket.get(path, operation), True  # a header longer than the peek
        if got is None:
            return None
        fields, body = self.layout.split(got[0], path, operation)
        if whole or not inline_size(fields):
            return Known(fields, got[1], cut(fields, body)[1])
        if not inline:
            return Known(fields, got[1], None)
        got = self.bucket.get(path, operation)
        if got is None:
            return None
        fields, body = self.layout.split(got[0], path, operation)
        return Known(fields, got[1], cut(fields, body)[1])

    def remember(self, name: str, known: Known) -> None:
        with self._lock:
            self._remembered[name] = known
            self._remembered.move_to_end(name)
            while len(self._remembered) > REMEMBERED:
                self._remembered.popitem(last=False)

    def recall(self, name: str) -> Known | None:
        with self._lock:
            return self._remembered.get(name)

    def forget(self, name: str) -> None:
        with self._lock:
            self._remembered.pop(name, None)

    def delete_later(self, paths: Sequence[str]) -> None:
        """Delete objects no record refers to any more, in the background (``Bucket``)."""
        self.recent.discard(paths)
        self.bucket.delete_later(paths)
