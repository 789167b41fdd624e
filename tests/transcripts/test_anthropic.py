"""Anthropic messages: blocks, tool_use/tool_result, thinking with signatures, the system prompt."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent_checkpoint.transcripts import MalformedTranscriptError, Turn, open_transcript

Saved = Callable[..., list[Turn]]


def test_the_documented_request_reads_turn_for_turn(
    saved: Saved, fixture_path: Callable[[str], Path]
) -> None:
    turns = saved(fixture_path("transcripts/anthropic_messages.json"))
    tool_id = "toolu_01A09q90qw90lq917835lq9"
    assert [(t.role, t.call_ids, t.result_ids) for t in turns] == [
        ("system", (), ()),
        ("user", (), ()),
        ("assistant", (tool_id,), ()),
        ("tool", (), (tool_id,)),
        ("assistant", (), ()),
        ("user", (), ()),
        ("assistant", (), ()),
    ]
    assert turns[0].content == "You are a careful assistant."
    assert turns[1].content == "What's the weather in Paris?"
    thinking, said, use = turns[2].content
    assert thinking == {
        "type": "thinking",
        "thinking": "The user wants the weather; I should call the tool.",
        "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds+x+Q==",
    }
    assert said == {"type": "text", "text": "Let me check."}
    assert turns[2].tool_calls == (
        {
            "id": tool_id,
            "type": "function",
            "function": {
                "name": "get_weather",
                "arguments": '{"location":"Paris","unit":"celsius"}',
            },
        },
    )
    assert use["input"] == {"location": "Paris", "unit": "celsius"}
    assert turns[3].content == [{"type": "text", "text": "18°C, cloudy"}]
    assert turns[3].tool_results[0]["name"] == "get_weather"  # type: ignore[index]
    assert turns[4].content[0]["type"] == "redacted_thinking"
    assert turns[5].content[1]["type"] == "image"
    assert {t.model for t in turns if t.role == "assistant"} == {"claude-sonnet-4-5"}


def test_a_user_message_mixing_results_and_text_splits_results_first(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    messages = [
        {"role": "user", "content": "run both"},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "a", "name": "x", "input": {}},
            {"type": "tool_use", "id": "b", "name": "y", "input": {"n": 1}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "a", "content": "A"},
            {"type": "tool_result", "tool_use_id": "b", "content": "B", "is_error": True},
            {"type": "text", "text": "and then stop"},
        ]},
    ]  # fmt: skip
    path.write_text(json.dumps(messages), encoding="utf-8")
    turns = list(open_transcript(path))
    assert [(t.role, t.content) for t in turns[2:]] == [
        ("tool", "A"),
        ("tool", "B"),
        ("user", [{"type": "text", "text": "and then stop"}]),
    ]
    assert turns[3].tool_results == (
        {"tool_call_id": "b", "name": "y", "content": "B", "is_error": True},
    )


def test_a_message_with_another_role_is_refused_with_its_position(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(
        json.dumps(
            {"system": "s", "messages": [{"role": "user", "content": "a"}, {"role": "bot"}]}
        ),
        encoding="utf-8",
    )
    with pytest.raises(MalformedTranscriptError, match=r"t\.json: message 2 is not an Anthropic"):
        list(open_transcript(path))


def test_a_system_message_mid_conversation_is_a_system_turn_in_its_place(
    run: Callable[..., Any], fixture_path: Callable[[str], Path], tmp_path: Path
) -> None:
    body = fixture_path("transcripts/anthropic_system_midway.json")
    out = tmp_path / "turns.jsonl"
    ran = run("save", str(body), "-o", str(out))
    assert ran.code == 0, ran.err
    turns = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    roles = ["system", "user", "assistant", "tool", "system", "assistant", "user"]
    assert [t["role"] for t in turns] == roles
    assert turns[4]["content"] == [  # blocks as sent, the kind this reader does not know too
        {"type": "text", "text": "The grep tool is available from here on."},
        {"type": "tool_addition", "tool": {"type": "tool_reference", "name": "grep"}},
    ]


def test_a_mid_conversation_system_message_is_anthropic_without_a_top_level_system(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.json"
    addition = {"type": "tool_addition", "tool": {"type": "tool_reference", "name": "grep"}}
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "find the bug"}]},
        {"role": "system", "content": [{"type": "text", "text": "grep is on"}, addition]},
        {"role": "assistant", "content": [{"type": "text", "text": "Searching."}]},
    ]
    path.write_text(json.dumps({"model": "claude-x", "messages": messages}), encoding="utf-8")
    transcript = open_transcript(path)
    assert transcript.format == "anthropic"
    assert [(t.role, t.content) for t in transcript][1] == ("system", messages[1]["content"])
