"""How the S3 backend reads (``s3.py`` holds the backend, ``s3_writes.py`` its writes): a
record with its segments (those it wrote last from memory), a record's header and ETag (from
its metadata or its first bytes), the headers of its own last writes it remembers, and the
listing of the index and of a prefix.
"""

from __future__ import annotations

import base64
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime

import orjson
from botocore.exceptions import ClientError

from ..errors import BackendError
from .base import Record
from .objects import PEEK, Current, Entry, ObjectLayout, RecentSegments, is_grave, segments_of
from .s3_bucket import PAGE, S3Bucket
from .s3_writes import RACES, Known, missing
from .segments import assemble

REMEMBERED = 256
"""Keys whose last write a backend object remembers (header and ETag), to append without a read."""


class S3Reads(ObjectLayout, S3Bucket):
    """The reads of an ``S3Backend``, which sets up ``_remembered`` and ``_recent``."""

    _remembered: OrderedDict[str, Known]
    _recent: RecentSegments

    def _load(self, name: str, operation: str) -> Record | None:
        path = self._records + name
        for _ in range(RACES):
            got = self._get(path, operation)
            if got is None:
                return None
            data, etag = got
            fields, body = self._split(data, path, operation)
            if is_grave(fields):
                return None
            record = Record(self._current(fields, name, operation).summary, body)
            segs = segments_of(fields)
            if segs is None:
                return record
            parts = self._read_segments(name, [sid for sid, _ in segs], operation)
            if all(part is not None for part in parts):
                return Record(record.summary, assemble(body, [p for p in parts if p is not None]))
            # A segment is gone: a write that replaced this record since deletes the segments
            # it no longer refers to. If the record is still the one read, it was lost: the
            # head alone does not decode, so the record reads as unreadable, not as absent.
            again = self._known(name, operation)
            if again is not None and again.etag == etag:
                return record
            if again is None or is_grave(again.fields):
                return None
        raise BackendError(
            f"{self.name} record {name!r} changed under {RACES} attempts to read it",
            backend=self.name,
            operation=operation,
        )

    def _get(self, path: str, operation: str, first: int = 0) -> tuple[bytes, str] | None:
        """The object's bytes (its first ``first`` bytes, if given) and ETag; ``None`` if it
        does not exist."""
        ranged = {"Range": f"bytes=0-{first - 1}"} if first else {}
        with self._translate(operation):
            try:
                response = self.client.get_object(Bucket=self.bucket, Key=path, **ranged)
                return response["Body"].read(), response["ETag"].strip('"')
            except ClientError as exc:
                if missing(exc):
                    return None
                raise

    def _read_segments(self, name: str, sids: list[str], operation: str) -> list[bytes | None]:
        """The segments' bytes, in order (``None`` for one that is gone). Ids are never
        reused, so those this backend wrote and still holds come from memory; the others are
        fetched in parallel."""
        parts = [self._recent.get(self._segment_path(name, sid)) for sid in sids]
        unread = [i for i, part in enumerate(parts) if part is None]
        fetched = self._map(
            lambda i: self._get_segment(name, sids[i], operation), unread, segments=True
        )
        for i, part in zip(unread, fetched, strict=True):
            parts[i] = part
        return parts

    def _get_segment(self, name: str, sid: str, operation: str) -> bytes | None:
        got = self._get(self._segment_path(name, sid), operation)
        return None if got is None else got[0]

    def _fetch(self, name: str, operation: str) -> Current | None:
        """The record's summary, token and ETag: from its metadata, else from its header."""
        known = self._known(name, operation)
        if known is None or is_grave(known.fields):
            return None
        return self._current(known.fields, name, operation, known.etag)

    def _known(self, name: str, operation: str, segments: bool = False) -> Known | None:
        """The record's header fields and ETag: from its metadata (one HEAD), else (or, with
        ``segments``, for a split record) from its header."""
        path = self._records + name
        with self._translate(operation):
            try:
                response = self.client.head_object(Bucket=self.bucket, Key=path)
            except ClientError as exc:
                if missing(exc):
                    return None
                raise
        packed = response.get("Metadata", {}).get("ac")
        if packed is not None:
            fields = orjson.loads(base64.urlsafe_b64decode(packed))
            if not (segments and "seg" in fields):
                return Known(fields, response["ETag"].strip('"'))
        return self._read_header(name, operation)

    def _read_header(self, name: str, operation: str) -> Known | None:
        """The record's header and ETag, read from the object itself: usually one ranged GET."""
        path = self._records + name
        got = self._get(path, operation, first=PEEK)
        if got is not None and b"\n" not in got[0] and len(got[0]) >= PEEK:
            got = self._get(path, operation)  # a header longer than the peek: read it whole
        if got is None:
            return None
        return Known(self._split(got[0], path, operation)[0], got[1])

    def _remember(self, name: str, known: Known) -> None:
        with self._lock:
            self._remembered[name] = known
            self._remembered.move_to_end(name)
            while len(self._remembered) > REMEMBERED:
                self._remembered.popitem(last=False)

    def _recall(self, name: str) -> Known | None:
        with self._lock:
            return self._remembered.get(name)

    def _forget_known(self, name: str) -> None:
        with self._lock:
            self._remembered.pop(name, None)

    def _fetch_many(self, names: Sequence[str], operation: str) -> list[Current | None]:
        return self._map(lambda name: self._fetch(name, operation), names)

    def _entries(self, start: str) -> Iterator[Entry]:
        start_after = self._index + start
        while True:
            with self._translate("scan"):
                response = self.client.list_objects_v2(
                    Bucket=self.bucket, Prefix=self._index, StartAfter=start_after, MaxKeys=PAGE
                )
            contents = response.get("Contents", [])
            for item in contents:
                entry = self._parse(item["Key"][len(self._index) :])
                if entry is not None:
                    yield entry
            if not contents or not response.get("IsTruncated"):
                return
            start_after = contents[-1]["Key"]

    def _list_all(self, prefix: str) -> tuple[list[tuple[str, datetime]], datetime]:
        """Every object under ``prefix`` with its LastModified, and the server's clock."""
        found: list[tuple[str, datetime]] = []
        now = datetime.now(timezone.utc)
        with self._translate("verify"):
            paginator = self.client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
                date = page.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
                now = parsedate_to_datetime(date) if date else now
                found.extend(
                    (item["Key"], item["LastModified"]) for item in page.get("Contents", [])
                )
        return found, now
