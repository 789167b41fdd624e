"""`LLMMessage` and its parts (spec §2.2): string content, tool calls, thinking blocks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from ..errors import InvalidArgumentError
from ._struct import (
    BOOLEAN,
    NUMBER,
    OBJECT,
    Json,
    JsonObject,
    Struct,
    key,
    kind_of,
    part,
    parts,
)

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True)
class ToolCall(Struct):
    """One call an assistant message makes: ``args`` is the decoded argument object."""

    id: str = field(metadata=key("id"))
    name: str = field(metadata=key("name"))
    args: JsonObject = field(default_factory=dict, metadata=key("args", OBJECT))
    provider_meta: JsonObject | None = field(default=None, metadata=key("providerMeta", OBJECT))
    extra: JsonObject = field(default_factory=dict, repr=False)
    key_order: tuple[str, ...] | None = field(default=None, repr=False, compare=False)

    def to_json(self) -> dict[str, Json]:
        if self.extra or (self.key_order is not None and self.key_order not in _CALL_ORDERS):
            return super().to_json()
        # As ``Message.to_json``: no unknown keys, the runtime's order, no generic loop.
        out: dict[str, Json] = {}
        if self.id is not None:
            out["id"] = self.id
        if self.name is not None:
            out["name"] = self.name
        if self.args is not None:
            out["args"] = self.args
        if self.provider_meta is not None:
            out["providerMeta"] = self.provider_meta
        return out


_CALL_ORDERS = frozenset((("id", "name", "args"), ("id", "name", "args", "providerMeta")))
"""The key orders ``ToolCall.to_json`` writes without the generic loop (when read so)."""


@dataclass(frozen=True)
class ThinkingBlock(Struct):
    """Model reasoning carried byte-exact, because Anthropic signatures must round-trip."""

    type: Literal["thinking", "redacted_thinking"] = field(metadata=key("type"))
    content: str = field(metadata=key("content"))
    signature: str | None = field(default=None, metadata=key("signature"))
    summary: bool | None = field(default=None, metadata=key("summary", BOOLEAN))
    provider_meta: JsonObject | None = field(default=None, metadata=key("providerMeta", OBJECT))
    extra: JsonObject = field(default_factory=dict, repr=False)
    key_order: tuple[str, ...] | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class InjectedBy(Struct):
    injection_id: str = field(metadata=key("injectionId"))
    flavor: str = field(metadata=key("flavor"))
    iteration: int | float = field(metadata=key("iteration", NUMBER))
    reason: str | None = field(default=None, metadata=key("reason"))
    extra: JsonObject = field(default_factory=dict, repr=False)
    key_order: tuple[str, ...] | None = field(default=None, repr=False, compare=False)

    RUNTIME_ORDER = ("injectionId", "flavor", "reason", "iteration")


# Not slotted, like the parts above: ``Struct.from_json`` fills an instance's __dict__ in one
# step, and the absent fields' defaults live on the class (histories hold thousands).
@dataclass(frozen=True)
class Message(Struct):
    """One turn of history. ``content`` is always a string; tool-calling turns carry ``""``."""

    role: str = field(metadata=key("role"))
    content: str = field(metadata=key("content"))
    tool_calls: tuple[ToolCall, ...] | None = field(
        default=None, metadata=key("toolCalls", parts(ToolCall))
    )
    tool_call_id: str | None = field(default=None, metadata=key("toolCallId"))
    tool_name: str | None = field(default=None, metadata=key("toolName"))
    thinking_blocks: tuple[ThinkingBlock, ...] | None = field(
        default=None, metadata=key("thinkingBlocks", parts(ThinkingBlock))
    )
    ephemeral: bool | None = field(default=None, metadata=key("ephemeral", BOOLEAN))
    injected_by: InjectedBy | None = field(
        default=None, metadata=key("injectedBy", part(InjectedBy))
    )
    extra: JsonObject = field(default_factory=dict, repr=False)
    key_order: tuple[str, ...] | None = field(default=None, repr=False, compare=False)

    def to_json(self) -> dict[str, Json]:
        if self.extra or (self.key_order is not None and self.key_order not in _CANONICAL):
            return super().to_json()
        # No unknown keys, and the keys in the runtime's order: write them without the
        # generic field loop (a history encodes thousands of messages per put).
        out: dict[str, Json] = {"role": self.role, "content": self.content}
        if self.tool_calls is not None:
            out["toolCalls"] = [c.to_json() for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["toolCallId"] = self.tool_call_id
        if self.tool_name is not None:
            out["toolName"] = self.tool_name
        if self.thinking_blocks is not None:
            out["thinkingBlocks"] = [b.to_json() for b in self.thinking_blocks]
        if self.ephemeral is not None:
            out["ephemeral"] = self.ephemeral
        if self.injected_by is not None:
            out["injectedBy"] = self.injected_by.to_json()
        return out


_OPTIONAL_KEYS = tuple(f.key for f in Message.FIELDS[2:])
_CANONICAL = frozenset(
    ("role", "content", *(k for i, k in enumerate(_OPTIONAL_KEYS) if mask >> i & 1))
    for mask in range(1 << len(_OPTIONAL_KEYS))
)
"""Every key order ``Message.to_json`` writes without the generic loop: role, content, then
any of the optional keys, each in the runtime's order."""


def messages_json(messages: Sequence[Message], first: int = 0) -> list[dict[str, Json]]:
    """The JSON of ``messages``, a history's from index ``first``. An item that is not a
    ``Message`` (a dict, a string) is refused by its index, not with an AttributeError."""
    try:
        return [m.to_json() for m in messages]
    except AttributeError:
        for i, m in enumerate(messages, first):
            if not isinstance(m, Message):
                raise InvalidArgumentError(
                    f"RunCheckpoint.history[{i}] is {kind_of(m)}, not a Message: "
                    "build it with Message(role, content), or read a checkpoint's whole JSON "
                    "with RunCheckpoint.from_json(...)"
                ) from None
        raise


def message_json(message: Message | JsonObject) -> dict[str, Json]:
    return message.to_json() if isinstance(message, Message) else dict(message)
