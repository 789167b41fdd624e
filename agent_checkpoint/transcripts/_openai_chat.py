"""OpenAI Chat Completions messages to canonical turns.

Every message keeps its role and content as sent. ``tool_calls`` pass through (custom tool
calls become function-shaped calls whose arguments are ``{"input": ...}``); a ``tool``
message becomes a tool turn whose ``tool_results`` carries its ``tool_call_id``. The legacy
``function_call`` / ``role: function`` pair is given a stable id (``legacy-<message>``) so
it pairs like any other call.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from .._model import Json
from ._errors import MalformedTranscriptError
from ._turns import CallNames, Turn, make_tool_call, make_tool_result

__all__ = ["PROVIDER", "ROLES", "turns_from_messages"]

PROVIDER = "openai"
ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


def _call(raw: Json, fallback_id: str) -> dict[str, Json] | None:
    if not isinstance(raw, dict):
        return None
    id_ = raw.get("id")
    id_ = id_ if isinstance(id_, str) and id_ else fallback_id
    custom = raw.get("custom")
    if raw.get("type") == "custom" and isinstance(custom, dict):
        text = custom.get("input")
        return make_tool_call(id_, str(custom.get("name", "")), {"input": text}, custom=True)
    function = raw.get("function")
    if not isinstance(function, dict):
        return None
    if id_ == raw.get("id") and raw.get("type") == "function":
        return dict(raw)
    return make_tool_call(id_, str(function.get("name", "")), function.get("arguments", "{}"))


def turns_from_messages(
    messages: Iterable[Json], *, model: str | None = None, ts: str
) -> Iterator[Turn]:
    """Turns of an OpenAI chat ``messages`` array, in order."""
    names = CallNames()
    legacy: list[tuple[str, str]] = []
    for i, message in enumerate(messages, 1):
        role = message.get("role") if isinstance(message, dict) else None
        if not isinstance(role, str) or role not in ROLES:
            raise MalformedTranscriptError(
                f"message {i} is not an OpenAI chat message (needs a role among "
                f"{', '.join(sorted(ROLES))})"
            )
        role, content = message["role"], message.get("content")
        if role == "assistant":
            calls: list[dict[str, Json]] = []
            names.new_batch()
            raw_calls = message.get("tool_calls") or []
            if not isinstance(raw_calls, list):
                raise MalformedTranscriptError(f"message {i}: tool_calls is not a list")
            for j, raw in enumerate(raw_calls, 1):
                call = _call(raw, f"call-{i}-{j}")
                if call is None:
                    raise MalformedTranscriptError(f"message {i}: tool call {j} has no function")
                calls.append(call)
                names.add(str(call["id"]), _name(call))
            function_call = message.get("function_call")
            if isinstance(function_call, dict):
                id_ = f"legacy-{i}"
                name = str(function_call.get("name", ""))
                calls.append(make_tool_call(id_, name, function_call.get("arguments", "{}")))
                legacy.append((id_, name))
            turn_model = message.get("model")
            yield Turn(
                "assistant",
                content,
                tool_calls=tuple(calls) or None,
                provider=PROVIDER,
                model=turn_model if isinstance(turn_model, str) else model,
                ts=ts,
            )
        elif role == "tool":
            answered = message.get("tool_call_id")
            answered = answered if isinstance(answered, str) else ""
            result = make_tool_result(answered, content, name=names.take(answered))
            yield Turn("tool", content, tool_results=(result,), provider=PROVIDER, ts=ts)
        elif role == "function":
            name = str(message.get("name", ""))
            match = next((p for p in reversed(legacy) if p[1] == name), None)
            id_ = match[0] if match else f"legacy-orphan-{i}"
            if match:
                legacy.remove(match)
            result = make_tool_result(id_, content, name=name or None)
            yield Turn("tool", content, tool_results=(result,), provider=PROVIDER, ts=ts)
        else:
            yield Turn(role, content, provider=PROVIDER, ts=ts)


def _name(call: dict[str, Json]) -> str:
    function = call.get("function")
    return str(function.get("name", "")) if isinstance(function, dict) else ""
