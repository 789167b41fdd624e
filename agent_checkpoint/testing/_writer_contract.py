"""The writer's contract: every backend stores only what reads back as itself, refuses the same
records with the same errors before it sees them, and reads the same stored bytes the same way
(``_writable.py``)."""

from __future__ import annotations

import math
from typing import Any

import orjson
import pytest

from .._maintenance import verify_store
from .._model import Message, ToolCall
from .._store import Store
from .._writable import MAX_DEPTH, MAX_SAVED_AT
from ..backends._base import Record, Summary
from ..errors import (
    InvalidCheckpointError,
    UnreadableEnvelopeError,
    UnsafeStageError,
)
from ._samples import checkpoint, stamped

_HOLE = "__nested__"


def nested(levels: int) -> Any:
    """A value of ``levels`` nested arrays around a number."""
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


def _raw(doc: dict[str, Any], saved_at: int = 1000, *, deep: int = 0) -> bytes:
    """Stored bytes of ``doc`` as the conversation, with ``deep`` nested arrays in place of
    the string ``_HOLE`` (bytes orjson could not write)."""
    body = orjson.dumps({"format": "conversation-v1", "data": doc, "savedAt": saved_at})
    return body.replace(f'"{_HOLE}"'.encode(), b"[" * deep + b"1" + b"]" * deep)


def _save_raw(store: Store, key: str, body: bytes) -> None:
    summary = Summary(key, "run-x", 1000, None, None, None, None, 0, len(body), 0)
    store.backend.save(Record(summary, body))


def _with_call(doc: dict[str, Any], args: Any) -> dict[str, Any]:
    doc["history"].append(
        {"role": "assistant", "content": "", "toolCalls": [{"id": "c1", "name": "t", "args": args}]}
    )
    return doc


class _WriterContract:
    """Subclass with a ``store`` fixture yielding an empty ``Store`` (via ``StoreConformance``)."""

    # -- nesting: one limit for writing and reading ----------------------------------------

    def test_a_record_nested_to_max_depth_round_trips_and_is_written_back(
        self, store: Store
    ) -> None:
        doc = checkpoint().to_json()
        doc["deep"] = nested(MAX_DEPTH - 2)  # envelope 1, data 2, this field's arrays 3...
        _with_call(doc, {"q": nested(MAX_DEPTH - 7)})  # ...history 3, message 4, args 7
        store.put(doc, key="deep")
        got = store.get_json("deep")
        assert got is not None and got["data"] == doc
        assert store.put(got, key="deep").revision == 2

    @pytest.mark.parametrize("where", ["unknown field", "tool call args", "version"])
    def test_a_record_nested_past_max_depth_is_refused_and_nothing_is_stored(
        self, store: Store, where: str
    ) -> None:
        doc = checkpoint().to_json()
        if where == "unknown field":
            doc["deep"] = nested(MAX_DEPTH - 1)
        elif where == "tool call args":
            _with_call(doc, {"q": nested(MAX_DEPTH - 6)})
        else:
            doc["version"] = nested(400)
        with pytest.raises(InvalidCheckpointError, match=f"deeper than {MAX_DEPTH} levels"):
            store.put(doc, key="deep")
        assert store.head("deep") is None and store.list().items == []

    def test_a_message_nested_past_max_depth_is_not_appended(self, store: Store) -> None:
        base = checkpoint(messages=1)
        store.put(base, key="grow")
        deep = Message("assistant", "", tool_calls=(ToolCall("c1", "t", {"q": nested(300)}),))
        with pytest.raises(InvalidCheckpointError, match=r"at data\.history\[1\]\.toolCalls"):
            store.put(base.evolve(history=(*base.history, deep)), key="grow")
        got = store.get("grow")
        assert got is not None and got.history == base.history
        assert store.head("grow").revision == 1  # type: ignore[union-attr]

    def test_a_stored_record_nested_past_max_depth_is_unreadable_not_absent(
        self, store: Store
    ) -> None:
        store.put(checkpoint("ok"), key="ok")
        doc = checkpoint().to_json()
        doc["deep"] = _HOLE
        _save_raw(store, "deep", _raw(doc, deep=300))
        version = checkpoint().to_json()
        version["version"] = _HOLE
        _save_raw(store, "version", _raw(version, deep=400))
        for key in ("deep", "version"):
            for read in (store.get, store.get_json, store.get_envelope):
                with pytest.raises(UnreadableEnvelopeError, match=f"deeper than {MAX_DEPTH}"):
                    read(key)
        report = verify_store(store)
        assert sorted(report.unreadable) == ["deep", "version"] and report.checked == 3

    # -- numbers -----------------------------------------------------------------------------

    @pytest.mark.parametrize(
        ("path", "value", "shown"),
        [
            ("lastCompletedIteration", math.nan, "data.lastCompletedIteration is NaN"),
            ("score", math.inf, "data.score is Infinity"),
            ("message", -math.inf, r"data.history\[1\].weight is -Infinity"),
            ("args", math.nan, r"data.history\[2\].toolCalls\[0\].args.x\[1\] is NaN"),
            ("failurePoint", math.inf, "data.failurePoint.iteration is Infinity"),
            ("score", 2**64, "beyond the 64 bits"),
            ("score", -(2**63) - 1, "beyond the 64 bits"),
        ],
    )
    def test_a_number_json_cannot_carry_is_refused_wherever_it_is(
        self, store: Store, path: str, value: float, shown: str
    ) -> None:
        doc = checkpoint().to_json()
        if path == "message":
            doc["history"][1]["weight"] = value
        elif path == "args":
            _with_call(doc, {"x": [1.5, value]})
        elif path == "failurePoint":
            doc["failurePoint"] = {"iteration": value, "phase": "tool"}
        else:
            doc[path] = value
        with pytest.raises(InvalidCheckpointError, match=shown):
            store.put(doc, key="n")
        assert store.head("n") is None

    def test_a_number_json_cannot_carry_is_not_appended(self, store: Store) -> None:
        base = checkpoint(messages=1)
        store.put(base, key="grow")
        bad = Message("assistant", "", tool_calls=(ToolCall("c1", "t", {"x": math.nan}),))
        with pytest.raises(InvalidCheckpointError, match=r"history\[1\].toolCalls\[0\].args.x"):
            store.put(base.evolve(history=(*base.history, bad)), key="grow")
        with pytest.raises(InvalidCheckpointError, match="lastCompletedIteration is NaN"):
            store.put(base.evolve(last_completed_iteration=math.nan), key="grow")
        got = store.get("grow")
        assert got is not None and got == base

    def test_numbers_read_back_as_written(self, store: Store) -> None:
        doc = checkpoint().to_json()
        doc["numbers"] = [0.1, -0.0, 1e308, 5e-324, 2**64 - 1, -(2**63), 2**53 + 1, 1.0]
        store.put(doc, key="n")
        got = store.get_json("n")
        assert got is not None and orjson.dumps(got["data"]["numbers"]) == orjson.dumps(
            doc["numbers"]
        )

    # -- strings -----------------------------------------------------------------------------

    @pytest.mark.parametrize("where", ["runId", "content", "args key"])
    def test_a_lone_surrogate_is_refused_with_where_it_is(self, store: Store, where: str) -> None:
        doc = checkpoint().to_json()
        if where == "runId":
            doc["runId"] = "run-\ud800"
        elif where == "content":
            doc["history"][0]["content"] = "half an emoji: \ud83d"
        else:
            _with_call(doc, {"\udfff": 1})
        with pytest.raises(InvalidCheckpointError, match="lone surrogate"):
            store.put(doc, key="s")
        assert store.head("s") is None

    @pytest.mark.parametrize(
        "field", ["runId", "identity.principal", "agent.id", "failurePoint.phase"]
    )
    def test_nul_in_a_field_the_index_keeps_is_refused_on_every_backend(
        self, store: Store, field: str
    ) -> None:
        doc = checkpoint(principal="p", agent="a", failed="tool").to_json()
        parent, _, name = field.rpartition(".")
        target = doc[parent] if parent else doc
        target[name] = "nul\x00inside"
        with pytest.raises(InvalidCheckpointError, match=f"data.{field} holds NUL"):
            store.put(doc, key="nul")
        assert store.head("nul") is None and store.list().items == []

    def test_nul_elsewhere_round_trips_on_every_backend(self, store: Store) -> None:
        doc = checkpoint().to_json()
        doc["history"][0]["content"] = "a\x00b"
        _with_call(doc, {"k\x00": "v\x00"})
        doc["originalInput"]["message"] = "\x00"
        store.put(doc, key="nul")
        got = store.get_json("nul")
        assert got is not None and got["data"] == doc

    def test_a_failure_iteration_the_index_cannot_hold_is_refused(self, store: Store) -> None:
        doc = checkpoint().to_json()
        doc["failurePoint"] = {"iteration": 2**63, "phase": "tool"}
        with pytest.raises(InvalidCheckpointError, match="signed 64-bit"):
            store.put(doc, key="f")
        doc["failurePoint"]["iteration"] = 2**63 - 1
        assert store.put(doc, key="f").failure_iteration == 2**63 - 1
        assert store.head("f").failure_iteration == 2**63 - 1  # type: ignore[union-attr]

    # -- savedAt -----------------------------------------------------------------------------

    @pytest.mark.parametrize("saved_at", [-1, MAX_SAVED_AT + 1, 10**16, 1.5, "1000", None])
    def test_a_saved_at_outside_the_range_is_refused_on_every_backend(
        self, store: Store, saved_at: Any
    ) -> None:
        envelope = {"format": "conversation-v1", "data": checkpoint().to_json()}
        if saved_at is not None:
            envelope["savedAt"] = saved_at
        with pytest.raises(InvalidCheckpointError, match="savedAt must be a whole number"):
            store.put(envelope, key="t")
        assert store.head("t") is None

    def test_the_ends_of_the_saved_at_range_are_stored_and_ordered(self, store: Store) -> None:
        store.put(stamped(checkpoint("first"), 0), key="first")
        store.put(stamped(checkpoint("last"), MAX_SAVED_AT), key="last")
        store.put(stamped(checkpoint("now"), 1_800_000_000_000), key="now")
        assert [(s.key, s.saved_at) for s in store.list()] == [
            ("last", MAX_SAVED_AT),
            ("now", 1_800_000_000_000),
            ("first", 0),
        ]
        assert [s.key for s in store.list(since=MAX_SAVED_AT)] == ["last"]
        assert store.forget_older_than(1).forgotten == 1
        assert [s.key for s in store.list()] == ["last", "now"]

    # -- every write path --------------------------------------------------------------------

    def test_put_record_applies_the_checks_put_makes(self, store: Store) -> None:
        summary = Summary("k", "r", 1, None, None, None, None, 0, 0, 0)
        unsafe = checkpoint().to_json()
        unsafe["failurePoint"] = {"iteration": 1, "phase": "tool", "stage": "https://u:p@h/x"}
        with pytest.raises(UnsafeStageError):
            store.put_record(Record(summary, _raw(unsafe)))
        nul = checkpoint().to_json()
        nul["runId"] = "r\x00"
        with pytest.raises(InvalidCheckpointError, match="NUL"):
            store.put_record(Record(summary, _raw(nul)))
        with pytest.raises(InvalidCheckpointError, match="savedAt"):
            store.put_record(Record(summary, _raw(checkpoint().to_json(), saved_at=-5)))
        with pytest.raises(InvalidCheckpointError, match="missing required"):
            store.put_record(Record(summary, _raw({"version": 1})))
        with pytest.raises(UnreadableEnvelopeError):
            store.put_record(Record(summary, b"{format=conversation-v1"))
        assert store.head("k") is None

    def test_put_record_stores_the_summary_of_its_bytes(self, store: Store) -> None:
        body = _raw(checkpoint("r", principal="alice", failed="llm").to_json(), saved_at=5000)
        lying = Summary("k", "other", 1, "mallory", "agent", None, None, 99, 1, 0)
        stored = store.put_record(Record(lying, body))
        assert (stored.run_id, stored.saved_at, stored.owner, stored.agent_id) == (
            "r",
            5000,
            "alice",
            None,
        )
        assert (stored.failure_phase, stored.message_count, stored.size) == ("llm", 2, len(body))
        assert store.head("k") == stored

    # -- the door's ledger ---------------------------------------------------------------------

    @pytest.mark.parametrize(
        "row",
        [
            {"kind": "basis", "toolCallId": "c", "toolName": "t", "iteration": 1, "basis": []},
            {
                "kind": "contingent",
                "declaredOn": "answer",
                "value": "v",
                "carriers": [{"toolCallId": "c", "standing": ["open"]}],
                "iteration": 1,
            },
        ],
    )
    def test_a_ledger_word_that_is_an_array_or_object_is_refused_by_the_door(
        self, store: Store, row: dict[str, Any]
    ) -> None:
        doc = checkpoint().to_json()
        doc["findingsLedger"] = [row]
        with pytest.raises(InvalidCheckpointError, match="findingsLedger"):
            store.put(doc, key="ledger")
        assert store.head("ledger") is None
        _save_raw(store, "stored", _raw(doc))
        with pytest.raises(InvalidCheckpointError, match="findingsLedger"):
            store.get("stored")
