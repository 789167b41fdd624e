"""S3 and S3-compatible servers on boto3, in the object layout described in ``fsspec.py``.

Where the fsspec backend takes a lock, this one uses S3's conditional writes, so they hold
between processes: a save reads the record (HEAD), writes its new index entry, PUTs the record
with ``If-None-Match: *`` (new key) or ``If-Match: <etag>`` (the commit point), then hands
the previous entry (and any segment no longer referred to) to a background thread to delete
(``flush`` waits for it, and so do ``close`` and ``verify``); a lost condition (412, or 404 where AWS answers that for a key deleted
meanwhile) re-reads and plans again, so the refusal is the right one (revision or owner). The
header's write token makes every write's ETag unique, so ``If-Match`` compares writes, not
contents. The header is mirrored into object metadata (when it fits AWS's 2 KB), so ``head``
is one HEAD request, and listing a page is one LIST plus a HEAD per entry, in parallel, to
keep only entries whose record still carries their token. Drop is conditional (``If-Match``)
only under ``expect_revision``.

``verify(repair=True)`` leaves entries younger than ``grace`` seconds alone: they may belong
to a save in flight, whose entry is written before its record.
"""

from __future__ import annotations

import base64
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager, suppress
from datetime import datetime, timedelta, timezone
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlsplit

import boto3
import orjson
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError, IncompleteReadError
from botocore.exceptions import ConnectionError as BotoConnectionError

from ..errors import BackendError, BackendUnavailableError, ConflictError, InvalidKeyError
from .base import Query, Record, Summary, plan_save, translate_errors
from .objects import PEEK, Current, Entry, ObjectLayout, key_name, segments_of
from .s3_writes import (
    RACES,
    Known,
    RecentSegments,
    Write,
    error_code,
    error_status,
    lost_race,
    missing,
)
from .segments import Split, assemble, merge, merge_start, plan_append, plan_split

T = TypeVar("T")
R = TypeVar("R")

PAGE = 1000
TRANSIENT = (BotoConnectionError, HTTPClientError, IncompleteReadError)
THROTTLED = frozenset(
    {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "RequestLimitExceeded"}
    | {"TooManyRequests", "ServiceUnavailable", "InternalError"}
)
REMEMBERED = 256
"""Keys whose last write a backend object remembers (header and ETag), to append without a read."""


class S3Backend(ObjectLayout):
    name = "s3"
    conditional_writes_across_processes = True
    max_segments = 32
    recent_segment_bytes = 4 << 20
    """How many bytes of the segments it wrote last a backend keeps, so that merging them
    (once a record holds ``max_segments``) needs no read."""

    def __init__(
        self,
        client: Any,
        bucket: str,
        prefix: str = "",
        *,
        create_bucket: bool = False,
        owns_client: bool = False,
        region: str | None = None,
    ) -> None:
        parts = [part for part in prefix.split("/") if part]
        if any(part in (".", "..") for part in parts) or len(prefix.encode()) > 512:
            raise InvalidKeyError(f"unusable s3 prefix {prefix!r}")
        self.client = client
        self.bucket = bucket
        self.prefix = "/".join(parts)
        root = self.prefix + "/" if parts else ""
        self._records = root + "records/"
        self._index = root + "index/"
        self._segments = root + "segments/"
        self._create = create_bucket
        self._owns = owns_client
        self._region = region
        self._bucket_checked = False
        self._bucket_lock = threading.Lock()
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._segment_threads: ThreadPoolExecutor | None = None
        self._janitor: ThreadPoolExecutor | None = None  # deletes what writes left behind
        self._cleaning: set[Future[None]] = set()
        self._recent = RecentSegments(self.recent_segment_bytes)
        self._remembered: OrderedDict[str, Known] = OrderedDict()
        self._siblings: dict[str, S3Backend] = {}
        self._closed = False

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        client: Any = None,
        endpoint_url: str | None = None,
        region: str | None = None,
        profile: str | None = None,
        create_bucket: bool = False,
    ) -> S3Backend:
        parts = urlsplit(url)
        if parts.scheme != "s3" or not parts.netloc:
            raise InvalidKeyError(f"an S3 store URL looks like s3://bucket/prefix, not {url!r}")
        params = dict(parse_qsl(parts.query))
        unknown = set(params) - {"endpoint_url", "region", "profile", "create_bucket"}
        if unknown:
            raise InvalidKeyError(f"unknown s3 URL parameters: {', '.join(sorted(unknown))}")
        region = region or params.get("region")
        create_bucket = create_bucket or params.get("create_bucket", "").lower() in ("1", "true")
        if client is not None:
            return cls(client, parts.netloc, parts.path, create_bucket=create_bucket, region=region)
        endpoint_url = endpoint_url or params.get("endpoint_url")
        config = Config(
            # the Store's retry policy governs; botocore's own retries would hide faults
            retries={"mode": "standard", "total_max_attempts": 1},
            connect_timeout=5,
            read_timeout=20,  # losing conditional racers may wait seconds for their 412
            max_pool_connections=32,
            s3={"addressing_style": "path"} if endpoint_url else None,
        )
        with translate_errors(cls.name, "open", transient=TRANSIENT, fatal=(BotoCoreError,)):
            session = boto3.session.Session(profile_name=profile or params.get("profile"))
            made = session.client(
                "s3", endpoint_url=endpoint_url, region_name=region, config=config
            )
        return cls(made, parts.netloc, parts.path, create_bucket=create_bucket, region=region,
                   owns_client=True)  # fmt: skip

    def load(self, key: str) -> Record | None:
        self._check_bucket("load")
        return self._load(key_name(key), "load")

    def head(self, key: str) -> Summary | None:
        self._check_bucket("head")
        current = self._fetch(key_name(key), "head")
        return current.summary if current is not None else None

    def _save(
        self,
        record: Record,
        split: Split | None,
        expect_revision: int | None,
        create_only: bool,
    ) -> Summary:
        self._check_bucket("save")
        key, name = record.key, key_name(record.key)
        write = Write(self, name)
        try:
            segs: list[list[Any]] = []
            if split is not None and split.segment:
                segs = [[write.upload(split.segment), len(split.segment)]]
            for attempt in range(RACES):
                # If-None-Match refuses an existing key by itself: a create needs no read first
                current = None if create_only and attempt == 0 else self._known(name, "save", True)
                summary = (plan_save if split is None else plan_split)(
                    self._summary_of(current.fields if current else None, name, "save"),
                    record,
                    expect_revision=expect_revision,
                    create_only=create_only,
                )
                if split is None:
                    landed = write.commit(key, summary, record.body, {}, current)
                else:
                    extra = {"dig": split.digest, "segs": segs}
                    landed = write.commit(key, summary, split.head, extra, current)
                if landed:
                    return summary
        finally:
            write.close()
        raise ConflictError(f"key {key!r} changed under {RACES} attempts to write it", key=key)

    def append(
        self, summary: Summary, split: Split, *, base_revision: int, base_digest: str
    ) -> Summary | None:
        self._check_bucket("append")
        name = key_name(summary.key)
        current = self._recall(name)
        if current is None or not current.extends(base_revision, base_digest):
            current = self._read_header(name, "append")
        write = Write(self, name)
        try:
            new: list[list[Any]] = []
            if split.segment:
                new = [[write.upload(split.segment), len(split.segment)]]
            for _ in range(RACES):
                if current is None or not current.extends(base_revision, base_digest):
                    return None
                planned = plan_append(
                    self._summary_of(current.fields, name, "append"),
                    summary,
                    base_revision=base_revision,
                )
                segs = list(current.segments or [])
                if new and len(segs) + 1 > self.max_segments:
                    merged = self._merge(name, segs, write)
                    if merged is None:  # a segment is gone: re-read, or let a full write heal
                        again = self._read_header(name, "append")
                        if again is None or again.etag == current.etag:
                            return None
                        current = again
                        continue
                    segs = merged
                extra = {"dig": split.digest, "segs": segs + new}
                if write.commit(summary.key, planned, split.head, extra, current):
                    return planned
                write.discard_merged()
                current = self._read_header(name, "append")
        finally:
            write.close()
        raise ConflictError(
            f"key {summary.key!r} changed under {RACES} attempts to append to it", key=summary.key
        )

    def _merge(self, name: str, segs: list[list[Any]], write: Write) -> list[list[Any]] | None:
        """``segs`` with its newest segments joined into one new object (uploaded with the
        commit), so that one more fits under ``max_segments``; ``None`` if one is gone."""
        start = merge_start([int(size) for _, size in segs], self.max_segments)
        paths = [self._segment_path(name, sid) for sid, _ in segs[start:]]
        parts = [self._recent.get(path) for path in paths]
        unread = [i for i, part in enumerate(parts) if part is None]
        read = self._map(lambda i: self._get_segment(name, segs[start + i][0], "append"), unread,
                         self._segment_pool())  # fmt: skip
        for i, part in zip(unread, read, strict=True):
            parts[i] = part
        if any(part is None for part in parts):
            return None
        joined = merge([part for part in parts if part is not None])
        return [*segs[:start], [write.upload(joined, merged=True), len(joined)]]

    def drop(self, key: str, *, expect_revision: int | None = None) -> bool:
        self._check_bucket("drop")
        name = key_name(key)
        for _ in range(RACES):
            current = self._known(name, "drop", segments=True)
            if current is None:
                if expect_revision is not None:
                    raise ConflictError(f"key {key!r} does not exist", key=key)
                return False
            summary = self._current(current.fields, name, "drop").summary
            found = summary.revision
            if expect_revision is not None and found != expect_revision:
                raise ConflictError(
                    f"key {key!r} is at revision {found}, not {expect_revision}", key=key
                )
            # a split record's delete is conditional too, so it removes the segments of the
            # record it deletes, not those of one an append committed meanwhile
            conditional = expect_revision is not None or current.segments is not None
            condition = {"IfMatch": f'"{current.etag}"'} if conditional else {}
            with self._translate("drop"):
                try:
                    self.client.delete_object(Bucket=self.bucket, Key=self._records + name,
                                              **condition)  # fmt: skip
                except ClientError as exc:
                    if not lost_race(exc):
                        raise
                    self._forget_known(name)
                    continue
            self._forget_known(name)
            self._forget(self._superseded(name, current.fields, set()))
            return True
        raise ConflictError(f"key {key!r} changed under {RACES} attempts to drop it", key=key)

    def scan(self, query: Query) -> list[Summary]:
        self._check_bucket("scan")
        return super().scan(query)

    def verify(self, *, repair: bool = False, grace: float = 300.0) -> dict[str, int]:
        """Compare the index with the records; with ``repair``, write missing entries and
        delete stale ones older than ``grace`` seconds. Segment objects no record refers to
        (left by a writer that died before its record's PUT) count as ``orphans``; ``repair``
        deletes those older than ``grace`` too."""
        self._check_bucket("verify")
        self.flush()  # what this process's writes left behind is not stale, only queued
        # segments are listed before the records are read: a segment written after its
        # record was read is young, and ``grace`` spares it
        segments, _ = self._list_all(self._segments)
        records, _ = self._list_all(self._records)
        names = [path[len(self._records) :] for path, _ in records]
        currents = self._fetch_many(names, "verify")
        expected = {
            self._entry_path(c.summary, n, c.token)
            for n, c in zip(names, currents, strict=True)
            if c is not None
        }
        entries, now = self._list_all(self._index)
        missing = sorted(expected - {path for path, _ in entries})
        cutoff = now - timedelta(seconds=grace)
        stale = [path for path, modified in entries if path not in expected and modified <= cutoff]
        orphans = self._orphans([path for path, modified in segments if modified <= cutoff])
        if repair:
            with self._translate("verify"):
                self._map(lambda p: self.client.put_object(Bucket=self.bucket, Key=p, Body=b""),
                          missing)  # fmt: skip
                for paths in (stale, orphans):
                    for chunk in range(0, len(paths), PAGE):
                        self._delete_many(paths[chunk : chunk + PAGE])
        count = sum(c is not None for c in currents)
        return {"records": count, "missing": len(missing), "stale": len(stale),
                "orphans": len(orphans)}  # fmt: skip

    def collect_orphans(self, *, delete: bool = False, grace: float = 300.0) -> int:
        self._check_bucket("verify")
        self.flush()
        segments, now = self._list_all(self._segments)
        cutoff = now - timedelta(seconds=grace)
        orphans = self._orphans([path for path, modified in segments if modified <= cutoff])
        if delete:
            with self._translate("verify"):
                for chunk in range(0, len(orphans), PAGE):
                    self._delete_many(orphans[chunk : chunk + PAGE])
        return len(orphans)

    def _orphans(self, paths: Sequence[str]) -> list[str]:
        """The segment objects among ``paths`` that their record does not refer to."""

        def headers(names: list[str]) -> list[dict[str, Any] | None]:
            knowns = self._map(lambda n: self._read_header(n, "verify"), names)
            return [known.fields if known else None for known in knowns]

        return self._unlisted(paths, headers)

    def iter_records(self) -> Iterator[Record]:
        """Every record, read from the records themselves, not through the index."""
        self._check_bucket("verify")
        records, _ = self._list_all(self._records)
        names = [path[len(self._records) :] for path, _ in records]
        for start in range(0, len(names), PAGE):
            loaded = self._map(lambda n: self._load(n, "verify"), names[start : start + PAGE])
            yield from (record for record in loaded if record is not None)

    def rebuild_index(self) -> int:
        return self.verify(repair=True)["records"]

    def namespace(self, name: str) -> S3Backend:
        with self._lock:
            sibling = self._siblings.get(name)
            if sibling is None:
                prefix = f"{self.prefix}/_{name}" if self.prefix else f"_{name}"
                sibling = S3Backend(self.client, self.bucket, prefix, create_bucket=self._create,
                                    region=self._region)  # fmt: skip
                self._siblings[name] = sibling
            return sibling

    def flush(self) -> None:
        """Wait for the deletes that earlier writes left to the background (the index entries
        and segments a commit superseded, a lost attempt's uploads); ``close`` waits too."""
        with self._lock:
            pending, siblings = list(self._cleaning), list(self._siblings.values())
        wait(pending)
        for sibling in siblings:
            sibling.flush()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            siblings = list(self._siblings.values())
            pools = [self._janitor, self._pool, self._segment_threads]  # the janitor drains first
        for sibling in siblings:
            sibling.close()
        for pool in pools:
            if pool is not None:
                pool.shutdown(wait=True)
        if self._owns:
            self.client.close()

    # -- internals -----------------------------------------------------------------------

    def _load(self, name: str, operation: str) -> Record | None:
        path = self._records + name
        for _ in range(RACES):
            with self._translate(operation):
                try:
                    response = self.client.get_object(Bucket=self.bucket, Key=path)
                    data = response["Body"].read()
                except ClientError as exc:
                    if missing(exc):
                        return None
                    raise
            fields, body = self._split(data, path, operation)
            record = Record(self._current(fields, name, operation).summary, body)
            segs = segments_of(fields)
            if segs is None:
                return record
            parts = self._map(lambda seg: self._get_segment(name, seg[0], operation), segs,
                              self._segment_pool())  # fmt: skip
            if all(part is not None for part in parts):
                return Record(record.summary, assemble(body, [p for p in parts if p is not None]))
            # A segment is gone: a write that replaced this record since deletes the segments
            # it no longer refers to. If the record is still the one read, it was lost: the
            # head alone does not decode, so the record reads as unreadable, not as absent.
            again = self._known(name, operation)
            if again is not None and again.etag == response["ETag"].strip('"'):
                return record
        raise BackendError(
            f"{self.name} record {name!r} changed under {RACES} attempts to read it",
            backend=self.name,
            operation=operation,
        )

    def _get_segment(self, name: str, sid: str, operation: str) -> bytes | None:
        with self._translate(operation):
            try:
                response = self.client.get_object(Bucket=self.bucket,
                                                  Key=self._segment_path(name, sid))  # fmt: skip
                data: bytes = response["Body"].read()
            except ClientError as exc:
                if missing(exc):
                    return None
                raise
        return data

    def _fetch(self, name: str, operation: str) -> Current | None:
        """The record's summary, token and ETag: from its metadata, else from its header."""
        known = self._known(name, operation)
        if known is None:
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
        with self._translate(operation):
            try:
                response = self.client.get_object(Bucket=self.bucket, Key=path,
                                                  Range=f"bytes=0-{PEEK - 1}")  # fmt: skip
                data = response["Body"].read()
                if b"\n" not in data and len(data) >= PEEK:
                    response = self.client.get_object(Bucket=self.bucket, Key=path)
                    data = response["Body"].read()
            except ClientError as exc:
                if missing(exc):
                    return None
                raise
        return Known(self._split(data, path, operation)[0], response["ETag"].strip('"'))

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

    def _map(
        self, fn: Callable[[T], R], items: Sequence[T], pool: ThreadPoolExecutor | None = None
    ) -> list[R]:
        if len(items) <= 1:
            return [fn(item) for item in items]
        if pool is None:
            with self._lock:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(16, thread_name_prefix="agent-checkpoint-s3")
                pool = self._pool
        return list(pool.map(fn, items))

    def _segment_pool(self) -> ThreadPoolExecutor:
        """Threads for a record's segments: a pool of their own, since loads run in ``_map``'s
        (a load waiting there on its own pool could wait forever)."""
        with self._lock:
            if self._segment_threads is None:
                self._segment_threads = ThreadPoolExecutor(
                    16, thread_name_prefix="agent-checkpoint-s3-segments"
                )
            return self._segment_threads

    def _check_bucket(self, operation: str) -> None:
        """A missing bucket would read as missing keys (a HEAD 404 carries no error code), so
        the first operation checks the bucket once, one thread at a time. A 403 (a policy
        scoped to the prefix may not allow HeadBucket) proves nothing either way."""
        if self._bucket_checked:
            return
        with self._bucket_lock, self._translate(operation):
            if self._bucket_checked:
                return
            try:
                self.client.head_bucket(Bucket=self.bucket)
            except ClientError as exc:
                if error_status(exc) == 403:
                    self._bucket_checked = True
                    return
                if error_status(exc) != 404:
                    raise
                if not self._create:
                    raise BackendError(
                        f"s3 bucket {self.bucket!r} does not exist; create it, or open the "
                        "store with create_bucket=True",
                        backend=self.name,
                        operation=operation,
                    ) from exc
                self._create_bucket()
            self._bucket_checked = True

    def _create_bucket(self) -> None:
        """Create the bucket; another client creating it first is success. Matched by error
        code, not by ``client.exceptions``: botocore builds those classes lazily and threads
        racing the first call can get different classes for the same code."""
        location = {"LocationConstraint": self._region}
        try:
            if self._region and self._region != "us-east-1":
                self.client.create_bucket(Bucket=self.bucket, CreateBucketConfiguration=location)
            else:
                self.client.create_bucket(Bucket=self.bucket)
        except ClientError as exc:
            if error_code(exc) != "BucketAlreadyOwnedByYou":
                raise

    @contextmanager
    def _translate(self, operation: str) -> Iterator[None]:
        try:
            with translate_errors(
                self.name, operation, transient=TRANSIENT, fatal=(BotoCoreError,)
            ):
                yield
        except ClientError as exc:
            code, status = error_code(exc), error_status(exc)
            detail = f"bucket {self.bucket!r} does not exist" if code == "NoSuchBucket" else exc
            transient = code in THROTTLED or status == 429 or status >= 500
            raise (BackendUnavailableError if transient else BackendError)(
                f"s3 {operation} failed: {code or status}: {detail}",
                backend=self.name,
                operation=operation,
            ) from exc
