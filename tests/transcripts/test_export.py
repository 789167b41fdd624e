"""``export_turns``: a conversation written in each format reads back as the same turns, and
what a format cannot hold is reported, never dropped silently."""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.shared_fixtures import shared_names

from agent_checkpoint.errors import InvalidArgumentError
from agent_checkpoint.transcripts import (
    EXPORT_FORMATS,
    Exported,
    Turn,
    export_turns,
    make_tool_call,
    make_tool_result,
    open_transcript,
    plan_integrity,
    write_export,
)
from agent_checkpoint.transcripts._convert import Converter
from agent_checkpoint.transcripts._export import SUFFIX
from agent_checkpoint.transcripts._turns import call_arguments, call_id, call_name, result_id

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
S1, S2, G1 = (
    "0b7c0e62-3f1e-4d8a-9c55-6a1f2d3e4b5c",
    "019a2d7a-41c4-78b1-b7cc-a45d62a89cd5",
    "f86f5318-f47b-4433-85f8-ec9d9a417f8e",
)
READ_BACK = [
    "turns",
    "openai-chat",
    "openai-responses",
    "anthropic",
    "codex",
    "claude-code",
    "gemini-cli",
    "aider",
]
"""The formats both written and read: every pair is round-tripped (adding a format to this
list is all its round trip takes)."""
WORDS_ONLY = {"aider"}
"""Formats that hold words only, no tool calls: round trips through them are of conversations
without tools (what they cannot hold is checked to be reported below)."""
FULL = {"turns", "openai-chat", "openai-responses", "anthropic", "codex"}
"""Formats that hold a leading system prompt (a Claude Code log holds none)."""


def normal(turns: list[Turn]) -> list[tuple[object, ...]]:
    """What every format must give back: role, words, calls (id, name, arguments as an
    object) and results (id, words, error flag)."""
    words = Converter()
    out = []
    for turn in turns:
        calls = []
        for call in turn.tool_calls or ():
            args = call_arguments(call)
            calls.append(
                (
                    call_id(call),
                    call_name(call),
                    orjson.loads(args) if isinstance(args, str) else args,
                )
            )
        results = [
            (result_id(r), words.text(r.get("content")), r.get("is_error") is True)
            for r in turn.tool_results or ()
        ]
        text = "" if turn.is_result and turn.role == "tool" else words.text(turn.content, [])
        out.append((turn.role, text, calls, results, _kinds(turn.content)))
    return out


_SAME = {"image_url": "image", "input_image": "image", "reasoning": "thinking"}
_WORDLIKE = {"text", "input_text", "output_text", "message", "tool_use", "tool_result"}


def _kinds(content: object) -> list[str]:
    """The kinds of block beside words a turn holds (an image is one kind in every shape)."""
    if not isinstance(content, list):
        return []
    kinds = [b.get("type") for b in content if isinstance(b, dict)]
    return sorted(
        _SAME.get(k, k)
        for k in kinds
        if isinstance(k, str) and k not in _WORDLIKE and not k.endswith("_call")
    )


def read_back(exported: Exported, folder: Path, name: str = "out") -> list[Turn]:
    path = folder / f"{name}{SUFFIX[exported.format]}"
    write_export(path, exported)
    return list(open_transcript(path))


_WORDS = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=12).filter(
    lambda s: s.strip() == s and s.strip()
)
_ARGS = st.dictionaries(
    st.sampled_from(["path", "city", "n"]), st.one_of(st.integers(-5, 5), _WORDS), max_size=2
)


@st.composite
def conversations(draw: st.DrawFn, system: bool = True, tools: bool = True) -> list[Turn]:
    turns: list[Turn] = []
    if system and draw(st.booleans()):
        turns.append(Turn("system", draw(_WORDS)))
    ids = itertools.count(1)
    for _ in range(draw(st.integers(1, 4))):
        turns.append(Turn("user", draw(_WORDS)))
        for _ in range(draw(st.integers(0, 2 if tools else 0))):
            calls = [
                make_tool_call(
                    f"call_{next(ids)}", draw(st.sampled_from(["ls", "read"])), draw(_ARGS)
                )
                for _ in range(draw(st.integers(1, 3)))
            ]
            said = draw(st.one_of(st.just(""), _WORDS))
            turns.append(Turn("assistant", said, tool_calls=tuple(calls)))
            for call in calls:
                result = make_tool_result(str(call["id"]), draw(_WORDS))
                turns.append(Turn("tool", result["content"], tool_results=(result,)))
        turns.append(Turn("assistant", draw(_WORDS)))
    return turns


@settings(max_examples=40, deadline=None)
@given(st.data(), st.sampled_from(READ_BACK), st.sampled_from(READ_BACK))
def test_every_pair_of_formats_gives_back_the_same_turns(
    data: st.DataObject, first: str, second: str
) -> None:
    tools = not {first, second} & WORDS_ONLY
    turns = data.draw(conversations(system=False, tools=tools), label="turns")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        exported = export_turns(turns, to=first, session_id=S1)  # type: ignore[arg-type]
        assert exported.notes() == []
        once = read_back(exported, folder, "first")
        again = export_turns(once, to=second, session_id=S2)  # type: ignore[arg-type]
        assert again.notes() == []
        assert normal(read_back(again, folder, "second")) == normal(turns)


SAMPLES = sorted(
    p.relative_to(FIXTURES).as_posix()
    for p in [*FIXTURES.glob("transcripts/*"), *FIXTURES.glob("claude-code/*")]
)


@pytest.mark.parametrize("sample", SAMPLES)
@pytest.mark.parametrize("fmt", READ_BACK)
def test_a_real_conversation_comes_back_or_its_losses_are_reported(
    sample: str, fmt: str, tmp_path: Path
) -> None:
    turns = list(open_transcript(FIXTURES / sample))
    exported = export_turns(turns, to=fmt)  # type: ignore[arg-type]
    back = read_back(exported, tmp_path)
    if not exported.notes():
        assert normal(back) == normal(turns)
    else:
        assert len(back) > 0


@settings(max_examples=25, deadline=None)
@given(conversations(system=True), st.sampled_from(sorted(FULL)))
def test_a_system_prompt_comes_back_where_the_format_holds_one(turns: list[Turn], fmt: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        exported = export_turns(turns, to=fmt)  # type: ignore[arg-type]
        assert exported.notes() == []
        assert normal(read_back(exported, Path(tmp))) == normal(turns)


def _tools_conversation() -> list[Turn]:
    call = make_tool_call("toolu_1", "Bash", {"command": "ls"})
    other = make_tool_call("toolu_2", "Read", {"path": "a.txt"})
    thinking = {"type": "thinking", "thinking": "Look first.", "signature": "sig=="}
    return [
        Turn("user", "list files", ts="2026-02-10T10:00:00Z"),
        Turn(
            "assistant",
            [thinking, {"type": "text", "text": "Looking."}],
            tool_calls=(call, other),
            model="claude-opus-4-6",
            ts="2026-02-10T10:00:01Z",
        ),
        Turn("tool", "a.txt", tool_results=(make_tool_result("toolu_1", "a.txt"),)),
        Turn("tool", "hello", tool_results=(make_tool_result("toolu_2", "hello", is_error=True),)),
        Turn("assistant", "Found a.txt.", model="claude-opus-4-6"),
    ]


def test_a_claude_code_log_is_chained_as_claude_code_writes_one() -> None:
    exported = export_turns(_tools_conversation(), to="claude-code", session_id=S1, cwd="/w")
    lines = [orjson.loads(line) for line in exported.data.splitlines()]
    assert exported.session_id == S1 and exported.notes() == []
    assert [line["parentUuid"] for line in lines] == [None] + [line["uuid"] for line in lines[:-1]]
    assert len({line["uuid"] for line in lines}) == len(lines)
    assert {line["sessionId"] for line in lines} == {S1}
    assert {line["cwd"] for line in lines} == {"/w"}
    # one line per block of the first reply, all under one message id
    reply = [line for line in lines if line["type"] == "assistant"][:4]
    assert [b["type"] for line in reply for b in line["message"]["content"]] == [
        "thinking",
        "text",
        "tool_use",
        "tool_use",
    ]
    assert len({line["message"]["id"] for line in reply}) == 1
    results = [line for line in lines if "sourceToolAssistantUUID" in line]
    by_uuid = {line["uuid"]: line for line in lines}
    for line in results:
        (block,) = line["message"]["content"]
        call_line = by_uuid[line["sourceToolAssistantUUID"]]
        assert call_line["message"]["content"][0]["id"] == block["tool_use_id"]
    assert results[1]["message"]["content"][0]["is_error"] is True
    # the same session id writes the same file
    again = export_turns(_tools_conversation(), to="claude-code", session_id=S1, cwd="/w")
    assert again.data == exported.data


def test_a_gemini_session_holds_each_result_in_its_call() -> None:
    exported = export_turns(_tools_conversation(), to="gemini-cli", session_id=G1, cwd="/w")
    session = orjson.loads(exported.data)
    assert session["sessionId"] == G1 and session["startTime"] == "2026-02-10T10:00:00Z"
    user, reply, last = session["messages"]
    assert (user["type"], user["content"]) == ("user", "list files")
    assert reply["type"] == "gemini" and reply["content"] == "Looking."
    assert reply["thoughts"][0]["description"] == "Look first."
    first, second = reply["toolCalls"]
    assert first["args"] == {"command": "ls"} and first["status"] == "success"
    assert first["result"][0]["functionResponse"]["response"] == {"output": "a.txt"}
    assert second["status"] == "error"
    assert last["content"] == "Found a.txt."
    assert exported.notes() == [
        "not carried into the gemini-cli file: thinking signature (a Gemini CLI session keeps "
        "the text only), at turn 2"
    ]


def test_aider_markdown_holds_words_and_reports_the_rest() -> None:
    exported = export_turns(_tools_conversation(), to="aider")
    text = exported.data.decode()
    assert text.startswith("\n# aider chat started at 2026-02-10 10:00:00\n")
    assert "#### list files" in text and "> a.txt" in text and "\nFound a.txt.\n" in text
    assert exported.notes() == [
        "not carried into the aider file: thinking block (Aider's history holds none), at turn 2",
        "not carried into the aider file: tool call (Aider's history holds none; results are "
        "quoted output), at turn 2",
    ]


@pytest.mark.parametrize(
    ("fmt", "lost"),
    [
        ("openai-chat", "thinking block (a chat message holds none)"),
        (
            "openai-responses",
            "thinking block (a Responses input holds OpenAI reasoning items only)",
        ),
        ("codex", "is_error flag of a tool result"),
    ],
)
def test_what_a_format_cannot_hold_is_reported(fmt: str, lost: str) -> None:
    exported = export_turns(_tools_conversation(), to=fmt)  # type: ignore[arg-type]
    assert any(lost in line for line in exported.notes()), exported.notes()


def test_every_format_is_written() -> None:
    for fmt in EXPORT_FORMATS:
        assert export_turns(_tools_conversation(), to=fmt).data


def test_an_unknown_format_or_a_non_turn_is_refused_naming_what_is_known() -> None:
    with pytest.raises(InvalidArgumentError, match=r"expected one of openai-chat, .*aider"):
        export_turns([], to="gemini")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="session_id must be a UUID"):
        export_turns([], to="claude-code", session_id="s-1")
    with pytest.raises(InvalidArgumentError, match=r"turns\[0\] is .*not a Turn"):
        export_turns([{"role": "user"}], to="anthropic")  # type: ignore[list-item]


SAME_SHAPE = {"anthropic", "claude-code", "codex", "openai-responses"}
"""Formats whose turns come back exactly as read (content blocks or items as sent, thinking
signatures, error flags) when written in their own format."""


@pytest.mark.parametrize("sample", SAMPLES)
def test_a_conversation_written_in_its_own_format_comes_back_as_read(
    sample: str, tmp_path: Path
) -> None:
    transcript = open_transcript(FIXTURES / sample)
    if transcript.format not in SAME_SHAPE:
        pytest.skip(f"{transcript.format}: chat messages are rewritten as chat_messages gives them")
    turns = list(transcript)
    exported = export_turns(turns, to=transcript.format)
    back = read_back(exported, tmp_path)
    if transcript.format == "claude-code":  # a log holds no system prompt
        turns = [t for t in turns if t.role not in ("system", "developer")]
    assert [t.compared() for t in back] == [t.compared() for t in turns]
    assert [t.is_compaction_summary for t in back] == [t.is_compaction_summary for t in turns]


@pytest.mark.parametrize("fmt", ["anthropic", "claude-code"])
def test_a_tool_id_anthropic_would_refuse_is_rewritten_for_call_and_result_alike(
    fmt: str, tmp_path: Path
) -> None:
    call = make_tool_call("call:1/a", "ls", {})
    turns = [
        Turn("user", "go"),
        Turn("assistant", "", tool_calls=(call,)),
        Turn("tool", "ok", tool_results=(make_tool_result("call:1/a", "ok"),)),
        Turn("assistant", "done"),
    ]
    exported = export_turns(turns, to=fmt)  # type: ignore[arg-type]
    assert any("tool-call id Anthropic would refuse" in n for n in exported.notes())
    back = read_back(exported, tmp_path)
    (called,) = back[1].call_ids
    assert called == "call_1_a_1" and back[2].result_ids == (called,)


@pytest.mark.parametrize("fmt", ["openai-responses", "codex"])
def test_two_replies_in_a_row_are_reported_where_they_read_back_as_one(
    fmt: str, tmp_path: Path
) -> None:
    call = make_tool_call("toolu_1", "TodoWrite", {"todos": []})
    turns = [
        Turn("user", "plan it"),
        Turn("assistant", "Let me make a list."),
        Turn("assistant", "", tool_calls=(call,)),
        Turn("tool", "ok", tool_results=(make_tool_result("toolu_1", "ok"),)),
    ]
    exported = export_turns(turns, to=fmt)  # type: ignore[arg-type]
    assert exported.notes() == [
        f"not carried into the {fmt} file: turn boundary between two replies (Responses items "
        "read back as one), at turn 3"
    ]
    assert [t.role for t in read_back(exported, tmp_path)] == ["user", "assistant", "tool"]


@pytest.mark.parametrize(
    "name", shared_names("corpus", (".jsonl", ".json")), ids=lambda n: n.split("/")[-1]
)
def test_every_real_transcript_comes_back_from_every_format_or_says_what_it_lost(
    name: str, fixture_path: Callable[[str], Path], tmp_path: Path
) -> None:
    transcript = open_transcript(fixture_path(name))
    turns = list(plan_integrity(transcript).apply(transcript))  # what save and export keep
    for fmt in EXPORT_FORMATS:
        exported = export_turns(turns, to=fmt)
        assert exported.data and exported.turns == len(turns), fmt
        if fmt in READ_BACK and not exported.notes():
            assert normal(read_back(exported, tmp_path, fmt)) == normal(turns), fmt
