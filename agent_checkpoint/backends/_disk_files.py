"""The disk backend's files (``_disk.py`` locks and indexes them): the record file format, a
JSON header line then the stored bytes.

A record of at most ``LOG_BYTES`` is a *frame*: its header also holds the length (``frame``) and
a checksum (``sum``) of its bytes, so that the next write of the key may append its own frame
to the file (one write and one fsync, no new file, rename or folder fsync) instead of
replacing the file. The newest whole frame is the record: a frame a killed writer left torn
(too short, or failing its checksum) is ignored, and the next write replaces the file. A
write that would grow the file past ``LOG_BYTES``, a larger record and the first record of
a key replace the file (temp file, fsync, rename, folder fsync), with one frame.
A rewrite's earlier frames stay in the file until it is replaced (at most ``LOG_BYTES`` of the
key's earlier versions; a delete removes the file at once, and a write of sealed bytes over
plain ones or back replaces it, ``DiskBackend.save``: a rekey leaves no plain frame behind). Versions
before frames read a file of several as unreadable (all after its first header as the
record): a store this version wrote needs this version or a later one.

Version 0.4 stored a growing history *split*: the record file held the envelope's head (its
history cut out at ``GAP``) and a ``split`` header naming a data file under ``segments/``
that appends grew. Such records are still read (``assembled``) and their data files removed
when the record is next written or deleted; nothing writes them any more (the Store's segment
layer keeps long histories in pieces of its own).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import xxhash

from ..errors import BackendError
from ._base import Record, Summary
from ._legacy import assemble

__all__ = [
    "FLOOR_FILE",
    "LOG_BYTES",
    "RecordFiles",
    "Split",
    "file_name",
    "header_line",
    "is_record_file",
    "is_tombstone",
    "parse_record",
    "tombstone_line",
]

_SAFE = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"
_RECORD_FILE = re.compile(r".*~[0-9a-f]{20}")
_TOMBSTONE = b'{"tombstone":true,'


def file_name(key: str) -> str:
    """A file name no key can escape the folder with: a readable, percent-encoded prefix and a
    hash of the whole key, so long keys and keys differing only by case stay distinct."""
    readable = urllib.parse.quote(key, safe=_SAFE)[:120]
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:20]
    return f"{readable}~{digest}"


def is_record_file(name: str) -> bool:
    """Whether a name in ``records/`` is a record file (a key may begin with a dot, so a
    record file may too; a temp file never ends as ``file_name`` ends)."""
    return _RECORD_FILE.fullmatch(name) is not None


def is_tombstone(data: bytes) -> bool:
    """Whether a record file is a deleted key's tombstone (versions before ``FLOOR_FILE``
    left one per deleted key, holding its last revision; still read, no longer written)."""
    return data.startswith(_TOMBSTONE)


def tombstone_line(key: str, revision: int) -> bytes:
    """The whole file a deleted key left before ``FLOOR_FILE`` (for tests of older stores)."""
    return _TOMBSTONE + orjson.dumps({"key": key, "revision": revision})[1:]


FLOOR_FILE = "revision-floor"
"""The file under a store's root that holds its *floor*: the highest revision any deleted
key had. A key with no record file starts past it, so a deleted key's revisions never repeat
(no ABA) although its file is removed whole: the store shrinks as keys are deleted."""


LOG_BYTES = 64 * 1024
"""The size a record file may grow to by appended frames before a write replaces it."""


def header_line(summary: Summary, body: bytes | None = None) -> bytes:
    """The header of ``summary``'s record; with ``body``, of a frame that holds it."""
    fields: dict[str, Any] = {
        "key": summary.key,
        "runId": summary.run_id,
        "savedAt": summary.saved_at,
        "owner": summary.owner,
        "agentId": summary.agent_id,
        "failurePhase": summary.failure_phase,
        "failureIteration": summary.failure_iteration,
        "messageCount": summary.message_count,
        "revision": summary.revision,
        "size": summary.size,  # what a reader gets back: more than the file holds, for a
    }  # record of the Store's segment layer (its older history is in pieces)
    if body is not None:
        fields["frame"] = len(body)
        fields["sum"] = xxhash.xxh3_64_intdigest(body)
    return orjson.dumps(fields)


Split = dict[str, Any]
"""A version 0.4 split record's header part: generation, segment count, digest, assembled
size, and the committed length of the generation's data file (``len``; absent in the still
older layout of one file per segment, ``<generation>-<index>``)."""


def parse_record(key: str, data: bytes) -> tuple[Record, Split | None]:
    """The record in a file's bytes (for a split record, its head) and its split header. A file
    whose header does not parse is still returned, whole, so the codec reports it unreadable
    rather than absent."""
    return _parsed(key, data)[:2]


def _parsed(key: str, data: bytes) -> tuple[Record, Split | None, int | None]:
    """``parse_record``, and where the file ends if a frame may be appended to it: a file of
    frames whose newest ends the file (nothing torn after it), else ``None``."""
    head, sep, body = data.partition(b"\n")
    try:
        h: dict[str, Any] = orjson.loads(head) if sep else {}
        end = None
        if "frame" in h and (newest := _newest_frame(data, h, len(head) + 1)):
            h, start, end = newest  # else damaged: its first header's, unreadable as a whole
            body = data[start:end]
        split = h.get("split")
        summary = Summary(
            key=h["key"],
            run_id=h["runId"],
            saved_at=h["savedAt"],
            owner=h["owner"],
            agent_id=h["agentId"],
            failure_phase=h["failurePhase"],
            failure_iteration=h["failureIteration"],
            message_count=h["messageCount"],
            size=split["size"] if split else h.get("size", len(body)),
            revision=h["revision"],
        )
    except (orjson.JSONDecodeError, TypeError, KeyError, ValueError):
        whole = Summary(key, "", 0, None, None, None, None, 0, len(data), 0)
        return Record(whole, data), None, None
    return Record(summary, body), split, end if end == len(data) else None


def _newest_frame(
    data: bytes, first: dict[str, Any], start: int
) -> tuple[dict[str, Any], int, int] | None:
    """The header, start and end of the newest whole frame of ``data``, whose first frame's
    header is ``first`` and its bytes begin at ``start``. Only the last frame may be torn (a
    writer appends only to a file whose newest frame ends it); ``None`` if the first frame
    is not whole: the file is damaged."""
    frames = []
    header, pos = first, start
    while True:
        end = pos + _length(header)
        if end > len(data):
            break  # torn: cut short
        frames.append((header, pos, end))
        newline = data.find(b"\n", end)
        if newline < 0:
            break  # the end of the file, or a header cut short
        try:
            header = orjson.loads(data[end:newline])
            _length(header)
        except (orjson.JSONDecodeError, TypeError, KeyError, ValueError):
            break  # a header torn across its newline (a power loss may leave one)
        pos = newline + 1
    for header, pos, end in frames[-2:][::-1]:
        if xxhash.xxh3_64_intdigest(memoryview(data)[pos:end]) == header.get("sum"):
            return header, pos, end
    return None


def _length(header: dict[str, Any]) -> int:
    length = header["frame"]
    if type(length) is not int or length < 0:
        raise ValueError(f"not a frame length: {length!r}")
    return length


class RecordFiles:
    """The ``records/`` and ``segments/`` folders under a disk store's root. The caller holds
    the key's lock around every write."""

    def __init__(self, root: Path, *, fsync: bool) -> None:
        self.root = root
        self.records = root / "records"
        self.segments = root / "segments"
        self.fsync = fsync

    def path(self, key: str) -> Path:
        return self.records / file_name(key)

    def read(self, key: str) -> tuple[Record, Split | None] | None:
        return self.state(key)[0]

    def state(self, key: str) -> tuple[tuple[Record, Split | None] | None, int, int | None]:
        """The record file's record and split header (``None`` for no record), the last
        revision the key had (its record's, a tombstone's, or 0 for a key never written), and
        where a frame may be appended (``None``: the next write replaces the file)."""
        try:
            data = self.path(key).read_bytes()
        except FileNotFoundError:
            return None, 0, None
        if is_tombstone(data):
            revision = orjson.loads(data).get("revision")
            return None, revision if isinstance(revision, int) else 0, None
        record, split, end = _parsed(key, data)
        return (record, split), record.summary.revision, end

    def assembled(self, record: Record, split: Split | None) -> Record | None:
        """The record with its history put back; ``None`` if its data file is gone (a full
        write replaced it since the record file was read: read again)."""
        if split is None:
            return record
        folder = self.segments / file_name(record.key)
        segments: list[bytes] | None
        try:
            if "len" not in split:  # the older layout: one file per segment
                segments = [
                    (folder / f"{split['gen']}-{i}").read_bytes() for i in range(split["segs"])
                ]
            else:
                with open(folder / str(split["gen"]), "rb") as f:
                    data = f.read(split["len"])
                # a truncated data file: the head alone, which reads as unreadable
                segments = [data] if len(data) == split["len"] else None
        except FileNotFoundError:
            return None
        return Record(record.summary, assemble(record.body, segments))

    def load(self, key: str) -> Record | None:
        found = self.read(key)
        while found is not None:
            record = self.assembled(*found)
            if record is not None:
                return record
            again = self.read(key)
            if again is not None and again[1] == found[1]:
                return found[0]  # the record still refers to it: lost, so it reads unreadable
            found = again  # a full write replaced the data file between the two reads
        return None

    def every(self) -> Iterator[Record]:
        """Every record file's record, in no particular order."""
        for path in self.records.iterdir():
            if not is_record_file(path.name):
                continue
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                continue
            if is_tombstone(data):
                continue
            record, split = parse_record(path.name, data)
            whole = self.assembled(record, split)
            if whole is None:  # rewritten meanwhile: read it again
                whole = self.load(record.summary.key)
            if whole is not None:
                yield whole

    def write(self, key: str, summary: Summary, body: bytes, *, end: int | None) -> None:
        """Replace the record: a frame appended at ``end`` (``state``'s), if the file stays
        within ``LOG_BYTES``, then fsynced; else the file replaced atomically (temp file,
        fsync, rename, folder fsync)."""
        if len(body) > LOG_BYTES:
            self.write_whole(key, header_line(summary) + b"\n", body)  # not joined: no copy
            return
        frame = header_line(summary, body) + b"\n" + body
        if end is None or end + len(frame) > LOG_BYTES:
            self.write_whole(key, frame)
            return
        fd = os.open(self.path(key), os.O_WRONLY)
        try:
            view = memoryview(frame)
            while view:  # a torn frame (a kill, a full disk) is ignored by readers
                view = view[os.pwrite(fd, view, end + len(frame) - len(view)) :]
            if self.fsync:
                os.fsync(fd)
        finally:
            os.close(fd)

    def remove(self, key: str) -> None:
        """Remove the record file, durably."""
        self.path(key).unlink(missing_ok=True)
        self.fsync_dir(self.records)

    def floor(self) -> int:
        """The store's floor (``FLOOR_FILE``): 0 until a key is deleted. The caller holds the
        lock of the key it is about to write: the floor was raised past that key's last
        revision, under that lock, before its record file went."""
        try:
            text = (self.root / FLOOR_FILE).read_bytes()
        except FileNotFoundError:
            return 0
        if not text.strip().isdigit():
            raise BackendError(
                f"{self.root / FLOOR_FILE} holds {text[:40]!r}, not a revision, so a new key "
                "cannot be given one its deleted predecessor never had; write into it the "
                "highest revision the store's records ever had",
                backend="disk",
                operation="save",
            )
        return int(text)

    def raise_floor(self, revision: int, lock: Path) -> None:
        """Raise the floor to ``revision`` (if below it), durably, before a record file with
        that revision is removed; ``lock`` serialises the raisers (a lower value written
        last would undo a higher one)."""
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if revision <= self.floor():
                return
            target = self.root / FLOOR_FILE
            tmp = target.with_name(f".{FLOOR_FILE}.{os.getpid()}.{threading.get_ident()}.tmp")
            try:
                with open(tmp, "wb") as f:
                    f.write(b"%d\n" % revision)
                    f.flush()
                    if self.fsync:
                        os.fsync(f.fileno())
                os.replace(tmp, target)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
            self.fsync_dir(self.root)  # on the disk before the record file goes
        finally:
            os.close(fd)

    def write_whole(self, key: str, *parts: bytes) -> None:
        """Replace the record file with ``parts``: temp file, fsync, rename, folder fsync."""
        target = self.path(key)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            with open(tmp, "wb") as f:
                for part in parts:
                    f.write(part)
                f.flush()
                if self.fsync:
                    os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        self.fsync_dir(self.records)

    def prune_segments(self, key: str, keep_gen: int | None) -> None:
        """Remove segment files no record file refers to (older generations, or all)."""
        folder = self.segments / file_name(key)
        if not folder.exists():
            return
        for path in folder.iterdir():
            if keep_gen is None or path.name.split("-", 1)[0] != str(keep_gen):
                path.unlink(missing_ok=True)
        if keep_gen is None:
            with contextlib.suppress(OSError):
                folder.rmdir()

    def orphans(self, grace: float) -> list[Path]:
        """Files older than ``grace`` seconds that no record file refers to: the temp files of
        writers that died before their rename (the floor's too), and data files of generations no record names
        (left by a writer that died between writing the data and its record, or between the
        commit and the prune)."""
        cutoff = time.time() - grace
        found = [
            path
            for path in _entries(self.records)
            if not is_record_file(path.name) and _older(path, cutoff)
        ]
        found += [  # a raiser of the floor killed before its rename
            path for path in self.root.glob(f".{FLOOR_FILE}.*.tmp") if _older(path, cutoff)
        ]
        for folder in self.legacy_folders():
            try:
                data = (self.records / folder.name).read_bytes()
            except FileNotFoundError:
                data = b""
            kept = None
            if data and not is_tombstone(data):
                split = parse_record(folder.name, data)[1]
                kept = str(split["gen"]) if split else None
            found += [
                path
                for path in _entries(folder)
                if path.name.split("-", 1)[0] != kept and _older(path, cutoff)
            ]
        return found

    def tombstones(self) -> list[tuple[str, Path, int]]:
        """The keys, files and revisions of the tombstones stores of earlier versions left."""
        found = []
        for path in _entries(self.records):
            if not is_record_file(path.name):
                continue
            try:
                with open(path, "rb") as f:
                    if not is_tombstone(f.read(len(_TOMBSTONE))):
                        continue
                    fields = orjson.loads(_TOMBSTONE + f.read())
            except (FileNotFoundError, orjson.JSONDecodeError):
                continue
            key, revision = fields.get("key"), fields.get("revision")
            if isinstance(key, str) and file_name(key) == path.name and type(revision) is int:
                found.append((key, path, revision))
        return found

    def legacy_folders(self) -> list[Path]:
        """The folders of version 0.4's history data files (none in a newer store)."""
        return _entries(self.segments)

    def fsync_dir(self, folder: Path) -> None:
        if self.fsync:
            fd = os.open(folder, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def _entries(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return []


def _older(path: Path, cutoff: float) -> bool:
    try:
        return path.stat().st_mtime < cutoff
    except FileNotFoundError:
        return False
