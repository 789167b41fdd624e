"""Aider chat histories, Gemini CLI sessions (both forms) and Claude Code web exports: each
detected by its content, read turn by turn, saved to a file and to a store (issue 47)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent_checkpoint import open_store
from agent_checkpoint.transcripts import (
    EmptyTranscriptError,
    MalformedTranscriptError,
    UnrecognizedFormatError,
    open_transcript,
    read_turns,
)

Run = Callable[..., Any]


def roles(turns: list[Any]) -> list[str]:
    return [t.role for t in turns]


# Aider


def test_aider_reads_the_last_session_holding_a_message_and_says_so(
    fixture_path: Callable[[str], Path],
) -> None:
    transcript = open_transcript(fixture_path("transcripts/aider_sessions.md"))
    turns = list(transcript)
    assert transcript.format == "aider"
    assert [(t.role, t.content) for t in turns] == [
        ("user", "fix the bug\nin foo.py"),  # two #### lines: one message
        ("assistant", "Here is the fix:\n\n```python\nx = 1\n\ny = 2\n```"),
        ("user", "Applied edit to foo.py\nCommit abc123 fix"),
        ("user", "/run pytest"),
        ("user", "1 passed\n\nAdd the output to the chat? y"),
        ("assistant", "All tests pass."),
    ]
    assert {t.model for t in turns if t.role == "assistant"} == {"claude-3"}
    assert {t.ts for t in turns} == {"2025-01-03T11:00:00Z"}
    output = turns[2].extra["_meta"]["injectedBy"]
    assert output["flavor"] == "tool-result"
    assert transcript.session == 2
    assert "read session 2 of 3" in transcript.notes[0]


def test_aider_session_picks_one_and_out_of_range_names_the_count(
    fixture_path: Callable[[str], Path],
) -> None:
    path = fixture_path("transcripts/aider_sessions.md")
    first = list(open_transcript(path, session=1))
    assert [(t.role, t.content, t.model) for t in first] == [
        ("user", "hello", None),
        ("assistant", "Hi there.", "gpt-4o"),
    ]
    with pytest.raises(EmptyTranscriptError, match=r"no session 4 .*sessions 1 to 3"):
        list(open_transcript(path, session=4))
    with pytest.raises(EmptyTranscriptError, match="no conversation turns"):
        list(open_transcript(path, session=3))  # aider started and quit
    with pytest.raises(UnrecognizedFormatError, match="--session picks one of an Aider"):
        open_transcript(fixture_path("transcripts/gemini_session.json"), session=1)


def test_aider_cli_session_saves_each_session_under_its_own_key(
    fixture_path: Callable[[str], Path], run: Run, tmp_path: Path
) -> None:
    path = fixture_path("transcripts/aider_sessions.md")
    bad = run("save", str(path), "--session", "9", "-o", str(tmp_path / "x.jsonl"))
    assert bad.code == 5 and "holds sessions 1 to 3" in bad.err
    assert not (tmp_path / "x.jsonl").exists()
    assert run("save", str(path), "--session", "0", "-o", str(tmp_path / "x.jsonl")).code == 2
    store = f"file://{tmp_path / 'store'}"
    assert run("save", str(path), "--store", store).code == 0
    assert run("save", str(path), "--session", "1", "--store", store).code == 0
    with open_store(store) as opened:
        keys = sorted(s.key for s in opened.list())
        assert len(keys) == 2 and keys[0].endswith("/session-1") and keys[1].endswith("/session-2")
        assert len(opened.get(keys[0]).history) == 2
        assert len(opened.get(keys[1]).history) == 6


def test_aider_without_a_message_is_refused(tmp_path: Path) -> None:
    path = tmp_path / ".aider.chat.history.md"
    path.write_text("\n# aider chat started at 2025-01-01 09:00:00\n\n> Aider v0.50  \n")
    with pytest.raises(EmptyTranscriptError, match="none of the 1 Aider session"):
        list(open_transcript(path))


def test_aider_history_that_is_not_utf8_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "h.md"
    path.write_bytes(b"#### caf\xe9\n")
    with pytest.raises(MalformedTranscriptError, match="not UTF-8"):
        open_transcript(path)  # seen in the first bytes
    path.write_bytes(b"#### hello\n\n" + b"fine\n" * 20_000 + b"\n#### caf\xe9\n")
    with pytest.raises(MalformedTranscriptError, match="line 20004 is not UTF-8"):
        list(open_transcript(path))


# Gemini CLI


def test_gemini_session_json_reads_calls_results_and_thoughts(
    fixture_path: Callable[[str], Path],
) -> None:
    transcript = open_transcript(fixture_path("transcripts/gemini_session.json"))
    turns = list(transcript)
    assert roles(turns) == ["user", "assistant", "tool", "tool", "assistant"]
    reply = turns[1]
    assert reply.model == "gemini-2.5-pro"
    assert reply.content == [{"type": "thinking", "thinking": "Listing\nI will run ls."}]
    assert [c["function"]["name"] for c in reply.tool_calls or ()] == [
        "run_shell_command",
        "read_file",
    ]
    assert json.loads((reply.tool_calls or ())[0]["function"]["arguments"]) == {"command": "ls"}
    assert turns[2].tool_results == (
        {
            "tool_call_id": "run_shell_command-1",
            "name": "run_shell_command",
            "content": "a.txt\nb.txt",
        },
    )
    assert (turns[3].tool_results or ())[0]["is_error"] is True
    assert turns[4].content == "Two files: a.txt and b.txt."  # text parts joined
    assert transcript.session_id() == "0d6f3c1e-5b7a-4c2e-9f10-3a2b1c0d9e8f"
    assert "1 info message(s)" in transcript.notes[0]


def test_gemini_jsonl_keeps_the_last_write_of_each_message_and_honours_rewind(
    fixture_path: Callable[[str], Path],
) -> None:
    lines = list(open_transcript(fixture_path("transcripts/gemini_session.jsonl")))
    document = list(open_transcript(fixture_path("transcripts/gemini_session.json")))
    assert [t.compared() for t in lines[:5]] == [t.compared() for t in document]
    # "now delete them" and its reply were rewound; the conversation went on from there.
    assert [(t.role, t.content) for t in lines[5:]] == [
        ("user", "thanks"),
        ("assistant", "You are welcome."),
    ]


def test_gemini_jsonl_set_messages_replaces_the_list(tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    records = [
        {"sessionId": "s1", "projectHash": "p", "startTime": "2026-01-01T00:00:00Z"},
        {"id": "a", "type": "user", "content": "old question"},
        {"$set": {"messages": [{"id": "b", "type": "user", "content": "kept"}]}},
        {"id": "c", "type": "gemini", "content": "answer"},
        {"id": "b", "type": "user", "content": "kept, edited"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    turns = list(open_transcript(path))
    assert [(t.role, t.content) for t in turns] == [
        ("user", "kept, edited"),
        ("assistant", "answer"),
    ]


def test_gemini_jsonl_line_whose_type_is_not_a_string_is_skipped_with_a_note(
    tmp_path: Path,
) -> None:
    # the fuzz campaign's find: a type of ["gemini"] raised TypeError (unhashable) mid-read
    path = tmp_path / "session.jsonl"
    records = [
        {"sessionId": "s1", "projectHash": "p", "startTime": "2026-01-01T00:00:00Z"},
        {"id": "a", "type": "user", "content": "question"},
        {"id": "b", "type": ["gemini"], "content": "not a message"},
        {"id": "c", "type": "gemini", "content": "answer"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    transcript = open_transcript(path)
    turns = list(transcript)
    assert [(t.role, t.content) for t in turns] == [("user", "question"), ("assistant", "answer")]
    assert any("skipped 1 line(s)" in note for note in transcript.notes)


def test_gemini_call_without_result_is_left_to_the_integrity_pass(tmp_path: Path, run: Run) -> None:
    path = tmp_path / "session.json"
    call = {"id": "c1", "name": "ls", "args": {}, "status": "cancelled"}
    body = {
        "sessionId": "s2",
        "projectHash": "p",
        "messages": [
            {"id": "1", "type": "user", "content": "go"},
            {"id": "2", "type": "gemini", "content": "", "toolCalls": [call]},
        ],
    }
    path.write_text(json.dumps(body))
    out = tmp_path / "out.jsonl"
    ran = run("save", str(path), "--on-dangling", "synthesize", "-o", str(out))
    assert ran.code == 0, ran.err
    turns = list(read_turns(out))
    assert roles(turns) == ["user", "assistant", "tool"]


def test_gemini_message_of_unknown_type_is_refused_with_its_place(tmp_path: Path) -> None:
    path = tmp_path / "session.json"
    body = {
        "sessionId": "s3",
        "projectHash": "p",
        "messages": [{"id": "1", "type": "user", "content": "go"}, {"id": "2", "type": "robot"}],
    }
    path.write_text(json.dumps(body))
    with pytest.raises(MalformedTranscriptError, match=r"message 2: a message of type 'robot'"):
        list(open_transcript(path))


# Claude Code web exports


def test_web_export_reads_as_the_log_it_wraps(
    fixture_path: Callable[[str], Path], saved: Callable[..., list[Any]]
) -> None:
    export = fixture_path("transcripts/claude_code_web_export.json")
    log = fixture_path("transcripts/claude_code_branches.jsonl")
    assert [t.to_json() for t in saved(export)] == [t.to_json() for t in saved(log)]
    read_export, read_log = open_transcript(export), open_transcript(log)
    list(read_export), list(read_log)
    assert read_export.notes == read_log.notes  # sidechains, meta lines, branches: the same


def test_web_export_saves_to_a_store_under_its_session_id(
    fixture_path: Callable[[str], Path], run: Run, tmp_path: Path
) -> None:
    store = f"file://{tmp_path / 'store'}"
    export = fixture_path("transcripts/claude_code_web_export.json")
    assert run("save", str(export), "--store", store).code == 0
    with open_store(store) as opened:
        assert [s.key for s in opened.list()] == ["5f8a3c2e-9b1d-4e7f-a6c0-1d2e3f4a5b6c"]


def test_diff_and_merge_read_the_new_formats(
    fixture_path: Callable[[str], Path], run: Run, tmp_path: Path
) -> None:
    export = fixture_path("transcripts/claude_code_web_export.json")
    log = fixture_path("transcripts/claude_code_branches.jsonl")
    assert run("diff", str(export), str(log)).code == 0
    gemini = fixture_path("transcripts/gemini_session.jsonl")
    document = fixture_path("transcripts/gemini_session.json")
    assert run("diff", str(document), str(gemini)).code == 1
    merged = tmp_path / "merged.jsonl"
    assert run("merge", str(document), str(gemini), "-o", str(merged)).code == 0
    assert len(list(read_turns(merged))) == 7


@pytest.mark.parametrize(
    ("name", "forced", "says"),
    [
        ("transcripts/openai_chat_tools.json", "aider", "JSON, not a file of the aider format"),
        (
            "transcripts/aider_sessions.md",
            "gemini-cli",
            "an Aider chat history, not a file of the gemini-cli",
        ),
        ("transcripts/openai_chat_tools.json", "gemini-cli", "JSON Lines, not one JSON document"),
        ("transcripts/openai_chat_tools.json", "claude-code", "JSON Lines, not one JSON document"),
    ],
)
def test_a_forced_format_that_cannot_hold_the_file_is_refused(
    fixture_path: Callable[[str], Path], name: str, forced: str, says: str
) -> None:
    with pytest.raises(MalformedTranscriptError, match=says):
        open_transcript(fixture_path(name), format=forced)  # type: ignore[arg-type]


def test_a_chat_body_is_not_taken_for_a_gemini_session(tmp_path: Path) -> None:
    path = tmp_path / "body.json"
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "hi", "id": "1"}]}))
    assert open_transcript(path).format == "openai-chat"
