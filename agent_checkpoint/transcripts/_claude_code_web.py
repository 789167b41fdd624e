"""Claude Code web exports: ``{"loglines": [...]}``, a session log's lines as one JSON array.

``LoglinesLines`` gives the array's elements the shape of a log's lines (``JsonLines``): each
element is a line, numbered from 1, whose offset is its byte offset in the file, so the Claude
Code reader (``_claude_code``) reads an export as it reads a log, one element at a time, and
re-reads the elements it keeps by offset.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from .._model import Json
from ._jsonio import MAX_RECORD_BYTES, JsonDocument, JsonLines, Line

__all__ = ["LOGLINES", "LoglinesLines"]

LOGLINES = "loglines"
"""The member of a web export holding the log's lines."""


class LoglinesLines(JsonLines):
    """The ``loglines`` array of a web export, read as the lines of a log."""

    def __init__(self, path: Path, *, max_record_bytes: int = MAX_RECORD_BYTES) -> None:
        super().__init__(path, max_record_bytes=max_record_bytes, tolerate="none")
        self._doc = JsonDocument(path, max_record_bytes=max_record_bytes)

    def __iter__(self) -> Iterator[Line]:
        self.notes = []
        for number, (offset, value) in enumerate(self._doc.located([LOGLINES]), 1):
            yield Line(number, offset, value)

    def records_at(self, offsets: Iterable[int]) -> Iterator[Json]:
        yield from self._doc.values_at(offsets)
