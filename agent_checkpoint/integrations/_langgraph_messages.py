"""The LangGraph saver's messages: a LangChain message as our ``Message`` (role and text any
tool reads, LangChain's fields beside them) and back, and how a step's messages are told apart
from other values and compared with the lineage's."""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping, Sequence
from operator import is_
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    message_to_dict,
    messages_from_dict,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from agent_checkpoint import InvalidCheckpointError, Message, ToolCall

_ROLES = {"human": "user", "ai": "assistant", "tool": "tool", "system": "system"}
_KINDS = {role: kind for kind, role in _ROLES.items()}
_EMPTY: tuple[Any, ...] = (None, {}, [], "")


def round_trip(message: BaseMessage, serde: SerializerProtocol) -> tuple[Message, BaseMessage]:
    """Our message for a LangChain one, and the LangChain message it reads back as.

    Ours has the role and text as any runtime reads them, the LangChain fields (those not at
    their default) under ``lc``, for an exact round trip; a field holding what JSON lacks (a
    datetime, a UUID, bytes...) through ``serde`` under ``lct``. A tuple is stored as a list,
    as LangGraph's serializer stores it and its savers give it back: the message read back is
    then a copy with lists for tuples, else ``message`` itself. A value ``serde`` does not
    give back as it was is refused, naming it."""
    lc = message_to_dict(message)
    given = {k: v for k, v in lc["data"].items() if v not in _EMPTY or k == "content"}
    data = {k: as_lists(v) for k, v in given.items()}
    listed = any(data[k] is not v for k, v in given.items())
    content = data.get("content")
    text = content if isinstance(content, str) else message.text
    if isinstance(content, str):
        del data["content"]
    calls: tuple[ToolCall, ...] | None = None
    raw_calls = data.get("tool_calls")
    if raw_calls and all(isinstance(c.get("id"), str) and plain(c.get("args")) for c in raw_calls):
        calls = tuple(ToolCall(c["id"], c["name"], dict(c.get("args") or {})) for c in raw_calls)
        del data["tool_calls"]
    role = _ROLES.get(lc["type"]) or str(getattr(message, "role", lc["type"]))
    call_id = data.pop("tool_call_id", None) if lc["type"] == "tool" else None
    data.pop("type", None)  # the message's type, kept once, beside its fields
    if lc["type"] == "tool":
        if data.get("status") == "success":  # ToolMessage's default
            del data["status"]
        if data.get("name") is not None and data.get("name") == message.name:
            del data["name"]  # kept as toolName
    extra: dict[str, Any] = {}
    typed = {k: data.pop(k) for k in [k for k, v in data.items() if not plain(v)]}
    if typed:
        extra["lct"] = _typed(message, typed, serde)
    extra["lc"] = data if _ROLES.get(lc["type"]) == role else {"type": lc["type"], **data}
    ours = Message(
        role,
        text,
        tool_calls=calls,
        tool_call_id=call_id,
        tool_name=message.name if lc["type"] == "tool" and message.name else None,
        extra=extra,
    )
    return ours, (langchain_of(ours.to_json(), serde) if listed else message)


def as_lists(value: Any) -> Any:
    """``value`` with every tuple in it (in its lists and dicts) a list, as LangGraph's
    serializer gives it back; ``value`` itself where it holds no tuple. Other types (a named
    tuple included) are the serializer's to carry."""
    kind = type(value)
    if kind is tuple or kind is list:
        items = [as_lists(v) for v in value]
        return value if kind is list and all(map(is_, items, value)) else items
    if kind is dict:
        found = {k: as_lists(v) for k, v in value.items()}
        return value if all(found[k] is v for k, v in value.items()) else found
    return value


def plain(value: Any) -> bool:
    """JSON that reads back as itself: strings, 64-bit integers, finite floats, booleans,
    ``None``, and lists and string-keyed dicts of them, of those exact types."""
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        return bool(-(2**63) <= value < 2**64)
    if kind is float:
        return math.isfinite(value)
    if kind is list:
        return all(map(plain, value))
    if kind is dict:
        return all(type(k) is str and plain(v) for k, v in value.items())
    return False


def _typed(message: BaseMessage, fields: dict[str, Any], serde: SerializerProtocol) -> list[str]:
    """``fields`` through ``serde``, once it is known to give them back exactly."""
    try:
        kind, blob = serde.dumps_typed(fields)
        back = serde.loads_typed((kind, blob))
    except Exception as exc:  # the serializer's own refusal, whatever its class
        raise InvalidCheckpointError(
            f"cannot store message {message.id!r}: the saver's serializer cannot carry its "
            f"fields {sorted(fields)} ({exc})"
        ) from exc
    unlike = _unlike(fields, back, "")
    if unlike is not None:
        where, value, read = unlike
        raise InvalidCheckpointError(
            f"cannot store message {message.id!r}: {where[1:]} is a {type(value).__name__}, "
            f"which the saver's serializer reads back as a {type(read).__name__} "
            f"({read!r:.80}): give it as a {type(read).__name__}"
        )
    return [kind, base64.b64encode(blob).decode("ascii")]


def _unlike(value: Any, back: Any, path: str) -> tuple[str, Any, Any] | None:
    """Where ``back`` first differs from ``value`` in type or value: its path and both."""
    if type(value) is not type(back):
        return path, value, back
    if isinstance(value, dict):
        if value.keys() != back.keys():
            return path, value, back
        for key, item in value.items():
            found = _unlike(item, back[key], f"{path}.{key}")
            if found is not None:
                return found
        return None
    if isinstance(value, (list, tuple)):
        if len(value) != len(back):
            return path, value, back
        for i, (item, read) in enumerate(zip(value, back, strict=True)):
            found = _unlike(item, read, f"{path}[{i}]")
            if found is not None:
                return found
        return None
    if isinstance(value, float) and math.isnan(value) and math.isnan(back):
        return None
    try:
        same = bool(value == back)
    except (TypeError, ValueError):  # an array's elementwise comparison
        same = False
    return None if same else (path, value, back)


def to_langchain(message: Message, serde: SerializerProtocol) -> BaseMessage:
    return langchain_of(message.to_json(), serde)


_CLASSES: dict[str, type[BaseMessage]] = {
    "human": HumanMessage,
    "ai": AIMessage,
    "tool": ToolMessage,
    "system": SystemMessage,
}


def langchain_of(message: Mapping[str, Any], serde: SerializerProtocol) -> BaseMessage:
    """The LangChain message of one stored message (its JSON, as ``round_trip`` wrote it)."""
    lc = message.get("lc")
    calls = message.get("toolCalls")
    if isinstance(lc, dict):
        data = {k: v for k, v in lc.items() if k != "type"}
        typed = message.get("lct")
        if typed is not None:
            kind, blob = typed
            data.update(serde.loads_typed((kind, base64.b64decode(blob))))
        data.setdefault("content", message["content"])
        kind = lc.get("type") or _KINDS[message["role"]]
        if kind == "tool" and message.get("toolName") is not None:
            data.setdefault("name", message["toolName"])
        if calls is not None:
            data["tool_calls"] = _calls(calls)
        if message.get("toolCallId") is not None:
            data["tool_call_id"] = message["toolCallId"]
        cls = _CLASSES.get(kind)
        if cls is not None:
            return cls(**data)
        return messages_from_dict([{"type": kind, "data": data}])[0]
    # a history another runtime wrote: the role and text, and the tool calls
    role, content = message.get("role"), str(message.get("content", ""))
    if role == "assistant":
        return AIMessage(
            content=content,
            tool_calls=_calls(calls or ()),
        )
    if role == "tool":
        return ToolMessage(
            content=content,
            tool_call_id=str(message.get("toolCallId") or ""),
            name=message.get("toolName"),
        )
    if role == "system":
        return SystemMessage(content=content)
    return HumanMessage(content=content)


def _calls(calls: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"name": c["name"], "args": dict(c.get("args") or {}), "id": c["id"], "type": "tool_call"}
        for c in calls
    ]


def is_messages(value: Any) -> bool:
    # by the few types the list holds, not message by message: a step's channel holds every
    # message of the thread, and this runs at every step (~80 us a step at 1,000 messages)
    return isinstance(value, list) and all(
        issubclass(kind, BaseMessage) for kind in set(map(type, value))
    )


def same(ours: Sequence[BaseMessage], theirs: Sequence[BaseMessage]) -> bool:
    # identity first, in one pass in C (an appended list holds the same objects), then
    # equality where they differ
    return len(ours) == len(theirs) and (
        all(map(is_, ours, theirs))
        or all(a is b or a == b or _alike(a, b) for a, b in zip(ours, theirs, strict=True))
    )


def _alike(given: BaseMessage, read: BaseMessage) -> bool:
    """Equal but for tuples given where lists are read back (``round_trip``)."""
    return type(given) is type(read) and as_lists(given.model_dump()) == as_lists(read.model_dump())
