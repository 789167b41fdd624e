"""The record objects of an S3 store, for ``S3Backend``: a record read whole (with the segment
objects of one an earlier version stored in them), a record's header and ETag (from its
metadata or its first bytes), and the header and ETag of the last write (or single-key
load) of each key, remembered so that the next write over it needs no read.
"""

from __future__ import annotations

import base64
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from ._base import Record
from ._objects import PEEK, Current, Layout, is_grave
from ._s3_bucket import Bucket

READS = 32
"""Attempts to read a record in segment objects while writers replace it (and delete them)."""

REMEMBERED = 256
"""Keys whose last write a backend remembers (header and ETag), to write again without a read."""


@dataclass(frozen=True)
class Known:
    """A record's header fields and ETag, as last written or read."""

    fields: dict[str, Any]
    etag: str


def pack(fields: dict[str, Any]) -> str:
    """Header fields as the ``ac`` metadata value that mirrors them."""
    return base64.urlsafe_b64encode(orjson.dumps(fields)).decode()


def unpack(packed: str) -> dict[str, Any]:
    fields: dict[str, Any] = orjson.loads(base64.urlsafe_b64decode(packed))
    return fields


class Records:
    """Reads of the records under ``layout`` in ``bucket``, and the memory of the last writes
    (``remember``, ``recall``, ``forget``)."""

    def __init__(self, bucket: Bucket, layout: Layout) -> None:
        self.bucket = bucket
        self.layout = layout
        self._remembered: OrderedDict[str, Known] = OrderedDict()
        self._lock = threading.Lock()

    def load(self, name: str, operation: str, *, remember: bool = False) -> Record | None:
        """The record read whole; with ``remember``, its header and ETag are remembered as a
        write's are, so that a conditional write of it next (read, then write on the revision
        read) needs no read of its own."""
        got = self.loaded(name, operation)
        if got is None:
            return None
        if remember:
            self.remember(name, got[0])
        return got[1]

    def loaded(self, name: str, operation: str) -> tuple[Known, Record | None] | None:
        """The record read whole, with the header and ETag of the object read (the record
        ``None``: a tombstone, or gone while its segment objects were read); ``None`` if
        there is no object."""
        read: list[Known] = []

        def get_all(paths: list[str]) -> list[bytes | None]:
            parts = self.bucket.map(lambda p: self.bucket.get(p, operation), paths, nested=True)
            return [part[0] if part is not None else None for part in parts]

        def still(_: dict[str, Any], etag: str) -> bool | None:
            again = self.known(name, operation)
            if again is None or is_grave(again.fields):
                return None
            return again.etag == etag

        record = self.layout.load(
            name,
            operation,
            get=lambda path: self.bucket.get(path, operation),
            get_all=get_all,
            still=still,
            tries=READS,
            seen=lambda fields, etag: read.append(Known(fields, etag)),
        )
        return (read[-1], record) if read else None

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
        header."""
        got = self.bucket.head(self.layout.record_path(name), operation)
        if got is None:
            return None
        metadata, etag = got
        packed = metadata.get("ac")
        return Known(unpack(packed), etag) if packed is not None else self.header(name, operation)

    def header(self, name: str, operation: str) -> Known | None:
        """The record's header and ETag, read from the object itself: one ranged GET, which
        holds the whole of most records' heads."""
        path = self.layout.record_path(name)
        got = self.bucket.get(path, operation, first=PEEK)
        if got is not None and len(got[0]) >= PEEK and b"\n" not in got[0]:
            got = self.bucket.get(path, operation)  # a header longer than the peek
        if got is None:
            return None
        return Known(self.layout.split(got[0], path, operation)[0], got[1])

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
        self.bucket.delete_later(paths)
