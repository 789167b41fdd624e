"""Tool-call integrity across a whole conversation, not only its last turn.

Every tool call must be answered by exactly one tool result after it, and every result
must answer a call. Results pair with calls by id: a result answers the first waiting call
with its id in the newest turn that has one (an older turn's call with that id was left
unanswered when a later turn used the id again), so:

- a **duplicate call id** (reused later, or twice in one parallel batch) is renamed
  ``<id>~<n>``, together with the result that answers it, and inside the turn's content;
- an **orphan result** (no call waiting for that id, or a second answer) is dropped, and a
  tool turn left with no result goes with it;
- a **dangling call** (no result ever, including the missing half of a parallel batch) is
  handled by the policy. ``"drop"`` (the default) never loses what the user said: a call
  followed later by user (or system, developer) input is removed on its own, from the
  turn's calls and content (the turn goes too if nothing else is left in it); the calls
  after the last input are cut with everything after them, at the last point where every
  call before has its result, so a resumed run never inherits a call whose outcome is
  unknown. ``"synthesize"`` keeps everything and adds an error result right after the
  call's other results.

``plan_integrity`` makes one pass over the turns keeping only ids and positions, and the
returned plan's ``apply`` makes a second, streaming pass: both work on a ``Transcript``
without holding the conversation in memory. ``repair`` does both for a list.
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal

from .._model import Json
from ._turns import Turn, call_id, call_name, make_tool_result, result_id

__all__ = [
    "DANGLING_RESULT",
    "IntegrityPlan",
    "IntegrityReport",
    "Policy",
    "plan_integrity",
    "repair",
]

Policy = Literal["drop", "synthesize"]
DANGLING_RESULT = (
    "error: no result was recorded for this tool call; the run stopped before it finished"
)
"""Content of a synthesised result."""


@dataclass(frozen=True, slots=True)
class Dangling:
    turn: int
    id: str
    name: str
    position: int = 0
    """Its place among the turn's calls."""


@dataclass(frozen=True, slots=True)
class Orphan:
    turn: int
    id: str


@dataclass(frozen=True, slots=True)
class Renamed:
    turn: int
    old: str
    new: str


@dataclass(frozen=True)
class IntegrityReport:
    """What ``apply`` changes. Turn numbers are 0-based positions in the input."""

    policy: Policy
    turns_in: int
    turns_out: int
    cut_at: int | None = None
    """First input turn left out by the ``drop`` policy; ``None`` when nothing was cut."""
    dangling: tuple[Dangling, ...] = ()
    dropped: tuple[Dangling, ...] = ()
    """Dangling calls the ``drop`` policy removed on their own (user input follows them)."""
    orphans: tuple[Orphan, ...] = ()
    renamed: tuple[Renamed, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.dangling or self.orphans or self.renamed)

    def lines(self) -> list[str]:
        """One human-readable line per change (turns counted from 1)."""
        out: list[str] = []
        out.extend(
            f"dropped tool call {d.id} ({d.name or 'unnamed'}) at turn {d.turn + 1}: it has no "
            "result and the conversation goes on after it (--on-dangling synthesize keeps it "
            "with an error result)"
            for d in self.dropped
        )
        if self.cut_at is not None:
            cut = [d for d in self.dangling if d not in self.dropped]
            first, others = cut[0], len(cut) - 1
            where = f"after turn {self.cut_at}" if self.cut_at else "before its first turn"
            out.append(
                f"cut the conversation {where} of {self.turns_in}: tool call {first.id} "
                f"({first.name or 'unnamed'}) at turn {first.turn + 1} has no result"
                + (f"; {others} other call(s) have none either" if others else "")
            )
        elif self.policy == "synthesize":
            out.extend(
                f"added an error result for tool call {d.id} ({d.name or 'unnamed'}) at turn "
                f"{d.turn + 1}: none was recorded"
                for d in self.dangling
            )
        out.extend(
            f"dropped a tool result for {o.id} at turn {o.turn + 1}: no call was waiting for it"
            for o in self.orphans
        )
        out.extend(
            f"renamed duplicate tool call id {r.old} at turn {r.turn + 1} to {r.new}"
            for r in self.renamed
        )
        return out


@dataclass
class IntegrityPlan:
    """The edits ``plan_integrity`` decided; ``apply`` performs them on the same turns."""

    report: IntegrityReport
    keep_until: int
    drop_turns: set[int] = field(default_factory=set)
    drop_results: set[tuple[int, int]] = field(default_factory=set)
    drop_calls: set[tuple[int, int]] = field(default_factory=set)
    call_renames: dict[tuple[int, int], str] = field(default_factory=dict)
    result_renames: dict[tuple[int, int], str] = field(default_factory=dict)
    inserts: dict[int, list[Turn]] = field(default_factory=dict)

    def apply(self, turns: Iterable[Turn]) -> Iterator[Turn]:
        """``turns`` (the same sequence that was planned) with the edits made."""
        n = 0
        for i, turn in enumerate(turns):
            n = i + 1
            if i >= self.keep_until:
                break
            yield from self.inserts.get(i, ())
            if i in self.drop_turns:
                continue
            yield self._edit(i, turn)
        else:
            yield from self.inserts.get(n, ())

    def _edit(self, i: int, turn: Turn) -> Turn:
        changes: dict[str, Json] = {}
        if turn.tool_calls and any(
            (i, p) in self.call_renames for p in range(len(turn.tool_calls))
        ):
            calls, content = [], turn.content
            for p, call in enumerate(turn.tool_calls):
                new = self.call_renames.get((i, p))
                if new is None:
                    calls.append(call)
                    continue
                old = call_id(call)
                calls.append(_with_id(call, ("id", "call_id"), new))
                nth = sum(1 for c in turn.tool_calls[:p] if call_id(c) == old)
                content = _rename_in_content(content, old, new, nth)
            changes["tool_calls"], changes["content"] = tuple(calls), content
        if turn.tool_calls and any((i, p) in self.drop_calls for p in range(len(turn.tool_calls))):
            calls = list(changes.get("tool_calls", turn.tool_calls))
            content = changes.get("content", turn.content)
            for p in range(len(calls) - 1, -1, -1):
                if (i, p) in self.drop_calls:
                    content = _drop_from_content(content, call_id(calls[p]), _CALLS)
                    del calls[p]
            changes["tool_calls"], changes["content"] = tuple(calls) or None, content
        if turn.tool_results:
            kept: list[Json] = []
            content = changes.get("content", turn.content)
            for p, result in enumerate(turn.tool_results):
                if (i, p) in self.drop_results:
                    content = _drop_from_content(content, result_id(result), _RESULTS)
                    continue
                new = self.result_renames.get((i, p))
                if new is not None:
                    content = _rename_in_content(content, result_id(result), new, 0)
                    result = _with_id(result, ("tool_call_id", "tool_use_id", "call_id"), new)
                kept.append(result)
            if len(kept) != len(turn.tool_results) or any(
                (i, p) in self.result_renames for p in range(len(turn.tool_results))
            ):
                changes["tool_results"], changes["content"] = tuple(kept) or None, content
        return turn.evolve(**changes) if changes else turn


def _with_id(entry: Json, keys: tuple[str, ...], new: str) -> dict[str, Json]:
    """``entry`` with its id (the first of ``keys`` present) set to ``new``, order kept."""
    key = next((k for k in keys if k in entry), keys[0])
    return dict(entry) | {key: new}


_REFERENCES = (
    ("tool_use", "id"),
    ("tool_result", "tool_use_id"),
    ("function_call", "call_id"),
    ("function_call_output", "call_id"),
    ("custom_tool_call", "call_id"),
)


def _rename_in_content(content: Json, old: str, new: str, nth: int) -> Json:
    """Rename the ``nth`` block of ``content`` that refers to tool call ``old``."""
    if not isinstance(content, list):
        return content
    out, seen = [], 0
    for block in content:
        if isinstance(block, dict):
            for kind, key in _REFERENCES:
                if block.get("type") == kind and block.get(key) == old:
                    if seen == nth:
                        block = dict(block) | {key: new}
                    seen += 1
                    break
        out.append(block)
    return out


_CALLS = _REFERENCES[:1] + _REFERENCES[2:3] + _REFERENCES[4:]
_RESULTS = _REFERENCES[1:2]


def _drop_from_content(content: Json, id_: str, kinds: tuple[tuple[str, str], ...]) -> Json:
    """``content`` without its blocks of ``kinds`` that refer to tool call ``id_``."""
    if not isinstance(content, list):
        return content
    return [
        b
        for b in content
        if not (
            isinstance(b, dict)
            and any(b.get("type") == k and b.get(key) == id_ for k, key in kinds)
        )
    ]


def _bare(turn: Turn) -> bool:
    """Whether a turn holds nothing but its tool calls (it goes when they all go)."""
    content = turn.content
    if isinstance(content, list):
        return all(
            isinstance(b, dict) and any(b.get("type") == k for k, _ in _CALLS) for b in content
        )
    return not content


def plan_integrity(turns: Iterable[Turn], *, policy: Policy = "drop") -> IntegrityPlan:
    """Decide the edits that give every call exactly one result (see the module doc)."""
    pending: dict[str, deque[tuple[int, str, str, int]]] = {}
    used: set[str] = set()
    starts, ends = array("q"), array("q")  # answered calls: (call turn, result turn)
    is_result = bytearray()
    last_input = -1
    bare: dict[int, int] = {}  # turns holding only their calls -> how many
    meta: dict[int, tuple[str | None, str | None]] = {}
    orphans: list[Orphan] = []
    renamed: list[Renamed] = []
    plan = IntegrityPlan(IntegrityReport(policy, 0, 0), keep_until=0)
    n = 0
    for i, turn in enumerate(turns):
        n = i + 1
        is_result.append(1 if turn.is_result else 0)
        if turn.role != "assistant" and not turn.is_result:
            last_input = i
        if turn.tool_calls and _bare(turn):
            bare[i] = len(turn.tool_calls)
        dropped = 0
        for p, rid in enumerate(turn.result_ids):
            waiting = pending.get(rid)
            if not waiting:
                orphans.append(Orphan(i, rid))
                plan.drop_results.add((i, p))
                dropped += 1
                continue
            call_turn, effective, _, _ = _answered(waiting)
            if not waiting:
                del pending[rid]
            starts.append(call_turn)
            ends.append(i)
            if effective != rid:
                plan.result_renames[(i, p)] = effective
        if dropped and dropped == len(turn.tool_results or ()) and turn.role == "tool":
            plan.drop_turns.add(i)
        for p, call in enumerate(turn.tool_calls or ()):
            cid = call_id(call)
            effective = cid
            if not cid or cid in used:
                k = 2
                while f"{cid or 'call'}~{k}" in used:
                    k += 1
                effective = f"{cid or 'call'}~{k}"
                plan.call_renames[(i, p)] = effective
                renamed.append(Renamed(i, cid, effective))
            used.add(effective)
            pending.setdefault(cid, deque()).append((i, effective, call_name(call), p))
            meta[i] = (turn.provider, turn.ts)
    dangling = sorted(
        (Dangling(t, eff, name, p) for waiting in pending.values() for t, eff, name, p in waiting),
        key=lambda d: (d.turn, d.position),
    )
    cut: int | None = None
    alone: list[Dangling] = []
    plan.keep_until = n
    if dangling and policy == "drop":
        tail = [d for d in dangling if d.turn > last_input]
        cut = _cut(n, starts, ends, tail) if tail else None
        if cut is not None and cut <= last_input:
            cut = None  # cutting there would lose user input too: drop the calls alone
        alone = [d for d in dangling if cut is None or d.turn < cut]
        for d in alone:
            plan.drop_calls.add((d.turn, d.position))
            if d.turn in bare:
                bare[d.turn] -= 1
        plan.drop_turns.update(t for t in {d.turn for d in alone} if bare.get(t) == 0)
        if cut is not None:
            plan.keep_until = cut
    elif dangling:
        for d in dangling:
            at = d.turn + 1
            while at < n and is_result[at]:
                at += 1
            provider, ts = meta.get(d.turn, (None, None))
            result = make_tool_result(d.id, DANGLING_RESULT, name=d.name or None, is_error=True)
            plan.inserts.setdefault(at, []).append(
                Turn("tool", DANGLING_RESULT, tool_results=(result,), provider=provider, ts=ts)
            )
    kept = plan.keep_until - sum(1 for t in plan.drop_turns if t < plan.keep_until)
    kept += sum(len(v) for v in plan.inserts.values())
    plan.report = IntegrityReport(
        policy,
        turns_in=n,
        turns_out=kept,
        cut_at=cut,
        dangling=tuple(dangling),
        dropped=tuple(alone),
        orphans=tuple(o for o in orphans if cut is None or o.turn < cut),
        renamed=tuple(r for r in renamed if cut is None or r.turn < cut),
    )
    return plan


def _answered(waiting: deque[tuple[int, str, str, int]]) -> tuple[int, str, str, int]:
    """The waiting call (turn, effective id, name, position) a result with their id answers,
    taken from ``waiting`` (in call order): the first of the newest turn's, as ``CallNames``
    pairs names. An older turn's call with that id was left unanswered when a later turn used
    the id again."""
    newest = waiting[-1][0]
    at = next(i for i, (turn, _, _, _) in enumerate(waiting) if turn == newest)
    entry = waiting[at]
    del waiting[at]
    return entry


def _cut(n: int, starts: array[int], ends: array[int], dangling: list[Dangling]) -> int:
    """The last point before which every call has its result, ``dangling`` never answered."""
    blocked = [0] * (n + 2)
    for start, end in [*zip(starts, ends, strict=True), *((d.turn, n) for d in dangling)]:
        blocked[start + 1] += 1
        blocked[end + 1] -= 1
    depth, last_ok = 0, 0
    for k in range(n + 1):
        depth += blocked[k]
        if depth == 0:
            last_ok = k
    return last_ok


def repair(turns: Iterable[Turn], *, policy: Policy = "drop") -> tuple[list[Turn], IntegrityReport]:
    """``turns`` with every tool call answered exactly once, and what was changed."""
    listed = list(turns)
    plan = plan_integrity(listed, policy=policy)
    return list(plan.apply(listed)), plan.report
