"""Any other fsspec URL (``gs://``, ``az://``, ...), in the layout of ``objects.py``.

``fsspec+memory://path`` reaches fsspec's own memory filesystem (``memory://`` is the library's
``MemoryBackend``): a leading ``fsspec+`` is stripped and the rest handed to fsspec.

fsspec has no compare-and-swap, so this backend holds its conditional writes (revisions,
create-only, owner write-once) under a lock per filesystem and root in this process: correct
within one process (fsspec's memory filesystem is per process anyway), not between processes,
which ``conditional_writes_across_processes = False`` declares. A record is one ``pipe_file``:
atomic where the filesystem's uploads are (object stores), not necessarily on a folder.

A growing history is kept as S3 keeps it (``Appending``, see ``segments.py``): the record holds
the head and lists its segments, each an object ``segments/<name>/<id>`` written before the
record that refers to it, so a put that extends the previous revision writes the new messages
and a small head instead of the whole history. Ids are never reused: a reader that raced a
write and misses a segment reads the record again, and a backend reads the segments it wrote
last from memory. Segments a write supersedes are deleted after it; ones a crashed writer left
are found by ``collect_orphans``.
"""

from __future__ import annotations

import bisect
import secrets
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import suppress
from datetime import datetime
from typing import Any

import orjson

from ..errors import BackendError, ConflictError, InvalidKeyError, MissingDependencyError
from .base import Record, Summary, plan_save, translate_errors
from .objects import (
    PEEK,
    TRANSIENT,
    Current,
    Entry,
    ObjectLayout,
    RecentSegments,
    extends,
    fields_of,
    grave_fields,
    is_grave,
    key_name,
    next_revision,
    reserved_root,
    segments_of,
)
from .segments import Split, assemble, merge, merge_start, plan_append, plan_split

READS = 8  # a read that misses a segment a racing write deleted reads the record again
_LOCKS: dict[tuple[str, str], threading.RLock] = {}
_LOCKS_GUARD = threading.Lock()


def _lock_for(fs: Any, root: str) -> threading.RLock:
    """One lock per filesystem and root in this process, shared by every backend on them."""
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    with _LOCKS_GUARD:
        return _LOCKS.setdefault((protocol, root), threading.RLock())


class FsspecBackend(ObjectLayout):
    name = "fsspec"
    conditional_writes_across_processes = False
    max_segments = 32
    recent_segment_bytes = 4 << 20
    """How many bytes of the segments it wrote last a backend keeps, so that reading them
    back (a get, a merge) needs no request."""

    def __init__(self, fs: Any, root: str, *, _namespace: bool = False) -> None:
        self.fs = fs
        self.root = root.rstrip("/")
        if not _namespace:
            reserved_root("fsspec", self.root)
        self._records = f"{self.root}/records/"
        self._index = f"{self.root}/index/"
        self._segments = f"{self.root}/segments/"
        self._lock = _lock_for(fs, self.root)
        self._siblings: dict[str, FsspecBackend] = {}
        self._recent = RecentSegments(self.recent_segment_bytes)

    @classmethod
    def from_url(cls, url: str, *, fs: Any = None, **storage_options: Any) -> FsspecBackend:
        target = url.removeprefix("fsspec+")
        if fs is not None:
            return cls(fs, fs._strip_protocol(target))
        try:
            from fsspec.core import url_to_fs
        except ModuleNotFoundError as exc:
            raise MissingDependencyError(
                f"the {url.partition(':')[0]}:// store needs the 'fsspec' package, which is not "
                "installed; install it with: pip install 'localab-checkpoint[fsspec]'"
            ) from exc
        scheme = target.partition(":")[0]
        try:
            made, root = url_to_fs(target, **storage_options)
        except ImportError as exc:  # fsspec names the driver package to install
            raise MissingDependencyError(f"the {scheme}:// store needs a driver: {exc}") from exc
        except ValueError as exc:
            raise InvalidKeyError(
                f"no store backend or fsspec filesystem for {url!r}: {exc}"
            ) from exc
        return cls(made, root)

    def load(self, key: str) -> Record | None:
        return self._load(key_name(key), "load")

    def head(self, key: str) -> Summary | None:
        current = self._fetch_many([key_name(key)], "head")[0]
        return current.summary if current is not None else None

    def _save(
        self,
        record: Record,
        split: Split | None,
        expect_revision: int | None,
        create_only: bool,
    ) -> Summary:
        name = key_name(record.key)
        with self._lock:
            fields = self._headers([name], "save")[0]
            current = self._summary_of(fields, name, "save")
            summary = (plan_save if split is None else plan_split)(
                current,
                record,
                expect_revision=expect_revision,
                create_only=create_only,
                revision=next_revision(fields),
            )
            if split is None:
                self._commit(name, record.key, summary, record.body, {}, fields, [])
                return summary
            uploads = [(secrets.token_hex(8), split.segment)] if split.segment else []
            segs = [[sid, len(data)] for sid, data in uploads]
            extra = {"dig": split.digest, "segs": segs}
            self._commit(name, record.key, summary, split.head, extra, fields, uploads)
            return summary

    def append(
        self, summary: Summary, split: Split, *, base_revision: int, base_digest: str
    ) -> Summary | None:
        name = key_name(summary.key)
        with self._lock:
            fields = self._headers([name], "append")[0]
            if fields is None or not extends(fields, base_revision, base_digest):
                return None
            segs = segments_of(fields) or []
            current = self._summary_of(fields, name, "append")
            planned = plan_append(
                current, summary, base_revision=base_revision, revision=next_revision(fields)
            )
            uploads: list[tuple[str, bytes]] = []
            if split.segment:
                if len(segs) + 1 > self.max_segments:
                    start = merge_start([int(size) for _, size in segs], self.max_segments)
                    parts = self._read_segments(name, segs[start:], "append")
                    if parts is None:  # a segment is lost: a full write heals the record
                        return None
                    joined = merge(parts)
                    uploads.append((secrets.token_hex(8), joined))
                    segs = [*segs[:start], [uploads[-1][0], len(joined)]]
                uploads.append((secrets.token_hex(8), split.segment))
                segs = [*segs, [uploads[-1][0], len(split.segment)]]
            extra = {"dig": split.digest, "segs": segs}
            self._commit(name, summary.key, planned, split.head, extra, fields, uploads)
            return planned

    def _commit(
        self,
        name: str,
        key: str,
        summary: Summary,
        body: bytes,
        extra: dict[str, Any],
        previous: dict[str, Any] | None,
        uploads: list[tuple[str, bytes]],
    ) -> None:
        """Write the segments and the index entry, then the record (the commit point), then
        delete what the record replaced: its entry and the segments it no longer lists."""
        token = secrets.token_hex(8)
        entry = self._entry_path(summary, name, token)
        header = orjson.dumps({"key": key, **fields_of(summary, token), **extra}) + b"\n"
        first = {self._segment_path(name, sid): data for sid, data in uploads}
        first[entry] = b""
        try:
            with self._translate("save"):
                self._pipe(first)
                self._pipe({self._records + name: header + body})
        except BaseException:
            self._forget(list(first))  # nothing refers to them: the record was not written
            raise
        kept = {sid for sid, _ in extra.get("segs", [])}
        for sid, data in uploads:
            if sid in kept:
                self._recent.add(self._segment_path(name, sid), data)
        if previous is not None:
            self._forget(self._superseded(name, previous, kept))

    def collect_orphans(self, *, delete: bool = False, grace: float = 300.0) -> int:
        """Segment objects no record lists (a writer died between writing a segment and its
        record), older than ``grace`` seconds where the filesystem reports a time."""
        with self._lock:
            with self._translate("verify"):
                try:
                    found = self.fs.find(self._segments.rstrip("/"), detail=True)
                except FileNotFoundError:
                    found = {}
            cutoff = time.time() - grace
            old = [str(path) for path, info in found.items()
                   if (moment := _modified(info)) is None or moment <= cutoff]  # fmt: skip
            orphans = self._unlisted(old, lambda names: self._headers(names, "verify"))
            if delete:
                with self._translate("verify"):
                    for path in orphans:
                        self.fs.rm_file(path)
            return len(orphans)

    def drop(self, key: str, *, expect_revision: int | None = None) -> bool:
        name = key_name(key)
        with self._lock:
            fields = self._headers([name], "drop")[0]
            live = fields is not None and not is_grave(fields)
            current = self._current(fields, name, "drop") if fields and live else None
            if current is None or fields is None:
                if expect_revision is not None:
                    raise ConflictError(f"key {key!r} does not exist", key=key)
                return False
            found = current.summary.revision
            if expect_revision is not None and found != expect_revision:
                raise ConflictError(
                    f"key {key!r} is at revision {found}, not {expect_revision}", key=key
                )
            grave = grave_fields(found, secrets.token_hex(8))
            with self._translate("drop"):
                self._pipe({self._records + name: orjson.dumps(grave) + b"\n"})
            self._forget(self._superseded(name, fields, set()))
            return True

    def verify(self, *, repair: bool = False) -> dict[str, int]:
        """Compare the index with the records; with ``repair``, write missing entries and
        delete stale ones (under the lock, so no save from this process is in flight)."""
        with self._lock:
            names = [path.rsplit("/", 1)[1] for path in self._ls(self._records, "verify")]
            currents = self._fetch_many(names, "verify")
            expected = {
                self._entry_path(c.summary, n, c.token)
                for n, c in zip(names, currents, strict=True)
                if c is not None
            }
            present = set(self._ls(self._index, "verify"))
            missing, stale = expected - present, present - expected
            if repair:
                with self._translate("verify"):
                    for path in missing:
                        self.fs.pipe_file(path, b"")
                    for path in stale:
                        self.fs.rm_file(path)
        records = sum(c is not None for c in currents)
        return {"records": records, "missing": len(missing), "stale": len(stale)}

    def iter_records(self) -> Iterator[Record]:
        """Every record, read from the records themselves, not through the index."""
        for path in self._ls(self._records, "verify"):
            record = self._load(path.rsplit("/", 1)[1], "verify")
            if record is not None:
                yield record

    def rebuild_index(self) -> int:
        return self.verify(repair=True)["records"]

    def namespace(self, name: str) -> FsspecBackend:
        with self._lock:
            sibling = self._siblings.get(name)
            if sibling is None:
                sibling = self._siblings[name] = FsspecBackend(
                    self.fs, f"{self.root}/_{name}", _namespace=True
                )
            return sibling

    def close(self) -> None:
        self._closed = True  # fsspec caches and shares filesystems: they are not ours to close

    def _load(self, name: str, operation: str) -> Record | None:
        path = self._records + name
        for _ in range(READS):
            with self._translate(operation):
                try:
                    data = self.fs.cat_file(path)
                except FileNotFoundError:
                    return None
            fields, body = self._split(data, path, operation)
            if is_grave(fields):
                return None
            record = Record(self._current(fields, name, operation).summary, body)
            segs = segments_of(fields)
            if segs is None:
                return record
            parts = self._read_segments(name, segs, operation)
            if parts is not None:
                return Record(record.summary, assemble(body, parts))
            # A segment is gone: a write that replaced the record since deletes the ones it no
            # longer lists. If the record is still the one read, it was lost: the head alone
            # does not decode, so the record reads as unreadable, not as absent.
            again = self._headers([name], operation)[0]
            if again is None or is_grave(again):
                return None
            if again.get("tok") == fields.get("tok"):
                return record
        raise BackendError(
            f"{self.name} record {name!r} changed under {READS} attempts to read it",
            backend=self.name,
            operation=operation,
        )

    def _read_segments(self, name: str, segs: list[Any], operation: str) -> list[bytes] | None:
        """The segments' bytes, in order; ``None`` if one is missing. Those this backend wrote
        last come from memory (ids are never reused)."""
        paths = [self._segment_path(name, str(sid)) for sid, _ in segs]
        held = {path: self._recent.get(path) for path in paths}
        unread = [path for path, data in held.items() if data is None]
        found: Any = {}
        if unread:
            with self._translate(operation):
                found = self.fs.cat(unread, on_error="return")
        parts: list[bytes] = []
        for path in paths:
            part = held[path]
            if part is None:
                part = found.get(path) if isinstance(found, dict) else found
            if isinstance(part, FileNotFoundError) or part is None:
                return None
            if isinstance(part, BaseException):
                with self._translate(operation):
                    raise part
            parts.append(part)
        return parts

    def _ls(self, folder: str, operation: str) -> list[str]:
        with self._translate(operation):
            try:
                return [str(p) for p in self.fs.ls(folder.rstrip("/"), detail=False)]
            except FileNotFoundError:
                return []

    def _entries(self, start: str) -> Iterator[Entry]:
        # fsspec has no start-after: the folder is listed whole, then cut
        names = sorted(path.rsplit("/", 1)[1] for path in self._ls(self._index, "scan"))
        for name in names[bisect.bisect_right(names, start) :]:
            entry = self._parse(name)
            if entry is not None:
                yield entry

    def _fetch_many(self, names: Sequence[str], operation: str) -> list[Current | None]:
        return [
            None if fields is None or is_grave(fields) else self._current(fields, name, operation)
            for name, fields in zip(names, self._headers(names, operation), strict=True)
        ]

    def _headers(self, names: Sequence[str], operation: str) -> list[dict[str, Any] | None]:
        """The records' header fields (``None`` for a missing record), read a peek at a time."""
        if not names:
            return []
        paths = [self._records + name for name in names]
        with self._translate(operation):
            peeks = self.fs.cat_ranges(paths, [0] * len(paths), [PEEK] * len(paths),
                                       on_error="return")  # fmt: skip
        out: list[dict[str, Any] | None] = []
        for path, peek in zip(paths, peeks, strict=True):
            if isinstance(peek, FileNotFoundError):
                out.append(None)
                continue
            if isinstance(peek, BaseException):
                with self._translate(operation):
                    raise peek
            if b"\n" not in peek and len(peek) >= PEEK:
                with self._translate(operation):
                    peek = self.fs.cat_file(path)
            out.append(self._split(peek, path, operation)[0])
        return out

    def _pipe(self, objects: dict[str, bytes]) -> None:
        """Write ``objects`` (in one call: concurrent on the async filesystems), making their
        folders first on a filesystem that has folders (the local one, a directory
        filesystem) when a write finds one missing."""
        try:
            self.fs.pipe(objects)
        except FileNotFoundError:
            for folder in {path.rpartition("/")[0] for path in objects}:
                self.fs.makedirs(folder, exist_ok=True)
            self.fs.pipe(objects)

    def _forget(self, paths: Sequence[str]) -> None:
        """Best effort: a leftover entry is skipped by listing and removed by ``verify``."""
        self._recent.discard(paths)
        for path in paths:
            with suppress(Exception):
                self.fs.rm_file(path)

    def _translate(self, operation: str) -> Any:
        return translate_errors(self.name, operation, transient=TRANSIENT, fatal=(Exception,))


def _modified(info: dict[str, Any]) -> float | None:
    """When an object was last written, as fsspec's drivers report it (their keys differ)."""
    for key in ("mtime", "created", "LastModified", "updated", "last_modified"):
        value = info.get(key)
        if isinstance(value, int | float):
            return float(value)
        if isinstance(value, datetime):
            return value.timestamp()
    return None
