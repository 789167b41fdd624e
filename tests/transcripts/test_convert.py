"""Turns to a RunCheckpoint's history and back, with a report of what could not be carried."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_checkpoint._model import InjectedBy, Message, RunCheckpoint, ThinkingBlock, ToolCall
from agent_checkpoint._validation import validate_checkpoint
from agent_checkpoint.errors import InvalidArgumentError
from agent_checkpoint.transcripts import (
    Turn,
    checkpoint_to_turns,
    make_tool_call,
    messages_to_turns,
    open_transcript,
    turns_to_checkpoint,
    turns_to_messages,
)

Saved = Callable[..., list[Turn]]
Fixture = Callable[[str], Path]


def test_anthropic_turns_become_string_messages_with_calls_results_and_signatures(
    saved: Saved, fixture_path: Fixture
) -> None:
    checkpoint, report = turns_to_checkpoint(
        saved(fixture_path("transcripts/anthropic_messages.json"))
    )
    tool_id = "toolu_01A09q90qw90lq917835lq9"
    assert list(checkpoint.history) == [
        Message("user", "What's the weather in Paris?"),
        Message(
            "assistant",
            "Let me check.",
            tool_calls=(
                ToolCall(tool_id, "get_weather", {"location": "Paris", "unit": "celsius"}),
            ),
            thinking_blocks=(
                ThinkingBlock(
                    "thinking",
                    "The user wants the weather; I should call the tool.",
                    signature="EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds+x+Q==",
                ),
            ),
        ),
        Message("tool", "18°C, cloudy", tool_call_id=tool_id, tool_name="get_weather"),
        Message(
            "assistant",
            "It is 18°C and cloudy in Paris.",
            thinking_blocks=(
                ThinkingBlock(
                    "redacted_thinking",
                    "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP",
                ),
            ),
        ),
        Message("user", "Thanks! What is in this picture?"),
        Message("assistant", "A single transparent pixel."),
    ]
    assert checkpoint.original_input.message == "Thanks! What is in this picture?"
    assert report.lines() == [
        "not carried into the checkpoint: system prompt (a history holds none), at turn 1",
        "not carried into the checkpoint: image block, at turn 6",
    ]
    document = checkpoint.to_json()
    validate_checkpoint(document)
    assert document["history"][1]["toolCalls"] == [
        {"id": tool_id, "name": "get_weather", "args": {"location": "Paris", "unit": "celsius"}}
    ]
    assert document["history"][2]["toolCallId"] == tool_id
    assert RunCheckpoint.from_json(document) == checkpoint


def test_openai_chat_turns_keep_parallel_and_legacy_calls(
    saved: Saved, fixture_path: Fixture
) -> None:
    history, report = turns_to_messages(saved(fixture_path("transcripts/openai_chat_tools.json")))
    assert [(m.role, m.content) for m in history[:4]] == [
        ("user", "What's the weather in Paris and Tokyo?"),
        ("assistant", ""),
        ("tool", "18°C, cloudy"),
        ("tool", "24°C, sunny"),
    ]
    assert history[1].tool_calls == (
        ToolCall("call_paris", "get_weather", {"city": "Paris"}),
        ToolCall("call_tokyo", "get_weather", {"city": "Tokyo"}),
    )
    assert (history[3].tool_call_id, history[3].tool_name) == ("call_tokyo", "get_weather")
    assert history[5] == Message("user", "And what is this?")
    assert history[6].tool_calls == (
        ToolCall("legacy-8", "describe_image", {"url": "https://example.com/cloud.png"}),
    )
    assert [line.split(",")[0] for line in report.lines()] == [
        "not carried into the checkpoint: system prompt (a history holds none)",
        "not carried into the checkpoint: image_url block",
    ]


def test_responses_reasoning_becomes_a_summary_thinking_block(
    saved: Saved, fixture_path: Fixture
) -> None:
    history, report = turns_to_messages(saved(fixture_path("transcripts/openai_responses.json")))
    assert history[1] == Message(
        "assistant",
        "",
        tool_calls=(ToolCall("call_oslo", "get_weather", {"city": "Oslo"}),),
        thinking_blocks=(
            ThinkingBlock(
                "thinking",
                "Simple arithmetic plus a weather lookup.",
                summary=True,
                provider_meta={"id": "rs_68af1", "encrypted_content": "gAAAAABor3Xk9e2xQ1"},
            ),
        ),
    )
    assert history[3] == Message("assistant", "2+2 is 4. Oslo: -3°C with snow.")
    assert history[5] == Message("assistant", "A jazz festival runs on Saturday.")
    assert "web_search_call block, at turn 7" in report.lines()[-1]


def test_codex_custom_tool_calls_carry_their_input(saved: Saved, fixture_path: Fixture) -> None:
    history, _ = turns_to_messages(saved(fixture_path("transcripts/codex_rollout.jsonl")))
    patch = next(m for m in history if m.tool_calls and m.tool_calls[0].name == "apply_patch")
    assert patch.tool_calls[0].args == {  # type: ignore[index]
        "input": "*** Begin Patch\n*** Add File: hello.txt\n+hi\n*** End Patch\n"
    }


def test_claude_code_error_results_are_reported(saved: Saved, fixture_path: Fixture) -> None:
    history, report = turns_to_messages(
        saved(fixture_path("transcripts/claude_code_branches.jsonl"))
    )
    assert history[1].thinking_blocks[0].signature == (  # type: ignore[index]
        "ErUBCkYIBxgCIkCk3wSq0H9bUb2m4c1vJp6x2gk0e6Gm7vUu5dZ8Q=="
    )
    assert history[1].content == "Let me look at the test\u2028and run it."
    assert report.lines() == [
        "not carried into the checkpoint: is_error flag of a tool result, at turn 4"
    ]


def test_arguments_that_are_not_an_object_travel_in_provider_meta() -> None:
    turn = Turn("assistant", "", tool_calls=(make_tool_call("c1", "shell", "ls -la"),))
    history, report = turns_to_messages([turn])
    assert history[0].tool_calls == (
        ToolCall("c1", "shell", {}, provider_meta={"arguments": "ls -la"}),
    )
    assert report.not_carried[0].what.startswith("tool-call arguments that are not a JSON object")


def test_a_checkpoint_comes_back_as_turns_stamped_with_its_time() -> None:
    checkpoint = RunCheckpoint.new(
        "hi", [Message("user", "hi"), Message("assistant", "yo")], checkpointed_at=1_750_000_000_000
    )
    turns = list(checkpoint_to_turns(checkpoint))
    assert [(t.role, t.content, t.ts) for t in turns] == [
        ("user", "hi", "2025-06-15T15:06:40Z"),
        ("assistant", "yo", "2025-06-15T15:06:40Z"),
    ]


words = st.text(alphabet="abc \n\u2028é😀\"'", max_size=12)
ids = st.text(alphabet="abcdef0123456789_", min_size=1, max_size=8)
args = st.dictionaries(
    st.sampled_from(["q", "n", "deep"]),
    st.one_of(words, st.integers(-(2**63), 2**63 - 1), st.lists(st.booleans())),
)
thinking = st.builds(
    ThinkingBlock,
    st.sampled_from(["thinking", "redacted_thinking"]),
    words,
    signature=st.one_of(st.none(), words),
    summary=st.one_of(st.none(), st.booleans()),
    provider_meta=st.one_of(st.none(), st.just({"encrypted_content": "gAAA"})),
)
injected = st.builds(
    InjectedBy,
    ids,
    st.sampled_from(["instructions", "skill"]),
    st.integers(0, 9),
    reason=st.sampled_from([None, "developer message", "system message", "a hook"]),
)
messages = st.one_of(
    st.builds(Message, st.just("user"), words),
    st.builds(Message, st.just("user"), words, injected_by=injected),
    st.builds(
        Message,
        st.just("assistant"),
        words,
        tool_calls=st.one_of(
            st.none(),
            st.lists(
                st.builds(ToolCall, ids, words, args, provider_meta=st.one_of(st.none(), st.just({"thoughtSignature": "x"}))),
                min_size=1,
                max_size=3,
            ).map(tuple),
        ),
        thinking_blocks=st.one_of(st.none(), st.lists(thinking, min_size=1, max_size=2).map(tuple)),
    ),
    st.builds(Message, st.just("tool"), words, tool_call_id=ids, tool_name=st.one_of(st.none(), words.filter(bool))),
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(history=st.lists(messages, max_size=8))
def test_history_to_turns_and_back_gives_the_same_messages(history: list[Message]) -> None:
    back, report = turns_to_messages(messages_to_turns(history))
    assert back == history
    assert report.not_carried == ()


def test_a_turn_file_written_by_the_seed_still_converts(tmp_path: Path) -> None:
    seed_lines = [
        {"role": "user", "content": [{"type": "text", "text": "list files"}], "tool_calls": None,
         "tool_results": None, "provider": "anthropic", "model": None, "ts": "2025-06-14T10:00:00Z"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash",
         "input": {"command": "ls"}}], "tool_calls": [{"type": "tool_use", "id": "t1",
         "name": "Bash", "input": {"command": "ls"}}], "tool_results": None,
         "provider": "anthropic", "model": "claude-3", "ts": "2025-06-14T10:00:01Z"},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a.py"},
         {"type": "text", "text": "thanks"}], "tool_calls": None, "tool_results": [{"type":
         "tool_result", "tool_use_id": "t1", "content": "a.py"}], "provider": "anthropic",
         "model": None, "ts": "2025-06-14T10:00:02Z"},
    ]  # fmt: skip
    path = tmp_path / "seed.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in seed_lines), encoding="utf-8")
    transcript = open_transcript(path)
    assert transcript.format == "turns"
    history, _ = turns_to_messages(transcript)
    assert history == [
        Message("user", "list files"),
        Message("assistant", "", tool_calls=(ToolCall("t1", "Bash", {"command": "ls"}),)),
        Message("tool", "a.py", tool_call_id="t1", tool_name="Bash"),
        Message("user", "thanks"),
    ]


@pytest.mark.parametrize(
    ("name", "roles"),
    [
        ("shared/claude-code/representative_messages.jsonl", "u a u a t a u a t a u"),
        ("shared/claude-code/todowrite_examples.jsonl", "u a a t a a t u a a t"),
        ("shared/claude-code/session_b.jsonl", "u a u"),
        ("shared/claude-code/edge_cases.jsonl", "u a u a t u u u a u u"),
        ("transcripts/claude_code_branches.jsonl", "u a t t a u a t a"),
        ("transcripts/claude_code_compacted.jsonl", "u u a t t a u"),
        ("transcripts/openai_chat_tools.json", "u a t t a u a t a u"),
        ("transcripts/anthropic_messages.json", "u a t a u a"),
        ("transcripts/openai_responses.json", "u a t a u a"),
        ("transcripts/codex_rollout.jsonl", "u u a t a u a t u"),
        ("transcripts/codex_compacted.jsonl", "u u a"),
    ],
)
def test_every_fixture_saves_to_a_valid_checkpoint_without_a_dangling_call(
    saved: Saved, fixture_path: Fixture, name: str, roles: str
) -> None:
    checkpoint, _ = turns_to_checkpoint(saved(fixture_path(name)))
    validate_checkpoint(checkpoint.to_json())
    assert " ".join(m.role[0] for m in checkpoint.history) == roles
    waiting: set[str] = set()
    for message in checkpoint.history:
        if message.role == "tool":
            assert message.tool_call_id in waiting, f"orphan result {message.tool_call_id}"
            waiting.discard(message.tool_call_id or "")
        for call in message.tool_calls or ():
            assert call.id not in waiting
            waiting.add(call.id)
    assert not waiting, f"dangling calls {waiting}"
    last_user = next(m for m in reversed(checkpoint.history) if m.role == "user")
    assert checkpoint.original_input.message == last_user.content


@pytest.mark.parametrize(
    ("call", "named"),
    [
        # each raised AttributeError or pathlib's TypeError from inside
        (
            lambda: list(checkpoint_to_turns({"runId": "r"})),  # type: ignore[arg-type]
            "checkpoint_to_turns takes a RunCheckpoint, not dict (RunCheckpoint.from_json",
        ),
        (lambda: open_transcript(None), "open_transcript takes a file's path, got None"),
        (lambda: open_transcript(["a.json"]), "open_transcript takes a file's path, got ['a"),
    ],
)
def test_a_transcript_function_given_the_wrong_kind_of_value_names_it(
    call: Callable[[], object], named: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=re.escape(named)):
        call()


def test_developer_and_mid_conversation_system_turns_are_kept_as_marked_instructions() -> None:
    turns = [
        Turn("system", "You are terse."),
        Turn("developer", [{"type": "input_text", "text": "The sandbox is read-only."}]),
        Turn("user", "Count the rows"),
        Turn("assistant", "41."),
        Turn("system", [{"type": "text", "text": "grep is available"}, {"type": "tool_addition"}]),
        Turn("developer", "Writing is allowed now."),
        Turn("user", "Add one"),
    ]
    history, report = turns_to_messages(turns)
    assert [(m.role, m.content) for m in history] == [
        ("user", "The sandbox is read-only."),
        ("user", "Count the rows"),
        ("assistant", "41."),
        ("user", "grep is available"),
        ("user", "Writing is allowed now."),
        ("user", "Add one"),
    ]
    assert [m.injected_by.to_json() if m.injected_by else None for m in history] == [
        {"injectionId": "turn-2", "flavor": "instructions", "reason": "developer message", "iteration": 1},
        None,
        None,
        {"injectionId": "turn-5", "flavor": "instructions", "reason": "system message", "iteration": 2},
        {"injectionId": "turn-6", "flavor": "instructions", "reason": "developer message", "iteration": 2},
        None,
    ]  # fmt: skip
    assert report.lines() == [  # only the leading system turn is a system prompt
        "not carried into the checkpoint: system prompt (a history holds none), at turn 1",
        "not carried into the checkpoint: tool_addition block, at turn 5",
    ]
    back = list(messages_to_turns(history))
    assert [t.role for t in back] == [
        "developer",
        "user",
        "assistant",
        "system",
        "developer",
        "user",
    ]
    again, again_report = turns_to_messages(back)
    assert again == history and again_report.not_carried == ()
