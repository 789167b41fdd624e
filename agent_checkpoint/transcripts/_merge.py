"""Merging two conversations by their shared prefix, never by set membership.

``find_fork`` compares the two turn by turn (role, content, tool calls and results) and
finds where they part. If one is a prefix of the other, the merge is the longer one: every
turn of both, in order, repeated turns included (the seed's "append what is not already
present" dropped a user's second "yes"). If both go on past the fork, that is a divergence:
``merged_turns`` refuses it with ``DivergedError`` unless told which side's branch to keep.
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

    @property
    def diverged(self) -> bool:
        return self.shared < self.a_turns and self.shared < self.b_turns

    def taken(self, prefer: Side | None = None) -> tuple[int, int]:
        """How many turns the merge takes from A, and how many new ones from B."""
        if not self.diverged:
            return self.a_turns, max(0, self.b_turns - self.a_turns)
        if prefer == "a":
            return self.a_turns, 0
        return self.shared, self.b_turns - self.shared

    def describe(self) -> str:
        return (
            f"A and B share their first {self.shared} turn(s), then A goes on with "
            f"{self.a_turns - self.shared} and B with {self.b_turns - self.shared} different "
            "turn(s)"
        )


def find_fork(a: Iterable[Turn], b: Iterable[Turn]) -> Fork:
    """Compare ``a`` and ``b`` turn by turn (one pass each, fingerprints only)."""
    prints_a = [t.fingerprint() for t in a]
    shared, count_b = 0, 0
    for turn in b:
        if shared == count_b and shared < len(prints_a) and turn.fingerprint() == prints_a[shared]:
            shared += 1
        count_b += 1
    return Fork(len(prints_a), count_b, shared)


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
