"""The first pass over a Claude Code log: which lines make up the conversation to keep.

Every line is indexed by its offset, its parent's index and a few flag bits, so a log of
any size costs a few dozen bytes per line; ``ClaudeCodeLog`` then decodes only the picked
lines again by offset.

The conversation is the chain of ``parentUuid`` links from its last message (the leaf) up
to the root or the last compaction boundary. A parent that is not in the log (its line lost,
or not JSON) or that closes a loop is replaced by the message line before the child in file
order, with a note naming both lines, rather than losing everything above the gap.

Since Claude Code 2.1, a message with several ``tool_use`` blocks is written as one line per
block (all sharing ``message.id``) and each ``tool_result`` line names *its own* call's line
as parent (``sourceToolAssistantUUID``), so the chain from the leaf passes through only some
of them: the other sibling lines and the result lines hanging off any sibling are added back,
and each message's lines and results are placed together where the message first appears on
the chain.

Sub-agents write ``isSidechain`` lines, in the main log (older versions) or in a log of their
own (``<session>/subagents/agent-<id>.jsonl``); each sub-agent's conversation is told apart
by its ``agentId`` (or, without one, by the sidechain root it grows from).
"""

from __future__ import annotations

import re
from array import array
from dataclasses import dataclass, field

from .._model import Json

__all__ = ["MAIN", "LogTree", "Picked", "is_noise"]

MAIN = 0
"""The agent number of the main conversation (lines that are not sidechains)."""

_LINK, _MESSAGE, _BOUNDARY = 0, 1, 2
_KIND = 3
_HAS_UUID = 4
_CALLS = 8
"""An assistant line with ``tool_use`` blocks: the only kind whose message may fork."""
_RESULTS = 16
"""A user line whose content is only ``tool_result`` blocks."""
_META = 32
"""A meta line kept as injected user content."""
_DUP = 64
"""A line repeating the uuid of an earlier usable line (a log resumed into a new file)."""

UuidKey = int | str
_NOISE = re.compile(
    r"<(local-command-caveat|local-command-stdout|local-command-stderr|command-name|"
    r"command-message|command-args)>.*?</\1>",
    re.DOTALL,
)


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


def _text_of(content: Json) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "\n".join(
        b["text"] for b in content if isinstance(b, dict) and isinstance(b.get("text"), str)
    )


def is_noise(content: Json) -> bool:
    """Whether a meta line holds only what the model is told to ignore: local-command
    caveats, their output and the command's own name tags (nothing else, no image)."""
    if isinstance(content, list) and any(
        not isinstance(b, dict) or b.get("type") != "text" for b in content
    ):
        return False
    return not _NOISE.sub("", _text_of(content)).strip()


def _only_results(content: Json) -> bool:
    return (
        isinstance(content, list)
        and bool(content)
        and all(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
    )


@dataclass(frozen=True)
class Picked:
    """The lines of the chosen conversation, in conversation order."""

    offsets: array[int]
    meta: frozenset[int]
    """Offsets of the meta lines kept as injected user content."""
    notes: list[str]


@dataclass
class LogTree:
    """Offsets, parents and flags of every line that can sit on a conversation's chain."""

    offsets: array[int] = field(default_factory=lambda: array("q"))
    numbers: array[int] = field(default_factory=lambda: array("q"))
    parents: array[int] = field(default_factory=lambda: array("q"))
    previous: array[int] = field(default_factory=lambda: array("q"))
    """The nearest earlier message or boundary line of the same agent (-1 if none)."""
    flags: array[int] = field(default_factory=lambda: array("B"))
    agent_of: array[int] = field(default_factory=lambda: array("i"))
    message_keys: array[int] = field(default_factory=lambda: array("q"))
    by_uuid: dict[UuidKey, int] = field(default_factory=dict)
    boundary_lines: dict[int, int] = field(default_factory=dict)
    unresolved: dict[int, tuple[UuidKey, str]] = field(default_factory=dict)
    bridges: list[tuple[int, str, int]] = field(default_factory=list)
    """Lines whose parent is not in the log: (line, the parent's uuid, line joined to)."""
    agents: dict[str, int] = field(default_factory=dict)
    """Sub-agent names (``agentId``, else the uuid of its sidechain root) to agent numbers."""
    roots: int = 0
    children: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    _last: dict[int, int] = field(default_factory=dict)

    def count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    def _agent(self, record: dict[str, Json], parent: int, number: int) -> int:
        if record.get("isSidechain") is not True:
            return MAIN
        name = record.get("agentId")
        if not isinstance(name, str) or not name:
            if parent >= 0 and self.agent_of[parent] != MAIN:
                return self.agent_of[parent]
            uuid = record.get("uuid")
            name = uuid if isinstance(uuid, str) and uuid else f"line {number}"
        return self.agents.setdefault(name, len(self.agents) + 1)

    def add(self, offset: int, number: int, record: dict[str, Json]) -> None:
        kind = record.get("type")
        key = _key(record.get("uuid"))
        flags = _LINK
        message = record.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if kind in ("user", "assistant"):
            if not isinstance(content, (str, list)):
                self.count("malformed")
            elif record.get("isApiErrorMessage") is True:
                self.count("api-error")
            elif record.get("isMeta") is True and is_noise(content):
                self.count("meta")
            else:
                flags = _MESSAGE
                if kind == "assistant" and any(
                    isinstance(b, dict) and b.get("type") == "tool_use" for b in content
                ):
                    flags |= _CALLS
                if record.get("isMeta") is True:
                    flags |= _META
                    self.count("meta-kept")
                elif kind == "user" and _only_results(content):
                    flags |= _RESULTS
        elif kind == "system" and record.get("subtype") == "compact_boundary":
            flags = _BOUNDARY
        elif key is None:
            return
        index = len(self.offsets)
        parent_uuid = record.get("parentUuid")
        parent_key = _key(parent_uuid)
        parent = -1 if parent_key is None else self.by_uuid.get(parent_key, -1)
        if parent_key is not None and parent < 0:
            self.unresolved[index] = (parent_key, str(parent_uuid))
        agent = self._agent(record, parent, number)
        if agent != MAIN and flags & _MESSAGE:
            self.count("sidechain")
        if key is not None:
            flags |= _HAS_UUID
            seen = self.by_uuid.get(key)
            # A log resumed into a new file repeats lines; keep the first usable copy.
            if seen is None or (self.kind(seen) != _MESSAGE and flags & _MESSAGE):
                self.by_uuid[key] = index
            else:
                flags |= _DUP
        self.offsets.append(offset)
        self.numbers.append(number)
        self.parents.append(parent)
        self.previous.append(self._last.get(agent, -1))
        if flags & _KIND != _LINK:
            self._last[agent] = index
        self.flags.append(flags)
        self.agent_of.append(agent)
        message_id = message.get("id") if isinstance(message, dict) else None
        self.message_keys.append(
            hash(message_id) or 1 if flags & _CALLS and isinstance(message_id, str) else 0
        )
        if flags & _KIND == _BOUNDARY:
            self.boundary_lines[index] = number
        if flags & _MESSAGE and agent == MAIN:
            self.roots += parent_key is None
            self.children += parent_key is not None

    def kind(self, index: int) -> int:
        return self.flags[index] & _KIND

    def resolve(self) -> None:
        """Link the lines whose parent comes later in the file; join a line whose parent is
        not in the log to the message line before it, unless that line hangs off nothing in
        the log either (a sub-agent's log whose lines each hang off the main session)."""
        loose: set[int] = set()
        for index, (key, uuid) in self.unresolved.items():
            parent = self.by_uuid.get(key, -1)
            if parent < 0:
                before = self.previous[index]
                if before >= 0 and before not in loose:
                    parent = before
                    self.bridges.append((index, uuid, before))
                else:
                    loose.add(index)
            self.parents[index] = parent
        self.unresolved.clear()

    def last_sidechain_agent(self) -> int:
        """The agent of the last sidechain message line (``MAIN`` if there is none)."""
        for i in range(len(self.flags) - 1, -1, -1):
            if self.agent_of[i] != MAIN and self.kind(i) == _MESSAGE:
                return self.agent_of[i]
        return MAIN

    def name_of(self, agent: int) -> str:
        return next((name for name, n in self.agents.items() if n == agent), "")

    def _mine(self, index: int, agent: int) -> bool:
        flags = self.flags[index]
        return flags & _KIND == _MESSAGE and not flags & _DUP and self.agent_of[index] == agent

    def pick(self, agent: int) -> Picked:
        """The lines of ``agent``'s conversation (``MAIN`` for the main one)."""
        n = len(self.flags)
        messages = sum(1 for i in range(n) if self._mine(i, agent))
        boundary: int | None = None
        notes: list[str] = []
        linked = self.children > 0 and self.children >= self.roots if agent == MAIN else True
        chain: list[int]
        if not linked:
            start = 0
            for i, line in self.boundary_lines.items():
                start, boundary = i + 1, line
            chain = [i for i in range(start, n) if self._mine(i, agent)]
        else:
            leaf = next((i for i in range(n - 1, -1, -1) if self._mine(i, agent)), -1)
            chain, boundary = self._walk(leaf, notes)
            chain = self._with_siblings(chain, agent)
        picked_meta = frozenset(self.offsets[i] for i in chain if self.flags[i] & _META)
        if linked:
            notes[:0] = self._bridge_notes(agent)
        if boundary is not None:
            notes.append(f"started at the compaction boundary on line {boundary}; kept its summary")
        if messages > len(chain):
            where = "off the active branch" if linked else "repeating an earlier uuid"
            notes.append(
                f"left out {messages - len(chain)} message line(s) {where}"
                + (" or before the compaction" if boundary is not None else "")
            )
        if not linked and messages:
            notes.append("lines carry no parentUuid links; read them in file order")
        return Picked(array("q", (self.offsets[i] for i in chain)), picked_meta, notes)

    def _bridge_notes(self, agent: int, shown: int = 3) -> list[str]:
        bridges = [b for b in self.bridges if self.agent_of[b[0]] == agent]
        notes = [
            f"line {self.numbers[i]}'s parent {uuid} is not in the log (a line lost or not "
            f"JSON); {self._joined(before)}"
            for i, uuid, before in bridges[:shown]
        ]
        if len(bridges) > shown:
            notes.append(f"joined {len(bridges) - shown} more line(s) the same way")
        return notes

    def _joined(self, before: int) -> str:
        what = "compaction boundary" if self.kind(before) == _BOUNDARY else "message line"
        return f"joined it to line {self.numbers[before]}, the {what} before it"

    def _walk(self, leaf: int, notes: list[str]) -> tuple[list[int], int | None]:
        """The chain from ``leaf`` up; a link back to a line already on it (a loop) is
        replaced by the message line before, or ends the chain if that one is on it too."""
        walked: list[int] = []
        boundary: int | None = None
        seen = bytearray(len(self.flags))
        i = leaf
        while i >= 0:
            seen[i] = 1
            if self.kind(i) == _BOUNDARY:
                boundary = self.boundary_lines[i]
                break
            if self.kind(i) == _MESSAGE:
                walked.append(i)
            parent = self.parents[i]
            if parent >= 0 and seen[parent]:
                before = self.previous[i]
                where = (
                    f"line {self.numbers[i]}'s parent is line {self.numbers[parent]}, closing a "
                    "loop of parentUuid links"
                )
                if before >= 0 and not seen[before]:
                    notes.append(f"{where}; {self._joined(before)}")
                    parent = before
                else:
                    notes.append(f"{where}; the conversation starts at line {self.numbers[i]}")
                    parent = -1
            i = parent
        walked.reverse()
        return walked, boundary

    def _message_above(self, index: int) -> int:
        """The nearest message line above ``index`` (past progress and other link lines)."""
        j, steps = self.parents[index], 0
        while j >= 0 and self.kind(j) != _MESSAGE and steps < 256:
            j, steps = self.parents[j], steps + 1
        return j if j >= 0 and self.kind(j) == _MESSAGE else -1

    def _with_siblings(self, chain: list[int], agent: int) -> list[int]:
        """``chain`` with every line of its tool-calling messages and every result answering
        one of those lines; each message's lines and results go together, in file order,
        where the message first appears on the chain.

        A line belongs to a message when it shares ``message.id`` with the message line
        above it (or that line is a result of the message), so two messages that happen
        to share an id (a redacted log) stay apart."""
        keys = {self.message_keys[i] for i in chain if self.message_keys[i]}
        if not keys:
            return chain
        on_chain = bytearray(len(self.flags))
        for i in chain:
            on_chain[i] = 1
        forked: set[int] = set()  # messages with a line or a result off the chain
        for i in range(chain[0], len(self.flags)):
            if on_chain[i] or not self._mine(i, agent):
                continue
            parent = self.parents[i]
            if self.message_keys[i] in keys:
                forked.add(self.message_keys[i])
            elif self.flags[i] & _RESULTS and parent >= 0 and self.message_keys[parent] in keys:
                forked.add(self.message_keys[parent])
        if not forked:
            return chain
        keys = forked
        group: dict[int, int] = {}  # line -> its message's first line
        members: dict[int, list[int]] = {}
        for i in range(chain[0], len(self.flags)):
            key = self.message_keys[i]
            if key in keys and self._mine(i, agent):
                # Under the line of an earlier block of the message, or under a result of
                # one (streamed tool execution writes later blocks there).
                g = group.get(self._message_above(i), -1)
                if g < 0 or self.message_keys[g] != key:
                    if not on_chain[i]:
                        continue
                    g = i
            elif self.flags[i] & _RESULTS and self.parents[i] in group and self._mine(i, agent):
                g = group[self.parents[i]]
            else:
                continue
            group[i] = g
            members.setdefault(g, []).append(i)
        out: list[int] = []
        placed: set[int] = set()
        for i in chain:
            g = group.get(i, -1)
            if g < 0:
                out.append(i)
            elif g not in placed:
                placed.add(g)
                out.extend(members[g])
        return out
