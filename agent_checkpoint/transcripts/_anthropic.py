"""Anthropic Messages: ``{role, content}`` with content blocks, to canonical turns.

An assistant message becomes one turn whose ``content`` is the block list as sent (text,
``thinking`` with its signature, ``redacted_thinking``, ``tool_use``, server tool blocks) and
whose ``tool_calls`` are its ``tool_use`` blocks. A user message is split: each
``tool_result`` block becomes a ``role: tool`` turn (in block order, as Anthropic requires
them first), and the remaining blocks, if any, one user turn. A top-level ``system`` prompt
becomes a ``system`` turn, and so does a ``role: "system"`` message in the conversation, in
its place, with its blocks as sent (``tool_addition`` and any other kind this reader does
not know). Claude Code logs reuse these helpers.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from .._model import Json
from ._errors import MalformedTranscriptError
from ._turns import CallNames, Turn, make_tool_call, make_tool_result

__all__ = [
    "PROVIDER",
    "ROLES",
    "assistant_turn",
    "tool_calls_of",
    "turns_from_messages",
    "user_turns",
]

PROVIDER = "anthropic"
ROLES = ("user", "assistant", "system")
"""Roles of the messages of a request (``system`` mid-conversation: instructions or tool
changes from there on)."""


def tool_calls_of(content: Json, names: CallNames | None = None) -> list[dict[str, Json]]:
    """The ``tool_use`` blocks of ``content`` as canonical tool calls (remembered in ``names``,
    one batch)."""
    calls: list[dict[str, Json]] = []
    if not isinstance(content, list):
        return calls
    if names is not None:
        names.new_batch()
    for block in content:
        if isinstance(block, dict) and block.get("type") == "tool_use":
            id_, name = block.get("id"), block.get("name")
            id_ = id_ if isinstance(id_, str) else ""
            name = name if isinstance(name, str) else ""
            calls.append(make_tool_call(id_, name, block.get("input", {})))
            if names is not None and id_:
                names.add(id_, name)
    return calls


def assistant_turn(
    content: Json, *, model: str | None, ts: str | None, names: CallNames | None = None
) -> Turn:
    calls = tool_calls_of(content, names)
    return Turn(
        "assistant",
        content,
        tool_calls=tuple(calls) or None,
        provider=PROVIDER,
        model=model,
        ts=ts,
    )


def user_turns(
    content: Json, *, ts: str | None, names: CallNames, role: str = "user"
) -> Iterator[Turn]:
    """The tool turns for the ``tool_result`` blocks of a user message, then the rest."""
    if not isinstance(content, list):
        yield Turn(role, content, provider=PROVIDER, ts=ts)
        return
    rest: list[Json] = []
    for block in content:
        if isinstance(block, dict) and block.get("type") == "tool_result":
            id_ = block.get("tool_use_id")
            id_ = id_ if isinstance(id_, str) else ""
            body = block.get("content", "")
            result = make_tool_result(
                id_, body, name=names.take(id_), is_error=block.get("is_error") is True
            )
            yield Turn("tool", body, tool_results=(result,), provider=PROVIDER, ts=ts)
        else:
            rest.append(block)
    if rest or not content:
        yield Turn(role, rest, provider=PROVIDER, ts=ts)


def turns_from_messages(
    messages: Iterable[Json],
    *,
    system: Json = None,
    model: str | None = None,
    ts: str,
) -> Iterator[Turn]:
    """Turns of an Anthropic ``messages`` array (and its request's ``system`` prompt)."""
    if system:
        yield Turn("system", system, provider=PROVIDER, ts=ts)
    names = CallNames()
    for i, message in enumerate(messages, 1):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise MalformedTranscriptError(
                f"message {i} is not an Anthropic message (needs role 'user', 'assistant' or "
                "'system')"
            )
        if "content" not in message:
            raise MalformedTranscriptError(f"message {i} has no `content`")
        content = message["content"]
        if message["role"] == "system":
            yield Turn("system", content, provider=PROVIDER, ts=ts)
        elif message["role"] == "assistant":
            turn_model = message.get("model")
            yield assistant_turn(
                content,
                model=turn_model if isinstance(turn_model, str) else model,
                ts=ts,
                names=names,
            )
        else:
            yield from user_turns(content, ts=ts, names=names)
