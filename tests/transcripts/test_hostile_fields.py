"""Records whose fields have the wrong JSON type, or nest absurdly deep, are refused as
malformed input with the library's error, never a TypeError or RecursionError."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from agent_checkpoint.errors import (
    CheckpointError,
    InvalidArgumentError,
    MalformedTranscriptError,
)
from agent_checkpoint.transcripts import (
    Turn,
    messages_to_turns,
    open_transcript,
    read_turns,
    turns_to_checkpoint,
)


@pytest.mark.parametrize(
    ("data", "fmt"),
    [
        (b'{"role":"user","content":"hi"}\n{"x":' + b"[" * 1100 + b"]" * 1100 + b"}\n", None),
        (b'{"type": [], "role": "user", "content": "hi"}\n', None),
        (b'{"role": ["user"], "content": "hi"}\n', None),
        (b'[{"role": {}, "content": "hi"}]', "openai-chat"),
        (
            b'[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":5}]',
            None,
        ),
    ],
)
def test_wrongly_typed_or_deep_records_are_refused_by_the_library(
    tmp_path: Path, data: bytes, fmt: str | None
) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(data)
    try:
        turns = list(open_transcript(path, format=fmt))  # type: ignore[arg-type]
        turns_to_checkpoint(turns)
    except CheckpointError:
        pass  # a documented refusal


def test_tool_calls_that_are_not_a_list_are_named(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(
        b'[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":5}]'
    )
    with pytest.raises(MalformedTranscriptError, match="tool_calls is not a list"):
        list(open_transcript(path, format="openai-chat"))


@pytest.mark.parametrize("summary", [b"900", b'[{"type":"summary_text","text":1}]'])
def test_reasoning_summaries_of_another_shape_carry_no_text(tmp_path: Path, summary: bytes) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(
        b'[{"role":"user","content":"hi"},{"type":"reasoning","id":"r","summary":' + summary + b"}]"
    )
    checkpoint, _report = turns_to_checkpoint(list(open_transcript(path)))
    assert checkpoint.history[0].content == "hi"


@pytest.mark.parametrize("fmt", ["openai-chat", "anthropic", "openai-responses"])
def test_an_integer_past_64_bits_beside_a_nan_becomes_text_not_a_type_error(
    tmp_path: Path, fmt: str
) -> None:
    # Python's json.dumps writes NaN, which orjson refuses, so the document is read by the
    # standard library's decoder; a content that is a huge integer then reached orjson.dumps.
    wrapper = {"openai-chat": "messages", "anthropic": "messages"}.get(fmt, "input")
    path = tmp_path / "t.json"
    path.write_text(
        json.dumps({wrapper: [{"role": "user", "content": 2**70, "score": float("nan")}]})
    )
    checkpoint, _report = turns_to_checkpoint(list(open_transcript(path, format=fmt)))  # type: ignore[arg-type]
    # what a document orjson could read gives: the float orjson reads, as orjson writes it
    assert checkpoint.history[0].content == orjson.dumps(orjson.loads(str(2**70))).decode()


def test_an_injected_by_marker_missing_its_fields_is_noted_not_raised(tmp_path: Path) -> None:
    # It escaped as the model's private Mismatch exception, outside the error tree.
    path = tmp_path / "turns.jsonl"
    path.write_text(
        '{"role":"user","content":"a","_meta":{"injectedBy":{"flavor":"skill"}}}\n'
        '{"role":"assistant","content":"b"}\n'
    )
    checkpoint, report = turns_to_checkpoint(list(read_turns(path)))
    assert [m.injected_by for m in checkpoint.history] == [None, None]
    assert report.lines() == [
        "not carried into the checkpoint: _meta.injectedBy marker that is not an injectedBy "
        "object, at turn 1"
    ]


def test_turns_that_are_dicts_are_refused_by_their_index() -> None:
    turns = [Turn("user", "hi"), {"role": "assistant", "content": "hello"}]
    with pytest.raises(InvalidArgumentError, match=r"turns\[1\] is a dict, not a Turn"):
        turns_to_checkpoint(turns)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=r"messages\[0\] is a dict, not a Message"):
        list(messages_to_turns([{"role": "user", "content": "hi"}]))  # type: ignore[list-item]


def test_a_folder_given_as_a_turn_file_is_named_as_one(tmp_path: Path) -> None:
    # it was reported as "no such file"
    with pytest.raises(MalformedTranscriptError, match="not a regular file"):
        list(read_turns(tmp_path))
