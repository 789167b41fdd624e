"""Tool-call integrity over the whole history: dangling, partial, orphan, duplicate."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agent_checkpoint.transcripts import (
    DANGLING_RESULT,
    Turn,
    make_tool_call,
    make_tool_result,
    repair,
)


def user(text: str) -> Turn:
    return Turn("user", text)


def calls(*ids: str) -> Turn:
    return Turn(
        "assistant",
        [{"type": "tool_use", "id": i, "name": f"fn_{i}", "input": {}} for i in ids],
        tool_calls=tuple(make_tool_call(i, f"fn_{i}", {}) for i in ids),
    )


def result(id_: str, body: str = "ok") -> Turn:
    return Turn("tool", body, tool_results=(make_tool_result(id_, body),))


def flat(turns: list[Turn]) -> list[tuple[str, object]]:
    """Each turn as (role, its call ids or result ids, else its content)."""
    return [(t.role, t.call_ids or t.result_ids or t.content) for t in turns]


def test_an_intact_history_is_left_alone() -> None:
    history = [user("q"), calls("a", "b"), result("a"), result("b"), Turn("assistant", "done")]
    repaired, report = repair(history)
    assert repaired == history
    assert not report.changed and report.lines() == []


def test_a_dangling_call_at_the_end_is_cut_like_the_seed() -> None:
    repaired, report = repair([user("q"), calls("a"), result("a"), user("again"), calls("b")])
    assert flat(repaired) == [
        ("user", "q"),
        ("assistant", ("a",)),
        ("tool", ("a",)),
        ("user", "again"),
    ]
    assert report.cut_at == 4
    assert report.lines() == [
        "cut the conversation after turn 4 of 5: tool call b (fn_b) at turn 5 has no result"
    ]


def test_a_dangling_call_followed_by_user_input_is_dropped_alone() -> None:
    history = [user("q"), calls("a"), user("never mind"), calls("b"), result("b"), user("end")]
    repaired, report = repair(history)
    assert flat(repaired) == [
        ("user", "q"),
        ("user", "never mind"),
        ("assistant", ("b",)),
        ("tool", ("b",)),
        ("user", "end"),
    ]  # the call's turn held nothing else, so it went with it
    assert report.cut_at is None and [d.id for d in report.dropped] == ["a"]
    assert report.lines() == [
        "dropped tool call a (fn_a) at turn 2: it has no result and the conversation goes on "
        "after it (--on-dangling synthesize keeps it with an error result)"
    ]


def test_a_dropped_call_leaves_the_rest_of_its_turn() -> None:
    said = Turn(
        "assistant",
        [{"type": "text", "text": "Let me look."}, {"type": "tool_use", "id": "a", "name": "f"}],
        tool_calls=(make_tool_call("a", "f", {}),),
    )
    repaired, _ = repair([user("q"), said, user("stop, thanks")])
    assert repaired[1] == said.evolve(
        content=[{"type": "text", "text": "Let me look."}], tool_calls=None
    )
    assert len(repaired) == 3


def test_a_partial_parallel_batch_loses_only_its_unanswered_call() -> None:
    history = [user("q"), calls("a", "b", "c"), result("a"), result("c"), user("next")]
    repaired, report = repair(history)
    assert flat(repaired) == [
        ("user", "q"),
        ("assistant", ("a", "c")),
        ("tool", ("a",)),
        ("tool", ("c",)),
        ("user", "next"),
    ]
    assert [b["id"] for b in repaired[1].content] == ["a", "c"]
    assert [d.id for d in report.dangling] == ["b"] and report.cut_at is None


def test_the_last_exchange_is_still_cut_when_no_user_input_follows() -> None:
    history = [user("q"), calls("a"), result("a"), user("again"), calls("b", "c"), result("c")]
    repaired, report = repair(history)
    assert flat(repaired) == [
        ("user", "q"),
        ("assistant", ("a",)),
        ("tool", ("a",)),
        ("user", "again"),
    ]
    assert report.cut_at == 4 and report.dropped == ()


def test_synthesize_answers_the_missing_call_right_after_its_batch() -> None:
    history = [user("q"), calls("a", "b", "c"), result("a"), result("c"), user("next")]
    repaired, report = repair(history, policy="synthesize")
    assert flat(repaired) == [
        ("user", "q"),
        ("assistant", ("a", "b", "c")),
        ("tool", ("a",)),
        ("tool", ("c",)),
        ("tool", ("b",)),
        ("user", "next"),
    ]
    assert repaired[4].tool_results == (
        {"tool_call_id": "b", "name": "fn_b", "content": DANGLING_RESULT, "is_error": True},
    )
    assert report.lines() == [
        "added an error result for tool call b (fn_b) at turn 2: none was recorded"
    ]


def test_an_orphan_result_is_dropped_with_its_turn() -> None:
    history = [user("q"), result("ghost"), calls("a"), result("a"), result("a", "again")]
    repaired, report = repair(history)
    assert flat(repaired) == [("user", "q"), ("assistant", ("a",)), ("tool", ("a",))]
    assert repaired[2].content == "ok"
    assert [(o.turn, o.id) for o in report.orphans] == [(1, "ghost"), (4, "a")]
    assert report.lines() == [
        "dropped a tool result for ghost at turn 2: no call was waiting for it",
        "dropped a tool result for a at turn 5: no call was waiting for it",
    ]


def test_a_result_before_its_call_is_an_orphan_and_the_call_dangles() -> None:
    repaired, report = repair([user("q"), result("a"), calls("a")])
    assert flat(repaired) == [("user", "q")]
    assert [o.id for o in report.orphans] == ["a"] and [d.id for d in report.dangling] == ["a"]


def test_duplicate_ids_in_one_batch_are_renamed_with_their_results_and_content() -> None:
    history = [
        user("q"),
        calls("call_0", "call_0"),
        result("call_0", "one"),
        result("call_0", "two"),
    ]
    repaired, report = repair(history)
    assert flat(repaired) == [
        ("user", "q"),
        ("assistant", ("call_0", "call_0~2")),
        ("tool", ("call_0",)),
        ("tool", ("call_0~2",)),
    ]
    assert [b["id"] for b in repaired[1].content] == ["call_0", "call_0~2"]
    assert repaired[3].content == "two"
    assert report.lines() == ["renamed duplicate tool call id call_0 at turn 2 to call_0~2"]


def test_an_id_reused_in_a_later_turn_is_renamed() -> None:
    history = [calls("c"), result("c", "first"), calls("c"), result("c", "second")]
    repaired, _ = repair(history)
    assert flat(repaired) == [
        ("assistant", ("c",)),
        ("tool", ("c",)),
        ("assistant", ("c~2",)),
        ("tool", ("c~2",)),
    ]
    assert repaired[3].content == "second"


def test_a_result_answers_the_newest_call_with_its_id_not_an_interrupted_older_one() -> None:
    """Servers that number ids per turn (``call_0``) reuse an id after an interrupted call:
    the result answers the call just before it, and the interrupted call is the one that
    dangles (dropped, the user's words after it kept)."""
    history = [
        user("run tests"),
        calls("call_0"),
        user("stop, check the weather"),
        calls("call_0"),
        result("call_0", "-3C snow"),
        Turn("assistant", "It is -3C in Oslo."),
    ]
    repaired, report = repair(history)
    assert flat(repaired) == [
        ("user", "run tests"),
        ("user", "stop, check the weather"),
        ("assistant", ("call_0~2",)),
        ("tool", ("call_0~2",)),
        ("assistant", "It is -3C in Oslo."),
    ]
    assert repaired[3].content == "-3C snow"
    assert [(d.turn, d.id) for d in report.dropped] == [(1, "call_0")]
    synthesized, _ = repair(history, policy="synthesize")
    assert flat(synthesized)[2:6] == [
        ("tool", ("call_0",)),
        ("user", "stop, check the weather"),
        ("assistant", ("call_0~2",)),
        ("tool", ("call_0~2",)),
    ]
    assert synthesized[2].content == DANGLING_RESULT and synthesized[5].content == "-3C snow"


ids = st.sampled_from(["a", "b", "c"])
turn_strategy = st.one_of(
    st.builds(user, st.sampled_from(["hi", "more"])),
    st.builds(lambda xs: calls(*xs), st.lists(ids, min_size=1, max_size=3)),
    st.builds(result, ids),
)


@settings(max_examples=300, deadline=None)
@given(history=st.lists(turn_strategy, max_size=14), policy=st.sampled_from(["drop", "synthesize"]))
def test_after_repair_every_call_has_exactly_one_later_result_and_no_orphan_remains(
    history: list[Turn], policy: str
) -> None:
    repaired, report = repair(history, policy=policy)  # type: ignore[arg-type]
    seen: set[str] = set()
    waiting: set[str] = set()
    for turn in repaired:
        for rid in turn.result_ids:
            assert rid in waiting, f"orphan or second result for {rid}"
            waiting.remove(rid)
        for cid in turn.call_ids:
            assert cid not in seen, f"duplicate call id {cid}"
            seen.add(cid)
            waiting.add(cid)
    assert not waiting, f"calls without a result: {waiting}"
    again, second = repair(repaired, policy=policy)  # type: ignore[arg-type]
    assert again == repaired and not second.changed
    assert report.turns_out == len(repaired)
    if policy == "drop":  # nothing is reordered or invented; only unanswered calls go
        originals = iter(history)
        for turn in repaired:  # same turn, bar renamed ids and dropped calls
            assert any(
                (turn.role, len(turn.result_ids)) == (o.role, len(o.result_ids))
                and len(turn.call_ids) <= len(o.call_ids)
                for o in originals
            )
        said = [t.content for t in history if t.role == "user"]
        kept = [t.content for t in repaired if t.role == "user"]
        last_input = max((i for i, t in enumerate(history) if t.role == "user"), default=-1)
        cut_inputs = (
            0
            if report.cut_at is None
            else sum(1 for t in history[report.cut_at :] if t.role == "user")
        )
        assert len(kept) == len(said) - cut_inputs
        assert report.cut_at is None or report.cut_at > last_input
    else:
        assert report.cut_at is None
        kept = [t for t in repaired if t.content != DANGLING_RESULT]
        assert len(kept) == len(history) - len(report.orphans)
