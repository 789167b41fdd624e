"""Any other fsspec URL (``gs://``, ``az://``, ...), in the layout of ``objects.py``.

``fsspec+memory://path`` reaches fsspec's own memory filesystem (``memory://`` is the library's
``MemoryBackend``): a leading ``fsspec+`` is stripped and the rest handed to fsspec.

fsspec has no compare-and-swap, so this backend holds its conditional writes (revisions,
create-only, owner write-once) under a lock per filesystem and root in this process: correct
within one process (fsspec's memory filesystem is per process anyway), not between processes,
which ``conditional_writes_across_processes = False`` declares. A record is one ``pipe_file``:
atomic where the filesystem's uploads are (object stores), not necessarily on a folder.
"""

from __future__ import annotations

import bisect
import secrets
import threading
from collections.abc import Iterator, Sequence
from contextlib import suppress
from typing import Any

from ..errors import ConflictError, InvalidKeyError, MissingDependencyError
from .base import Record, Summary, plan_save, translate_errors
from .objects import PEEK, TRANSIENT, Current, Entry, ObjectLayout, key_name

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

    def __init__(self, fs: Any, root: str) -> None:
        self.fs = fs
        self.root = root.rstrip("/")
        self._records = f"{self.root}/records/"
        self._index = f"{self.root}/index/"
        self._lock = _lock_for(fs, self.root)
        self._siblings: dict[str, FsspecBackend] = {}

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

    def save(
        self, record: Record, *, expect_revision: int | None = None, create_only: bool = False
    ) -> Summary:
        name = key_name(record.key)
        with self._lock:
            current = self._fetch_many([name], "save")[0]
            summary = plan_save(
                current.summary if current else None,
                record,
                expect_revision=expect_revision,
                create_only=create_only,
            )
            token = secrets.token_hex(8)
            entry = self._entry_path(summary, name, token)
            data = self._header(record.key, summary, token) + record.body
            with self._translate("save"):
                self.fs.pipe_file(entry, b"")
                self.fs.pipe_file(self._records + name, data)
            if current is not None:
                self._forget([self._entry_path(current.summary, name, current.token)])
            return summary

    def drop(self, key: str, *, expect_revision: int | None = None) -> bool:
        name = key_name(key)
        with self._lock:
            current = self._fetch_many([name], "drop")[0]
            if current is None:
                if expect_revision is not None:
                    raise ConflictError(f"key {key!r} does not exist", key=key)
                return False
            found = current.summary.revision
            if expect_revision is not None and found != expect_revision:
                raise ConflictError(
                    f"key {key!r} is at revision {found}, not {expect_revision}", key=key
                )
            with self._translate("drop"):
                self.fs.rm_file(self._records + name)
            self._forget([self._entry_path(current.summary, name, current.token)])
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
                sibling = self._siblings[name] = FsspecBackend(self.fs, f"{self.root}/_{name}")
            return sibling

    def close(self) -> None:
        pass  # fsspec caches and shares filesystem instances; they are not ours to close

    def _load(self, name: str, operation: str) -> Record | None:
        path = self._records + name
        with self._translate(operation):
            try:
                data = self.fs.cat_file(path)
            except FileNotFoundError:
                return None
        fields, body = self._split(data, path, operation)
        return Record(self._current(fields, name, operation).summary, body)

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
        if not names:
            return []
        paths = [self._records + name for name in names]
        with self._translate(operation):
            peeks = self.fs.cat_ranges(paths, [0] * len(paths), [PEEK] * len(paths),
                                       on_error="return")  # fmt: skip
        out: list[Current | None] = []
        for name, path, peek in zip(names, paths, peeks, strict=True):
            if isinstance(peek, FileNotFoundError):
                out.append(None)
                continue
            if isinstance(peek, BaseException):
                with self._translate(operation):
                    raise peek
            if b"\n" not in peek and len(peek) >= PEEK:
                with self._translate(operation):
                    peek = self.fs.cat_file(path)
            out.append(self._current(self._split(peek, path, operation)[0], name, operation))
        return out

    def _forget(self, paths: Sequence[str]) -> None:
        """Best effort: a leftover entry is skipped by listing and removed by ``verify``."""
        for path in paths:
            with suppress(Exception):
                self.fs.rm_file(path)

    def _translate(self, operation: str) -> Any:
        return translate_errors(self.name, operation, transient=TRANSIENT, fatal=(Exception,))
