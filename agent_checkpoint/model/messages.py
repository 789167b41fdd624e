"""`LLMMessage` and its parts (spec §2.2): string content, tool calls, thinking blocks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ._struct import (
    Field,
    Json,
    JsonObject,
    Struct,
    boolean,
    encode_part,
    encode_parts,
    number,
    obj,
    part,
    parts,
    same,
    text,
)

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True)
class ToolCall(Struct):
    """One call an assistant message makes: ``args`` is the decoded argument object."""

    id: str
    name: str
    args: JsonObject = field(default_factory=dict)
    provider_meta: JsonObject | None = None
    extra: JsonObject = field(default_factory=dict, repr=False)
    key_order: tuple[str, ...] | None = field(default=None, repr=False, compare=False)

    FIELDS = (
        Field("id", "id", text, same),
        Field("name", "name", text, same),
        Field("args", "args", obj, same),
        Field("providerMeta", "provider_meta", obj, same),
    )


@dataclass(frozen=True)
class ThinkingBlock(Struct):
    """Model reasoning carried byte-exact, because Anthropic signatures must round-trip."""

    type: Literal["thinking", "redacted_thinking"]
    content: str
    signature: str | None = None
    summary: bool | None = None
    provider_meta: JsonObject | None = None
    extra: JsonObject = field(default_factory=dict, repr=False)
    key_order: tuple[str, ...] | None = field(default=None, repr=False, compare=False)

    FIELDS = (
        Field("type", "type", text, same),
        Field("content", "content", text, same),
        Field("signature", "signature", text, same),
        Field("summary", "summary", boolean, same),
        Field("providerMeta", "provider_meta", obj, same),
    )


@dataclass(frozen=True, slots=True)
class InjectedBy(Struct):
    injection_id: str
    flavor: str
    iteration: int | float
    reason: str | None = None
    extra: JsonObject = field(default_factory=dict, repr=False)
    key_order: tuple[str, ...] | None = field(default=None, repr=False, compare=False)

    FIELDS = (
        Field("injectionId", "injection_id", text, same),
        Field("flavor", "flavor", text, same),
        Field("reason", "reason", text, same),
        Field("iteration", "iteration", number, same),
    )


# Not slotted, like the parts above: ``Struct.from_json`` fills an instance's __dict__ in one
# step, and the absent fields' defaults live on the class (histories hold thousands).
@dataclass(frozen=True)
class Message(Struct):
    """One turn of history. ``content`` is always a string; tool-calling turns carry ``""``."""

    role: str
    content: str
    tool_calls: tuple[ToolCall, ...] | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    thinking_blocks: tuple[ThinkingBlock, ...] | None = None
    ephemeral: bool | None = None
    injected_by: InjectedBy | None = None
    extra: JsonObject = field(default_factory=dict, repr=False)
    key_order: tuple[str, ...] | None = field(default=None, repr=False, compare=False)

    FIELDS = (
        Field("role", "role", text, same),
        Field("content", "content", text, same),
        Field("toolCalls", "tool_calls", parts(ToolCall), encode_parts),
        Field("toolCallId", "tool_call_id", text, same),
        Field("toolName", "tool_name", text, same),
        Field("thinkingBlocks", "thinking_blocks", parts(ThinkingBlock), encode_parts),
        Field("ephemeral", "ephemeral", boolean, same),
        Field("injectedBy", "injected_by", part(InjectedBy), encode_part),
    )

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


def message_json(message: Message | JsonObject) -> dict[str, Json]:
    return message.to_json() if isinstance(message, Message) else dict(message)
