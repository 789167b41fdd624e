"""Aligned comparison of two conversations.

Turns are compared on ``role``, ``content``, ``tool_calls`` and ``tool_results`` as
``Turn.compared`` gives them (``ts``, ``provider``, ``model`` and unknown keys are ignored, as
in the seed, and so is the ``name`` a result repeats from its call). The two sequences are
aligned with ``difflib.SequenceMatcher`` over per-turn fingerprints, so a turn inserted in
the middle is one difference, not a shifted tail of them. Both inputs are read twice (once to
align, once to describe the differing turns) and never held whole in memory.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import orjson

from .._model import Json
from ._turns import Turn, call_id, call_name, result_id

__all__ = ["DiffResult", "Difference", "diff_turns"]

FIELDS = ("role", "content", "tool_calls", "tool_results")
_PREVIEW = 60


def _digest(value: Json) -> bytes:
    return hashlib.blake2b(
        orjson.dumps(value, option=orjson.OPT_SORT_KEYS), digest_size=12
    ).digest()


def _key(turn: Turn) -> tuple[str, bytes, bytes, bytes]:
    role, content, calls, results = turn.compared()
    return (role, _digest(content), _digest(calls), _digest(results))


def preview(turn: Turn) -> tuple[str, bool]:
    """A short one-line description of a turn, for people, and whether it is the turn's own
    text (which the text report quotes) rather than a description of it."""
    if turn.tool_calls:
        text = ", ".join(f"{call_name(c)}({call_id(c)})" for c in turn.tool_calls)
        return _clip(f"calls {text}"), False
    if turn.tool_results:
        return _clip(f"result for {', '.join(result_id(r) for r in turn.tool_results)}"), False
    content = turn.content
    if isinstance(content, list):
        texts = [
            b["text"] for b in content if isinstance(b, dict) and isinstance(b.get("text"), str)
        ]
        if not texts:
            return f"[{len(content)} block(s)]", False
        content = " ".join(texts)
    if isinstance(content, str):
        return _clip(content), True
    return _clip(orjson.dumps(content).decode()), False


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _PREVIEW else text[: _PREVIEW - 1] + "…"


@dataclass(frozen=True, slots=True)
class Difference:
    """One aligned difference; indices are 0-based positions in A and B."""

    op: Literal["insert", "delete", "change"]
    a_index: int | None
    b_index: int | None
    role: str
    fields: tuple[str, ...] = ()
    preview: str = ""
    quoted: bool = False
    """``preview`` is the turn's text: the text report shows it in quotes."""

    def to_json(self) -> dict[str, Json]:
        out: dict[str, Json] = {"op": self.op, "aIndex": self.a_index, "bIndex": self.b_index}
        out["role"] = self.role
        if self.fields:
            out["fields"] = list(self.fields)
        out["preview"] = self.preview
        return out

    def line(self) -> str:
        shown = json.dumps(self.preview, ensure_ascii=False) if self.quoted else self.preview
        if self.op == "insert":
            return f"+ B turn {self.b_index_1} ({self.role}) inserted: {shown}"
        if self.op == "delete":
            return f"- A turn {self.a_index_1} ({self.role}) removed: {shown}"
        return (
            f"~ A turn {self.a_index_1} / B turn {self.b_index_1} ({self.role}): "
            f"{', '.join(self.fields)} differ: {shown}"
        )

    @property
    def a_index_1(self) -> int:
        return (self.a_index or 0) + 1

    @property
    def b_index_1(self) -> int:
        return (self.b_index or 0) + 1


@dataclass(frozen=True)
class DiffResult:
    a_turns: int
    b_turns: int
    differences: tuple[Difference, ...]

    @property
    def identical(self) -> bool:
        return not self.differences

    def to_json(self) -> dict[str, Json]:
        """identical, aTurns, bTurns, differences (the seed's shape, in the camelCase keys
        every JSON this library prints uses)."""
        return {
            "identical": self.identical,
            "aTurns": self.a_turns,
            "bTurns": self.b_turns,
            "differences": [d.to_json() for d in self.differences],
        }

    def lines(self) -> list[str]:
        """The text report: ``identical``, or ``different`` and one line per difference."""
        if self.identical:
            return ["identical"]
        counts = {
            op: sum(1 for d in self.differences if d.op == op)
            for op in ("insert", "delete", "change")
        }
        return [
            "different",
            f"A has {self.a_turns} turns, B has {self.b_turns}: {counts['insert']} inserted, "
            f"{counts['delete']} removed, {counts['change']} changed",
            *(d.line() for d in self.differences),
        ]


def _reiterable(turns: Iterable[Turn]) -> Iterable[Turn]:
    return list(turns) if iter(turns) is turns else turns


def diff_turns(a: Iterable[Turn], b: Iterable[Turn]) -> DiffResult:
    """Align ``a`` and ``b`` and list their differences (iterates each twice)."""
    a, b = _reiterable(a), _reiterable(b)
    keys_a = [_key(t) for t in a]
    keys_b = [_key(t) for t in b]
    head = 0
    while head < min(len(keys_a), len(keys_b)) and keys_a[head] == keys_b[head]:
        head += 1
    tail = 0
    while tail < min(len(keys_a), len(keys_b)) - head and keys_a[-1 - tail] == keys_b[-1 - tail]:
        tail += 1
    matcher = difflib.SequenceMatcher(
        None, keys_a[head : len(keys_a) - tail], keys_b[head : len(keys_b) - tail], autojunk=False
    )
    plan: list[tuple[str, int | None, int | None]] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        i1, i2, j1, j2 = i1 + head, i2 + head, j1 + head, j2 + head
        if tag == "equal":
            continue
        paired = min(i2 - i1, j2 - j1) if tag == "replace" else 0
        plan.extend(("change", i1 + k, j1 + k) for k in range(paired))
        plan.extend(("delete", i, None) for i in range(i1 + paired, i2))
        plan.extend(("insert", None, j) for j in range(j1 + paired, j2))
    need_a = {i for _, i, _ in plan if i is not None}
    need_b = {j for _, _, j in plan if j is not None}
    turns_a = {i: t for i, t in enumerate(a) if i in need_a}
    turns_b = {j: t for j, t in enumerate(b) if j in need_b}
    differences: list[Difference] = []
    for op, i, j in plan:
        if op == "change" and i is not None and j is not None:
            fields = tuple(
                f for f, x, y in zip(FIELDS, keys_a[i], keys_b[j], strict=True) if x != y
            )
            differences.append(
                Difference("change", i, j, turns_b[j].role, fields, *preview(turns_b[j]))
            )
        elif op == "delete" and i is not None:
            differences.append(
                Difference("delete", i, None, turns_a[i].role, (), *preview(turns_a[i]))
            )
        elif j is not None:
            differences.append(
                Difference("insert", None, j, turns_b[j].role, (), *preview(turns_b[j]))
            )
    return DiffResult(len(keys_a), len(keys_b), tuple(differences))
