"""One write of an S3 record, for ``S3Backend``: its index entry, the conditional PUT of the
record that commits it, and the clean-up either way.

A write uploads its index entry first, then PUTs the record with ``If-Match`` (or
``If-None-Match: *``), the commit point: a committed record never misses its entry. What the
commit supersedes (the previous entry, an earlier version's segment objects) is deleted
afterwards, off the write's path.
"""

from __future__ import annotations

import secrets

import orjson

from ._base import Summary
from ._objects import HASHED, fields_of
from ._s3_records import Known, Records, pack

META_LIMIT = 1800  # AWS caps user metadata at 2 KB; a longer header is read from the body


class Write:
    """One write of the record ``name``: its conditional PUT of the record, and the clean-up
    either way. The index entry it uploaded is deleted again unless the record committed or
    the PUT's outcome is unknown (a transient fault: ``verify(repair=True)`` removes it if it
    did not land)."""

    def __init__(self, records: Records, name: str) -> None:
        self.records = records
        self.name = name
        # One token for every attempt: only one can commit, and an attempt whose condition
        # failed wrote no record, so the next one reuses its index entry.
        self.token = secrets.token_hex(8)
        self.entry: str | None = None  # uploaded, not yet committed
        self.settled = True  # False while a record PUT's outcome is unknown
        self.committed = False

    def commit(self, key: str, summary: Summary, body: bytes, current: Known | None) -> bool:
        """PUT the record over ``current`` (``If-Match``) or as new (``If-None-Match``);
        ``False`` if the condition failed."""
        records, name = self.records, self.name
        layout, bucket = records.layout, records.bucket
        kept = layout.kept_token(current.fields if current else None, name, summary)
        token = kept or self.token
        entry = layout.entry_path(summary, name, token)
        fields = {"key": key, **fields_of(summary, token)}
        packed = pack(fields_of(summary, token) | ({"key": key} if HASHED in name else {}))
        metadata = {"ac": packed} if len(packed) <= META_LIMIT else {}
        if self.entry is not None and self.entry != entry:
            records.delete_later([self.entry])  # an earlier attempt's, with another owner
            self.entry = None
        if not kept and self.entry is None:
            self.entry = entry  # the entry goes first: a committed record never misses it
            bucket.put(entry, b"", "save")
        self.settled = False
        etag = bucket.put_if(layout.record_path(name), orjson.dumps(fields) + b"\n" + body,
                             "save", etag=current.etag if current else None,
                             metadata=metadata)  # fmt: skip
        if etag is None:
            self.settled = True
            records.forget(name)
            return False
        self.settled = self.committed = True
        self.entry = None
        if etag:
            records.remember(name, Known(fields, etag))
        else:
            records.forget(name)
        records.delete_later(layout.superseded(name, current.fields if current else None, kept))
        return True

    def close(self) -> None:
        """Delete the index entry no attempt committed (unless an outcome is unknown)."""
        if not self.committed and self.settled and self.entry:
            self.records.delete_later([self.entry])
