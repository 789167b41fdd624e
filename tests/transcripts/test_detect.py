"""Formats are detected by content, over a sample of records, and ``--format`` overrides."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent_checkpoint.transcripts import (
    EmptyTranscriptError,
    MalformedTranscriptError,
    TranscriptNotFoundError,
    UnrecognizedFormatError,
    open_transcript,
)
from agent_checkpoint.transcripts._detect import detect
from agent_checkpoint.transcripts._jsonio import BOM, MAX_RECORD_BYTES


@pytest.mark.parametrize(
    ("name", "fmt", "container"),
    [
        ("shared/claude-code/representative_messages.jsonl", "claude-code", "jsonl"),
        ("shared/claude-code/edge_cases.jsonl", "claude-code", "jsonl"),
        ("shared/claude-code/session_b.jsonl", "claude-code", "jsonl"),
        ("shared/claude-code/todowrite_examples.jsonl", "claude-code", "jsonl"),
        ("transcripts/claude_code_branches.jsonl", "claude-code", "jsonl"),
        ("transcripts/claude_code_compacted.jsonl", "claude-code", "jsonl"),
        ("transcripts/openai_chat_tools.json", "openai-chat", "array"),
        ("transcripts/anthropic_messages.json", "anthropic", "object"),
        ("transcripts/openai_responses.json", "openai-responses", "object"),
        ("transcripts/codex_rollout.jsonl", "codex", "jsonl"),
        ("transcripts/codex_compacted.jsonl", "codex", "jsonl"),
        ("transcripts/aider_sessions.md", "aider", "markdown"),
        ("transcripts/gemini_session.json", "gemini-cli", "object"),
        ("transcripts/gemini_session.jsonl", "gemini-cli", "jsonl"),
        ("transcripts/claude_code_web_export.json", "claude-code", "object"),
    ],
)
def test_each_fixture_is_detected_by_its_content(
    fixture_path: Callable[[str], Path], name: str, fmt: str, container: str
) -> None:
    detected = detect(fixture_path(name), max_record_bytes=MAX_RECORD_BYTES)
    assert (detected.format, detected.container) == (fmt, container)


def _jsonl(path: Path, records: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_a_canonical_turn_file_is_detected_as_turns(tmp_path: Path) -> None:
    path = _jsonl(
        tmp_path / "c.jsonl",
        [{"role": "user", "content": "hi", "tool_calls": None, "tool_results": None, "ts": None}],
    )
    assert open_transcript(path).format == "turns"


@pytest.mark.parametrize("start", [b"\n", b"  \r\n\n", BOM + b"\n"], ids=["blank", "blanks", "bom"])
@pytest.mark.parametrize(
    ("name", "fmt"),
    [("claude-code/parallel_calls.jsonl", "claude-code"), ("seed/weather.seed.jsonl", "turns")],
)
def test_a_jsonl_file_starting_with_a_blank_line_reads_as_without_it(
    fixture_path: Callable[[str], Path],
    tmp_path: Path,
    start: bytes,
    name: str,
    fmt: str,
) -> None:
    source = fixture_path(name)
    path = tmp_path / "t.jsonl"
    path.write_bytes(start + source.read_bytes())
    detected = detect(path, max_record_bytes=MAX_RECORD_BYTES)
    assert (detected.format, detected.container) == (fmt, "jsonl")
    turns = [t.to_json() for t in open_transcript(path)]
    assert turns and turns == [t.to_json() for t in open_transcript(source)]


def test_detection_looks_past_an_ambiguous_first_record(tmp_path: Path) -> None:
    records = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "w", "input": {}}],
        },
    ]
    assert open_transcript(_jsonl(tmp_path / "a.jsonl", records)).format == "anthropic"
    path = tmp_path / "a.json"
    path.write_text(json.dumps(records), encoding="utf-8")
    assert open_transcript(path).format == "anthropic"


def test_plain_text_messages_read_as_openai_chat_as_in_the_seed(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps([{"role": "user", "content": "hi"}]), encoding="utf-8")
    assert open_transcript(path).format == "openai-chat"


def test_a_claude_code_log_starting_with_bookkeeping_lines_is_still_claude_code(
    tmp_path: Path,
) -> None:
    records = [
        {"type": "summary", "summary": "s", "leafUuid": "u"},
        {"type": "file-history-snapshot", "messageId": "m", "snapshot": {}},
        {"type": "queue-operation", "operation": "enqueue", "sessionId": "s"},
        {"type": "user", "uuid": "u", "parentUuid": None, "sessionId": "s",
         "message": {"role": "user", "content": "hi"}},
    ]  # fmt: skip
    assert open_transcript(_jsonl(tmp_path / "s.jsonl", records)).format == "claude-code"


def test_format_overrides_detection(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps([{"role": "user", "content": "hi"}]), encoding="utf-8")
    transcript = open_transcript(path, format="anthropic")
    assert transcript.format == "anthropic"
    assert [t.provider for t in transcript] == ["anthropic"]


def test_a_forced_line_format_refuses_a_json_document(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps([{"role": "user", "content": "hi"}]), encoding="utf-8")
    with pytest.raises(MalformedTranscriptError, match="claude-code files are JSON Lines"):
        open_transcript(path, format="claude-code")


def test_an_unknown_format_name_is_a_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown format 'gemini'"):
        open_transcript(tmp_path / "x", format="gemini")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("content", "error", "message"),
    [
        (b"", EmptyTranscriptError, "the file is empty"),
        (b"\xef\xbb\xbf \n\n\t ", EmptyTranscriptError, "the file is empty"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", MalformedTranscriptError, "binary data"),
        ("caf\xe9 au lait\n".encode("latin-1"), MalformedTranscriptError, "not UTF-8"),
        (b"hello world\n", MalformedTranscriptError, "not JSON or JSON Lines"),
        (b"42\n", MalformedTranscriptError, "not JSON or JSON Lines"),
        (b'{"name": "x", "version": 2}\n', UnrecognizedFormatError, "pass --format"),
        (b'{"settings": {"a": 1}}', UnrecognizedFormatError, "pass --format"),
        (b'{\n "messages": 3\n}', UnrecognizedFormatError, "without a messages, input, output"),
        (b'[{"id": 1}, {"id": 2}]', UnrecognizedFormatError, "not a transcript format"),
    ],
)
def test_what_is_not_a_transcript_is_refused_with_one_line(
    tmp_path: Path, content: bytes, error: type[Exception], message: str
) -> None:
    path = tmp_path / "input"
    path.write_bytes(content)
    with pytest.raises(error, match=message) as caught:
        open_transcript(path)
    assert "\n" not in str(caught.value) and str(path) in str(caught.value)


def test_a_missing_file_and_a_folder_are_refused(tmp_path: Path) -> None:
    with pytest.raises(TranscriptNotFoundError, match="no such file"):
        open_transcript(tmp_path / "missing.jsonl")
    with pytest.raises(MalformedTranscriptError, match="not a regular file"):
        open_transcript(tmp_path)


def test_a_mistral_chat_body_is_read_as_chat_messages_without_format(
    fixture_path: Callable[[str], Path], run: Callable[..., Any], tmp_path: Path
) -> None:
    # a document_url part and an assistant prefix message are Mistral's, on chat messages
    body = fixture_path("transcripts/mistral_chat_document.json")
    out = tmp_path / "turns.jsonl"
    ran = run("save", str(body), "-o", str(out))
    assert ran.code == 0, ran.err
    turns = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [t["role"] for t in turns] == ["system", "user", "assistant", "tool", "assistant"]
    assert turns[1]["content"][1]["document_url"] == "https://example.com/invoice-17.pdf"
    assert turns[3]["tool_results"][0]["tool_call_id"] == "k2Vd8rQpa"


def test_a_document_url_part_is_not_taken_for_an_anthropic_block(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    document = {"type": "document_url", "document_url": "https://example.com/a.pdf"}
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "Summarise it"}, document]},
        {"role": "assistant", "content": "It is a lease."},
    ]
    path.write_text(json.dumps({"model": "mistral-small-latest", "messages": messages}))
    assert open_transcript(path).format == "openai-chat"
