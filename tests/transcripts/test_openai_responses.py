"""OpenAI Responses items: messages, reasoning, function calls and outputs, server tools."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from agent_checkpoint.transcripts import MalformedTranscriptError, Turn, open_transcript

Saved = Callable[..., list[Turn]]


def test_the_documented_input_reads_turn_for_turn(
    saved: Saved, fixture_path: Callable[[str], Path]
) -> None:
    turns = saved(fixture_path("transcripts/openai_responses.json"))
    assert [(t.role, t.call_ids, t.result_ids) for t in turns] == [
        ("system", (), ()),
        ("user", (), ()),
        ("assistant", ("call_oslo",), ()),
        ("tool", (), ("call_oslo",)),
        ("assistant", (), ()),
        ("user", (), ()),
        ("assistant", (), ()),
    ]
    assert turns[0].content == "Be brief."
    assert [item["type"] for item in turns[2].content] == ["reasoning", "function_call"]
    assert turns[2].content[0]["encrypted_content"] == "gAAAAABor3Xk9e2xQ1"
    assert turns[2].tool_calls[0]["function"] == {  # type: ignore[index]
        "name": "get_weather",
        "arguments": '{"city":"Oslo"}',
    }
    assert turns[3].tool_results == (
        {"tool_call_id": "call_oslo", "name": "get_weather", "content": "-3°C, snow"},
    )
    assert turns[4].content[0]["content"][0]["text"] == "2+2 is 4. Oslo: -3°C with snow."
    assert turns[5].content == [{"type": "input_text", "text": "Find events in Oslo this weekend."}]
    assert [item["type"] for item in turns[6].content] == ["web_search_call", "message"]
    assert {t.model for t in turns if t.role == "assistant"} == {"gpt-5"}


def test_a_response_object_with_input_and_output_reads_both(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    body = {
        "input": [{"role": "user", "content": "hi"}],
        "output": [
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "yo"}],
            },
            {"type": "item_reference", "id": "msg_1"},
        ],
    }
    path.write_text(json.dumps(body), encoding="utf-8")
    transcript = open_transcript(path)
    turns = list(transcript)
    assert transcript.format == "openai-responses"
    assert [t.role for t in turns] == ["user", "assistant"]
    assert transcript.notes == ["skipped 1 item_reference item(s): they carry no conversation"]


@pytest.mark.parametrize(
    ("item", "named"),
    [
        (
            {"role": "tool", "content": "42"},
            "item 2 is not a Responses message (needs a role among",
        ),
        (
            {"role": "assistant", "content": "hi", "tool_calls": []},
            "item 2 is not a Responses item: it has `tool_calls`",
        ),
        ([1], "item 2 is not a Responses item (a list)"),
    ],
)
def test_a_record_that_is_not_a_responses_item_is_refused_by_its_number(
    tmp_path: Path, item: object, named: str
) -> None:
    path = tmp_path / "items.json"
    path.write_text(json.dumps({"input": [{"role": "user", "content": "hi"}, item]}))
    with pytest.raises(MalformedTranscriptError, match=re.escape(f"{path}: {named}")):
        list(open_transcript(path))
