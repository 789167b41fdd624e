"""The canonical turn JSONL: field order, unknown keys, timestamps, streaming, atomic writes."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_checkpoint.transcripts import (
    TURN_KEYS,
    MalformedTranscriptError,
    Turn,
    iso_utc,
    read_turns,
    write_turns,
)
from agent_checkpoint.transcripts._turns import turn_from_json


def test_every_line_carries_the_seven_seed_keys_in_order(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.jsonl"
    write_turns(path, [Turn("user", "hi", ts="2026-07-22T01:40:00Z")])
    line = json.loads(path.read_text(encoding="utf-8"))
    assert tuple(line) == TURN_KEYS
    assert line == {
        "role": "user",
        "content": "hi",
        "tool_calls": None,
        "tool_results": None,
        "provider": None,
        "model": None,
        "ts": "2026-07-22T01:40:00Z",
    }


def test_unknown_keys_survive_a_read_and_a_write(tmp_path: Path) -> None:
    source, copy = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    source.write_text(
        '{"role":"user","content":"hi","_meta":{"source":"a"},"tool_calls":null,"x":[1]}\n',
        encoding="utf-8",
    )
    write_turns(copy, read_turns(source))
    line = json.loads(copy.read_text(encoding="utf-8"))
    assert line["_meta"] == {"source": "a"} and line["x"] == [1]
    assert list(line)[: len(TURN_KEYS)] == list(TURN_KEYS)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2025-06-14T10:00:00Z", "2025-06-14T10:00:00Z"),
        ("2025-06-14T12:00:00.250+02:00", "2025-06-14T10:00:00.250Z"),
        ("2025-06-14T10:00:00", "2025-06-14T10:00:00Z"),
        (1_750_000_000, "2025-06-15T15:06:40Z"),
        (1_750_000_000_123, "2025-06-15T15:06:40.123Z"),
        ("yesterday", None),
        (None, None),
        (True, None),
    ],
)
def test_timestamps_become_iso_8601_utc_with_z(value: object, expected: str | None) -> None:
    assert iso_utc(value) == expected


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.jsonl"
    path.write_text("old\n", encoding="utf-8")

    def broken() -> Iterator[Turn]:
        yield Turn("user", "one")
        raise MalformedTranscriptError("line 2 is bad")

    with pytest.raises(MalformedTranscriptError):
        write_turns(path, broken())
    assert path.read_text(encoding="utf-8") == "old\n"
    assert os.listdir(tmp_path) == ["ckpt.jsonl"]


def test_a_new_file_is_private_and_a_replaced_one_keeps_its_mode(tmp_path: Path) -> None:
    fresh, shared = tmp_path / "fresh.jsonl", tmp_path / "shared.jsonl"
    write_turns(fresh, [Turn("user", "a")])
    shared.write_text("", encoding="utf-8")
    shared.chmod(0o644)
    write_turns(shared, [Turn("user", "a")])
    assert fresh.stat().st_mode & 0o777 == 0o600
    assert shared.stat().st_mode & 0o777 == 0o644


def test_line_separators_inside_strings_are_escaped_and_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.jsonl"
    text = "first\u2028second\u2029third"
    write_turns(path, [Turn("user", text), Turn("assistant", "ok")])
    raw = path.read_bytes()
    assert b"\\u2028" in raw and "\u2028".encode() not in raw
    assert len(raw.decode("utf-8").splitlines()) == 2  # a naive reader splits correctly
    assert [t.content for t in read_turns(path)] == [text, "ok"]


def test_reading_streams_turn_by_turn(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.jsonl"
    path.write_text('{"role":"user","content":"a"}\n{"role":"assistant","content":"b"}\n{oops\n')
    turns = read_turns(path)
    assert next(turns).content == "a"
    assert next(turns).content == "b"
    with pytest.raises(MalformedTranscriptError, match=r"line 3 is not valid JSON"):
        next(turns)


def test_a_bom_and_blank_lines_are_tolerated(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.jsonl"
    path.write_bytes(
        b'\xef\xbb\xbf{"role":"user","content":"a"}\n\n  \n{"role":"tool","content":"b"}'
    )
    assert [(t.role, t.content) for t in read_turns(path)] == [("user", "a"), ("tool", "b")]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"role":"user","content":"a"', "line 1 is not valid JSON"),
        ("[1, 2]", "expected a JSON object, got list"),
        ('{"content":"a"}', "needs a string `role`"),
        ('{"role":"assistant","tool_calls":{"id":"x"}}', "`tool_calls` must be a list"),
    ],
)
def test_a_turn_file_refuses_lines_that_are_not_turns(
    tmp_path: Path, line: str, message: str
) -> None:
    path = tmp_path / "ckpt.jsonl"
    path.write_text(line, encoding="utf-8")
    with pytest.raises(MalformedTranscriptError, match=message):
        list(read_turns(path))


def test_tool_ids_are_read_from_either_provider_shape() -> None:
    turn = turn_from_json(
        {
            "role": "assistant",
            "tool_calls": [{"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {}}],
        }
    )
    result = turn_from_json(
        {"role": "user", "tool_results": [{"type": "tool_result", "tool_use_id": "toolu_1"}]}
    )
    assert turn.call_ids == ("toolu_1",) and result.result_ids == ("toolu_1",)
    assert result.is_result and not turn.is_result


def test_fingerprints_ignore_time_provider_model_and_unknown_keys() -> None:
    a = Turn("user", "hi", provider="openai", model="m1", ts="2026-01-01T00:00:00Z")
    b = Turn("user", "hi", provider="anthropic", model=None, ts=None, extra={"_meta": {}})
    assert a.fingerprint() == b.fingerprint()
    assert a.fingerprint() != Turn("user", "hi!").fingerprint()
