"""Merge by shared prefix and fork point: extensions merge, divergence is refused."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


def _line(uuid: str, parent: str | None, minute: int, role: str, text: str, **more: Any) -> str:
    """A Claude Code log line of session s-7, written at 10:<minute>."""
    message: dict[str, Any] = {"role": role, "content": text}
    if role == "assistant":
        message |= {
            "id": f"msg-{uuid}",
            "model": "claude-x",
            "content": [{"type": "text", "text": text}],
        }
    line = {
        "parentUuid": parent,
        "isSidechain": False,
        "sessionId": "s-7",
        "type": role,
        "message": message,
        "uuid": uuid,
        "timestamp": f"2026-05-04T10:{minute:02d}:00.000Z",
    }
    return json.dumps(line | more)  # fmt: skip


BEFORE = [
    _line("u1", None, 0, "user", "Why does the parser crash on empty input?"),
    _line("u2", "u1", 1, "assistant", "It indexes the first token before checking."),
    _line("u3", "u2", 2, "user", "Guard it, then."),
    _line("u4", "u3", 3, "assistant", "Guarded: parse('') now returns []."),
]
COMPACTED = [
    json.dumps({"parentUuid": None, "logicalParentUuid": "u4", "isSidechain": False,
                "sessionId": "s-7", "type": "system", "subtype": "compact_boundary",
                "content": "Conversation compacted", "uuid": "b1",
                "timestamp": "2026-05-04T10:10:00.000Z"}),
    _line("u5", "b1", 10, "user", "This session is being continued from a previous "
          "conversation. Summary: the parser's empty-input crash was fixed.", isCompactSummary=True),
    _line("u6", "u5", 11, "user", "Now add a test for it."),
    _line("u7", "u6", 12, "assistant", "Added test_parse_empty."),
]  # fmt: skip


def _log(path: Path, lines: list[str]) -> str:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("order", ["before-after", "after-before"])
def test_snapshots_on_either_side_of_a_compaction_merge_at_its_summary(
    run: Callable[..., Any], tmp_path: Path, order: str
) -> None:
    early = _log(tmp_path / "early.jsonl", BEFORE)
    late = _log(tmp_path / "late.jsonl", BEFORE + COMPACTED)
    a, b = (early, late) if order == "before-after" else (late, early)
    out = tmp_path / "merged.jsonl"
    ran = run("merge", a, b, "-o", str(out))
    assert ran.code == 0, ran.err
    later, earlier = ("B", "A") if order == "before-after" else ("A", "B")
    assert (
        f"note: {later} continues {earlier} past a compaction: its first turn summarises the 4 "
        f"turn(s) of {earlier}, so the merge is {later}" in ran.err
    )
    turns = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [t["content"] if t["role"] == "user" else t["content"][0]["text"] for t in turns] == [
        "This session is being continued from a previous conversation. Summary: the parser's "
        "empty-input crash was fixed.",
        "Now add a test for it.",
        "Added test_parse_empty.",
    ]
    assert turns[0]["_meta"]["compactionSummary"] is True


def test_a_snapshot_that_goes_on_past_the_compaction_is_refused_saying_why(
    run: Callable[..., Any], tmp_path: Path
) -> None:
    # A took another turn after the moment B's log was compacted: a branch of its own
    rewound = _line("u8", "u4", 20, "user", "Actually, raise an error instead.")
    a = _log(tmp_path / "a.jsonl", [*BEFORE, rewound])
    b = _log(tmp_path / "b.jsonl", BEFORE + COMPACTED)
    ran = run("merge", a, b, "-o", str(tmp_path / "merged.jsonl"))
    assert ran.code == 4
    assert (
        "B starts from a compaction summary, but A has turns stamped after that compaction: "
        "not the conversation the summary covers" in ran.err
    )
