"""The shared test vectors (copied from ../shared/vectors, unchanged) behave as listed."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from agent_checkpoint import (
    InvalidCheckpointError,
    RunCheckpoint,
    UnreadableEnvelopeError,
    validate_checkpoint,
)
from agent_checkpoint._codec import Codec
from agent_checkpoint._model import fnv1a, identity_namespace
from agent_checkpoint.envelope import check_envelope
from agent_checkpoint.errors import InvalidPausedRunError, UnknownFormatError

VECTORS = Path(__file__).parent / "vectors"
CHECKPOINTS = json.loads((VECTORS / "checkpoints.json").read_text())
ENVELOPES = json.loads((VECTORS / "envelopes.json").read_text())
KIND = {
    "format": UnknownFormatError,
    "checkpoint": InvalidCheckpointError,
    "paused": InvalidPausedRunError,
    "unreadable": UnreadableEnvelopeError,
}


def _ids(cases: list[dict[str, Any]]) -> list[str]:
    return [c["name"] for c in cases]


@pytest.mark.parametrize("case", CHECKPOINTS["valid"], ids=_ids(CHECKPOINTS["valid"]))
def test_valid_checkpoint_is_accepted_and_rewritten_identically(case: dict[str, Any]) -> None:
    doc = case["doc"]
    validate_checkpoint(doc)
    again = RunCheckpoint.from_json(orjson.loads(orjson.dumps(doc))).to_json()
    assert orjson.dumps(again) == orjson.dumps(doc)  # same value, same key order


@pytest.mark.parametrize("case", CHECKPOINTS["invalid"], ids=_ids(CHECKPOINTS["invalid"]))
def test_invalid_checkpoint_is_refused_with_the_runtime_message(case: dict[str, Any]) -> None:
    with pytest.raises(InvalidCheckpointError) as caught:
        validate_checkpoint(case["doc"])
    assert isinstance(caught.value, TypeError)
    assert str(caught.value).startswith("[resumeOnError] ")
    assert re.search(case["error"], str(caught.value))


@pytest.mark.parametrize("case", ENVELOPES["valid"], ids=_ids(ENVELOPES["valid"]))
def test_valid_envelope_round_trips(case: dict[str, Any]) -> None:
    envelope = check_envelope(case["envelope"])
    assert orjson.dumps(envelope.to_json()) == orjson.dumps(case["envelope"])
    decoded = Codec().decode(orjson.dumps(case["envelope"]))
    assert decoded == envelope


@pytest.mark.parametrize("case", ENVELOPES["refuse"], ids=_ids(ENVELOPES["refuse"]))
def test_refused_envelope_raises_the_named_kind(case: dict[str, Any]) -> None:
    value = case["envelope"] if "envelope" in case else case["stored"]
    with pytest.raises(KIND[case["kind"]]) as caught:
        check_envelope(value, "sess-1")
    if "error" in case:
        assert re.search(case["error"], str(caught.value))
    if case["kind"] == "unreadable":
        assert caught.value.code == "ERR_UNREADABLE_ENVELOPE"  # type: ignore[attr-defined]
        assert "sess-1" in str(caught.value)


def test_unreadable_preview_quotes_at_most_64_units() -> None:
    mangled = next(c for c in ENVELOPES["refuse"] if c["name"] == "mangled-tostring")["stored"]
    with pytest.raises(UnreadableEnvelopeError) as caught:
        check_envelope(mangled)
    assert caught.value.stored_preview == (
        '"{format=conversation-v1, data={version=1, runId=run-7, history=[…" (116 chars)'
    )
    assert "a stored session is present but unreadable" in str(caught.value)


@pytest.mark.parametrize(
    ("value", "preview"),
    [
        (7, "number 7"),
        (True, "boolean true"),
        (None, "null"),
        ([1, 2], "an array of 2 items"),
        ("😀" * 40, '"' + "😀" * 32 + '…" (80 chars)'),
    ],
)
def test_preview_describes_shapes(value: Any, preview: str) -> None:
    with pytest.raises(UnreadableEnvelopeError) as caught:
        check_envelope(value)
    assert caught.value.stored_preview == preview


def test_object_preview_lists_the_first_eight_keys() -> None:
    from agent_checkpoint._envelope import preview_stored

    assert preview_stored({}) == "an object with no keys"
    assert preview_stored({f"k{i}": i for i in range(9)}) == (
        "an object with keys: k0, k1, k2, k3, k4, k5, k6, k7…"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("hello", "4f9f2cab"),
        ("", "811c9dc5"),
        ("[Summary] week one", "7ee0d143"),
        ("héllo 😀", "4dfa2d50"),
    ],
)
def test_fnv1a_matches_the_runtime(text: str, expected: str) -> None:
    assert fnv1a(text) == expected


def test_identity_namespace_escapes_like_the_runtime() -> None:
    assert identity_namespace(None, None, "c") == "_/_/c"
    assert identity_namespace("t/1", "_", "50%") == "t%2F1/%5F/50%25"
    assert identity_namespace("", "p", "c") == "_/p/c"


def test_skill_cursor_of_another_type_is_refused_by_name() -> None:
    doc = dict(CHECKPOINTS["valid"][0]["doc"], skillCursor=3)
    with pytest.raises(
        InvalidCheckpointError,
        match=r"`skillCursor` must be a skill id string when present \(got number\)",
    ):
        validate_checkpoint(doc)


def test_not_an_object_is_refused_first() -> None:
    for value in (None, 0, "", "text", 5):
        with pytest.raises(InvalidCheckpointError, match=r"checkpoint is not an object\.$"):
            validate_checkpoint(value)
    with pytest.raises(InvalidCheckpointError, match="unsupported checkpoint version: undefined"):
        validate_checkpoint([])


VALID = CHECKPOINTS["valid"][0]["doc"]


def nested(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


def test_a_version_nested_any_depth_is_refused_with_the_runtimes_message() -> None:
    doc = dict(VALID)
    doc["version"] = nested(5000)
    with pytest.raises(InvalidCheckpointError) as caught:
        validate_checkpoint(doc)
    assert str(caught.value).startswith("[resumeOnError] unsupported checkpoint version: 1. ")


@pytest.mark.parametrize(
    ("version", "shown"),
    [
        ([1, [2, None]], "1,2,"),  # String([1,[2,null]]) in JavaScript
        ([None], ""),
        ([[], [1]], ",1"),
        ([{"a": 1}, True], "[object Object],true"),
        ([2.0, "x"], "2,x"),
        (None, "null"),
    ],
)
def test_a_version_that_is_an_array_prints_as_javascript_prints_it(
    version: Any, shown: str
) -> None:
    doc = dict(VALID)
    doc["version"] = version
    with pytest.raises(InvalidCheckpointError, match=re.escape(f"version: {shown}. This runtime")):
        validate_checkpoint(doc)


BASIS_ROW = {"kind": "basis", "toolCallId": "c", "toolName": "t", "iteration": 1, "basis": "direct"}
PERIOD_ROW = {"kind": "period", "toolCallId": "c", "toolName": "t", "iteration": 1, "turn": 1}
CARRIER = {"toolCallId": "c", "standing": "open"}
CONTINGENT_ROW = {"kind": "contingent", "declaredOn": "answer", "value": "v", "iteration": 1}


LEDGER_WORDS: dict[str, tuple[Any, str]] = {  # a row with the word in it, a word it takes
    "basis": (lambda w: {**BASIS_ROW, "basis": w}, "direct"),
    "expect": (lambda w: {**BASIS_ROW, "expect": w}, "low"),
    "standing": (
        lambda w: {"kind": "judgment", "toolCallId": "c", "iteration": 1, "standing": w},
        "fact",
    ),
    "verdict": (lambda w: {**PERIOD_ROW, "verdict": w}, "covered"),
    "carriers.standing": (
        lambda w: {**CONTINGENT_ROW, "carriers": [{**CARRIER, "standing": w}]},
        "open",
    ),
}


@pytest.mark.parametrize("word", [["direct"], {"basis": "direct"}, []])
@pytest.mark.parametrize("field", list(LEDGER_WORDS))
def test_a_ledger_word_that_is_an_array_or_object_is_refused_with_the_ledger_message(
    field: str, word: Any
) -> None:
    row, takes = LEDGER_WORDS[field]
    validate_checkpoint({**VALID, "findingsLedger": [row(takes)]})
    with pytest.raises(InvalidCheckpointError, match="findingsLedger"):
        validate_checkpoint({**VALID, "findingsLedger": [row(word)]})
