"""The migration mechanism, proven with test-only formats (the real format stays v1)."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from agent_checkpoint import InvalidCheckpointError, Migrations, Store, open_store
from agent_checkpoint.backends import Record, Summary
from agent_checkpoint.errors import MigrationError


def v0_to_v1(doc: dict[str, Any]) -> dict[str, Any]:
    """A test-only v0 format: snake_case keys and `messages` instead of `history`."""
    return {
        "version": 1,
        "runId": doc["run_id"],
        "history": [{"role": m["role"], "content": m["text"]} for m in doc["messages"]],
        "lastCompletedIteration": doc.get("iteration", 0),
        "originalInput": {"message": doc["input"]},
    }


def v1_to_v2(doc: dict[str, Any]) -> dict[str, Any]:
    """A test-only v2 format that nests the input message under `input.text`."""
    out = {k: v for k, v in doc.items() if k != "originalInput"}
    out["version"] = 2
    out["input"] = {"text": doc["originalInput"]["message"]}
    return out


V0 = {"version": 0, "run_id": "old-1", "messages": [{"role": "user", "text": "hi"}], "input": "hi"}
V1 = {
    "version": 1,
    "runId": "r",
    "history": [],
    "lastCompletedIteration": 0,
    "originalInput": {"message": "m"},
}


def test_a_chain_upgrades_to_its_current_version() -> None:
    chain = Migrations({1: v1_to_v2}, current=2)
    assert chain.readable == (1, 2)
    upgraded = chain.upgrade(V1)
    assert upgraded["version"] == 2 and upgraded["input"] == {"text": "m"}
    assert "originalInput" not in upgraded
    assert chain.upgrade(upgraded) is upgraded


def test_steps_do_not_touch_their_input() -> None:
    before = copy.deepcopy(V0)
    Migrations({0: v0_to_v1}).upgrade(V0)
    assert before == V0


def test_a_newer_version_is_refused_by_name_listing_what_can_be_read() -> None:
    chain = Migrations({0: v0_to_v1, 1: v1_to_v2}, current=2)
    with pytest.raises(
        InvalidCheckpointError,
        match=r"unsupported checkpoint version: 3\. This library reads checkpoint versions 0, 1, 2",
    ):
        chain.upgrade({**V1, "version": 3})


def test_a_version_without_a_path_is_refused_by_name() -> None:
    chain = Migrations({0: v0_to_v1}, current=3)  # no step 1 -> 2: version 0 cannot reach 3
    with pytest.raises(
        InvalidCheckpointError, match=r"version: 0\. This library reads checkpoint versions 3"
    ):
        chain.upgrade(V0)


def test_a_step_that_lands_on_the_wrong_version_is_caught() -> None:
    chain = Migrations({0: lambda d: {**d, "version": 5}})
    with pytest.raises(MigrationError, match="produced version 5"):
        chain.upgrade(V0)


def test_a_step_past_the_current_version_is_refused_at_construction() -> None:
    with pytest.raises(MigrationError):
        Migrations({1: v1_to_v2}, current=1)


def _store_raw(store: Store, key: str, data: dict[str, Any]) -> None:
    body = orjson.dumps({"format": "conversation-v1", "data": data, "savedAt": 1})
    store.backend.save(
        Record(Summary(key, "old-1", 1, None, None, None, None, 1, len(body), 0), body)
    )


def test_reads_upgrade_old_records_automatically() -> None:
    store = Store(open_store("memory://").backend, migrations=Migrations({0: v0_to_v1}))
    _store_raw(store, "legacy", V0)
    ckpt = store.get("legacy")
    assert ckpt is not None and ckpt.run_id == "old-1"
    assert [(m.role, m.content) for m in ckpt.history] == [("user", "hi")]


def test_without_a_step_an_old_record_is_refused_not_misread() -> None:
    store = open_store("memory://")
    _store_raw(store, "legacy", V0)
    with pytest.raises(InvalidCheckpointError, match="unsupported checkpoint version: 0"):
        store.get("legacy")
