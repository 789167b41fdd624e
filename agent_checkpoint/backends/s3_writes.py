"""One write of an S3 record, for ``S3Backend``: the segment objects it adds, the index entry,
the conditional PUT of the record that commits them, and the clean-up either way.

A write uploads its index entry and its new segments first, then PUTs the record with
``If-Match`` (or ``If-None-Match: *``), the commit point: a committed record never misses its
entry or a segment. What the commit supersedes (the previous entry, segments no longer
referred to) is deleted afterwards, off the write's path.
"""

from __future__ import annotations

import secrets
from typing import Any

import orjson

from .base import Summary
from .objects import HASHED, fields_of
from .s3_records import Known, Records, pack

META_LIMIT = 1800  # AWS caps user metadata at 2 KB; a longer header is read from the body


class Write:
    """One write of the record ``name``: the segment objects it uploads (unreferenced until
    its record commits), its conditional PUT of the record, and the clean-up either way.
    Objects it uploaded are deleted again unless the record committed or the PUT's outcome is
    unknown (a transient fault: ``verify(repair=True)`` removes them if it did not land)."""

    def __init__(self, records: Records, name: str) -> None:
        self.records = records
        self.name = name
        # One token for every attempt: only one can commit, and an attempt whose condition
        # failed wrote no record, so the next one reuses its index entry.
        self.token = secrets.token_hex(8)
        self.entry: str | None = None  # uploaded, not yet committed
        self.pending: list[tuple[str, bytes]] = []  # uploaded with the next commit
        self.uploaded: dict[str, bytes] = {}
        self.owned: list[str] = []
        self.per_attempt: list[str] = []
        self.settled = True  # False while a record PUT's outcome is unknown
        self.committed = False

    def upload(self, data: bytes, *, attempt: bool = False) -> str:
        """A new segment object's id; it is uploaded with the next commit's index entry.
        ``attempt``: its bytes depend on the record the attempt read, so a lost attempt
        deletes it (``discard_attempt``)."""
        sid = secrets.token_hex(8)
        self.pending.append((sid, data))
        self.uploaded[sid] = data
        self.owned.append(sid)
        if attempt:
            self.per_attempt.append(sid)
        return sid

    def commit(
        self,
        key: str,
        summary: Summary,
        head: bytes,
        extra: dict[str, Any],
        current: Known | None,
        inline: bytes = b"",
    ) -> bool:
        """PUT the record over ``current`` (``If-Match``) or as new (``If-None-Match``), with
        ``inline`` history content after its head; ``False`` if the condition failed, nothing
        then referring to this attempt's objects."""
        records, name, token = self.records, self.name, self.token
        layout, bucket = records.layout, records.bucket
        entry = layout.entry_path(summary, name, token)
        fields = {"key": key, **fields_of(summary, token), **extra}
        if inline:
            fields["inl"] = len(inline)
        body = orjson.dumps(fields) + b"\n" + head + inline
        mirrored = fields_of(summary, token) | ({"key": key} if HASHED in name else {})
        if "segs" in extra:
            mirrored["seg"] = len(extra["segs"])
        packed = pack(mirrored)
        metadata = {"ac": packed} if len(packed) <= META_LIMIT else {}
        # the entry and the segments go first: a committed record never misses either
        puts = [] if entry == self.entry else [(entry, b"")]
        puts += [(layout.segment_path(name, sid), data) for sid, data in self.pending]
        if self.entry is not None and entry != self.entry:
            records.delete_later([self.entry])  # an earlier attempt's, with another owner tag
        self.entry = entry
        bucket.put_many(puts, "save")
        self.pending = []
        self.settled = False
        etag = bucket.put_if(layout.record_path(name), body, "save",
                             etag=current.etag if current else None, metadata=metadata)  # fmt: skip
        if etag is None:
            self.settled = True
            records.forget(name)
            return False
        self.settled = self.committed = True
        self.entry = None
        if etag:
            records.remember(name, Known(fields, etag, inline))
        else:
            records.forget(name)
        kept = {sid for sid, _ in extra.get("segs", [])}
        for sid in kept & self.uploaded.keys():
            records.recent.add(layout.segment_path(name, sid), self.uploaded[sid])
        records.delete_later(layout.superseded(name, current.fields if current else None, kept))
        return True

    def discard_attempt(self) -> None:
        """Delete the segments of an attempt that lost its race that no other could use."""
        if self.per_attempt and self.settled:
            gone, self.per_attempt = set(self.per_attempt), []
            self.owned = [sid for sid in self.owned if sid not in gone]
            self.records.delete_later(
                [self.records.layout.segment_path(self.name, sid) for sid in gone]
            )

    def close(self) -> None:
        """Delete what no attempt committed (unless an outcome is unknown)."""
        if not self.committed and self.settled:
            paths = [self.records.layout.segment_path(self.name, sid) for sid in self.owned]
            self.records.delete_later(paths + ([self.entry] if self.entry else []))
