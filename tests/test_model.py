"""The record as typed values: lossless round trips, key order, unknown fields, immutability."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_checkpoint import Message, RunCheckpoint, ToolCall, open_store, validate_checkpoint
from agent_checkpoint._model import FailurePoint, Identity, ThinkingBlock
from agent_checkpoint.errors import InvalidArgumentError, InvalidCheckpointError

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


def _document_with_history() -> dict[str, Any]:
    return {
        "version": 1,
        "runId": "run-1",
        "history": [
            {"content": "hi", "role": "user"},
            {
                "role": "assistant",
                "content": "",
                "toolCalls": [{"id": "c1", "name": "search", "args": {"q": "x"}, "z": 1}],
            },
            {"role": "tool", "content": "found", "toolCallId": "c1", "toolName": "search"},
            {"role": "assistant", "content": "done", "futureKey": [1, 2]},
        ],
        "lastCompletedIteration": 2,
        "originalInput": {"message": "go"},
    }


def test_a_read_checkpoint_types_its_history_on_first_use_and_round_trips_either_way() -> None:
    doc = _document_with_history()
    untouched = RunCheckpoint.from_json(doc)
    assert orjson.dumps(untouched.to_json()) == orjson.dumps(doc)  # without typing the history
    touched = RunCheckpoint.from_json(doc)
    history = touched.history
    assert [type(m) for m in history] == [Message] * 4
    assert history[1].tool_calls == (ToolCall("c1", "search", {"q": "x"}, extra={"z": 1}),)
    assert touched.history is history  # typed once
    assert orjson.dumps(touched.to_json()) == orjson.dumps(doc)
    assert untouched == touched
    grown = untouched.evolve(history=(*untouched.history, Message("user", "more")))
    assert grown.to_json()["history"][:4] == doc["history"]
    assert grown.last_completed_iteration == 2
    with pytest.raises(AttributeError):
        untouched.no_such_field  # type: ignore[attr-defined]  # noqa: B018


def test_typing_a_read_history_changes_nothing_the_checkpoint_holds() -> None:
    checkpoint = RunCheckpoint.from_json(_document_with_history())
    held = dict(vars(checkpoint))
    history = checkpoint.history
    assert vars(checkpoint) == held and all(held[k] is v for k, v in vars(checkpoint).items())
    with pytest.raises(dataclasses.FrozenInstanceError):
        checkpoint.history = history  # type: ignore[misc]
    assert checkpoint.evolve(run_id="run-2").history == history


def test_a_part_whose_runtime_order_does_not_name_each_key_once_is_refused() -> None:
    from agent_checkpoint._model._struct import Struct, key

    with pytest.raises(TypeError, match="RUNTIME_ORDER"):

        @dataclasses.dataclass(frozen=True)
        class Odd(Struct):
            first: str = dataclasses.field(metadata=key("first"))
            second: str = dataclasses.field(metadata=key("second"))
            extra: dict[str, Any] = dataclasses.field(default_factory=dict)
            key_order: tuple[str, ...] | None = None

            RUNTIME_ORDER = ("second", "second")


def test_to_json_of_a_read_checkpoint_does_not_hand_out_its_own_messages() -> None:
    checkpoint = RunCheckpoint.from_json(_document_with_history())
    out = checkpoint.to_json()
    out["history"][0]["content"] = "changed by the caller"
    assert checkpoint.history[0].content == "hi"
    assert checkpoint.to_json()["history"][0]["content"] == "hi"


odd_tool_calls = st.sampled_from(
    [["not an object"], [{"id": 7, "name": "t"}], [{"name": "t"}], {"id": "c"}, [], [{}]]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(messages(), max_size=8), st.data())
def test_a_typed_history_writes_every_message_back_as_read(
    history: list[dict[str, Any]], data: st.DataObject
) -> None:
    for message in history:  # some tool calls of shapes the typed fields cannot hold
        if "toolCalls" in message and data.draw(st.booleans()):
            message["toolCalls"] = data.draw(odd_tool_calls)
    doc = {
        "version": 1,
        "runId": "r",
        "history": history,
        "lastCompletedIteration": 0,
        "originalInput": {"message": "go"},
    }
    typed = RunCheckpoint.from_json(orjson.loads(orjson.dumps(doc))).history
    assert typed == tuple(Message.from_json(m) for m in history)  # one by one, the same
    assert orjson.dumps([m.to_json() for m in typed]) == orjson.dumps(history)
    twice = RunCheckpoint.from_json(orjson.loads(orjson.dumps(doc))).history
    assert twice == typed  # readers compiled by the first read give the same values


@pytest.mark.parametrize(
    "keys",
    [
        ("role", "content"),
        ("content", "role"),
        ("role", "content", "toolName", "toolCallId"),
        ("role", "content", "toolCallId", "toolName"),
        ("toolCallId", "role", "content"),
    ],
)
def test_message_key_order_survives_the_fast_writer(keys: tuple[str, ...]) -> None:
    values = {"role": "tool", "content": "x", "toolCallId": "c", "toolName": "t"}
    doc = {k: values[k] for k in keys}
    assert list(Message.from_json(doc).to_json()) == list(keys)


def test_a_known_key_order_still_keeps_values_of_another_shape_verbatim() -> None:
    good = {"role": "tool", "content": "x", "toolCallId": "c1", "toolName": "t"}
    odd = {"role": "tool", "content": "x", "toolCallId": 7, "toolName": None}
    for doc in (good, odd, good):  # the same key order, read three times
        message = Message.from_json(doc)
        assert orjson.dumps(message.to_json()) == orjson.dumps(doc)
    message = Message.from_json(odd)
    assert message.tool_call_id is None and message.tool_name is None
    assert dict(message.extra) == {"toolCallId": 7, "toolName": None}
    call = ToolCall.from_json({"id": "c", "name": "n"})  # no args: the default, made per call
    assert call.args == {} and call.to_json() == {"id": "c", "name": "n", "args": {}}
    from agent_checkpoint._model._struct import Mismatch

    with pytest.raises(Mismatch):  # a part missing a required key keeps another shape...
        Message._read({"content": "no role"})
    with pytest.raises(InvalidArgumentError, match=r"got keys: content$"):  # ...asked for: refused
        Message.from_json({"content": "no role"})


def test_key_orders_past_the_remembered_ones_are_read_the_generic_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import itertools

    from agent_checkpoint._model import _struct

    monkeypatch.setattr(_struct, "_SHAPES_KEPT", 2)
    monkeypatch.setattr(Message, "_SHAPES", {})
    values = {"role": "tool", "content": "x", "toolCallId": "c1", "toolName": "t"}
    for keys in itertools.permutations(values):
        doc = {k: values[k] for k in keys}
        message = Message.from_json(doc)
        assert (message.role, message.tool_call_id) == ("tool", "c1")
        assert orjson.dumps(message.to_json()) == orjson.dumps(doc)
    assert len(Message._SHAPES) == 2


def test_a_read_part_does_not_change_when_the_caller_changes_its_json() -> None:
    doc = _document_with_history()
    doc["claimVerification"] = {"checked": ["a"]}
    checkpoint = RunCheckpoint.from_json(doc)
    call = checkpoint.history[1].tool_calls[0]  # type: ignore[index]
    doc["history"][1]["toolCalls"][0]["args"]["q"] = "changed by the caller"
    doc["history"][3]["futureKey"].append(3)
    doc["claimVerification"]["checked"].append("b")
    assert call.args == {"q": "x"}
    assert checkpoint.history[3].extra == {"futureKey": [1, 2]}
    assert checkpoint.claim_verification == {"checked": ["a"]}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"tool_calls": ({"id": "c", "name": "search", "args": {}},)},
            r"Message\.tool_calls\[0\] is a dict, not a ToolCall: build it with ToolCall\(\.\.\.\), "
            r"or read the whole JSON object with Message\.from_json\(\.\.\.\)",
        ),
        (
            {"tool_calls": ToolCall("c", "search", {})},
            r"Message\.tool_calls is a ToolCall, not a tuple of ToolCall: put the one in a "
            r"tuple, tool_calls=\(\.\.\.,\)",
        ),
        (
            {"thinking_blocks": [ThinkingBlock("thinking", "t"), "more"]},
            r"Message\.thinking_blocks\[1\] is a str, not a ThinkingBlock",
        ),
        (
            {"injected_by": {"injectionId": "i", "flavor": "f", "iteration": 1}},
            r"Message\.injected_by is a dict, not an InjectedBy",
        ),
    ],
)
def test_a_message_built_with_json_where_a_part_goes_is_refused_where_it_is_built(
    fields: dict[str, Any], message: str
) -> None:
    # Without the check, the mistake surfaced as an AttributeError inside the next put.
    with pytest.raises(InvalidArgumentError, match=message):
        Message("assistant", "", **fields)


def test_parts_in_a_list_or_read_from_json_are_taken_as_they_are() -> None:
    calls = [ToolCall("c", "search", {"q": "x"})]
    built = Message("assistant", "", tool_calls=calls)  # type: ignore[arg-type]
    read = Message.from_json(
        {
            "role": "assistant",
            "content": "",
            "toolCalls": [{"id": "c", "name": "search", "args": {"q": "x"}}],
        }
    )
    assert built.to_json() == read.to_json()
    assert dataclasses.replace(read, content="again").tool_calls == read.tool_calls


@pytest.mark.parametrize(
    ("history", "named"),
    [
        ([{"role": 5}], "history[0] is missing text: `role` is number"),
        ([{"role": "user", "content": "x"}, {"content": "y"}], "history[1] is missing text"),
    ],
)
def test_a_history_from_json_that_cannot_be_typed_is_refused_by_the_door_s_message(
    history: list[dict[str, object]], named: str
) -> None:
    # from_json leaves the checks to the door and types the history on first use: that once
    # raised the model's internal Mismatch, which no `except CheckpointError` caught
    doc = {**RunCheckpoint.new("hi", run_id="r1").to_json(), "history": history}
    checkpoint = RunCheckpoint.from_json(doc)
    with pytest.raises(InvalidCheckpointError, match=re.escape(named)):
        _ = checkpoint.history
    with open_store("memory://") as store:
        with pytest.raises(InvalidCheckpointError, match=re.escape(named)):
            store.put(checkpoint, key="k")
        assert store.get_record("k") is None
