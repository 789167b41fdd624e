"""Canonical turns to a ``RunCheckpoint``'s history and back (spec §2.2).

History messages carry string ``content``. Going there, text blocks (and Responses message
items) are joined with newlines; ``tool_calls`` become ``toolCalls`` with their arguments
decoded to objects; each tool result becomes a ``tool`` message with ``toolCallId`` and
``toolName``; ``thinking`` / ``redacted_thinking`` blocks and Responses ``reasoning`` items
become ``thinkingBlocks`` with their signatures untouched. What has no place in a history
message (images, documents, server tool items, system prompts, error flags of results) is
listed in the ``ConversionReport`` rather than silently lost.

Instructions given inside the conversation are kept where they were given: a ``developer``
turn (Codex writes them at the start and mid-session), and a ``system`` turn after the
conversation has started, become ``user`` messages marked ``injectedBy`` (flavor
``instructions``, reason ``INSTRUCTION_REASONS[role]``), the way the runtime marks what it
adds to a conversation. Only a leading ``system`` turn is the system prompt, which a history
does not hold (spec §2.1).

Coming back, an assistant message with thinking blocks becomes a block list (thinking,
text, ``tool_use``) so the signatures travel on; every other message keeps string content,
and a message marked as instructions is a ``developer`` or ``system`` turn again. History ->
turns -> history gives the same messages.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

import orjson

from .._model import InjectedBy, Json, Message, RunCheckpoint, ThinkingBlock, ToolCall
from .._model._struct import kind_of
from .._validation import validate_checkpoint
from ..errors import InvalidArgumentError
from ._turns import (
    Turn,
    call_arguments,
    call_id,
    call_name,
    iso_utc,
    make_tool_call,
    make_tool_result,
    result_id,
)

__all__ = [
    "INSTRUCTION_REASONS",
    "ConversionReport",
    "NotCarried",
    "checkpoint_to_turns",
    "messages_to_turns",
    "turns_to_checkpoint",
    "turns_to_messages",
]

_TEXT = frozenset({"text", "input_text", "output_text"})
_CARRIED_ELSEWHERE = frozenset(
    {
        "tool_use",
        "tool_result",
        "function_call",
        "custom_tool_call",
        "local_shell_call",
        "computer_call",
        "function_call_output",
    }
)
INSTRUCTION_REASONS = {"developer": "developer message", "system": "system message"}
"""``injectedBy.reason`` of the history message kept for a turn of each instructions role."""
_ROLE_OF_REASON = {reason: role for role, reason in INSTRUCTION_REASONS.items()}


@dataclass(frozen=True, slots=True)
class NotCarried:
    turn: int
    """0-based position of the turn in the input."""
    what: str


@dataclass(frozen=True)
class ConversionReport:
    """What the history could not hold."""

    not_carried: tuple[NotCarried, ...] = ()

    def lines(self, into: str = "the checkpoint") -> list[str]:
        """One line per kind of loss, naming up to five turns (counted from 1)."""
        by_kind: dict[str, list[int]] = {}
        for item in self.not_carried:
            by_kind.setdefault(item.what, []).append(item.turn + 1)
        out = []
        for what, turns in by_kind.items():
            shown = ", ".join(str(t) for t in turns[:5]) + (", ..." if len(turns) > 5 else "")
            times = f", {len(turns)} times," if len(turns) > 1 else ","
            at = "turns" if len(turns) > 1 else "turn"
            out.append(f"not carried into {into}: {what}{times} at {at} {shown}")
        return out


class Converter:
    """Turns to history messages, one turn at a time, noting what they cannot hold."""

    def __init__(self) -> None:
        self.lost: list[NotCarried] = []
        self.names: dict[str, str] = {}
        self.turn = 0
        self.replies = 0
        self.started = False

    def lose(self, what: str) -> None:
        self.lost.append(NotCarried(self.turn, what))

    def text(self, content: Json, thinking: list[ThinkingBlock] | None = None) -> str:
        if content is None:
            return ""
        if isinstance(content, str):
            return content
        if isinstance(content, dict):
            content = [content]
        if not isinstance(content, list):
            return orjson.dumps(content).decode()
        pieces: list[str] = []
        for block in content:
            if isinstance(block, str):
                pieces.append(block)
                continue
            kind = block.get("type") if isinstance(block, dict) else None
            if isinstance(block, dict) and kind is None and "role" in block:
                kind = "message"  # a Responses message in its short form, {role, content}
            if not isinstance(block, dict) or not isinstance(kind, str):
                self.lose("content block without a type")
            elif kind in _TEXT and isinstance(block.get("text"), str):
                pieces.append(block["text"])
            elif kind == "refusal" and isinstance(block.get("refusal"), str):
                pieces.append(block["refusal"])
            elif kind == "message":
                pieces.append(self.text(block.get("content"), thinking))
            elif kind in ("thinking", "redacted_thinking", "reasoning") and thinking is not None:
                thinking.append(_thinking(block))
            elif kind not in _CARRIED_ELSEWHERE:
                self.lose(f"{kind} block")
        return "\n".join(p for p in pieces if p)

    def messages(self, turn: Turn) -> Iterator[Message]:
        if turn.role in INSTRUCTION_REASONS:
            marker = self.injected(turn)  # kept before: given where the conversation had begun
            if marker is None and turn.role == "system" and not self.started:
                self.lose("system prompt (a history holds none)")
                return
            marker = marker or InjectedBy(
                f"turn-{self.turn + 1}",
                "instructions",
                self.replies + 1,
                reason=INSTRUCTION_REASONS[turn.role],
            )
            yield Message("user", self.text(turn.content), injected_by=marker)
            return
        self.started = True
        self.replies += turn.role == "assistant"
        if turn.is_result:
            rest = turn.content
            for result in turn.tool_results or ():
                rid = result_id(result)
                name = result.get("name")
                if "name" not in result:  # an explicit null stays null (see messages_to_turns)
                    name = self.names.get(rid)
                name = name if isinstance(name, str) and name else None
                body = result.get("content", turn.content)
                if result.get("is_error") is True:
                    self.lose("is_error flag of a tool result")
                yield Message("tool", self.text(body), tool_call_id=rid, tool_name=name)
                rest = None if turn.role == "tool" else rest
            extra = self.text(rest) if rest is not None else ""
            if extra:
                yield Message(turn.role, extra)
            return
        if turn.role != "assistant":
            yield Message(turn.role, self.text(turn.content), injected_by=self.injected(turn))
            return
        thinking: list[ThinkingBlock] = []
        content = self.text(turn.content, thinking)
        calls = tuple(self.call(c) for c in turn.tool_calls or ())
        yield Message(
            "assistant",
            content,
            tool_calls=calls or None,
            thinking_blocks=tuple(thinking) or None,
        )

    def injected(self, turn: Turn) -> InjectedBy | None:
        """The turn's ``_meta.injectedBy`` marker (a kept Claude Code meta line), if any."""
        meta = turn.extra.get("_meta")
        marker = meta.get("injectedBy") if isinstance(meta, dict) else None
        if not isinstance(marker, dict):
            return None
        try:
            return InjectedBy.from_json(marker)
        except (TypeError, ValueError):
            self.lose("_meta.injectedBy marker that is not an injectedBy object")
            return None

    def call(self, call: Json) -> ToolCall:
        id_, name = call_id(call), call_name(call)
        self.names[id_] = name
        raw = call_arguments(call)
        args: Json = raw
        if isinstance(raw, str):
            try:
                args = orjson.loads(raw) if raw.strip() else {}
            except orjson.JSONDecodeError:
                args = None
        meta = call.get("provider_meta")
        meta = dict(meta) if isinstance(meta, dict) else None
        if args is None and raw is None:
            args = {}
        if not isinstance(args, dict):
            self.lose("tool-call arguments that are not a JSON object (kept in providerMeta)")
            meta = (meta or {}) | {"arguments": raw}
            args = {}
        return ToolCall(id_, name, args, provider_meta=meta)


def _texts(parts: Json) -> list[str]:
    """The string ``text`` of each object in a list of parts; anything else is skipped."""
    if not isinstance(parts, list):
        return []
    return [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]


def _thinking(block: dict[str, Json]) -> ThinkingBlock:
    kind = block["type"]
    if kind == "reasoning":
        summary, raw = _texts(block.get("summary")), _texts(block.get("content"))
        meta = {k: v for k, v in block.items() if k not in ("type", "summary")}
        return ThinkingBlock(
            "thinking",
            "\n".join(summary) if summary or not raw else "\n".join(raw),
            summary=bool(summary) or not raw,
            provider_meta=meta or None,
        )
    signature, flag, extra = (
        block.get("signature"),
        block.get("summary"),
        block.get("provider_meta"),
    )
    body = block.get("thinking") if kind == "thinking" else block.get("data")
    kind_: Literal["thinking", "redacted_thinking"] = (
        "thinking" if kind == "thinking" else "redacted_thinking"
    )
    return ThinkingBlock(
        kind_,
        body if isinstance(body, str) else "",
        signature=signature if isinstance(signature, str) else None,
        summary=flag if isinstance(flag, bool) else None,
        provider_meta=extra if isinstance(extra, dict) else None,
    )


def checked(turns: Iterable[Turn]) -> Iterator[tuple[int, Turn]]:
    """``enumerate(turns)``, refusing anything that is not a ``Turn``, naming it."""
    for i, turn in enumerate(turns):
        if not isinstance(turn, Turn):
            raise InvalidArgumentError(
                f"turns[{i}] is {kind_of(turn)}, not a Turn: open_transcript "
                "and read_turns give Turns, turn_from_json(...) makes one of a JSON object"
            )
        yield i, turn


def turns_to_messages(turns: Iterable[Turn]) -> tuple[list[Message], ConversionReport]:
    """History messages for ``turns``, and what they could not carry."""
    converter = Converter()
    out: list[Message] = []
    for i, turn in checked(turns):
        converter.turn = i
        out.extend(converter.messages(turn))
    return out, ConversionReport(tuple(converter.lost))


def turns_to_checkpoint(
    turns: Iterable[Turn], *, run_id: str | None = None, **optional: Json
) -> tuple[RunCheckpoint, ConversionReport]:
    """A new checkpoint holding ``turns`` as history; ``originalInput.message`` is the text of
    the last user message ("" if none). ``optional`` goes to ``RunCheckpoint.new``."""
    history, report = turns_to_messages(turns)
    last_user = next((m.content for m in reversed(history) if m.role == "user"), "")
    checkpoint = RunCheckpoint.new(last_user, history, run_id=run_id, **optional)
    validate_checkpoint(checkpoint.to_json())
    return checkpoint, report


def _block(block: ThinkingBlock) -> dict[str, Json]:
    out: dict[str, Json]
    if block.type == "redacted_thinking":
        out = {"type": "redacted_thinking", "data": block.content}
        if block.signature is not None:
            out["signature"] = block.signature
    else:
        out = {"type": "thinking", "thinking": block.content}
        if block.signature is not None:
            out["signature"] = block.signature
    if block.summary is not None:
        out["summary"] = block.summary
    if block.provider_meta is not None:
        out["provider_meta"] = dict(block.provider_meta)
    return out


def messages_to_turns(
    messages: Iterable[Message],
    *,
    ts: str | None = None,
    provider: str | None = None,
    model: str | None = None,
) -> Iterator[Turn]:
    """Canonical turns for history ``messages`` (every turn stamped ``ts``)."""
    for i, message in enumerate(messages):
        if not isinstance(message, Message):
            raise InvalidArgumentError(f"messages[{i}] is {kind_of(message)}, not a Message")
        if message.role == "tool":
            result = make_tool_result(
                message.tool_call_id or "", message.content, name=message.tool_name
            )
            if not message.tool_name:
                result = {"tool_call_id": result["tool_call_id"], "name": None} | result
            yield Turn("tool", message.content, tool_results=(result,), provider=provider, ts=ts)
            continue
        calls = tuple(
            make_tool_call(
                c.id,
                c.name,
                dict(c.args),
                **({"provider_meta": dict(c.provider_meta)} if c.provider_meta else {}),
            )
            for c in message.tool_calls or ()
        )
        content: Json = message.content
        if message.thinking_blocks:
            content = [_block(b) for b in message.thinking_blocks]
            if message.content:
                content.append({"type": "text", "text": message.content})
            content.extend(
                {"type": "tool_use", "id": c.id, "name": c.name, "input": dict(c.args)}
                for c in message.tool_calls or ()
            )
        injected = message.injected_by
        role = message.role
        if injected and role == "user" and injected.flavor == "instructions":
            role = _ROLE_OF_REASON.get(injected.reason or "", role)
        yield Turn(
            role,
            content,
            tool_calls=calls or None,
            provider=provider,
            model=model if message.role == "assistant" else None,
            ts=ts,
            extra={"_meta": {"injectedBy": injected.to_json()}} if injected else {},
        )


def checkpoint_to_turns(checkpoint: RunCheckpoint) -> Iterator[Turn]:
    """The checkpoint's history as canonical turns, stamped with its ``checkpointedAt``."""
    if not isinstance(checkpoint, RunCheckpoint):
        hint = " (RunCheckpoint.from_json reads its JSON)" if isinstance(checkpoint, dict) else ""
        raise InvalidArgumentError(
            f"checkpoint_to_turns takes a RunCheckpoint, not {type(checkpoint).__name__}{hint}"
        )
    ts = iso_utc(checkpoint.checkpointed_at) if checkpoint.checkpointed_at else None
    return messages_to_turns(checkpoint.history, ts=ts)
