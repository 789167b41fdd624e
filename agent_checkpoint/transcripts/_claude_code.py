"""Claude Code session logs (``~/.claude/projects/*/<session>.jsonl``) to canonical turns.

A log is a tree, not a list: every line names its ``parentUuid``, a rewind or an edited
prompt starts a new branch, sub-agents write ``isSidechain`` lines, and ``/compact`` (or
auto-compaction) writes a ``system`` line of subtype ``compact_boundary`` with no parent,
followed by the summary as a user message (its turn marked ``_meta.compactionSummary``). Lines of other types (``summary``,
``file-history-snapshot``, ``progress``, ``queue-operation``, ``system``, anything newer)
carry no turn but may sit on the chain. ``_claude_code_tree`` picks the lines of the active
conversation (see there for parallel tool calls and sub-agents).

Streamed assistant lines sharing ``message.id`` become one turn, with the results of its
calls after it. Meta lines (``isMeta``) that carry what the model acted on (the expanded
text of a slash command, a skill's body, a hook's added context) are kept as user turns
marked ``_meta.injectedBy`` (the checkpoint's own ``injectedBy``, flavor ``skill`` or
``instructions``); meta lines that are only local-command caveats or output, and API-error
stand-ins, are left out. Logs whose lines carry no parent links at all (old or hand-made
ones) are read in file order from the last boundary. A torn final line and lines that are
not JSON are skipped and reported; a line whose parent is lost is joined to the message line
before it (see ``_claude_code_tree``).
"""

from __future__ import annotations

from collections.abc import Iterator

from .._model import Json
from ._anthropic import PROVIDER, assistant_turn, tool_calls_of, user_turns
from ._claude_code_tree import MAIN, LogTree, Picked
from ._errors import EmptyTranscriptError
from ._jsonio import JsonLines
from ._turns import CallNames, Turn, iso_utc

__all__ = ["LINE_TYPES", "META_REASON", "ClaudeCodeLog"]

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
META_REASON = "Claude Code meta line (isMeta)"
"""``injectedBy.reason`` of a kept meta line."""
_SKILL_PREFIX = "Base directory for this skill"


class ClaudeCodeLog:
    """A Claude Code session log as a re-iterable source of canonical turns.

    ``subagent`` picks the conversation of that sub-agent (its ``agentId``) instead of the
    main one; a log holding only sidechain lines is read as its sub-agent's conversation
    (``subagent`` then names that sub-agent, once read).
    """

    def __init__(self, lines: JsonLines, *, ts: str, subagent: str | None = None) -> None:
        self.lines = lines
        self.default_ts = ts
        self.subagent = subagent
        self.notes: list[str] = []
        self._picked: Picked | None = None
        self._index_notes: list[str] = []

    def _build(self) -> Picked:
        tree = LogTree()
        non_objects = 0
        for line in self.lines:
            if isinstance(line.value, dict):
                tree.add(line.offset, line.number, line.value)
            else:
                non_objects += 1
        tree.resolve()
        notes = list(self.lines.notes)
        if non_objects:
            notes.append(f"skipped {non_objects} line(s) that are not JSON objects")
        agent = self._agent(tree, notes)
        picked = tree.pick(agent)
        labels = {
            "meta": "meta line(s) of local-command caveats or output",
            "api-error": "API-error stand-in line(s)",
            "malformed": "user/assistant line(s) without a message",
        }
        for what, label in labels.items():
            if tree.counts.get(what):
                notes.append(f"left out {tree.counts[what]} {label}")
        if picked.meta:
            notes.append(
                f"kept {len(picked.meta)} meta line(s) (expanded commands, skill bodies, hook "
                "context) as user turns marked _meta.injectedBy"
            )
        self._index_notes = notes + picked.notes
        return picked

    def _agent(self, tree: LogTree, notes: list[str]) -> int:
        """The agent number to read, and a note on the sub-agents left out or picked."""
        names = sorted(tree.agents, key=tree.agents.__getitem__)
        if self.subagent is not None:
            if self.subagent not in tree.agents:
                held = _listed(names) if names else "none"
                raise EmptyTranscriptError(
                    f"{self.lines.path}: no sub-agent {self.subagent!r} in this log "
                    f"(sub-agents: {held})"
                )
            notes.append(f"read the conversation of sub-agent {self.subagent}")
            return tree.agents[self.subagent]
        agent = tree.last_sidechain_agent() if tree.roots + tree.children == 0 else MAIN
        if agent != MAIN:
            # A sub-agent's own log: every message line is a sidechain.
            name = tree.name_of(agent)
            self.subagent = name  # what was read: its key is the sub-agent's, not the main one's
            others = [n for n in names if n != name]
            notes.append(
                f"every message line is a sidechain: read it as the conversation of sub-agent "
                f"{name}"
                + (f" (others here: {_listed(others)}; --subagent picks one)" if others else "")
            )
            return agent
        if tree.counts.get("sidechain"):
            notes.append(
                f"left out {tree.counts['sidechain']} sidechain (sub-agent) line(s) of "
                f"{len(names)} sub-agent(s): {_listed(names)} (--subagent ID saves one)"
            )
        return MAIN

    def __iter__(self) -> Iterator[Turn]:
        if self._picked is None:
            self._picked = self._build()
        self.notes = list(self._index_notes)
        meta = self._picked.meta
        offsets = self._picked.offsets
        names = CallNames()
        held: Turn | None = None
        held_id: Json = None
        results: list[Turn] = []
        replies = 0
        for offset, record in zip(offsets, self.lines.records_at(offsets), strict=True):
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
                replies += 1
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
            if offset in meta:
                turns = [_injected(t, record, replies + 1) for t in turns]
            if record.get("isCompactSummary") is True:
                turns = [t.as_compaction_summary() for t in turns]
            yield from turns
        if held is not None:
            yield held
            yield from results


def _listed(names: list[str], shown: int = 5) -> str:
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f" and {more} more" if more > 0 else "")


def _injected(turn: Turn, record: dict[str, Json], iteration: int) -> Turn:
    """A kept meta turn, marked with the checkpoint's ``injectedBy`` (spec 2.2)."""
    if turn.is_result:
        return turn
    content = turn.content
    text = content if isinstance(content, str) else ""
    if isinstance(content, list) and content and isinstance(content[0], dict):
        first = content[0].get("text")
        text = first if isinstance(first, str) else ""
    uuid = record.get("uuid")
    marker: dict[str, Json] = {
        "injectionId": uuid if isinstance(uuid, str) else "",
        "flavor": "skill" if text.startswith(_SKILL_PREFIX) else "instructions",
        "reason": META_REASON,
        "iteration": iteration,
    }
    return turn.evolve(extra=dict(turn.extra) | {"_meta": {"injectedBy": marker}})


def _blocks(content: Json) -> list[Json]:
    if isinstance(content, list):
        return content
    return [{"type": "text", "text": content}] if content else []


def _merge(turn: Turn, content: Json, names: CallNames) -> Turn:
    calls = (turn.tool_calls or ()) + tuple(tool_calls_of(content, names))
    return Turn(
        "assistant",
        _blocks(turn.content) + _blocks(content),
        tool_calls=calls or None,
        provider=PROVIDER,
        model=turn.model,
        ts=turn.ts,
    )
