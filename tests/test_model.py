"""The record as typed values: lossless round trips, key order, unknown fields, immutability."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_checkpoint import Message, RunCheckpoint, ToolCall, validate_checkpoint
from agent_checkpoint.model import FailurePoint, Identity, ThinkingBlock

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**53), 2**53), st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=10,
)
unknown_keys = st.text(min_size=1, max_size=12).filter(
    lambda k: k
    not in {
        "version", "runId", "history", "lastCompletedIteration", "originalInput", "checkpointedAt",
        "failurePoint", "folded", "identity", "agent", "skillCursor", "evidenceRecovery",
        "findingsLedger", "turnNumber", "claimVerification",
    }
)  # fmt: skip


@st.composite
def messages(draw: st.DrawFn) -> dict[str, Any]:
    msg: dict[str, Any] = {
        "role": draw(st.sampled_from(["system", "user", "assistant", "tool"])),
        "content": draw(st.text(max_size=40)),
    }
    if draw(st.booleans()):
        msg["toolCalls"] = [
            {
                "id": draw(st.text(max_size=6)),
                "name": "t",
                "args": draw(st.dictionaries(st.text(max_size=5), json_scalars, max_size=3)),
            }
        ]
    if draw(st.booleans()):
        msg["thinkingBlocks"] = [
            {"type": "thinking", "content": draw(st.text(max_size=10)), "signature": "c2ln"}
        ]
    for key in draw(
        st.lists(
            st.text(min_size=1, max_size=6).filter(lambda k: k not in msg), max_size=2, unique=True
        )
    ):
        msg[key] = draw(json_values)
    keys = list(msg)
    order = draw(st.permutations(keys))
    return {k: msg[k] for k in order}


@st.composite
def checkpoints(draw: st.DrawFn) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "version": 1,
        "runId": draw(st.text(max_size=20)),
        "history": draw(st.lists(messages(), max_size=5)),
        "lastCompletedIteration": draw(st.integers(0, 100)),
        "originalInput": {"message": draw(st.text(max_size=20))},
    }
    optional: dict[str, Any] = {
        "checkpointedAt": draw(st.integers(0, 2**45)),
        "failurePoint": {
            "iteration": 2,
            "phase": draw(st.sampled_from(["llm", "tool", "iteration", "unknown"])),
        },
        "identity": {
            "conversationId": draw(st.text(max_size=8)),
            "principal": draw(st.text(max_size=8)),
        },
        "agent": {"id": draw(st.text(max_size=8))},
        "skillCursor": draw(st.text(max_size=8)),
        "turnNumber": draw(st.integers(1, 1000)),
        "claimVerification": draw(st.dictionaries(st.text(max_size=5), json_values, max_size=3)),
    }
    for key in draw(st.lists(st.sampled_from(sorted(optional)), unique=True)):
        doc[key] = optional[key]
    for key in draw(st.lists(unknown_keys, max_size=3, unique=True)):
        doc[key] = draw(json_values)
    order = draw(st.permutations(list(doc)))
    return {k: doc[k] for k in order}


@settings(max_examples=300, deadline=None)
@given(checkpoints())
def test_round_trip_keeps_value_and_key_order(doc: dict[str, Any]) -> None:
    validate_checkpoint(doc)
    again = RunCheckpoint.from_json(orjson.loads(orjson.dumps(doc))).to_json()
    assert orjson.dumps(again) == orjson.dumps(doc)


def test_new_checkpoint_is_written_in_the_runtime_key_order() -> None:
    ckpt = RunCheckpoint.new(
        "hi",
        [
            Message("user", "hi"),
            Message("assistant", "", tool_calls=(ToolCall("c1", "search", {"q": "x"}),)),
        ],
        run_id="run-1",
        identity=Identity("conv", principal="alice"),
        failure_point=FailurePoint(1, "tool", "search"),
        turn_number=2,
    )
    doc = ckpt.to_json()
    assert list(doc) == [
        "version", "runId", "history", "lastCompletedIteration", "originalInput",
        "checkpointedAt", "failurePoint", "identity", "turnNumber",
    ]  # fmt: skip
    assert doc["history"][1] == {
        "role": "assistant",
        "content": "",
        "toolCalls": [{"id": "c1", "name": "search", "args": {"q": "x"}}],
    }
    assert isinstance(doc["checkpointedAt"], int)
    assert "folded" not in doc and None not in doc.values()
    validate_checkpoint(doc)


def test_absent_optionals_are_omitted_never_null() -> None:
    doc = RunCheckpoint.new("m", run_id="r", checkpointed_at=5).to_json()
    assert doc == {
        "version": 1,
        "runId": "r",
        "history": [],
        "lastCompletedIteration": 0,
        "originalInput": {"message": "m"},
        "checkpointedAt": 5,
    }


def test_a_known_key_of_another_shape_is_kept_verbatim() -> None:
    doc = {
        "version": 1, "runId": "r", "history": [], "lastCompletedIteration": 0,
        "originalInput": {"message": "m"}, "failurePoint": "weird", "identity": None,
    }  # fmt: skip
    ckpt = RunCheckpoint.from_json(doc)
    assert ckpt.failure_point is None
    assert orjson.dumps(ckpt.to_json()) == orjson.dumps(doc)


def test_thinking_signatures_are_kept_byte_exact() -> None:
    block = {
        "type": "thinking",
        "content": "hmm",
        "signature": "EqQBCkgIAhABGAIiQL+/==",
        "summary": False,
    }
    msg = {"role": "assistant", "content": "ok", "thinkingBlocks": [block]}
    parsed = Message.from_json(msg)
    assert parsed.thinking_blocks == (
        ThinkingBlock("thinking", "hmm", "EqQBCkgIAhABGAIiQL+/==", False),
    )
    assert parsed.to_json() == msg


def test_values_are_immutable() -> None:
    ckpt = RunCheckpoint.new("m")
    with pytest.raises(dataclasses.FrozenInstanceError):
        ckpt.run_id = "other"  # type: ignore[misc]
    changed = ckpt.evolve(run_id="other")
    assert (ckpt.run_id != "other", changed.run_id) == (True, "other")


def test_default_key_prefers_the_conversation_id() -> None:
    assert RunCheckpoint.new("m", run_id="r").default_key == "r"
    assert RunCheckpoint.new("m", run_id="r", identity=Identity("c")).default_key == "c"
