"""Any other fsspec URL (``gs://``, ``az://``, ...), in the layout of ``_objects.py``.

``fsspec+memory://path`` reaches fsspec's own memory filesystem (``memory://`` is the library's
``MemoryBackend``): a leading ``fsspec+`` is stripped and the rest handed to fsspec.

fsspec has no compare-and-swap, so this backend holds its conditional writes (revisions,
create-only, owner write-once) under a lock per filesystem and root in this process: correct
within one process (fsspec's memory filesystem is per process anyway), not between processes,
which ``conditional_writes_across_processes = False`` declares. A record is one ``pipe_file``:
atomic where the filesystem's uploads are (object stores), not necessarily on a folder.

Growing histories are the store's segment layer's (``_segments.py``): its pieces are records
in the ``segments`` namespace, and ``load_many`` reads a record's pieces with one ``cat``
(concurrent on the async filesystems).
"""

from __future__ import annotations

import bisect
import secrets
import threading
from collections.abc import Iterator, Sequence
from contextlib import suppress
from typing import Any

import orjson

from ..errors import InvalidKeyError, MissingDependencyError
from ._base import Closable, Query, Record, Summary, plan_drop, translate_errors
from ._objects import (
    PEEK,
    TRANSIENT,
    Current,
    Entry,
    Layout,
    fields_of,
    grave_fields,
    in_segments,
    is_grave,
    key_name,
    reserved_root,
    segments_of,
)
from ._url_options import EVERY, SCHEMES

READS = 8  # a read that misses a legacy segment a racing write deleted reads again
_LOCKS: dict[tuple[str, str], threading.RLock] = {}
_LOCKS_GUARD = threading.Lock()


def _lock_for(fs: Any, root: str) -> threading.RLock:
    """One lock per filesystem and root in this process, shared by every backend on them."""
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    with _LOCKS_GUARD:
        return _LOCKS.setdefault((protocol, root), threading.RLock())


class FsspecBackend(Closable):
    name = "fsspec"
    conditional_writes_across_processes = False

    def __init__(self, fs: Any, root: str, *, _namespace: bool = False) -> None:
        self.fs = fs
        self.root = root.rstrip("/")
        if not _namespace:
            reserved_root("fsspec", self.root)
        self._layout = Layout.under(self.name, self.root + "/")
        self._records = self._layout.records
        self._index = self._layout.index
        self._lock = _lock_for(fs, self.root)
        self._siblings: dict[str, FsspecBackend] = {}

    @classmethod
    def from_url(cls, url: str, *, fs: Any = None, **storage_options: Any) -> FsspecBackend:
        """Any fsspec URL (``fsspec+`` stripped), keywords being the filesystem's storage
        options; or a ready filesystem (``fs=``), beside which they are refused."""
        SCHEMES["fsspec"].read(url, storage_options, client=fs, driver_keywords=EVERY)
        target = url.removeprefix("fsspec+")
        if fs is not None:
            return cls(fs, fs._strip_protocol(target))
        return cls(*_filesystem(url, storage_options))

    def load(self, key: str) -> Record | None:
        return self._load(key_name(key), "load")

    def in_old_layout(self, key: str) -> bool:
        return in_segments(self._headers([key_name(key)], "load")[0])

    def head(self, key: str) -> Summary | None:
        current = self._fetch_many([key_name(key)], "head")[0]
        return current.summary if current is not None else None

    def load_many(self, keys: Sequence[str]) -> list[Record | None]:
        names = [key_name(key) for key in keys]
        with self._translate("load"):
            found = self.fs.cat([self._records + name for name in names], on_error="return")
        out: list[Record | None] = []
        for name in names:
            data = found.get(self._records + name) if isinstance(found, dict) else found
            if isinstance(data, FileNotFoundError) or data is None:
                out.append(None)
                continue
            if isinstance(data, BaseException):
                with self._translate("load"):
                    raise data
            fields, body = self._layout.split(data, self._records + name, "load")
            if segments_of(fields) is not None:  # a record in legacy segment objects
                out.append(self._load(name, "load"))
                continue
            summary = self._layout.summary_of(fields, name, "load")
            out.append(None if summary is None else Record(summary, body))
        return out

    def save(
        self, record: Record, *, expect_revision: int | None = None, create_only: bool = False
    ) -> Summary:
        name = key_name(record.key)
        with self._lock:
            fields = self._headers([name], "save")[0]
            summary = self._layout.plan(
                fields, name, record, expect_revision=expect_revision, create_only=create_only
            )
            kept = self._layout.kept_token(fields, name, summary)
            token = kept or secrets.token_hex(8)
            entry = self._layout.entry_path(summary, name, token)
            header = orjson.dumps({"key": record.key, **fields_of(summary, token)}) + b"\n"
            try:
                with self._translate("save"):
                    if not kept:
                        self._pipe({entry: b""})  # the entry first: a record never misses it
                    self._pipe({self._records + name: header + record.body})
            except BaseException:
                if not kept:
                    self._forget([entry])  # nothing refers to it: the record was not written
                raise
            self._forget(self._layout.superseded(name, fields, kept))
            return summary

    def drop(self, key: str, *, expect_revision: int | None = None) -> bool:
        name = key_name(key)
        with self._lock:
            fields = self._headers([name], "drop")[0]
            live = fields is not None and not is_grave(fields)
            current = self._layout.current(fields, name, "drop") if fields and live else None
            found = current.summary.revision if current is not None else None
            if not plan_drop(key, found, expect_revision):
                return False
            assert fields is not None and found is not None  # a live record was found
            grave = grave_fields(found, secrets.token_hex(8))
            with self._translate("drop"):
                self._pipe({self._records + name: orjson.dumps(grave) + b"\n"})
            self._forget(self._layout.superseded(name, fields))
            return True

    def forget(self, key: str) -> None:
        """Remove ``key``'s record and index entry, leaving no tombstone (``Forgetting``: for
        keys never written again, such as the segment layer's pieces)."""
        name = key_name(key)
        with self._lock:
            fields = self._headers([name], "forget")[0]
            if fields is None:
                return
            with self._translate("forget"):
                self.fs.rm_file(self._records + name)  # first: an entry alone is skipped
            self._forget(self._layout.superseded(name, fields))

    def scan(self, query: Query) -> list[Summary]:
        return self._layout.scan(query, self._entries, lambda n: self._fetch_many(n, "scan"))

    def verify(self, *, repair: bool = False) -> dict[str, int]:
        """Compare the index with the records; with ``repair``, write missing entries and
        delete stale ones (under the lock, so no save from this process is in flight)."""
        with self._lock:
            names = [path.rsplit("/", 1)[1] for path in self._ls(self._records, "verify")]
            currents = self._fetch_many(names, "verify")
            expected = {
                self._layout.entry_path(c.summary, n, c.token)
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
        def get(path: str) -> tuple[bytes, str] | None:
            with self._translate(operation):
                try:
                    return self.fs.cat_file(path), ""
                except FileNotFoundError:
                    return None

        def get_all(paths: list[str]) -> list[bytes | None]:
            with self._translate(operation):
                found = self.fs.cat(paths, on_error="return")
            parts = [found.get(p) if isinstance(found, dict) else found for p in paths]
            return [part if isinstance(part, bytes) else None for part in parts]

        def still(fields: dict[str, Any], _: str) -> bool | None:
            again = self._headers([name], operation)[0]
            if again is None or is_grave(again):
                return None
            return again.get("tok") == fields.get("tok")

        return self._layout.load(
            name, operation, get=get, get_all=get_all, still=still, tries=READS
        )

    def _ls(self, folder: str, operation: str) -> list[str]:
        with self._translate(operation):
            try:
                return [str(p) for p in self.fs.ls(folder.rstrip("/"), detail=False)]
            except FileNotFoundError:
                return []

    def _entries(self, start: str, first: int) -> Iterator[Entry]:
        # fsspec has no start-after nor pages (``first`` goes unused): the folder is listed
        # whole, then cut
        names = sorted(path.rsplit("/", 1)[1] for path in self._ls(self._index, "scan"))
        for name in names[bisect.bisect_right(names, start) :]:
            entry = self._layout.parse(name)
            if entry is not None:
                yield entry

    def _fetch_many(self, names: Sequence[str], operation: str) -> list[Current | None]:
        return [
            None
            if fields is None or is_grave(fields)
            else self._layout.current(fields, name, operation)
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
            out.append(self._layout.split(peek, path, operation)[0])
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
        for path in paths:
            with suppress(Exception):
                self.fs.rm_file(path)

    def _translate(self, operation: str) -> Any:
        return translate_errors(self.name, operation, transient=TRANSIENT, fatal=(Exception,))


def _filesystem(url: str, storage_options: dict[str, Any]) -> tuple[Any, str]:
    """fsspec's filesystem for ``url`` (``fsspec+`` stripped), and the root path in it."""
    target = url.removeprefix("fsspec+")
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
        raise InvalidKeyError(f"no store backend or fsspec filesystem for {url!r}: {exc}") from exc
    return made, root
