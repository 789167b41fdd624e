"""LangGraph's values to what ``AgentCheckpointSaver`` stores and back: a checkpoint to its
entry's fields (JSON where it is, else through the saver's serializer) and an entry to a
checkpoint, pending writes in LangGraph's order, a thread's config."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any, cast

import orjson
from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    Checkpoint,
    CheckpointMetadata,
    PendingWrite,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from ._langgraph_lineage import Entry, LineageRead
from ._langgraph_messages import is_messages
from ._langgraph_records import Key, id_time, pack, pack_ts, saved_at, unpack, unpack_ts

__all__ = [
    "checkpoint_of",
    "config_of",
    "dump",
    "entry_fields",
    "pending",
    "unpacked",
]


def dump(serde: SerializerProtocol, value: Any) -> list[str]:
    kind, blob = serde.dumps_typed(value)
    return [kind, base64.b64encode(blob).decode("ascii")]


def packed(serde: SerializerProtocol, value: Mapping[str, Any], name: str) -> dict[str, Any]:
    """``{name: value}`` where it is JSON (readable by any tool; a checkpoint's fields
    packed), else ``{name + "t": serialized}``."""
    try:
        plain = orjson.loads(orjson.dumps(value))
    except TypeError:
        return {name + "t": dump(serde, dict(value))}
    return {name: pack(plain) if name == "c" else plain}


def unpacked(serde: SerializerProtocol, entry: Mapping[str, Any], name: str) -> dict[str, Any]:
    if name in entry:
        stored = entry[name]
        return unpack(stored) if name == "c" else dict(stored)
    kind, blob = entry[name + "t"]
    return dict(serde.loads_typed((kind, base64.b64decode(blob))))


def entry_fields(
    serde: SerializerProtocol,
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    channel: str,
) -> tuple[dict[str, Any], list[BaseMessage] | None]:
    """A checkpoint's entry fields, and the messages of its ``channel`` (None where it holds
    none: its value is then among the entry's other channels')."""
    checkpoint_id = checkpoint["id"]
    values = dict(checkpoint["channel_values"])
    messages = values.pop(channel, None)
    if messages is not None and not is_messages(messages):
        values[channel] = messages
        messages = None
    entry = {"id": checkpoint_id, **pack_ts(checkpoint_id, checkpoint.get("ts"))}
    if id_time(checkpoint_id) is None:
        entry["at"] = saved_at(checkpoint_id, checkpoint.get("ts"))
    rest = {k: v for k, v in checkpoint.items() if k not in ("id", "ts", "channel_values")}
    entry.update(packed(serde, rest, "c"))
    if values:
        entry["vals"] = {k: dump(serde, v) for k, v in values.items()}
    entry.update(packed(serde, get_checkpoint_metadata(config, metadata), "m"))
    if channel != "messages":
        entry["ch"] = channel
    return entry, messages


def checkpoint_of(serde: SerializerProtocol, entry: Entry, read: LineageRead) -> Checkpoint:
    """The checkpoint an entry of a lineage read holds, its messages included."""
    data = entry.data
    values = {
        channel: serde.loads_typed((kind, base64.b64decode(blob)))
        for channel, (kind, blob) in data.get("vals", {}).items()
    }
    if entry.count is not None:
        values[str(data.get("ch", "messages"))] = read.messages(entry.count)
    return cast(
        Checkpoint,
        {
            **unpacked(serde, data, "c"),
            "id": entry.id,
            "ts": unpack_ts(entry.id, data),
            "channel_values": values,
        },
    )


def pending(serde: SerializerProtocol, records: Sequence[Mapping[str, Any]]) -> list[PendingWrite]:
    """The writes of a checkpoint's task records, in LangGraph's order (task path, task
    id, index: ``writes_sort_key``)."""
    found: list[tuple[tuple[str, str, int], PendingWrite]] = []
    for record in records:
        for idx, (channel, kind, blob) in record["writes"].items():
            value = serde.loads_typed((kind, base64.b64decode(blob)))
            order = (str(record.get("path", "")), str(record["task"]), int(idx))
            found.append((order, (str(record["task"]), channel, value)))
    found.sort(key=lambda item: item[0])
    return [write for _, write in found]


def config_of(thread: Key, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread.thread,
            "checkpoint_ns": thread.ns,
            "checkpoint_id": checkpoint_id,
        }
    }
