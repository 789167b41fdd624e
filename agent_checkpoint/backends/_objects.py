"""The object layout the S3 and fsspec backends share: records, an ordered index, repair.

Layout under the store's root::

    records/<name>                          JSON header line, newline, the stored bytes
    index/<position>_<name>!<token>.<tags>  an empty object per record, for listing
    _<namespace>/                           the same again for the Store's own records
                                            (claims; the pieces of long histories)

``<name>`` is the key's UTF-8 in lowercase base32hex, which keeps byte order (names sort as
keys do) and holds no character a filesystem or S3 could reinterpret (``..``, ``/``, ``%``).
A name over ``BUDGET`` characters is cut and ends in ``~`` plus a hash, since SeaweedFS refuses
path segments over 255 bytes; listing orders such keys by their real keys. ``<position>``
counts down as ``savedAt`` grows, so name order is newest first, ties by key, and a keyset
cursor is a start-after name. ``<tags>`` hash owner, agent and failure phase, so filters skip
entries unread. The header holds the key, the summary and a random write token. Growing
histories are the store's segment layer's (``_segments.py``): its records are opaque bytes.

Stores written before that kept a long history's older content in objects
``segments/<name>/<id>``, which the header lists as ``segs`` (``[[id, size], ...]``, oldest
first), with the newest ``inl`` bytes of the body (S3) held inline after the head. Such a
record still loads assembled (``load``, by ``_legacy.py``), and a write or drop over it deletes its segments.

A save writes its new index entry, then the record (the commit point), then deletes the
previous entry. A save that lists under the same entry (the same time, key and tags, as a
claim's rewrite of a run) keeps the record's token and entry and writes the record alone;
its header's revision still makes its bytes new. An entry counts only while its record
carries its token, so a crash leaves at most an entry that listing skips: never a key listed
twice, a dropped key or a stale summary, and never a committed record missing from the
index. ``verify(repair=True)`` (the CLI's
``verify --repair``) writes missing entries and deletes stale ones.

A drop replaces the record with a tombstone (a header with the key's last revision and
``"dead": true``, no body), written under the same condition as any write, so that the key's
next record continues past every revision it had; reads and listings treat it as absent. Oldest-first listing
(retention) has no index of its own: it reads the index from the bound to the end.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from ..errors import BackendError, InvalidKeyError
from ._base import Query, Record, Summary, is_after, matches, plan_save
from ._legacy import with_inline

WIDTH = 17
OFFSET = 10_000_000_000_000_000  # savedAt from -OFFSET up to 9 * OFFSET fits WIDTH digits
TOP = 99_999_999_999_999_999
HASHED = "~"
NO_TAG = "-" * 8
# position, '_', name (at most BUDGET + 33 characters), '!', token, '.', tags: 255 bytes
BUDGET = 255 - (WIDTH + 1 + 1 + 16 + 1 + 24) - 33
PEEK = 16384
TRANSIENT = (ConnectionError, TimeoutError)


@dataclass(frozen=True)
class Current:
    """A stored record's summary, write token and (on S3) ETag."""

    summary: Summary
    token: str
    etag: str = ""


@dataclass(frozen=True)
class Entry:
    position: int
    name: str
    token: str
    tags: str

    @property
    def group(self) -> str | None:
        """Cut names sharing position and stem sort by hash: they are ordered as one unit."""
        return None if HASHED not in self.name else f"{self.position}:{stem(self.name)}"


def reserved_root(backend: str, root: str) -> None:
    """Refuse a store root whose last segment begins with ``_``: a store's namespaces (its
    claims) live in ``<root>/_<name>``, so such a store could share another's files."""
    last = root.rstrip("/").rpartition("/")[2]
    if last.startswith("_"):
        raise InvalidKeyError(
            f"{backend} store location {root!r} ends in a segment beginning with '_', which "
            "names a store's own namespaces (its claims live in '<location>/_leases'); "
            "choose another name"
        )


def key_name(key: str) -> str:
    name = base64.b32hexencode(key.encode()).decode().rstrip("=").lower()
    if len(name) <= BUDGET:
        return name
    return name[:BUDGET] + HASHED + hashlib.sha256(key.encode()).hexdigest()[:32]


def name_key(name: str) -> str | None:
    if HASHED in name:
        return None
    return base64.b32hexdecode(name.upper() + "=" * (-len(name) % 8)).decode()


def stem(name: str) -> str:
    return name.partition(HASHED)[0]


def position(saved_at: int) -> int:
    """Index position of ``saved_at``: smaller is newer. Bounds out of range are clamped."""
    return min(max(TOP - (saved_at + OFFSET), -1), TOP + 1)


def _tag(value: str | None) -> str:
    return NO_TAG if value is None else hashlib.blake2b(value.encode(), digest_size=4).hexdigest()


def _may_match(entry: Entry, query: Query) -> bool:
    owner, agent, phase = entry.tags[:8], entry.tags[8:16], entry.tags[16:]
    if query.owner is not None and owner != _tag(query.owner):
        return False
    if query.agent_id is not None and agent != _tag(query.agent_id):
        return False
    if query.failed is not None and (phase != NO_TAG) != query.failed:
        return False
    if query.phase is not None and phase != _tag(query.phase):
        return False
    return not query.prefix or _may_begin(entry.name, query.prefix.encode())


def _may_begin(name: str, prefix: bytes) -> bool:
    """Whether the key named ``name`` may begin with ``prefix`` (its UTF-8), read from the
    name alone: a whole name spells the key; a cut one, in its whole groups of 8 characters,
    the key's first bytes. Compared as bytes, so no character is a wildcard."""
    if HASHED not in name:
        return base64.b32hexdecode(name.upper() + "=" * (-len(name) % 8)).startswith(prefix)
    spelled = stem(name)
    known = base64.b32hexdecode(spelled[: len(spelled) - len(spelled) % 8].upper())
    return known.startswith(prefix) if len(known) >= len(prefix) else prefix.startswith(known)


def fields_of(summary: Summary, token: str) -> dict[str, Any]:
    s = summary
    return {"run": s.run_id, "at": s.saved_at, "owner": s.owner, "agent": s.agent_id,
            "phase": s.failure_phase, "iter": s.failure_iteration, "msgs": s.message_count,
            "size": s.size, "rev": s.revision, "tok": token}  # fmt: skip


def is_grave(fields: dict[str, Any] | None) -> bool:
    """Whether a record header is a deleted key's tombstone."""
    return fields is not None and fields.get("dead") is True


def grave_fields(revision: int, token: str) -> dict[str, Any]:
    return {"rev": revision, "tok": token, "dead": True}


def next_revision(fields: dict[str, Any] | None) -> int:
    """The revision of a write over the record (or tombstone) with header ``fields``."""
    revision = fields.get("rev") if fields is not None else None
    return (revision if isinstance(revision, int) else 0) + 1


def segments_of(fields: dict[str, Any]) -> list[list[Any]] | None:
    """``[[id, size], ...]`` of a record an earlier version stored in segment objects."""
    segs = fields.get("segs")
    return segs if isinstance(segs, list) else None


def in_segments(fields: dict[str, Any] | None) -> bool:
    """Whether the record object with header ``fields`` is a live record version 0.4 stored
    in segment objects."""
    return fields is not None and not is_grave(fields) and segments_of(fields) is not None


def _units(entries: Iterable[Entry]) -> Iterator[list[Entry]]:
    group: list[Entry] = []
    for entry in entries:
        if group and entry.group != group[0].group:
            yield group
            group = []
        if entry.group is None:
            yield [entry]
        else:
            group.append(entry)
    if group:
        yield group


class Layout:
    """Where a store's objects live under its root, and how their names and headers read:
    the paths of records, index entries and legacy segments, and listing through the index
    (``scan``),
    given how to list entries and read records (the backend's I/O)."""

    def __init__(self, backend: str, records: str, index: str, segments: str) -> None:
        self.backend = backend
        self.records = records
        self.index = index
        self.segments = segments

    @classmethod
    def under(cls, backend: str, root: str) -> Layout:
        """The layout under ``root``, which is ``""`` or a path ending in ``/``."""
        return cls(backend, root + "records/", root + "index/", root + "segments/")

    def record_path(self, name: str) -> str:
        return self.records + name

    def segment_path(self, name: str, sid: str) -> str:
        return f"{self.segments}{name}/{sid}"

    def entry_path(self, summary: Summary, name: str, token: str) -> str:
        if not 0 <= summary.saved_at + OFFSET <= TOP:
            raise InvalidKeyError(f"savedAt {summary.saved_at} is outside what the index orders")
        tags = _tag(summary.owner) + _tag(summary.agent_id) + _tag(summary.failure_phase)
        return f"{self.index}{position(summary.saved_at):0{WIDTH}d}_{name}!{token}.{tags}"

    def parse(self, entry: str) -> Entry | None:
        """The entry named ``entry`` (its path with ``index`` removed); ``None`` if malformed."""
        rest, _, tags = entry.rpartition(".")
        name, bang, token = rest[WIDTH + 1 :].rpartition("!")
        if not (rest[:WIDTH].isdigit() and rest[WIDTH : WIDTH + 1] == "_" and bang):
            return None
        return Entry(int(rest[:WIDTH]), name, token, tags) if len(tags) == 24 else None

    def current(self, fields: dict[str, Any], name: str, operation: str, etag: str = "") -> Current:
        f = fields
        key = f.get("key") or name_key(name)
        if not isinstance(key, str):
            raise BackendError(f"{self.backend} record {name!r} does not name its key",
                               backend=self.backend, operation=operation)  # fmt: skip
        summary = Summary(key, f["run"], f["at"], f["owner"], f["agent"], f["phase"], f["iter"],
                          f["msgs"], f["size"], f["rev"])  # fmt: skip
        return Current(summary, f["tok"], etag)

    def summary_of(
        self, fields: dict[str, Any] | None, name: str, operation: str
    ) -> Summary | None:
        """The live record's summary; ``None`` for a missing key or a tombstone."""
        if fields is None or is_grave(fields):
            return None
        return self.current(fields, name, operation).summary

    def plan(
        self,
        fields: dict[str, Any] | None,
        name: str,
        record: Record,
        *,
        expect_revision: int | None,
        create_only: bool,
    ) -> Summary:
        """``plan_save`` of ``record`` over the record whose header is ``fields``."""
        return plan_save(
            self.summary_of(fields, name, "save"),
            record,
            expect_revision=expect_revision,
            create_only=create_only,
            revision=next_revision(fields),
        )

    def read(
        self, data: bytes, path: str, name: str, operation: str
    ) -> tuple[dict[str, Any], Record | None, list[str] | None]:
        """A record object's header fields, its record (``None`` for a tombstone), and the
        paths of the segment objects version 0.4 wrote its history to (``None``: none; the
        record's bytes are then whole, else its body is their head: ``load``)."""
        fields, body = self.split(data, path, operation)
        if is_grave(fields):
            return fields, None, None
        record = Record(self.current(fields, name, operation).summary, body)
        segs = segments_of(fields)
        if segs is None:
            return fields, record, None
        return fields, record, [self.segment_path(name, str(sid)) for sid, _ in segs]

    def load(
        self,
        name: str,
        operation: str,
        *,
        get: Callable[[str], tuple[bytes, str] | None],
        get_all: Callable[[list[str]], list[bytes | None]],
        still: Callable[[dict[str, Any], str], bool | None],
        tries: int,
        seen: Callable[[dict[str, Any], str], None] | None = None,
    ) -> Record | None:
        """The record ``name`` read whole: ``get(path)`` reads an object and its version (an
        ETag, or ``""``), ``get_all(paths)`` the segment objects of a record version 0.4
        stored in them (``None`` for one gone). A segment gone means a write that replaced the
        record since deleted it: ``still(fields, version)`` says whether the record read is
        still there (``None``: nor any record); if so the segment was lost, and the head alone
        reads as unreadable; if not, the record is read again, ``tries`` times at most.
        ``seen(fields, version)``: told of each record object read."""
        path = self.record_path(name)
        for _ in range(tries):
            got = get(path)
            if got is None:
                return None
            fields, record, paths = self.read(got[0], path, name, operation)
            if seen is not None:
                seen(fields, got[1])
            if record is None or paths is None:
                return record
            parts = get_all(paths)
            held = [part for part in parts if part is not None]
            if len(held) == len(parts):
                return Record(record.summary, with_inline(fields, record.body, held))
            again = still(fields, got[1])
            if again is None:
                return None
            if again:
                return record
        raise BackendError(
            f"{self.backend} record {name!r} changed under {tries} attempts to read it",
            backend=self.backend,
            operation=operation,
        )

    def split(self, data: bytes, path: str, operation: str) -> tuple[dict[str, Any], bytes]:
        """A record object's header fields and the bytes after the header line."""
        header, newline, body = data.partition(b"\n")
        try:
            fields = orjson.loads(header) if newline else None
        except orjson.JSONDecodeError:
            fields = None
        if not isinstance(fields, dict) or "tok" not in fields:
            raise BackendError(
                f"{self.backend} object {path!r} is not a record of this store",
                backend=self.backend,
                operation=operation,
            )
        return fields, body

    def kept_token(self, fields: dict[str, Any] | None, name: str, summary: Summary) -> str | None:
        """The write token of the record with header ``fields`` when a write of ``summary``
        over it lists under the same index entry (same time, key and tags, as when a claim
        rewrites a record unchanged): the write keeps that token and entry, with no upload
        before its commit and no delete after. The header's revision still changes, so the
        record's bytes (and its ETag) differ from every earlier version's."""
        if fields is None or is_grave(fields) or segments_of(fields) is not None:
            return None
        if fields.get("at") != summary.saved_at:  # the entry's position: most writes move it
            return None
        current = self.current(fields, name, "save")
        entry = self.entry_path(current.summary, name, current.token)
        return current.token if self.entry_path(summary, name, current.token) == entry else None

    def superseded(
        self, name: str, fields: dict[str, Any] | None, kept: str | None = None
    ) -> list[str]:
        """What a write that replaced the record with header ``fields`` leaves behind: its
        index entry (unless the write ``kept`` its token, ``kept_token``) and the segment
        objects an earlier version listed in it."""
        if fields is None or is_grave(fields):
            return []
        current = self.current(fields, name, "save")
        paths = (
            [] if current.token == kept else [self.entry_path(current.summary, name, current.token)]
        )
        return paths + [self.segment_path(name, str(sid)) for sid, _ in segments_of(fields) or []]

    def scan(
        self,
        query: Query,
        entries: Callable[[str, int], Iterator[Entry]],
        fetch_many: Callable[[list[str]], list[Current | None]],
    ) -> list[Summary]:
        """``Backend.scan`` over the index: ``entries(start, first)`` yields the entries in
        name order strictly after the name ``start`` (``first``: about how many the listing
        needs, where the backend can list a page of that size); ``fetch_many(names)`` reads
        those records."""
        start = ""
        if query.saved_before is not None:
            if position(query.saved_before) > TOP:
                return []
            # '~' sorts after '_': entries saved at the bound itself are skipped too
            start = f"{position(query.saved_before):0{WIDTH}d}~"
        stop = TOP if query.saved_since is None else position(query.saved_since)
        if query.after is not None:
            saved, key = query.after
            if query.oldest_first:
                stop = min(stop, position(saved))
            else:
                # past every entry of the cursor's key (or of its stem), before greater keys
                start = max(start, f"{position(saved):0{WIDTH}d}_{stem(key_name(key))}!~")
        # A page and a few entries for stale or filtered-out ones; oldest first reads to the end.
        first = sys.maxsize if query.oldest_first else query.limit + 8
        found = itertools.takewhile(lambda e: e.position <= stop, entries(start, first))
        units = _units(e for e in found if _may_match(e, query))
        if query.oldest_first:
            # reversed by position only: the sort is stable, so ties stay in key order
            units = iter(sorted(units, key=lambda unit: -unit[0].position))
        return _collect(units, query, fetch_many)


def _collect(
    units: Iterable[list[Entry]],
    query: Query,
    fetch_many: Callable[[list[str]], list[Current | None]],
) -> list[Summary]:
    """Keep the entries whose record still carries their token and passes the query,
    reading records a page's worth at a time."""
    out: list[Summary] = []
    batch: list[list[Entry]] = []
    ending: list[list[Entry]] = [[]]  # flushes the last batch
    for unit in itertools.chain(units, ending):
        if unit:
            batch.append(unit)
            if sum(map(len, batch)) < query.limit - len(out):
                continue
        entries = [entry for chunk in batch for entry in chunk]
        found = fetch_many([e.name for e in entries])
        valid = {
            e: c.summary for e, c in zip(entries, found, strict=True) if c and c.token == e.token
        }
        for chunk in batch:
            for summary in sorted((valid[e] for e in chunk if e in valid), key=lambda s: s.key):
                if is_after(summary, query) and matches(summary, query):
                    out.append(summary)
                    if len(out) >= query.limit:
                        return out
        batch = []
    return out
