"""The LangGraph saver's records: the keys it writes under (``langgraph/<thread>/<namespace>/
...``, parsed back by ``parse``), and LangChain messages as our ``Message`` and back."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime
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
from langchain_core.runnables import RunnableConfig

from agent_checkpoint import InvalidArgumentError, Message, ToolCall

ROOT_NS = "-"  # the root namespace ("") in a key
_UUID_EPOCH = 0x01B21DD213814000  # 1582-10-15 to 1970-01-01 in 100 ns ticks (RFC 9562)


# -- keys ---------------------------------------------------------------------------------


def escape(part: str) -> str:
    return part.replace("%", "%25").replace("/", "%2F")


def unescape(part: str) -> str:
    return part.replace("%2F", "/").replace("%25", "%")


_INVERT = str.maketrans("0123456789abcdef", "fedcba9876543210")


def inverted(checkpoint_id: str) -> str:
    """Ascending keys for descending ids: a listing gives ties (one millisecond) newest first."""
    return checkpoint_id.translate(_INVERT)


@dataclass(frozen=True, slots=True)
class Key:
    thread: str
    ns: str

    @property
    def base(self) -> str:
        ns = ROOT_NS if self.ns == "" else "+" + escape(self.ns)
        return f"langgraph/{escape(self.thread)}/{ns}"

    @property
    def tag(self) -> str:
        """The agent id every record of the thread (all namespaces) is indexed under."""
        return f"langgraph:{self.thread}"

    @property
    def first_lineage(self) -> str:
        return f"{self.base}/m/0"

    def lineage(self, checkpoint_id: str) -> str:
        return f"{self.base}/m/{escape(checkpoint_id)}"

    def checkpoint(self, checkpoint_id: str) -> str:
        return f"{self.base}/c/{escape(inverted(checkpoint_id))}"

    def writes(self, checkpoint_id: str, task_id: str) -> str:
        return f"{self.checkpoint(checkpoint_id)}/w/{escape(task_id)}"

    def lineage_key(self, ref: Mapping[str, Any]) -> str:
        """The key of the lineage a checkpoint's messages reference names (by its suffix)."""
        return f"{self.base}/m/{ref['lineage']}"

    def holds_checkpoint(self, key: str) -> bool:
        prefix = f"{self.base}/c/"
        return key.startswith(prefix) and "/" not in key[len(prefix) :]


def thread_of(config: RunnableConfig) -> Key:
    configurable = config.get("configurable") or {}
    thread = configurable.get("thread_id")
    if thread is None:
        raise InvalidArgumentError(
            "the config names no thread: pass {'configurable': {'thread_id': ...}}"
        )
    return Key(str(thread), str(configurable.get("checkpoint_ns") or ""))


def id_time(checkpoint_id: str) -> int | None:
    """Epoch ms of a UUIDv6 checkpoint id (LangGraph's ids carry their time), else ``None``."""
    with suppress(ValueError):
        parsed = uuid.UUID(checkpoint_id)
        if parsed.version == 6:
            ticks = ((parsed.int >> 96) << 28) | (((parsed.int >> 80) & 0xFFFF) << 12)
            ticks |= (parsed.int >> 64) & 0xFFF
            return (ticks - _UUID_EPOCH) // 10_000
    return None


def saved_at(checkpoint_id: str, ts: str | None) -> int:
    """The time a checkpoint is listed at: its id's, else its ``ts``, else now."""
    at = id_time(checkpoint_id)
    if at is None and ts:
        with suppress(ValueError):
            at = int(datetime.fromisoformat(ts).timestamp() * 1000)
    return at if at is not None else int(datetime.now().timestamp() * 1000)


# -- messages -----------------------------------------------------------------------------

_ROLES = {"human": "user", "ai": "assistant", "tool": "tool", "system": "system"}
_EMPTY: tuple[Any, ...] = (None, {}, [], "")


def to_ours(message: BaseMessage) -> Message:
    """Our message for a LangChain one: role and text as any runtime reads them, the
    LangChain fields (those not at their default) under ``lc``, for an exact round trip."""
    lc = message_to_dict(message)
    data = {k: v for k, v in lc["data"].items() if v not in _EMPTY or k == "content"}
    content = data.get("content")
    text = content if isinstance(content, str) else message.text
    if isinstance(content, str):
        del data["content"]
    calls: tuple[ToolCall, ...] | None = None
    raw_calls = data.get("tool_calls")
    if raw_calls and all(isinstance(c.get("id"), str) for c in raw_calls):
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
    return Message(
        role,
        text,
        tool_calls=calls,
        tool_call_id=call_id,
        tool_name=message.name if lc["type"] == "tool" and message.name else None,
        extra={"lc": {"type": lc["type"], **data}},
    )


def to_langchain(message: Message) -> BaseMessage:
    lc = message.extra.get("lc")
    if isinstance(lc, dict):
        data = {k: v for k, v in lc.items() if k != "type"}
        data.setdefault("content", message.content)
        if lc["type"] == "tool" and message.tool_name is not None:
            data.setdefault("name", message.tool_name)
        if message.tool_calls is not None:
            data["tool_calls"] = [
                {"name": c.name, "args": dict(c.args), "id": c.id, "type": "tool_call"}
                for c in message.tool_calls
            ]
        if message.tool_call_id is not None:
            data["tool_call_id"] = message.tool_call_id
        return messages_from_dict([{"type": lc["type"], "data": data}])[0]
    # a history another runtime wrote: the role and text, and the tool calls
    if message.role == "assistant":
        calls = [
            {"name": c.name, "args": dict(c.args), "id": c.id, "type": "tool_call"}
            for c in message.tool_calls or ()
        ]
        return AIMessage(content=message.content, tool_calls=calls)
    if message.role == "tool":
        return ToolMessage(
            content=message.content,
            tool_call_id=message.tool_call_id or "",
            name=message.tool_name,
        )
    if message.role == "system":
        return SystemMessage(content=message.content)
    return HumanMessage(content=message.content)


def is_messages(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(m, BaseMessage) for m in value)


def same(ours: Sequence[BaseMessage], theirs: Sequence[BaseMessage]) -> bool:
    # identity first (an appended list holds the same objects), equality where it differs
    return len(ours) == len(theirs) and all(
        a is b or a == b for a, b in zip(ours, theirs, strict=True)
    )


def parse(key: str) -> tuple[Key, str, str | None] | None:
    """The thread, checkpoint id and task (writes) of a checkpoint's or writes' key; ``None``
    for any other key (a lineage, a record that is not the saver's)."""
    parts = key.split("/")
    if len(parts) not in (5, 7) or parts[0] != "langgraph" or parts[3] != "c":
        return None
    ns = "" if parts[2] == ROOT_NS else unescape(parts[2][1:])
    thread = Key(unescape(parts[1]), ns)
    checkpoint_id = inverted(unescape(parts[4]))
    task = unescape(parts[6]) if len(parts) == 7 and parts[5] == "w" else None
    if len(parts) == 7 and task is None:
        return None
    return thread, checkpoint_id, task


def retarget(key: str, thread_id: str) -> str:
    """``key`` moved to thread ``thread_id`` (same namespace, same record): ``copy_thread``."""
    parts = key.split("/")
    parts[1] = escape(thread_id)
    return "/".join(parts)
