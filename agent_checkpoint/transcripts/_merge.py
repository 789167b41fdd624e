"""Merging two conversations by their shared prefix, never by set membership.

``find_fork`` compares the two turn by turn (role, content, tool calls and results) and
finds where they part. If one is a prefix of the other, the merge is the longer one: every
turn of both, in order, repeated turns included (the seed's "append what is not already
present" dropped a user's second "yes"). If both go on past the fork, that is a divergence:
``merged_turns`` refuses it with ``DivergedError`` unless told which side's branch to keep.

Two snapshots of one session taken on either side of a compaction share no turn: the later
one starts with the compaction's summary (a turn marked ``_meta.compactionSummary``) of
turns it no longer holds. When exactly one side starts so, and the other ends before that
compaction (no turn of it is stamped later than the summary), the summary is the fork
point: the summarised side is covered by it, and the merge is the compacted side. A side
with turns from after the compaction is a branch of its own; the refusal says why.
Output turns carry ``_meta.source``, ``"a"`` or ``"b"``: the side of this merge each came
from, replacing the tag of an earlier merge (the seed's merge kept it, so a turn new in B
could say ``"a"``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

from .._model import Json
from ._errors import DivergedError
from ._turns import Turn

__all__ = ["Fork", "Side", "find_fork", "merged_turns"]

Side = Literal["a", "b"]


@dataclass(frozen=True)
class Fork:
    """How two conversations relate: ``shared`` leading turns are the same."""

    a_turns: int
    b_turns: int
    shared: int
    compacted: Side | None = None
    """The side that starts with a compaction summary, when the other does not."""
    continues: bool = False
    """The ``compacted`` side continues the other past its compaction (see the module doc)."""

    @property
    def diverged(self) -> bool:
        return not self.continues and self.shared < self.a_turns and self.shared < self.b_turns

    def taken(self, prefer: Side | None = None) -> tuple[int, int]:
        """How many turns the merge takes from A, and how many new ones from B."""
        if self.continues:
            return (0, self.b_turns) if self.compacted == "b" else (self.a_turns, 0)
        if not self.diverged:
            return self.a_turns, max(0, self.b_turns - self.a_turns)
        if prefer == "a":
            return self.a_turns, 0
        return self.shared, self.b_turns - self.shared

    def describe(self) -> str:
        said = (
            f"A and B share their first {self.shared} turn(s), then A goes on with "
            f"{self.a_turns - self.shared} and B with {self.b_turns - self.shared} different "
            "turn(s)"
        )
        if self.compacted is None:
            return said
        this, other = ("B", "A") if self.compacted == "b" else ("A", "B")
        if self.continues:
            covered = self.a_turns if other == "A" else self.b_turns
            return (
                f"{this} continues {other} past a compaction: its first turn summarises the "
                f"{covered} turn(s) of {other}, so the merge is {this}"
            )
        return (
            f"{said} ({this} starts from a compaction summary, but {other} has turns stamped "
            "after that compaction: not the conversation the summary covers)"
        )


class _Side:
    """What ``find_fork`` keeps of one side: fingerprints, its first turn and last time."""

    def __init__(self) -> None:
        self.prints: list[bytes] = []
        self.summary_at: str | None = None
        self.starts_compacted = False
        self.last_ts: str | None = None

    def add(self, turn: Turn) -> bytes:
        if not self.prints:
            self.starts_compacted = turn.is_compaction_summary
            self.summary_at = turn.ts
        if turn.ts and (self.last_ts is None or turn.ts > self.last_ts):
            self.last_ts = turn.ts
        fingerprint = turn.fingerprint()
        self.prints.append(fingerprint)
        return fingerprint

    def ends_before(self, compacted: _Side) -> bool:
        at = compacted.summary_at
        return at is None or self.last_ts is None or self.last_ts <= at


def find_fork(a: Iterable[Turn], b: Iterable[Turn]) -> Fork:
    """Compare ``a`` and ``b`` turn by turn (one pass each, fingerprints only)."""
    side_a, side_b = _Side(), _Side()
    for turn in a:
        side_a.add(turn)
    prints_a = side_a.prints
    shared, count_b = 0, 0
    for turn in b:
        fingerprint = side_b.add(turn)
        if shared == count_b and shared < len(prints_a) and fingerprint == prints_a[shared]:
            shared += 1
        count_b += 1
    fork = Fork(len(prints_a), count_b, shared)
    if shared or side_a.starts_compacted == side_b.starts_compacted:
        return fork
    compacted: Side = "b" if side_b.starts_compacted else "a"
    summarised, summary = (side_a, side_b) if compacted == "b" else (side_b, side_a)
    return Fork(
        fork.a_turns,
        fork.b_turns,
        0,
        compacted=compacted,
        continues=summarised.ends_before(summary),
    )


def _tagged(turn: Turn, source: Side) -> Turn:
    meta = turn.extra.get("_meta")
    meta = dict(meta) if isinstance(meta, dict) else {}
    meta["source"] = source
    extra: dict[str, Json] = dict(turn.extra) | {"_meta": meta}
    return turn.evolve(extra=extra)


def merged_turns(
    a: Iterable[Turn], b: Iterable[Turn], fork: Fork, *, prefer: Side | None = None
) -> Iterator[Turn]:
    """The merge of ``a`` and ``b`` as ``fork`` describes them (iterates each once more).

    Raises ``DivergedError`` for diverged conversations unless ``prefer`` names the side
    whose turns after the fork are kept.
    """
    if fork.diverged and prefer is None:
        raise DivergedError(
            fork.describe() + "; pass --prefer a or --prefer b to keep one branch",
            fork=fork.shared,
            a_rest=fork.a_turns - fork.shared,
            b_rest=fork.b_turns - fork.shared,
        )
    from_a, from_b = fork.taken(prefer)
    for i, turn in enumerate(a):
        if i >= from_a:
            break
        yield _tagged(turn, "a")
    if from_b:
        skip = fork.b_turns - from_b
        for j, turn in enumerate(b):
            if j >= skip:
                yield _tagged(turn, "b")
