"""Bytes to JSON records without loading a whole file: JSON Lines, and one JSON document.

``JsonLines`` reads line by line from a binary file (never ``str.splitlines``, which also
splits on U+2028 and U+2029 inside strings), skips a UTF-8 BOM, bounds every line by
``max_record_bytes`` and can re-read a record later by its byte offset. ``JsonDocument``
scans a top-level array (or the arrays inside a top-level object) element by element, so a
large ``transcript.json`` is parsed one message at a time. ``dump_line`` writes one record.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal

import orjson

from .._model import Json
from .._writable import MAX_DEPTH, dumps, too_deep, writable_int
from ._errors import MalformedTranscriptError

__all__ = [
    "BOM",
    "MAX_RECORD_BYTES",
    "JsonDocument",
    "JsonLines",
    "Line",
    "TooDeepError",
    "dump_line",
]

BOM = b"\xef\xbb\xbf"
MAX_RECORD_BYTES = 32 * 1024 * 1024
"""Longest line or array element read, in bytes; a longer one is refused, never truncated."""

_CHUNK = 1 << 20
_FIRST_READ = 16 * 1024
"""What is read first to decode one record at a known offset (doubling up to ``_CHUNK``)."""
_WHOLE = 1 << 20
"""A file up to this size is read in one call and split, rather than line by line."""
_WS = b" \t\r\n"
_CONTAINER_TOKENS = re.compile(rb'["\[\]{}]')
_STRING_TOKENS = re.compile(rb'["\\]')
_SCALAR_END = re.compile(rb"[,\]}\s]")

Tolerance = Literal["none", "torn", "any"]


class TooDeepError(ValueError):
    """A record that is JSON but nests past ``MAX_DEPTH``, the most a checkpoint holds."""

    def __init__(self) -> None:
        super().__init__(
            f"nests objects and arrays deeper than {MAX_DEPTH} levels (MAX_DEPTH), the most a "
            "checkpoint holds"
        )


def loads(raw: bytes) -> Json:
    """Decode one JSON value; lone UTF-16 surrogates (which JavaScript writes) become U+FFFD.
    A value nested past ``MAX_DEPTH`` raises ``TooDeepError``."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        try:
            value = _scrub(json.loads(raw.decode("utf-8"), parse_int=_integer, parse_float=_float))
        except RecursionError:
            # orjson stops at 1,024 levels; the fallback must not recurse past Python's limit.
            raise TooDeepError from None
    if too_deep(value):
        raise TooDeepError
    return value


def _integer(text: str) -> int | float:
    """An integer as orjson reads it: past the 64-bit range (what orjson can write back), a
    float. The length test comes first: Python refuses ``int()`` of 4,300 digits or more."""
    if len(text) <= 20:
        value = int(text)
        if writable_int(value):
            return value
    return _float(text)


def _float(text: str) -> float:
    """A number as orjson reads it: one too large for a double is refused, not infinity."""
    value = float(text)
    if math.isinf(value):
        raise ValueError("number is infinity when parsed as double")
    return value


def _problem(exc: Exception, invalid: str = "is not valid JSON") -> str:
    """Why a record was refused, for a message naming where it is."""
    return str(exc) if isinstance(exc, TooDeepError) else f"{invalid} ({_reason(exc)})"


def _scrub(value: Json) -> Json:
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    if isinstance(value, dict):
        return {_scrub(k): _scrub(v) for k, v in value.items()}
    return value


def dump_line(value: Json) -> bytes:
    """One JSONL line. U+2028/U+2029 are escaped so line-splitting readers stay safe."""
    out = dumps(value, option=orjson.OPT_APPEND_NEWLINE)
    if b"\xe2\x80" in out:
        out = out.replace(b"\xe2\x80\xa8", b"\\u2028").replace(b"\xe2\x80\xa9", b"\\u2029")
    return out


@dataclass(frozen=True, slots=True)
class Line:
    number: int
    """1-based line number in the file."""
    offset: int
    """Byte offset of the line's first byte, for ``JsonLines.records_at``."""
    value: Json


class JsonLines:
    """A JSON Lines file, re-iterable, one decoded record per non-blank line.

    ``tolerate`` says which undecodable lines are skipped (with a note in ``notes``) rather
    than refused: ``"torn"`` only a final line with no newline (a writer killed mid-line),
    ``"any"`` every bad line, ``"none"`` none.
    """

    def __init__(
        self,
        path: Path,
        *,
        max_record_bytes: int = MAX_RECORD_BYTES,
        tolerate: Tolerance = "torn",
    ) -> None:
        self.path = path
        self.max_record_bytes = max_record_bytes
        self.tolerate = tolerate
        self.notes: list[str] = []

    def _raw_lines(self, f: BinaryIO) -> Iterator[tuple[int, bytes, bool]]:
        """Each line's byte offset, its bytes, and whether a newline ended it."""
        offset = 3 if f.read(3) == BOM else 0
        limit = self.max_record_bytes
        if os.fstat(f.fileno()).st_size - offset <= min(_WHOLE, limit):
            f.seek(offset)
            pieces = _whole(f)
            last = pieces.pop()
            for piece in pieces:
                yield offset, piece, True
                offset += len(piece) + 1
            if last:
                yield offset, last, False
            return
        f.seek(offset)
        number = 0
        while True:
            raw = f.readline(limit + 1)
            if not raw:
                return
            number += 1
            ended = raw.endswith(b"\n")
            if len(raw) > limit and not ended:
                raise MalformedTranscriptError(
                    f"{self.path}: line {number} is longer than {limit} bytes"
                )
            yield offset, raw, ended
            offset += len(raw)

    def __iter__(self) -> Iterator[Line]:
        self.notes = []
        skipped = 0
        with self.path.open("rb") as f:
            number = 0
            for start, raw, ended in self._raw_lines(f):
                number += 1
                stripped = raw.strip(_WS)
                if not stripped:
                    continue
                try:
                    value = loads(stripped)
                except (ValueError, UnicodeDecodeError) as exc:
                    torn = not ended and not isinstance(exc, TooDeepError)
                    if torn and self.tolerate != "none":
                        self.notes.append(f"ignored a torn final line {number} (incomplete JSON)")
                        continue
                    if self.tolerate == "any" and not isinstance(exc, TooDeepError):
                        skipped += 1
                        continue
                    raise MalformedTranscriptError(
                        f"{self.path}: line {number} {_problem(exc)}"
                    ) from None
                yield Line(number, start, value)
        if skipped:
            self.notes.append(f"skipped {skipped} line(s) that are not valid JSON")

    def records_at(self, offsets: Iterable[int]) -> Iterator[Json]:
        """Decode the lines starting at ``offsets`` (from ``Line.offset``), in the order given."""
        with self.path.open("rb") as f:
            for offset in offsets:
                f.seek(offset)
                raw = f.readline(self.max_record_bytes + 1)
                try:
                    yield loads(raw.strip(_WS))
                except (ValueError, UnicodeDecodeError):
                    raise MalformedTranscriptError(
                        f"{self.path}: the file changed while it was read (byte {offset})"
                    ) from None


def _whole(f: BinaryIO) -> list[bytes]:
    """The rest of ``f`` split at newlines, a BOM at its start skipped."""
    data = f.read()
    return (data[3:] if data.startswith(BOM) else data).split(b"\n")


def read_values(
    f: BinaryIO, name: str, *, max_record_bytes: int = MAX_RECORD_BYTES
) -> Iterator[tuple[int, Json]]:
    """Each non-blank line's number and value from the open JSON Lines file ``f`` (named
    ``name`` in errors): ``JsonLines`` without its tolerance of bad lines and without a
    ``Line`` per record, for readers that refuse the first line that is not JSON."""
    lines: Iterable[bytes]
    if os.fstat(f.fileno()).st_size <= min(_WHOLE, max_record_bytes):
        lines = _whole(f)
    else:
        stream = JsonLines(Path(name), max_record_bytes=max_record_bytes)
        lines = (raw for _, raw, _ in stream._raw_lines(f))
    for number, raw in enumerate(lines, 1):
        stripped = raw.strip(_WS)
        if stripped:
            try:
                yield number, loads(stripped)
            except (ValueError, UnicodeDecodeError) as exc:
                raise MalformedTranscriptError(f"{name}: line {number} {_problem(exc)}") from None


def _reason(exc: Exception) -> str:
    return str(exc).split("\n", 1)[0][:120]


class _Scanner:
    """Finds the extent of JSON values in a file read chunk by chunk."""

    def __init__(
        self, f: BinaryIO, path: Path, limit: int, start: int = 0, chunk: int = _CHUNK
    ) -> None:
        self.f, self.path, self.limit = f, path, limit
        self.chunk = chunk
        self.buf = b""
        self.pos = 0
        self.base = start
        self.eof = False
        if start:
            f.seek(start)
        elif f.read(3) != BOM:
            f.seek(0)
        else:
            self.base = 3

    def fail(self, what: str) -> MalformedTranscriptError:
        return MalformedTranscriptError(f"{self.path}: {what} at byte {self.base + self.pos}")

    def more(self, start: int) -> bool:
        if self.eof:
            return False
        if len(self.buf) - start > self.limit:
            raise self.fail(f"a record longer than {self.limit} bytes")
        chunk = self.f.read(self.chunk)
        if not chunk:
            self.eof = True
            return False
        self.chunk = min(self.chunk * 2, _CHUNK)  # a short read first, for one record
        self.buf += chunk
        return True

    def skip_ws(self) -> int | None:
        """Advance to the next significant byte and return it; ``None`` at end of file."""
        while True:
            buf = self.buf
            n = len(buf)
            while self.pos < n and buf[self.pos] in _WS:
                self.pos += 1
            if self.pos < n:
                return buf[self.pos]
            self.base += self.pos
            self.buf, self.pos = b"", 0
            if not self.more(0):
                return None

    def expect(self, chars: bytes) -> int:
        c = self.skip_ws()
        if c is None:
            raise self.fail("the JSON document ends early (truncated?)")
        if c not in chars:
            raise self.fail(f"expected {' or '.join(repr(chr(x)) for x in chars)}")
        self.pos += 1
        return c

    def value(self) -> bytes:
        """The raw bytes of the value starting at the next significant byte."""
        if self.skip_ws() is None:
            raise self.fail("the JSON document ends early (truncated?)")
        self.base += self.pos
        self.buf, self.pos = self.buf[self.pos :], 0
        end = self._end()
        if end > self.limit:
            raise self.fail(f"a record longer than {self.limit} bytes")
        raw, self.pos = self.buf[:end], end
        return raw

    def _end(self) -> int:
        first = self.buf[0]
        if first == 0x22:
            return self._string_end(1)
        if first in b"[{":
            depth, i = 0, 0
            while True:
                m = _CONTAINER_TOKENS.search(self.buf, i)
                if m is None:
                    if not self.more(0):
                        raise self.fail("the JSON document ends inside a value (truncated?)")
                    continue
                ch = self.buf[m.start()]
                if ch == 0x22:
                    i = self._string_end(m.end())
                    continue
                depth += 1 if ch in b"[{" else -1
                i = m.end()
                if depth == 0:
                    return i
        while True:
            m = _SCALAR_END.search(self.buf)
            if m is not None:
                return m.start()
            if not self.more(0):
                return len(self.buf)

    def _string_end(self, i: int) -> int:
        while True:
            m = _STRING_TOKENS.search(self.buf, i)
            if m is None or (self.buf[m.start()] == 0x5C and m.end() >= len(self.buf)):
                if not self.more(0):
                    raise self.fail("the JSON document ends inside a string (truncated?)")
                continue
            if self.buf[m.start()] == 0x5C:
                i = m.end() + 1
                continue
            return m.end()


class JsonDocument:
    """One JSON document whose top level is an array of records or an object holding arrays.

    ``items()`` yields the top-level array's elements, or the elements of the arrays under the
    ``streamed`` member names of a top-level object, each decoded on its own. ``members()``
    gives the object's other members (a ``system`` prompt, a ``model``), decoded whole.
    """

    def __init__(self, path: Path, *, max_record_bytes: int = MAX_RECORD_BYTES) -> None:
        self.path = path
        self.max_record_bytes = max_record_bytes
        self.notes: list[str] = []

    def top(self) -> Literal["array", "object"]:
        with self.path.open("rb") as f:
            c = _Scanner(f, self.path, self.max_record_bytes).skip_ws()
        if c == ord("["):
            return "array"
        if c == ord("{"):
            return "object"
        raise MalformedTranscriptError(f"{self.path}: not a JSON array or object")

    def members(self, streamed: Sequence[str] = ()) -> tuple[dict[str, Json], list[str]]:
        """The members not in ``streamed``, decoded; and the ``streamed`` names holding arrays."""
        others: dict[str, Json] = {}
        arrays: list[str] = []
        for key, raw in self._walk(streamed, items=False):
            if raw is None:
                arrays.append(key or "")
            elif key is not None:
                others[key] = self._decode(raw)
        return others, arrays

    def items(self, streamed: Sequence[str] = ()) -> Iterator[Json]:
        """Elements of the top-level array, or of the ``streamed`` arrays in file order."""
        for _, raw in self._walk(streamed, items=True):
            if raw is not None:
                yield self._decode(raw)

    def located(self, streamed: Sequence[str]) -> Iterator[tuple[int, Json]]:
        """``items(streamed)`` with each element's byte offset, for ``value_at``."""
        with self.path.open("rb") as f:
            s = _Scanner(f, self.path, self.max_record_bytes)
            if s.expect(b"{") and s.skip_ws() == ord("}"):
                return
            while True:
                key = self._decode(s.value())
                s.expect(b":")
                if key in streamed and s.skip_ws() == ord("["):
                    s.expect(b"[")
                    if s.skip_ws() == ord("]"):
                        s.pos += 1
                    else:
                        while True:
                            raw = s.value()
                            yield s.base, self._decode(raw)
                            if s.expect(b",]") == ord("]"):
                                break
                else:
                    s.value()
                if s.expect(b",}") == ord("}"):
                    return

    def values_at(self, offsets: Iterable[int]) -> Iterator[Json]:
        """The values starting at the byte ``offsets`` (from ``located``), in the order given."""
        with self.path.open("rb") as f:
            for offset in offsets:
                s = _Scanner(f, self.path, self.max_record_bytes, offset, chunk=_FIRST_READ)
                yield self._decode(s.value())

    def _decode(self, raw: bytes) -> Json:
        try:
            return loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise MalformedTranscriptError(
                f"{self.path}: {_problem(exc, 'invalid JSON')}"
            ) from None

    def _walk(
        self, streamed: Sequence[str], *, items: bool
    ) -> Iterator[tuple[str | None, bytes | None]]:
        """``(None, element)`` of a top-level array; for an object, ``(key, element)`` of
        streamed arrays when ``items``, else ``(key, None)`` for them and ``(key, value)``
        for the other members."""
        with self.path.open("rb") as f:
            s = _Scanner(f, self.path, self.max_record_bytes)
            top = s.skip_ws()
            if top == ord("["):
                yield from ((None, raw) for raw in self._elements(s, keep=items))
            elif top != ord("{"):
                raise s.fail("expected a JSON array or object")
            elif s.expect(b"{") and s.skip_ws() == ord("}"):
                s.pos += 1
            else:
                while True:
                    key = self._decode(s.value())
                    if not isinstance(key, str):
                        raise s.fail("expected a member name")
                    s.expect(b":")
                    if key in streamed and s.skip_ws() == ord("["):
                        if not items:
                            yield key, None
                        yield from ((key, raw) for raw in self._elements(s, keep=items))
                    else:
                        raw = s.value()
                        if not items:
                            yield key, raw
                    if s.expect(b",}") == ord("}"):
                        break
            if s.skip_ws() is not None:
                raise s.fail("unexpected data after the JSON document")

    @staticmethod
    def _elements(s: _Scanner, *, keep: bool) -> Iterator[bytes]:
        s.expect(b"[")
        if s.skip_ws() == ord("]"):
            s.pos += 1
            return
        while True:
            raw = s.value()
            if keep:
                yield raw
            if s.expect(b",]") == ord("]"):
                return
