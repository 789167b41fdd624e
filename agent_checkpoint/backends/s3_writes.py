"""How the S3 backend writes a record (``s3_reads.py`` reads and lists, ``s3.py`` verifies): the
conditional PUT that commits it, the segment objects a growing history adds (and the merges that
keep their number under ``max_segments``), and the clean-up of what a write leaves behind (the
background deletes of ``S3Cleanup``).

A write uploads its index entry and its new segments first, then PUTs the record with
``If-Match`` (or ``If-None-Match: *``), the commit point: a committed record never misses its
entry or a segment. What the commit supersedes (the previous entry, segments no longer
referred to) is deleted afterwards, off the write's path.
"""

from __future__ import annotations

import base64
import secrets
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from botocore.exceptions import BotoCoreError, ClientError

from .base import Summary
from .objects import HASHED, RecentSegments, extends, fields_of, segments_of

if TYPE_CHECKING:
    from .s3 import S3Backend

META_LIMIT = 1800  # AWS caps user metadata at 2 KB; a longer header is read from the body
RACES = 32
RACE_CODES = frozenset({"PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey"})


@dataclass(frozen=True)
class Known:
    """A record's header fields and ETag, as last written or read."""

    fields: dict[str, Any]
    etag: str

    @property
    def segments(self) -> list[list[Any]] | None:
        return segments_of(self.fields)

    def extends(self, revision: int, digest: str) -> bool:
        return extends(self.fields, revision, digest)


def error_status(exc: ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def missing(exc: ClientError) -> bool:
    return error_status(exc) == 404 and error_code(exc) != "NoSuchBucket"


def lost_race(exc: ClientError) -> bool:
    # If-Match on a key deleted meanwhile: SeaweedFS answers 412, AWS and moto 404
    return error_code(exc) in RACE_CODES or (
        error_status(exc) in (404, 412) and error_code(exc) != "NoSuchBucket"
    )


class Write:
    """One write of a record: the segment objects it uploads (unreferenced until its record
    commits), its conditional PUT of the record, and the clean-up either way. Objects it
    uploaded are deleted again unless the record committed or the PUT's outcome is unknown
    (a transient fault: ``verify(repair=True)`` removes them if it did not land)."""

    def __init__(self, backend: S3Backend, name: str) -> None:
        self.backend = backend
        self.name = name
        self.pending: list[tuple[str, bytes]] = []  # uploaded with the next commit
        self.uploaded: dict[str, bytes] = {}
        self.owned: list[str] = []
        self.merged: list[str] = []
        self.settled = True  # False while a record PUT's outcome is unknown
        self.committed = False

    def upload(self, data: bytes, *, merged: bool = False) -> str:
        """A new segment object's id; it is uploaded with the next commit's index entry."""
        sid = secrets.token_hex(8)
        self.pending.append((sid, data))
        self.uploaded[sid] = data
        self.owned.append(sid)
        if merged:
            self.merged.append(sid)
        return sid

    def commit(
        self,
        key: str,
        summary: Summary,
        head: bytes,
        extra: dict[str, Any],
        current: Known | None,
    ) -> bool:
        """PUT the record over ``current`` (``If-Match``) or as new (``If-None-Match``);
        ``False`` if the condition failed, nothing then referring to this attempt's objects."""
        b, name = self.backend, self.name
        token = secrets.token_hex(8)
        entry = b._entry_path(summary, name, token)
        fields = {"key": key, **fields_of(summary, token), **extra}
        body = orjson.dumps(fields) + b"\n" + head
        mirrored = fields_of(summary, token) | ({"key": key} if HASHED in name else {})
        if "segs" in extra:
            mirrored["seg"] = len(extra["segs"])
        packed = base64.urlsafe_b64encode(orjson.dumps(mirrored)).decode()
        metadata = {"ac": packed} if len(packed) <= META_LIMIT else {}
        condition = {"IfMatch": f'"{current.etag}"'} if current else {"IfNoneMatch": "*"}
        # the entry and the segments go first: a committed record never misses either
        puts = [(entry, b"")] + [(b._segment_path(name, sid), data) for sid, data in self.pending]
        with b._translate("save"):
            b._map(lambda put: b.client.put_object(Bucket=b.bucket, Key=put[0], Body=put[1]),
                   puts)  # fmt: skip
            self.pending = []
            self.settled = False
            try:
                response = b.client.put_object(Bucket=b.bucket, Key=b._records + name, Body=body,
                                               Metadata=metadata, **condition)  # fmt: skip
            except ClientError as exc:
                if not lost_race(exc):
                    raise
                self.settled = True
                b._forget_known(name)
                b._forget([entry])  # its token was never committed: no one else uses it
                return False
        self.settled = self.committed = True
        etag = str(response.get("ETag", "")).strip('"')
        if etag:
            b._remember(name, Known(fields, etag))
        else:
            b._forget_known(name)
        kept = {sid for sid, _ in extra.get("segs", [])}
        for sid in kept & self.uploaded.keys():
            b._recent.add(b._segment_path(name, sid), self.uploaded[sid])
        b._forget(b._superseded(name, current.fields if current else None, kept))
        return True

    def discard_merged(self) -> None:
        """Delete the merged segments of an attempt that lost its race."""
        if self.merged and self.settled:
            gone, self.merged = set(self.merged), []
            self.owned = [sid for sid in self.owned if sid not in gone]
            self.backend._forget([self.backend._segment_path(self.name, sid) for sid in gone])

    def close(self) -> None:
        if not self.committed and self.settled and self.owned:
            paths = [self.backend._segment_path(self.name, sid) for sid in self.owned]
            self.backend._forget(paths)


class S3Cleanup:
    """The deletes of an ``S3Backend``, which sets up ``_janitor``, ``_cleaning`` and the
    rest: what writes leave behind, deleted on a background thread, and deletes in bulk."""

    client: Any
    bucket: str
    _lock: threading.Lock
    _closed: bool
    _janitor: ThreadPoolExecutor | None
    _cleaning: set[Future[None]]
    _recent: RecentSegments
    _siblings: dict[str, S3Backend]

    def flush(self) -> None:
        """Wait for the deletes that earlier writes left to the background (the index entries
        and segments a commit superseded, a lost attempt's uploads); ``close`` waits too."""
        with self._lock:
            pending, siblings = list(self._cleaning), list(self._siblings.values())
        wait(pending)
        for sibling in siblings:
            sibling.flush()

    def _forget(self, paths: Sequence[str]) -> None:
        """Delete objects no record refers to any more (index entries and segments a commit
        superseded, or a lost attempt's uploads) on a background thread, so that the write
        returns without waiting for it: one round trip less on every put that replaces a
        record. Best effort: listing skips a leftover entry (its token is not the record's),
        no record refers to a leftover segment, and ``verify(repair=True)`` removes both."""
        if not paths:
            return
        paths = list(paths)
        self._recent.discard(paths)
        done: Future[None] | None = None
        with self._lock:
            if not self._closed:
                if self._janitor is None:
                    self._janitor = ThreadPoolExecutor(
                        1, thread_name_prefix="agent-checkpoint-s3-cleanup"
                    )
                done = self._janitor.submit(self._delete_quietly, paths)
                self._cleaning.add(done)
        if done is None:  # closed: nothing runs in the background any more
            self._delete_quietly(paths)
        else:
            done.add_done_callback(self._cleaned)  # outside the lock: it may run right here

    def _cleaned(self, done: Future[None]) -> None:
        with self._lock:
            self._cleaning.discard(done)

    def _delete_quietly(self, paths: Sequence[str]) -> None:
        with suppress(ClientError, BotoCoreError):
            self._delete_many(paths)

    def _delete_many(self, paths: Sequence[str]) -> None:
        if len(paths) == 1:
            self.client.delete_object(Bucket=self.bucket, Key=paths[0])
        elif paths:
            objects = [{"Key": path} for path in paths]
            self.client.delete_objects(
                Bucket=self.bucket, Delete={"Objects": objects, "Quiet": True}
            )
