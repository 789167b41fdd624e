"""Merge by shared prefix and fork point: extensions merge, divergence is refused."""

from __future__ import annotations

import pytest

from agent_checkpoint.transcripts import DivergedError, Turn, find_fork, merged_turns


def convo(*texts: str) -> list[Turn]:
    return [Turn("user" if i % 2 == 0 else "assistant", t) for i, t in enumerate(texts)]


def contents(turns: list[Turn]) -> list[object]:
    return [t.content for t in turns]


def test_b_extending_a_gives_all_of_b_with_provenance() -> None:
    a, b = convo("q1", "a1"), convo("q1", "a1", "q2", "a2")
    fork = find_fork(a, b)
    assert (fork.shared, fork.diverged, fork.taken()) == (2, False, (2, 2))
    merged = list(merged_turns(a, b, fork))
    assert contents(merged) == ["q1", "a1", "q2", "a2"]
    assert [t.extra["_meta"] for t in merged] == [
        {"source": "a"},
        {"source": "a"},
        {"source": "b"},
        {"source": "b"},
    ]


def test_a_legitimately_repeated_turn_is_kept() -> None:
    a = convo("yes", "ok", "yes", "ok")
    b = convo("yes", "ok", "yes", "ok", "yes", "ok")
    merged = list(merged_turns(a, b, find_fork(a, b)))
    assert contents(merged) == ["yes", "ok", "yes", "ok", "yes", "ok"]


def test_b_already_inside_a_adds_nothing() -> None:
    a, b = convo("q1", "a1", "q2"), convo("q1", "a1")
    fork = find_fork(a, b)
    assert fork.taken() == (3, 0)
    assert contents(list(merged_turns(a, b, fork))) == ["q1", "a1", "q2"]


def test_diverged_conversations_are_refused_with_the_fork_point() -> None:
    a, b = convo("q1", "a1", "q2 by A"), convo("q1", "a1", "q2 by B", "a2 by B")
    fork = find_fork(a, b)
    assert fork.diverged and fork.shared == 2
    with pytest.raises(DivergedError, match="share their first 2 turn") as caught:
        list(merged_turns(a, b, fork))
    assert (caught.value.fork, caught.value.a_rest, caught.value.b_rest) == (2, 1, 2)


def test_prefer_keeps_one_branch_past_the_fork() -> None:
    a, b = convo("q1", "a1", "q2 by A"), convo("q1", "a1", "q2 by B", "a2 by B")
    fork = find_fork(a, b)
    assert contents(list(merged_turns(a, b, fork, prefer="a"))) == ["q1", "a1", "q2 by A"]
    kept_b = list(merged_turns(a, b, fork, prefer="b"))
    assert contents(kept_b) == ["q1", "a1", "q2 by B", "a2 by B"]
    assert [t.extra["_meta"]["source"] for t in kept_b] == ["a", "a", "b", "b"]


def test_the_source_is_the_side_of_this_merge_whatever_an_earlier_merge_said() -> None:
    a = [Turn("user", "q", extra={"_meta": {"source": "b", "other": 1}})]
    b = [*a, Turn("assistant", "r", extra={"_meta": {"source": "a"}})]
    merged = list(merged_turns(a, b, find_fork(a, b)))
    assert [t.extra["_meta"] for t in merged] == [{"source": "a", "other": 1}, {"source": "b"}]
