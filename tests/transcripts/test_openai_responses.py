"""OpenAI Responses items: messages, reasoning, function calls and outputs, server tools."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


TOOL_OUTPUT = {"type": "function_call_output", "call_id": "call_w1", "output": "18C, cloudy"}


@pytest.mark.parametrize(
    ("continues", "named"),
    [
        ({"previous_response_id": "resp_68a1b2c3"}, "previous_response_id resp_68a1b2c3"),
        ({"conversation": {"id": "conv_6896679"}}, "conversation conv_6896679"),
        ({"conversation": "conv_6896679"}, "conversation conv_6896679"),
    ],
)
def test_a_request_whose_history_is_on_the_server_is_refused_saying_so(
    run: Callable[..., Any], tmp_path: Path, continues: dict[str, Any], named: str
) -> None:
    # the request sends only the output of a call made in a response the server keeps
    body = {"model": "gpt-4.1", "instructions": "You report weather.", **continues}
    path = tmp_path / "request.json"
    path.write_text(json.dumps(body | {"input": [TOOL_OUTPUT]}), encoding="utf-8")
    out = tmp_path / "turns.jsonl"
    ran = run("save", str(path), "-o", str(out))
    assert ran.code == 5 and not out.exists()
    error = ran.err.splitlines()[-1]
    assert error.startswith(f"agent-checkpoint: error: {path}: nothing of the conversation to save")
    assert f"stored on OpenAI's servers ({named})" in error
    assert "--on-dangling" not in ran.err
    marker = tmp_path / "ran"
    resumed = run("resume", str(path), "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')")
    assert resumed.code == 5 and "nothing of the conversation to resume" in resumed.err
    assert not marker.exists()


def test_a_request_continuing_a_stored_conversation_says_only_its_items_were_saved(
    run: Callable[..., Any], tmp_path: Path
) -> None:
    body = {
        "model": "gpt-4.1",
        "previous_response_id": "resp_68a1b2c3",
        "input": [{"role": "user", "content": "And tomorrow?"}],
    }
    path = tmp_path / "request.json"
    path.write_text(json.dumps(body), encoding="utf-8")
    ran = run("save", str(path), "-o", str(tmp_path / "turns.jsonl"))
    assert ran.code == 0
    assert (
        "note: this request continues a conversation stored on OpenAI's servers "
        "(previous_response_id resp_68a1b2c3): the file holds only the items it added" in ran.err
    )


def test_tool_outputs_with_no_call_in_the_file_are_refused_without_a_dangling_call_hint(
    run: Callable[..., Any], tmp_path: Path
) -> None:
    path = tmp_path / "items.json"
    path.write_text(json.dumps([TOOL_OUTPUT]), encoding="utf-8")
    ran = run("save", str(path), "-o", str(tmp_path / "turns.jsonl"))
    assert ran.code == 5
    assert ran.err.splitlines()[-1].endswith(
        "no complete turn to save (every tool result answers a call the file does not hold)"
    )


def test_a_request_whose_input_is_one_string_reads_as_a_user_message(
    run: Callable[..., Any], tmp_path: Path
) -> None:
    # the usual shape of a request that continues a stored response
    body = {"model": "gpt-4.1", "previous_response_id": "resp_68a1b2c3", "input": "And tomorrow?"}
    path = tmp_path / "request.json"
    path.write_text(json.dumps(body), encoding="utf-8")
    out = tmp_path / "turns.jsonl"
    ran = run("save", str(path), "-o", str(out))
    assert ran.code == 0, ran.err
    assert "stored on OpenAI's servers (previous_response_id resp_68a1b2c3)" in ran.err
    (turn,) = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert (turn["role"], turn["content"]) == ("user", "And tomorrow?")
