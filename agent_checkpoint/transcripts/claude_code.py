"""Claude Code session logs (``~/.claude/projects/*/<session>.jsonl``) to canonical turns.

A log is a tree, not a list: every line names its ``parentUuid``, a rewind or an edited
prompt starts a new branch, sub-agents write ``isSidechain`` lines, and ``/compact`` (or
auto-compaction) writes a ``system`` line of subtype ``compact_boundary`` with no parent,
followed by the summary as a user message. Lines of other types (``summary``,
``file-history-snapshot``, ``progress``, ``queue-operation``, ``system``, anything newer)
carry no turn but may sit on the chain.

The active conversation is the chain of parents from the last non-sidechain message, up to
the root or the last compaction boundary. Streamed assistant lines sharing ``message.id``
become one turn. Meta lines (``isMeta``) and API-error stand-ins are left out. Logs whose
lines carry no parent links at all (old or hand-made ones) are read in file order from the
last boundary. A torn final line and lines that are not JSON are skipped and reported.

Memory stays bounded: the first pass keeps, per line, only its offset, its parent's index
and its kind (a few dozen bytes); the turns are then decoded again by offset.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..model import Json
from .anthropic import PROVIDER, assistant_turn, tool_calls_of, user_turns
from .jsonio import JsonLines
from .turns import Turn, iso_utc

__all__ = ["LINE_TYPES", "ClaudeCodeLog"]

LINE_TYPES = frozenset(
    {
        "user",
        "assistant",
        "summary",
        "system",
        "file-history-snapshot",
        "progress",
        "queue-operation",
        "attachment",
    }
)
"""Line types known to appear; others are tolerated the same way."""

_LINK, _MESSAGE, _BOUNDARY = 0, 1, 2
_KIND = 3
_HAS_UUID = 4
UuidKey = int | str


def _key(uuid: Json) -> UuidKey | None:
    """A compact dict key for a uuid (a 128-bit int instead of a 36-character string)."""
    if not isinstance(uuid, str) or not uuid:
        return None
    if len(uuid) == 36:
        try:
            return int(uuid.replace("-", ""), 16)
        except ValueError:
            pass
    return uuid


def _has_message(record: dict[str, Json]) -> bool:
    message = record.get("message")
    return isinstance(message, dict) and isinstance(message.get("content"), (str, list))


@dataclass
class _Index:
    offsets: array[int] = field(default_factory=lambda: array("q"))
    parents: array[int] = field(default_factory=lambda: array("q"))
    flags: array[int] = field(default_factory=lambda: array("b"))
    by_uuid: dict[UuidKey, int] = field(default_factory=dict)
    boundary_lines: dict[int, int] = field(default_factory=dict)
    unresolved: dict[int, UuidKey] = field(default_factory=dict)
    roots: int = 0
    children: int = 0
    counts: dict[str, int] = field(default_factory=dict)

    def count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    def add(self, offset: int, number: int, record: dict[str, Json]) -> None:
        kind = record.get("type")
        key = _key(record.get("uuid"))
        if kind in ("user", "assistant"):
            if record.get("isSidechain") is True:
                self.count("sidechain")
                return
            if record.get("isMeta") is True:
                self.count("meta")
                entry = _LINK
            elif record.get("isApiErrorMessage") is True:
                self.count("api-error")
                entry = _LINK
            elif not _has_message(record):
                self.count("malformed")
                entry = _LINK
            else:
                entry = _MESSAGE
        elif kind == "system" and record.get("subtype") == "compact_boundary":
            entry = _BOUNDARY
        elif key is None or record.get("isSidechain") is True:
            return
        else:
            entry = _LINK
        index = len(self.offsets)
        self.offsets.append(offset)
        self.flags.append(entry | (_HAS_UUID if key is not None else 0))
        if entry == _BOUNDARY:
            self.boundary_lines[index] = number
        parent = _key(record.get("parentUuid"))
        if entry == _MESSAGE:
            self.roots += parent is None
            self.children += parent is not None
        if parent is None:
            self.parents.append(-1)
        else:
            found = self.by_uuid.get(parent)
            self.parents.append(-1 if found is None else found)
            if found is None:
                self.unresolved[index] = parent
        if key is not None:
            seen = self.by_uuid.get(key)
            # A log resumed into a new file repeats lines; keep the first usable copy.
            if seen is None or (self.kind(seen) != _MESSAGE and entry == _MESSAGE):
                self.by_uuid[key] = index

    @property
    def linked(self) -> bool:
        """Whether messages form a parent chain (real logs: all but the first do); a stray
        linked line among unlinked ones does not count."""
        return self.children > 0 and self.children >= self.roots

    def kind(self, index: int) -> int:
        return self.flags[index] & _KIND

    def resolve(self) -> None:
        for index, parent in self.unresolved.items():
            self.parents[index] = self.by_uuid.get(parent, -1)
        self.unresolved.clear()

    def chain(self) -> tuple[list[int], int | None]:
        """Entry indices of the active conversation's messages, and the boundary's line."""
        n = len(self.flags)
        boundary: int | None = None
        if not self.linked:
            start = 0
            for i, line in self.boundary_lines.items():
                start, boundary = i + 1, line
            first_copies = set(self.by_uuid.values())
            picked = [
                i
                for i in range(start, n)
                if self.kind(i) == _MESSAGE and (not self.flags[i] & _HAS_UUID or i in first_copies)
            ]
            return picked, boundary
        leaf = next((i for i in range(n - 1, -1, -1) if self.kind(i) == _MESSAGE), -1)
        walked: list[int] = []
        i, steps = leaf, 0
        while i >= 0 and steps <= n:
            if self.kind(i) == _BOUNDARY:
                boundary = self.boundary_lines[i]
                break
            if self.kind(i) == _MESSAGE:
                walked.append(i)
            i, steps = self.parents[i], steps + 1
        walked.reverse()
        return walked, boundary


class ClaudeCodeLog:
    """A Claude Code session log as a re-iterable source of canonical turns."""

    def __init__(self, lines: JsonLines, *, ts: str) -> None:
        self.lines = lines
        self.default_ts = ts
        self.notes: list[str] = []
        self._chain: array[int] | None = None
        self._index_notes: list[str] = []

    def _build(self) -> array[int]:
        index = _Index()
        non_objects = 0
        for line in self.lines:
            if isinstance(line.value, dict):
                index.add(line.offset, line.number, line.value)
            else:
                non_objects += 1
        index.resolve()
        picked, boundary = index.chain()
        messages = sum(1 for i in range(len(index.flags)) if index.kind(i) == _MESSAGE)
        notes = list(self.lines.notes)
        if non_objects:
            notes.append(f"skipped {non_objects} line(s) that are not JSON objects")
        labels = {
            "sidechain": "sidechain (sub-agent) line(s)",
            "meta": "meta line(s)",
            "api-error": "API-error stand-in line(s)",
            "malformed": "user/assistant line(s) without a message",
        }
        for what, label in labels.items():
            if index.counts.get(what):
                notes.append(f"left out {index.counts[what]} {label}")
        if boundary is not None:
            notes.append(f"started at the compaction boundary on line {boundary}; kept its summary")
        if messages > len(picked):
            where = "off the active branch" if index.linked else "repeating an earlier uuid"
            notes.append(
                f"left out {messages - len(picked)} message line(s) {where}"
                + (" or before the compaction" if boundary is not None else "")
            )
        if not index.linked and messages:
            notes.append("lines carry no parentUuid links; read them in file order")
        self._index_notes = notes
        return array("q", (index.offsets[i] for i in picked))

    def __iter__(self) -> Iterator[Turn]:
        if self._chain is None:
            self._chain = self._build()
        self.notes = list(self._index_notes)
        names: dict[str, str] = {}
        held: Turn | None = None
        held_id: Json = None
        results: list[Turn] = []
        for record in self.lines.records_at(self._chain):
            message = record["message"]
            content = message["content"]
            ts = iso_utc(record.get("timestamp")) or self.default_ts
            if record.get("type") == "assistant":
                message_id = message.get("id")
                if held is not None and message_id and message_id == held_id:
                    held = _merge(held, content, names)
                    continue
                if held is not None:
                    yield held
                    yield from results
                model = message.get("model")
                held = assistant_turn(
                    content, model=model if isinstance(model, str) else None, ts=ts, names=names
                )
                held_id, results = message_id, []
                continue
            turns = list(user_turns(content, ts=ts, names=names))
            if held is not None and turns and all(t.is_result for t in turns):
                # Results of a streamed message may land between its lines; keep them after it.
                results.extend(turns)
                continue
            if held is not None:
                yield held
                yield from results
                held, held_id, results = None, None, []
            yield from turns
        if held is not None:
            yield held
            yield from results


def _blocks(content: Json) -> list[Json]:
    if isinstance(content, list):
        return content
    return [{"type": "text", "text": content}] if content else []


def _merge(turn: Turn, content: Json, names: dict[str, str]) -> Turn:
    calls = (turn.tool_calls or ()) + tuple(tool_calls_of(content, names))
    return Turn(
        "assistant",
        _blocks(turn.content) + _blocks(content),
        tool_calls=calls or None,
        provider=PROVIDER,
        model=turn.model,
        ts=turn.ts,
    )
