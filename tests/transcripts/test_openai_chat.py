"""OpenAI chat messages: parallel tool calls, legacy function calls, content parts."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from agent_checkpoint.transcripts import Turn, open_transcript

Saved = Callable[..., list[Turn]]


def test_the_documented_tool_conversation_reads_turn_for_turn(
    saved: Saved, fixture_path: Callable[[str], Path]
) -> None:
    turns = saved(fixture_path("transcripts/openai_chat_tools.json"))
    assert [(t.role, t.call_ids, t.result_ids) for t in turns] == [
        ("system", (), ()),
        ("user", (), ()),
        ("assistant", ("call_paris", "call_tokyo"), ()),
        ("tool", (), ("call_paris",)),
        ("tool", (), ("call_tokyo",)),
        ("assistant", (), ()),
        ("user", (), ()),
        ("assistant", ("legacy-8",), ()),
        ("tool", (), ("legacy-8",)),
        ("assistant", (), ()),
        ("user", (), ()),
    ]  # the booking call at the end has no result, so it is cut
    assert turns[0].content == "You are a weather assistant."
    assert turns[2].content is None
    assert turns[2].tool_calls[0] == {  # type: ignore[index]
        "id": "call_paris",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    assert turns[4].tool_results == (
        {"tool_call_id": "call_tokyo", "name": "get_weather", "content": "24°C, sunny"},
    )
    assert turns[6].content[1] == {  # content parts are kept as sent
        "type": "image_url",
        "image_url": {"url": "https://example.com/cloud.png"},
    }
    assert all(t.provider == "openai" for t in turns)


def test_a_legacy_function_call_pairs_with_its_function_message(
    saved: Saved, fixture_path: Callable[[str], Path]
) -> None:
    turns = saved(fixture_path("transcripts/openai_chat_tools.json"))
    call = turns[7].tool_calls[0]  # type: ignore[index]
    assert call["function"]["name"] == "describe_image"
    assert json.loads(call["function"]["arguments"]) == {"url": "https://example.com/cloud.png"}
    assert turns[8].tool_results == (
        {"tool_call_id": "legacy-8", "name": "describe_image", "content": "A cumulus cloud."},
    )


def test_messages_as_json_lines_read_the_same(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    messages = [
        {"role": "developer", "content": "Answer tersely."},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4", "refusal": None},
    ]
    path.write_text("".join(json.dumps(m) + "\n" for m in messages), encoding="utf-8")
    transcript = open_transcript(path)
    assert transcript.format == "openai-chat"
    assert [(t.role, t.content) for t in transcript] == [
        ("developer", "Answer tersely."),
        ("user", "2+2?"),
        ("assistant", "4"),
    ]


def test_a_request_body_gives_its_model_to_assistant_turns(tmp_path: Path) -> None:
    path = tmp_path / "request.json"
    body = {
        "model": "gpt-4o",
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
    }
    path.write_text(json.dumps(body), encoding="utf-8")
    assert [(t.role, t.model) for t in open_transcript(path)] == [
        ("user", None),
        ("assistant", "gpt-4o"),
    ]


def _call(id_: str, name: str) -> dict[str, object]:
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": "{}"}}


def test_a_result_is_named_after_the_call_it_answers_when_ids_repeat(tmp_path: Path) -> None:
    """Two calls of one batch with one id are answered in their order; an id used again
    after an interrupted call names the newer call's tool."""
    batch = [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [_call("c0", "read_file"), _call("c0", "delete_file")],
        },
        {"role": "tool", "tool_call_id": "c0", "content": "file contents"},
        {"role": "tool", "tool_call_id": "c0", "content": "deleted"},
    ]
    reused = [
        {"role": "user", "content": "run tests"},
        {"role": "assistant", "content": None, "tool_calls": [_call("c0", "run_tests")]},
        {"role": "user", "content": "stop, check the weather"},
        {"role": "assistant", "content": None, "tool_calls": [_call("c0", "get_weather")]},
        {"role": "tool", "tool_call_id": "c0", "content": "-3C snow"},
    ]
    named = []
    for name, messages in (("batch", batch), ("reused", reused)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(messages))
        named.append(
            [
                (t.content, t.tool_results[0]["name"])
                for t in open_transcript(path)
                if t.tool_results
            ]
        )
    assert named[0] == [("file contents", "read_file"), ("deleted", "delete_file")]
    assert named[1] == [("-3C snow", "get_weather")]
