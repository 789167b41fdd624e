"""The object layout the S3 and fsspec backends share: records, an ordered index, repair.

Layout under the store's root::

    records/<name>                          JSON header line, newline, the stored bytes
    index/<position>_<name>!<token>.<tags>  an empty object per record, for listing
    segments/<name>/<id>                    a piece of a growing history (``segments.py``)
    _<namespace>/                           the same again for the Store's bookkeeping

``<name>`` is the key's UTF-8 in lowercase base32hex, which keeps byte order (names sort as
keys do) and holds no character a filesystem or S3 could reinterpret (``..``, ``/``, ``%``).
A name over ``BUDGET`` characters is cut and ends in ``~`` plus a hash, since SeaweedFS refuses
path segments over 255 bytes; listing orders such keys by their real keys. ``<position>``
counts down as ``savedAt`` grows, so name order is newest first, ties by key, and a keyset
cursor is a start-after name. ``<tags>`` hash owner, agent and failure phase, so filters skip
entries unread. The header holds the key, the summary and a random write token; a record kept
in segments adds ``segs`` (``[[id, size], ...]``, oldest first) and ``dig`` (``segments.py``),
and the S3 backend's ``inl``: that many of the object's last bytes are history content held in
the record itself, the newest, after every listed segment's (absent: none).

A save writes its new index entry, then the record (the commit point), then deletes the
previous entry. An entry counts only while its record carries its token, so a crash leaves at
most an entry that listing skips: never a key listed twice, a dropped key or a stale summary,
and never a committed record missing from the index. ``verify(repair=True)`` (the CLI's
``verify --repair``) writes missing entries and deletes stale ones.

A drop replaces the record with a tombstone (a header with the key's last revision and
``"dead": true``, no body), written under the same condition as any write, so that the key's
next record continues past every revision it had; reads and listings treat it as absent. Oldest-first listing
(retention) has no index of its own: it reads the index from the bound to the end.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import itertools
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from ..errors import BackendError, InvalidKeyError
from .base import Closable, Query, Record, Summary, is_after, matches
from .segments import Split

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


class RecentSegments:
    """The bytes of the segments this backend committed last, up to ``limit`` bytes, so that
    a read or a merge takes the newest segments without reading them back. Segment ids are never
    reused, so a cached segment never goes stale; it leaves when its object is deleted."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._held: OrderedDict[str, bytes] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def add(self, path: str, data: bytes) -> None:
        if len(data) > self.limit:
            return
        with self._lock:
            self._size += len(data) - len(self._held.pop(path, b""))
            self._held[path] = data
            while self._size > self.limit:
                self._size -= len(self._held.popitem(last=False)[1])

    def get(self, path: str) -> bytes | None:
        with self._lock:
            return self._held.get(path)

    def discard(self, paths: Iterable[str]) -> None:
        with self._lock:
            for path in paths:
                self._size -= len(self._held.pop(path, b""))


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
    return query.phase is None or phase == _tag(query.phase)


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
    """``[[id, size], ...]`` of a record stored in segments; ``None`` for a whole one."""
    segs = fields.get("segs")
    return segs if isinstance(segs, list) else None


def extends(fields: dict[str, Any], revision: int, digest: str) -> bool:
    """Whether the record with header ``fields`` is the segmented one an append extends."""
    return (
        segments_of(fields) is not None
        and fields.get("rev") == revision
        and fields.get("dig") == digest
    )


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
    the paths of records, index entries and segments, and listing through the index (``scan``),
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

    def superseded(self, name: str, fields: dict[str, Any] | None, kept: set[str]) -> list[str]:
        """What a write that replaced the record with header ``fields`` leaves behind: its
        index entry and the segments the new record does not list (ids are never reused, so
        no later record can refer to them)."""
        if fields is None or is_grave(fields):
            return []
        current = self.current(fields, name, "save")
        paths = [self.entry_path(current.summary, name, current.token)]
        paths += [self.segment_path(name, str(sid)) for sid, _ in segments_of(fields) or []
                  if sid not in kept]  # fmt: skip
        return paths

    def unlisted(
        self,
        paths: Sequence[str],
        headers: Callable[[list[str]], list[dict[str, Any] | None]],
    ) -> list[str]:
        """The segment objects among ``paths`` that their record does not list, ``headers``
        reading the records' header fields by name."""
        by_name: dict[str, list[str]] = {}
        for path in paths:
            name, slash, _ = path[len(self.segments) :].rpartition("/")
            if slash:
                by_name.setdefault(name, []).append(path)
        owners = list(by_name)
        orphans: list[str] = []
        for name, fields in zip(owners, headers(owners), strict=True):
            segs = segments_of(fields) if fields is not None else None
            kept = {self.segment_path(name, str(sid)) for sid, _ in segs or []}
            orphans.extend(path for path in by_name[name] if path not in kept)
        return sorted(orphans)

    def scan(
        self,
        query: Query,
        entries: Callable[[str], Iterator[Entry]],
        fetch_many: Callable[[list[str]], list[Current | None]],
    ) -> list[Summary]:
        """``Backend.scan`` over the index: ``entries(start)`` yields the entries in name order
        strictly after the name ``start``; ``fetch_many(names)`` reads those records."""
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
        found = itertools.takewhile(lambda e: e.position <= stop, entries(start))
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


class ObjectLayout(Closable):
    """The fsspec backend's base: ``Layout``'s methods under the names that backend calls.
    The subclass sets ``_records``, ``_index`` and ``_segments`` (path prefixes ending in
    ``/``) and provides ``_save``, ``_entries`` and ``_fetch_many``."""

    name: str
    _records: str
    _index: str
    _segments: str

    @functools.cached_property
    def _layout(self) -> Layout:
        return Layout(self.name, self._records, self._index, self._segments)

    def save(
        self, record: Record, *, expect_revision: int | None = None, create_only: bool = False
    ) -> Summary:
        return self._save(record, None, expect_revision, create_only)

    def save_split(
        self,
        record: Record,
        split: Split,
        *,
        expect_revision: int | None = None,
        create_only: bool = False,
    ) -> Summary:
        """``save`` of a record kept as a head plus segment objects (``segments.py``)."""
        return self._save(record, split, expect_revision, create_only)

    def _save(
        self, record: Record, split: Split | None, expect_revision: int | None, create_only: bool
    ) -> Summary:
        raise NotImplementedError

    def _entries(self, start: str) -> Iterator[Entry]:
        """Index entries in name order, strictly after the name ``start``."""
        raise NotImplementedError

    def _fetch_many(self, names: Sequence[str], operation: str) -> list[Current | None]:
        raise NotImplementedError

    def _segment_path(self, name: str, sid: str) -> str:
        return self._layout.segment_path(name, sid)

    def _summary_of(
        self, fields: dict[str, Any] | None, name: str, operation: str
    ) -> Summary | None:
        return self._layout.summary_of(fields, name, operation)

    def _superseded(self, name: str, fields: dict[str, Any] | None, kept: set[str]) -> list[str]:
        return self._layout.superseded(name, fields, kept)

    def _unlisted(
        self,
        paths: Sequence[str],
        headers: Callable[[list[str]], list[dict[str, Any] | None]],
    ) -> list[str]:
        return self._layout.unlisted(paths, headers)

    def _entry_path(self, summary: Summary, name: str, token: str) -> str:
        return self._layout.entry_path(summary, name, token)

    def _parse(self, entry: str) -> Entry | None:
        return self._layout.parse(entry)

    def _current(
        self, fields: dict[str, Any], name: str, operation: str, etag: str = ""
    ) -> Current:
        return self._layout.current(fields, name, operation, etag)

    def _split(self, data: bytes, path: str, operation: str) -> tuple[dict[str, Any], bytes]:
        return self._layout.split(data, path, operation)

    def scan(self, query: Query) -> list[Summary]:
        return self._layout.scan(query, self._entries, lambda n: self._fetch_many(n, "scan"))
