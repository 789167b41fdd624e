"""A history read from JSON that grows is typed only where it grew, and stored as it is."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from agent_checkpoint import Message, RunCheckpoint, open_store
from agent_checkpoint._model._history import TYPED
from agent_checkpoint._store import Store


@pytest.fixture
def typed(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many messages each typing of a read history built, in order."""
    counts: list[int] = []
    read_all = Message.from_json_many.__func__  # type: ignore[attr-defined]

    def counting(cls: type[Message], items: Any) -> tuple[Message, ...]:
        counts.append(len(items))
        result: tuple[Message, ...] = read_all(cls, items)
        return result

    TYPED.clear()
    monkeypatch.setattr(Message, "from_json_many", classmethod(counting))
    yield counts
    TYPED.clear()


@pytest.fixture
def store() -> Iterator[Store]:
    with open_store("memory://") as s:
        yield s


def _message(i: int, first: str) -> dict[str, Any]:
    if i == 0:
        return {"role": "system", "content": first}
    if i % 3 == 1:
        args = {"q": f"query {i}", "limit": i}
        return {"role": "assistant", "content": "", "toolCalls": [{"id": f"c{i}", "name": "search", "args": args}]}  # fmt: skip
    if i % 3 == 2:
        return {"role": "tool", "content": f"rows {i}", "toolCallId": f"c{i - 1}", "toolName": "search"}  # fmt: skip
    return {"role": "assistant", "content": f"answer {i}", "futureKey": {"kept": i}}


def _document(first: str = "") -> dict[str, Any]:
    checkpoint = RunCheckpoint.new("go", run_id=f"run-{uuid.uuid4().hex}", checkpointed_at=1)
    doc = checkpoint.to_json()
    doc["firstMessage"] = first or f"system prompt {uuid.uuid4().hex}"
    return doc


def _grow(doc: dict[str, Any]) -> None:
    doc["history"].append(_message(len(doc["history"]), doc["firstMessage"]))


def _stored(store: Store, key: str) -> bytes:
    checkpoint = store.get(key)
    assert checkpoint is not None
    return orjson.dumps(checkpoint.to_json())


def test_a_history_put_from_json_after_every_message_types_only_the_new_one(
    store: Store, typed: list[int]
) -> None:
    doc = _document()
    previous = None
    for step in range(12):
        _grow(doc)
        checkpoint = RunCheckpoint.from_json(doc)
        store.put(checkpoint, key="k")
        if step > 1:  # the earlier messages are the very same values
            assert previous is not None
            assert all(
                a is b for a, b in zip(previous.history, checkpoint.history[:-1], strict=True)
            )
        previous = checkpoint
        assert _stored(store, "k") == orjson.dumps(doc)
    assert typed == [1, 2] + [1] * 10  # the second put remembers the history


def test_a_service_decoding_each_request_anew_types_only_the_new_message(
    store: Store, typed: list[int]
) -> None:
    doc = _document()
    for _ in range(12):
        _grow(doc)
        request = orjson.loads(orjson.dumps(doc))  # new dicts, equal to the last ones
        store.put(RunCheckpoint.from_json(request), key="k")
        assert _stored(store, "k") == orjson.dumps(doc)
    assert typed == [1, 2] + [1] * 10


def test_messages_changed_in_place_are_typed_again_and_stored_as_changed(
    store: Store, typed: list[int]
) -> None:
    doc = _document()
    for _ in range(8):
        _grow(doc)
        store.put(RunCheckpoint.from_json(doc), key="k")
    edits = [
        lambda h: h[5].update(content="edited"),
        lambda h: h[4]["toolCalls"][0]["args"].update(q="changed deep inside"),
        lambda h: h[3].pop("futureKey"),
    ]
    for edit in edits:
        edit(doc["history"])
        _grow(doc)
        store.put(RunCheckpoint.from_json(doc), key="k")
        assert _stored(store, "k") == orjson.dumps(doc)
    assert typed == [1, 2] + [1] * 6 + [4, 6, 8]  # from the first changed message on


def test_a_history_cut_back_is_stored_as_it_now_is(store: Store, typed: list[int]) -> None:
    doc = _document()
    for _ in range(6):
        _grow(doc)
        store.put(RunCheckpoint.from_json(doc), key="k")
    del doc["history"][3:]
    store.put(RunCheckpoint.from_json(doc), key="k")
    assert _stored(store, "k") == orjson.dumps(doc)
    _grow(doc)
    store.put(RunCheckpoint.from_json(doc), key="k")
    assert _stored(store, "k") == orjson.dumps(doc)
    assert typed == [1, 2] + [1] * 4 + [0, 1]


def test_conversations_sharing_their_first_message_each_type_only_their_new_messages(
    store: Store, typed: list[int]
) -> None:
    prompt = f"the same system prompt {uuid.uuid4().hex}"
    docs = [_document(prompt) for _ in range(3)]
    for step in range(8):
        for i, doc in enumerate(docs):
            _grow(doc)
            if step:  # each conversation takes its own way after the prompt
                doc["history"][-1]["content"] += f" in conversation {i}"
            store.put(RunCheckpoint.from_json(doc), key=f"k{i}")
    for i, doc in enumerate(docs):
        assert _stored(store, f"k{i}") == orjson.dumps(doc)
    assert typed == [1] * 3 + [2] * 3 + [1] * 18  # each remembered from its second put on


def test_keys_reordered_deep_inside_a_message_are_written_in_their_new_order(
    typed: list[int],
) -> None:
    """Equal values in another key order are another JSON text: a history typed before must
    not lend its messages (and their order) to it (the round trip keeps key order, spec §2.1)."""
    doc = _document()
    for _ in range(4):
        _grow(doc)
    for _ in range(2):  # remembered from the second typing on
        RunCheckpoint.from_json(orjson.loads(orjson.dumps(doc))).history  # noqa: B018
    call = doc["history"][1]["toolCalls"][0]
    call["args"] = dict(reversed(list(call["args"].items())))  # same values, other order
    history = RunCheckpoint.from_json(orjson.loads(orjson.dumps(doc))).history
    assert orjson.dumps([m.to_json() for m in history]) == orjson.dumps(doc["history"])
    assert typed[-1] == len(doc["history"]) - 1  # typed again from the changed message on
