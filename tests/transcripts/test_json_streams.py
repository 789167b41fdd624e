"""Reading JSON documents element by element and JSON Lines line by line."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_checkpoint.transcripts import MalformedTranscriptError
from agent_checkpoint.transcripts._jsonio import BOM, JsonDocument, JsonLines, Line, Tolerance

tricky_text = st.text(alphabet=st.sampled_from('ab"\\[]{},: \n\u2028é😀'), max_size=40)
records = st.lists(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]), "content": tricky_text}),
    max_size=8,
)


@settings(max_examples=60, deadline=None)
@given(records=records, indent=st.sampled_from([None, 2]))
def test_array_elements_decode_exactly_as_the_whole_document(
    tmp_path_factory: pytest.TempPathFactory, records: list[dict[str, str]], indent: int | None
) -> None:
    path = tmp_path_factory.mktemp("doc") / "t.json"
    path.write_text(json.dumps(records, indent=indent, ensure_ascii=False), encoding="utf-8")
    assert list(JsonDocument(path).items()) == records


def test_elements_spanning_many_read_chunks_are_whole(tmp_path: Path) -> None:
    big = [{"content": ('x\\"]}[{' * 50_000) + str(i)} for i in range(6)]  # ~350 KB each
    path = tmp_path / "t.json"
    path.write_text(json.dumps(big), encoding="utf-8")
    assert list(JsonDocument(path).items()) == big


def test_an_object_streams_its_named_arrays_and_decodes_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    doc = {
        "model": "m",
        "system": [{"type": "text", "text": "s"}],
        "messages": [{"a": 1}, {"b": 2}],
    }
    path.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    members, arrays = JsonDocument(path).members(["messages"])
    assert members == {"model": "m", "system": [{"type": "text", "text": "s"}]}
    assert arrays == ["messages"]
    assert list(JsonDocument(path).items(["messages"])) == [{"a": 1}, {"b": 2}]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[{"role": "user", "content": "hi"}, {"role": "assi', "ends inside a string"),
        ('[{"role": "user", "content": "hi"}, {"role": 1', "ends inside a value"),
        ('[{"role": "user"}', "ends early"),
        ('[{"role": "user"}] trailing', "unexpected data after the JSON document"),
        ('[{"role": "user"} {"role": "user"}]', "expected ',' or ']'"),
    ],
)
def test_a_broken_document_is_refused_with_its_byte_offset(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "t.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(MalformedTranscriptError, match=rf"{message}.* at byte \d+"):
        list(JsonDocument(path).items())


def test_an_oversized_element_is_refused_not_truncated(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps([{"content": "x" * 5000}]), encoding="utf-8")
    with pytest.raises(MalformedTranscriptError, match="longer than 1024 bytes"):
        list(JsonDocument(path, max_record_bytes=1024).items())


def test_an_oversized_line_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"a": 1}\n{"content": "' + "x" * 5000 + '"}\n', encoding="utf-8")
    with pytest.raises(MalformedTranscriptError, match="line 2 is longer than 1024 bytes"):
        list(JsonLines(path, max_record_bytes=1024))


def test_lines_are_split_on_newlines_only(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes('{"a": "x\u2028y\u2029z\x85w"}\n{"b": 2}\n'.encode())
    values = [line.value for line in JsonLines(path)]
    assert values == [{"a": "x\u2028y\u2029z\x85w"}, {"b": 2}]


def test_a_torn_final_line_is_noted_or_refused_by_tolerance(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"a": 1}\n{"b": 2}\n{"c": ', encoding="utf-8")
    lines = JsonLines(path, tolerate="torn")
    assert [line.value for line in lines] == [{"a": 1}, {"b": 2}]
    assert lines.notes == ["ignored a torn final line 3 (incomplete JSON)"]
    with pytest.raises(MalformedTranscriptError, match="line 3"):
        list(JsonLines(path, tolerate="none"))


def test_a_bad_middle_line_is_refused_unless_any_is_tolerated(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"a": 1}\nnot json\n{"b": 2}\n', encoding="utf-8")
    with pytest.raises(MalformedTranscriptError, match="line 2 is not valid JSON"):
        list(JsonLines(path, tolerate="torn"))
    lines = JsonLines(path, tolerate="any")
    assert [line.value for line in lines] == [{"a": 1}, {"b": 2}]
    assert lines.notes == ["skipped 1 line(s) that are not valid JSON"]


def test_records_are_reread_by_offset(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"n": 1}\n\n{"n": 2}\n{"n": 3}\n')
    lines = JsonLines(path)
    offsets = {line.value["n"]: line.offset for line in lines}
    assert list(lines.records_at([offsets[3], offsets[1]])) == [{"n": 3}, {"n": 1}]


def test_lone_surrogates_written_by_javascript_become_replacement_characters(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"content": "half an emoji: \\ud83d!"}\n', encoding="utf-8")
    assert [line.value for line in JsonLines(path)] == [{"content": "half an emoji: \ufffd!"}]


@pytest.mark.parametrize("number", ["1180591620717411303424", "-9223372036854775809", "1e300"])
def test_a_line_read_past_a_lone_surrogate_holds_numbers_as_orjson_reads_them(
    tmp_path: Path, number: str
) -> None:
    # A lone surrogate sends the line to the standard library's decoder, whose integers have no
    # bound; orjson reads one past 64 bits as a float, and could not write the int back.
    path = tmp_path / "t.jsonl"
    path.write_text(f'{{"n": {number}, "s": "\\ud83d"}}\n', encoding="utf-8")
    [line] = JsonLines(path)
    assert line.value == {"n": orjson.loads(number), "s": "\ufffd"}
    assert isinstance(line.value["n"], float)  # type: ignore[index]


@pytest.mark.parametrize("number", ["9" * 5000, "1e400", "-1e400"])
def test_a_number_past_a_double_is_refused_past_a_lone_surrogate_too(
    tmp_path: Path, number: str
) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(f'{{"s": "\\ud83d", "n": {number}}}\n', encoding="utf-8")
    with pytest.raises(
        MalformedTranscriptError,
        match=r"line 1 is not valid JSON \(number is infinity when parsed as double\)",
    ):
        list(JsonLines(path))


@pytest.mark.parametrize(
    "content",
    [
        b'{"a":1}\n\n  {"b":2}\r\n{"c":3}\n',
        BOM + b'{"a":1}\n{"b":[1,2]}',  # a BOM, and no final newline
        b'{"a":1}\n{"b":2',  # a torn final line
        b'{"a":1}\nnot json\n{"c":3}\n',
        b"\n\n",
        b"",
    ],
)
@pytest.mark.parametrize("tolerate", ["none", "torn", "any"])
def test_small_files_read_whole_give_what_reading_line_by_line_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: bytes, tolerate: Tolerance
) -> None:
    from agent_checkpoint.transcripts import _jsonio as jsonio

    path = tmp_path / "f.jsonl"
    path.write_bytes(content)

    def read() -> tuple[list[Line] | str, list[str]]:
        lines = JsonLines(path, tolerate=tolerate)
        try:
            return list(lines), lines.notes
        except MalformedTranscriptError as exc:
            return str(exc), lines.notes

    def values() -> list[tuple[int, object]] | str:
        with open(path, "rb") as f:
            try:
                return list(jsonio.read_values(f, str(path)))
            except MalformedTranscriptError as exc:
                return str(exc)

    whole, whole_values = read(), values()
    monkeypatch.setattr(jsonio, "_WHOLE", 0)  # every file now takes the line-by-line path
    assert read() == whole
    assert values() == whole_values
    if tolerate == "none":  # read_values refuses as JsonLines(tolerate="none") does
        assert whole_values == (
            whole[0] if isinstance(whole[0], str) else [(ln.number, ln.value) for ln in whole[0]]
        )
    for line in whole[0] if isinstance(whole[0], list) else []:
        assert list(JsonLines(path).records_at([line.offset])) == [line.value]
