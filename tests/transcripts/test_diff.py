"""Diff aligns turns: an inserted turn is one difference, not a shifted tail."""

from __future__ import annotations

from agent_checkpoint.transcripts import Turn, diff_turns, make_tool_call


def convo(*texts: str) -> list[Turn]:
    return [Turn("user" if i % 2 == 0 else "assistant", t) for i, t in enumerate(texts)]


def test_identical_conversations_ignore_time_provider_and_model() -> None:
    a = convo("hi", "yo")
    b = [t.evolve(ts="2030-01-01T00:00:00Z", provider="x", model="m") for t in a]
    result = diff_turns(a, b)
    assert result.identical and result.lines() == ["identical"]
    assert result.to_json() == {"identical": True, "aTurns": 2, "bTurns": 2, "differences": []}


def test_a_turn_inserted_in_the_middle_is_one_difference() -> None:
    a = convo("q1", "a1", "q2", "a2", "q3", "a3")
    b = [*a[:2], Turn("user", "an aside"), *a[2:]]
    result = diff_turns(a, b)
    assert [d.to_json() for d in result.differences] == [
        {"op": "insert", "aIndex": None, "bIndex": 2, "role": "user", "preview": "an aside"}
    ]
    assert result.lines()[1:] == [
        "A has 6 turns, B has 7: 1 inserted, 0 removed, 0 changed",
        '+ B turn 3 (user) inserted: "an aside"',
    ]


def test_previews_in_json_are_the_text_itself_not_a_python_repr() -> None:
    a = convo("Where?", "Paris.")
    b = convo("Where?", "Rome.")
    (json_diff,) = diff_turns(a, b).to_json()["differences"]  # type: ignore[misc]
    assert json_diff["preview"] == "Rome."  # type: ignore[index]
    said = 'She said "it\'s fine"'
    (quoted,) = diff_turns(a, convo("Where?", said)).differences
    assert quoted.preview == said
    assert quoted.line().endswith(': "She said \\"it\'s fine\\""')


def test_a_removed_and_a_changed_turn_are_told_apart() -> None:
    a = convo("q1", "a1", "q2", "a2")
    b = [a[0], a[1], Turn("user", "q2, reworded"), a[3]]
    changed = diff_turns(a, b).differences
    assert [(d.op, d.a_index, d.b_index, d.fields) for d in changed] == [
        ("change", 2, 2, ("content",))
    ]
    removed = diff_turns(a, [a[0], a[1], a[3]]).differences
    assert [(d.op, d.a_index, d.role) for d in removed] == [("delete", 2, "user")]


def test_a_change_in_tool_calls_names_that_field() -> None:
    a = [Turn("assistant", None, tool_calls=(make_tool_call("c1", "ls", {"path": "/"}),))]
    b = [Turn("assistant", None, tool_calls=(make_tool_call("c1", "ls", {"path": "/tmp"}),))]
    (difference,) = diff_turns(a, b).differences
    assert difference.fields == ("tool_calls",)
    assert difference.preview == "calls ls(c1)"


def test_repeated_turns_align_by_position_not_by_set() -> None:
    a = convo("yes", "ok", "yes", "ok")
    b = convo("yes", "ok", "yes", "ok", "yes", "ok")
    assert [(d.op, d.b_index) for d in diff_turns(a, b).differences] == [
        ("insert", 4),
        ("insert", 5),
    ]
