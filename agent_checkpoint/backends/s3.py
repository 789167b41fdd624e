"""S3 and S3-compatible servers on boto3, in the object layout described in ``fsspec.py``.

Where the fsspec backend takes a lock, this one uses S3's conditional writes, so they hold
between processes: a save reads the record (HEAD), writes its new index entry, PUTs the record
with ``If-None-Match: *`` (new key) or ``If-Match: <etag>`` (the commit point), then deletes
the previous entry; a lost condition (412, or 404 where AWS answers that for a key deleted
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
import secrets
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
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
from .objects import HASHED, PEEK, Current, Entry, ObjectLayout, fields_of, key_name

T = TypeVar("T")
R = TypeVar("R")

META_LIMIT = 1800  # AWS caps user metadata at 2 KB; a longer header is read from the body
PAGE = 1000
RACES = 32
TRANSIENT = (BotoConnectionError, HTTPClientError, IncompleteReadError)
THROTTLED = frozenset(
    {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "RequestLimitExceeded"}
    | {"TooManyRequests", "ServiceUnavailable", "InternalError"}
)
RACE_CODES = frozenset({"PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey"})


def _status(exc: ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _missing(exc: ClientError) -> bool:
    return _status(exc) == 404 and _code(exc) != "NoSuchBucket"


def _lost_race(exc: ClientError) -> bool:
    # If-Match on a key deleted meanwhile: SeaweedFS answers 412, AWS and moto 404
    return _code(exc) in RACE_CODES or (_status(exc) in (404, 412) and _code(exc) != "NoSuchBucket")


class S3Backend(ObjectLayout):
    name = "s3"
    conditional_writes_across_processes = True

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
        self._create = create_bucket
        self._owns = owns_client
        self._region = region
        self._bucket_checked = False
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
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

    def save(
        self, record: Record, *, expect_revision: int | None = None, create_only: bool = False
    ) -> Summary:
        self._check_bucket("save")
        key, name = record.key, key_name(record.key)
        for attempt in range(RACES):
            # If-None-Match refuses an existing key by itself: a create needs no read first
            current = None if create_only and attempt == 0 else self._fetch(name, "save")
            summary = plan_save(
                current.summary if current else None,
                record,
                expect_revision=expect_revision,
                create_only=create_only,
            )
            token = secrets.token_hex(8)
            entry = self._entry_path(summary, name, token)
            body = self._header(key, summary, token) + record.body
            fields = fields_of(summary, token) | ({"key": key} if HASHED in name else {})
            packed = base64.urlsafe_b64encode(orjson.dumps(fields)).decode()
            metadata = {"ac": packed} if len(packed) <= META_LIMIT else {}
            condition = {"IfMatch": f'"{current.etag}"'} if current else {"IfNoneMatch": "*"}
            with self._translate("save"):
                # the entry goes first: a committed record is never missing from the index
                self.client.put_object(Bucket=self.bucket, Key=entry, Body=b"")
                try:
                    self.client.put_object(Bucket=self.bucket, Key=self._records + name,
                                           Body=body, Metadata=metadata, **condition)  # fmt: skip
                except ClientError as exc:
                    if not _lost_race(exc):
                        raise
                    self._forget([entry])  # its token was never committed: no one else uses it
                    continue
            if current is not None:
                self._forget([self._entry_path(current.summary, name, current.token)])
            return summary
        raise ConflictError(f"key {key!r} changed under {RACES} attempts to write it", key=key)

    def drop(self, key: str, *, expect_revision: int | None = None) -> bool:
        self._check_bucket("drop")
        name = key_name(key)
        for _ in range(RACES):
            current = self._fetch(name, "drop")
            if current is None:
                if expect_revision is not None:
                    raise ConflictError(f"key {key!r} does not exist", key=key)
                return False
            found = current.summary.revision
            if expect_revision is not None and found != expect_revision:
                raise ConflictError(
                    f"key {key!r} is at revision {found}, not {expect_revision}", key=key
                )
            condition = {"IfMatch": f'"{current.etag}"'} if expect_revision is not None else {}
            with self._translate("drop"):
                try:
                    self.client.delete_object(Bucket=self.bucket, Key=self._records + name,
                                              **condition)  # fmt: skip
                except ClientError as exc:
                    if not _lost_race(exc):
                        raise
                    continue
            self._forget([self._entry_path(current.summary, name, current.token)])
            return True
        raise ConflictError(f"key {key!r} changed under {RACES} attempts to drop it", key=key)

    def scan(self, query: Query) -> list[Summary]:
        self._check_bucket("scan")
        return super().scan(query)

    def verify(self, *, repair: bool = False, grace: float = 300.0) -> dict[str, int]:
        """Compare the index with the records; with ``repair``, write missing entries and
        delete stale ones older than ``grace`` seconds."""
        self._check_bucket("verify")
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
        if repair:
            with self._translate("verify"):
                self._map(lambda p: self.client.put_object(Bucket=self.bucket, Key=p, Body=b""),
                          missing)  # fmt: skip
                for chunk in range(0, len(stale), PAGE):
                    self._delete_many(stale[chunk : chunk + PAGE])
        count = sum(c is not None for c in currents)
        return {"records": count, "missing": len(missing), "stale": len(stale)}

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

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            siblings, pool = list(self._siblings.values()), self._pool
        for sibling in siblings:
            sibling.close()
        if pool is not None:
            pool.shutdown(wait=True)
        if self._owns:
            self.client.close()

    # -- internals -----------------------------------------------------------------------

    def _load(self, name: str, operation: str) -> Record | None:
        path = self._records + name
        with self._translate(operation):
            try:
                data = self.client.get_object(Bucket=self.bucket, Key=path)["Body"].read()
            except ClientError as exc:
                if _missing(exc):
                    return None
                raise
        fields, body = self._split(data, path, operation)
        return Record(self._current(fields, name, operation).summary, body)

    def _fetch(self, name: str, operation: str) -> Current | None:
        """The record's summary, token and ETag: from its metadata, else from its header."""
        path = self._records + name
        with self._translate(operation):
            try:
                response = self.client.head_object(Bucket=self.bucket, Key=path)
                packed = response.get("Metadata", {}).get("ac")
                if packed is not None:
                    fields = orjson.loads(base64.urlsafe_b64decode(packed))
                else:
                    response = self.client.get_object(Bucket=self.bucket, Key=path,
                                                      Range=f"bytes=0-{PEEK - 1}")  # fmt: skip
                    data = response["Body"].read()
                    if b"\n" not in data and len(data) >= PEEK:
                        response = self.client.get_object(Bucket=self.bucket, Key=path)
                        data = response["Body"].read()
            except ClientError as exc:
                if _missing(exc):
                    return None
                raise
        if packed is None:
            fields = self._split(data, path, operation)[0]
        return self._current(fields, name, operation, response["ETag"].strip('"'))

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
        """Delete index entries whose records moved on. Best effort: a leftover entry is
        skipped by listing and removed by ``verify(repair=True)``."""
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

    def _map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        if len(items) <= 1:
            return [fn(item) for item in items]
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(16, thread_name_prefix="agent-checkpoint-s3")
            pool = self._pool
        return list(pool.map(fn, items))

    def _check_bucket(self, operation: str) -> None:
        """A missing bucket would read as missing keys (a HEAD 404 carries no error code), so
        the first operation checks the bucket once. A 403 (a policy scoped to the prefix may
        not allow HeadBucket) proves nothing either way."""
        if self._bucket_checked:
            return
        with self._translate(operation):
            try:
                self.client.head_bucket(Bucket=self.bucket)
            except ClientError as exc:
                if _status(exc) == 403:
                    self._bucket_checked = True
                    return
                if _status(exc) != 404:
                    raise
                if not self._create:
                    raise BackendError(
                        f"s3 bucket {self.bucket!r} does not exist; create it, or open the "
                        "store with create_bucket=True",
                        backend=self.name,
                        operation=operation,
                    ) from exc
                location = {"LocationConstraint": self._region}
                with suppress(self.client.exceptions.BucketAlreadyOwnedByYou):
                    if self._region and self._region != "us-east-1":
                        self.client.create_bucket(Bucket=self.bucket,
                                                  CreateBucketConfiguration=location)  # fmt: skip
                    else:
                        self.client.create_bucket(Bucket=self.bucket)
        self._bucket_checked = True

    @contextmanager
    def _translate(self, operation: str) -> Iterator[None]:
        try:
            with translate_errors(
                self.name, operation, transient=TRANSIENT, fatal=(BotoCoreError,)
            ):
                yield
        except ClientError as exc:
            code, status = _code(exc), _status(exc)
            detail = f"bucket {self.bucket!r} does not exist" if code == "NoSuchBucket" else exc
            transient = code in THROTTLED or status == 429 or status >= 500
            raise (BackendUnavailableError if transient else BackendError)(
                f"s3 {operation} failed: {code or status}: {detail}",
                backend=self.name,
                operation=operation,
            ) from exc
