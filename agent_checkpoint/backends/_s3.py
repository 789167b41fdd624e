"""S3 and S3-compatible servers on boto3, in the object layout described in ``_objects.py``.

Where the fsspec backend takes a lock, this one uses S3's conditional writes, so they hold
between processes. A save writes its new index entry, then PUTs the record with
``If-None-Match: *`` (new key) or ``If-Match: <etag>`` (the commit point), then hands the
previous entry (and any segment object of an earlier version) to a background thread to delete
(``flush`` waits for it, and so do ``close`` and ``verify``); a save that keeps the
record's index entry (``Layout.kept_token``: a claim's rewrite) is the record's PUT alone. No
read comes first when the backend remembers the key's last write or ``load`` (its header and ETag), nor for a key it
does not know, which it writes as new; a lost condition (412, or 404 where AWS answers that
for a key deleted meanwhile) reads the header and plans again, and only a refusal planned on
what was read is raised, so it is the right one (revision, owner, create-only). The header's
write token makes every write's ETag unique, so ``If-Match`` compares writes, not contents.
The header is mirrored into object metadata (when it fits AWS's 2 KB), so ``head`` is one
HEAD request, and listing a page is one LIST plus a HEAD per entry, in parallel, to keep only
entries whose record still carries their token.

Growing histories are the store's segment layer's (``_segments.py``): its pieces are records
in the ``segments`` namespace, and ``load_many`` reads a record's pieces in one parallel wave
of GETs. Drop writes a tombstone over the record read (``If-Match``).

``verify(repair=True)`` leaves entries younger than ``grace`` seconds alone: they may belong
to a save in flight, whose entry is written before its record.

The parts: ``_s3_bucket.py`` (``Bucket``: the client, requests, conditional PUTs, background
deletes), ``_s3_records.py`` (``Records``: reading records, remembering the last writes),
``_s3_writes.py`` (``Write``: one write's index entry and commit).
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import orjson

from ..errors import ConflictError, InvalidKeyError
from ._base import Query, Record, Summary, plan_drop
from ._objects import (
    Current,
    Entry,
    Layout,
    grave_fields,
    in_segments,
    is_grave,
    key_name,
    reserved_root,
)
from ._s3_bucket import NAME, Bucket, connect
from ._s3_records import Known, Records, pack
from ._s3_writes import Write
from ._url_options import SCHEMES

OPTIONS = SCHEMES["s3"]
RACES = 32
"""Attempts at one write while other writers keep winning its condition."""

GUESS_BYTES = 64 << 10
"""A write of a key this backend does not remember, with no ``expect_revision``, is first
tried as a new key (``If-None-Match: *``, no read before it) when its record object is no
larger than this; a larger one reads the key's header first rather than risk sending its
bytes twice."""


class S3Backend:
    name = NAME
    conditional_writes_across_processes = True
    segment_create_first = False
    """A refused create costs the index entry's PUT, the record's refused PUT and a GET: the
    segment layer reads a key it does not know (one GET) before writing it instead."""

    def __init__(
        self,
        client: Any,
        bucket: str,
        prefix: str = "",
        *,
        create_bucket: bool = False,
        owns_client: bool = False,
        region: str | None = None,
        _namespace: bool = False,
    ) -> None:
        parts = [part for part in prefix.split("/") if part]
        if any(part in (".", "..") for part in parts) or len(prefix.encode()) > 512:
            raise InvalidKeyError(f"unusable s3 prefix {prefix!r}")
        if not _namespace:
            reserved_root("s3", "/".join(parts))
        self.client = client
        self.bucket = bucket
        self.prefix = "/".join(parts)
        self._layout = Layout.under(NAME, self.prefix + "/" if parts else "")
        self._bucket = Bucket(client, bucket, self._layout.records, create=create_bucket,
                              region=region, owns_client=owns_client)  # fmt: skip
        self._records = Records(self._bucket, self._layout)
        self._siblings: dict[str, S3Backend] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str, *, client: Any = None, **options: Any) -> S3Backend:
        """``s3://bucket/prefix?endpoint_url=..&region=..&profile=..&create_bucket=..``
        (``SCHEMES["s3"]``), keywords overriding the URL. With a ready boto3 client
        (``client=``, which you own and close), ``endpoint_url`` and ``profile`` are refused:
        set them on that client."""
        bucket, prefix = _bucket_and_prefix(url)
        given = OPTIONS.read(url, options, client=client)
        owns = client is None
        if owns:
            client = connect(region=given["region"], **given.connection)
        return cls(client, bucket, prefix, **given.store, owns_client=owns)

    @property
    def closed(self) -> bool:
        return self._bucket.closed

    def _check(self, operation: str) -> None:
        self._bucket.check(operation)

    def load(self, key: str) -> Record | None:
        self._check("load")
        return self._records.load(key_name(key), "load", remember=True)

    def head(self, key: str) -> Summary | None:
        self._check("head")
        current = self._records.fetch(key_name(key), "head")
        return current.summary if current is not None else None

    def in_old_layout(self, key: str) -> bool:
        self._check("load")
        known = self._records.header(key_name(key), "load")
        return known is not None and in_segments(known.fields)

    def load_many(self, keys: Sequence[str]) -> list[Record | None]:
        self._check("load")
        return self._bucket.map(lambda key: self._records.load(key_name(key), "load"), keys)

    def save(
        self, record: Record, *, expect_revision: int | None = None, create_only: bool = False
    ) -> Summary:
        self._check("save")
        key, name = record.key, key_name(record.key)
        current, verified = self._records.recall(name), False
        # unknown, it is guessed new: If-None-Match refuses an existing key, and costs no read
        if current is None and (expect_revision is not None or len(record.body) > GUESS_BYTES):
            current, verified = self._records.header(name, "save"), True
        write = Write(self._records, name)
        try:
            for _ in range(RACES):
                fields = current.fields if current else None
                try:
                    summary = self._layout.plan(
                        fields,
                        name,
                        record,
                        expect_revision=expect_revision,
                        create_only=create_only,
                    )
                except ConflictError:
                    if verified:
                        raise
                    # refused by a guess or a memory: only what is stored may refuse a write
                    current, verified = self._records.header(name, "save"), True
                    continue
                if write.commit(key, summary, record.body, current):
                    return summary
                current, verified = self._records.header(name, "save"), True
        finally:
            write.close()
        raise ConflictError(f"key {key!r} changed under {RACES} attempts to write it", key=key)

    def drop(self, key: str, *, expect_revision: int | None = None) -> bool:
        self._check("drop")
        name = key_name(key)
        current, verified = self._records.recall(name), False
        if current is None:
            current, verified = self._records.header(name, "drop"), True
        for _ in range(RACES):
            found = self._live_revision(current, name)
            if not verified and (found is None or expect_revision not in (None, found)):
                # a memory may be stale: only what is stored may refuse a drop
                current, verified = self._records.header(name, "drop"), True
                continue
            if not plan_drop(key, found, expect_revision):
                return False
            assert current is not None and found is not None  # a live record was found
            if self._bury(name, found, current):
                return True
            current, verified = self._records.header(name, "drop"), True
        raise ConflictError(f"key {key!r} changed under {RACES} attempts to drop it", key=key)

    def forget(self, key: str) -> None:
        """Remove ``key``'s record object and index entry, leaving no tombstone
        (``Forgetting``: for keys never written again, such as the segment layer's pieces)."""
        self._check("forget")
        name = key_name(key)
        current = self._records.recall(name) or self._records.header(name, "forget")
        self._records.forget(name)
        if current is None:
            return
        self._bucket.delete([self._layout.record_path(name)], "forget")  # first: see fsspec
        self._records.delete_later(self._layout.superseded(name, current.fields))

    def _live_revision(self, known: Known | None, name: str) -> int | None:
        if known is None or is_grave(known.fields):
            return None
        return self._layout.current(known.fields, name, "drop").summary.revision

    def _bury(self, name: str, revision: int, current: Known) -> bool:
        """Replace exactly the record read (``If-Match``) with a tombstone, so that its entry
        (and an earlier version's segments) go with it, never those of one committed
        meanwhile; ``False`` if it changed."""
        grave = grave_fields(revision, secrets.token_hex(8))
        etag = self._bucket.put_if(self._layout.record_path(name), orjson.dumps(grave) + b"\n",
                                   "drop", etag=current.etag, metadata={"ac": pack(grave)})  # fmt: skip
        self._records.forget(name)
        if etag is None:
            return False
        self._records.delete_later(self._layout.superseded(name, current.fields))
        return True

    def scan(self, query: Query) -> list[Summary]:
        self._check("scan")
        return self._layout.scan(
            query, self._entries, lambda names: self._records.fetch_many(names, "scan")
        )

    def scan_loaded(self, query: Query) -> list[tuple[Summary, Record]]:
        """``scan``, each summary with its record read whole: the GET of an entry's record
        both reads it and proves the entry current (the record carries its token), where
        ``scan`` HEADs it, so a listing that reads the records costs a request a record,
        not two."""
        self._check("scan")
        read: dict[int, tuple[Summary, Record]] = {}  # by the listed summary (id: kept alive)

        def fetch(name: str) -> Current | None:
            known, record = self._records.loaded(name, "scan") or (None, None)
            if known is None or record is None:  # no record, or a tombstone
                return None
            current = self._layout.current(known.fields, name, "scan", known.etag)
            read[id(current.summary)] = (current.summary, record)
            return current

        summaries = self._layout.scan(query, self._entries, lambda ns: self._bucket.map(fetch, ns))
        return [(summary, read[id(summary)][1]) for summary in summaries]

    def _entries(self, start: str, first: int) -> Iterator[Entry]:
        index = self._layout.index
        for path in self._bucket.list_after(index, index + start, "scan", first):
            entry = self._layout.parse(path[len(index) :])
            if entry is not None:
                yield entry

    def namespace(self, name: str) -> S3Backend:
        with self._lock:
            sibling = self._siblings.get(name)
            if sibling is None:
                prefix = f"{self.prefix}/_{name}" if self.prefix else f"_{name}"
                sibling = S3Backend(self.client, self.bucket, prefix,
                                    create_bucket=self._bucket.create, region=self._bucket.region,
                                    _namespace=True)  # fmt: skip
                sibling._bucket.checked = self._bucket.checked  # the same bucket: seen once
                self._siblings[name] = sibling
            return sibling

    def verify(self, *, repair: bool = False, grace: float = 300.0) -> dict[str, int]:
        """Compare the index with the records; with ``repair``, write missing entries and
        delete stale ones older than ``grace`` seconds."""
        self._check("verify")
        self.flush()  # what this process's writes left behind is not stale, only queued
        layout, bucket = self._layout, self._bucket
        records, _ = bucket.list_all(layout.records, "verify")
        names = [path[len(layout.records) :] for path, _ in records]
        currents = self._records.fetch_many(names, "verify")
        expected = {
            layout.entry_path(c.summary, n, c.token)
            for n, c in zip(names, currents, strict=True)
            if c is not None
        }
        entries, now = bucket.list_all(layout.index, "verify")
        missing = sorted(expected - {path for path, _ in entries})
        cutoff = now - timedelta(seconds=grace)
        stale = [path for path, modified in entries if path not in expected and modified <= cutoff]
        if repair:
            bucket.put_many([(path, b"") for path in missing], "verify")
            bucket.delete(stale, "verify")
        count = sum(c is not None for c in currents)
        return {"records": count, "missing": len(missing), "stale": len(stale)}

    def iter_records(self) -> Iterator[Record]:
        """Every record, read from the records themselves, not through the index."""
        self._check("verify")
        records, _ = self._bucket.list_all(self._layout.records, "verify")
        names = [path[len(self._layout.records) :] for path, _ in records]
        for start in range(0, len(names), 1000):
            loaded = self._bucket.map(
                lambda n: self._records.load(n, "verify"), names[start : start + 1000]
            )
            yield from (record for record in loaded if record is not None)

    def rebuild_index(self) -> int:
        return self.verify(repair=True)["records"]

    def flush(self) -> None:
        """Wait for the deletes that earlier writes left to the background (the index entries
        a commit superseded, a lost attempt's entry); ``close`` waits too."""
        self._bucket.flush()
        with self._lock:
            siblings = list(self._siblings.values())
        for sibling in siblings:
            sibling.flush()

    def close(self) -> None:
        with self._lock:
            siblings = list(self._siblings.values())
        for sibling in siblings:
            sibling.close()
        self._bucket.close()


def _bucket_and_prefix(url: str) -> tuple[str, str]:
    """The bucket and the prefix an ``s3://bucket/prefix`` URL names."""
    parts = urlsplit(url)
    if parts.scheme != "s3" or not parts.netloc:
        raise InvalidKeyError(f"an S3 store URL looks like s3://bucket/prefix, not {url!r}")
    if "@" in parts.netloc:  # never echo it: it holds credentials
        raise InvalidKeyError(
            "an s3:// URL takes no credentials (s3://bucket/prefix): boto3 reads them from "
            "the usual AWS sources (environment, ~/.aws, an instance role)"
        )
    return parts.netloc, parts.path
