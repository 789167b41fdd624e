"""The ADK session service's records: the keys it writes under (``adk/<app>/<user>/<session
id>``, parsed back by ``parsed``), session state split into ADK's scopes, and ADK's events as
our ``Message`` and back. Public API of ``agent_checkpoint`` only."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from google.adk.events.event import Event
from google.adk.sessions.state import State
from pydantic import ValidationError
from pydantic_core import PydanticSerializationError, to_jsonable_python

from agent_checkpoint import (
    InvalidArgumentError,
    Message,
    Record,
    Store,
    ThinkingBlock,
    ToolCall,
    UnreadableEnvelopeError,
)

from .keys import ADK_SESSION_PREFIX, ADK_STATE_PREFIX

KEY_PREFIX = ADK_SESSION_PREFIX
"""A session's record is stored under ``KEY_PREFIX + "<app>/<user>/<session id>"``."""

STATE_PREFIX = ADK_STATE_PREFIX
"""App state is stored under ``STATE_PREFIX + "<app>"``, user state under
``STATE_PREFIX + "<app>/<user>"``."""
EVENT = "adkEvent"
"""The message field that keeps ADK's event."""

TEXT = "adkText"
"""The message field naming the part of the event's content whose text is the message's
``content`` (the event keeps ``null`` there, so the text is stored once)."""

SESSION = "adkSession"
"""The record field holding the session's ids, own state, last update time and write."""

STATE = "adkState"
"""The field of an app or user state record holding its state."""

STAMPS = "adkStamps"
"""The field of an app or user state record holding, for each key of its state, the stamp
(``[event timestamp, write token]``) of the delta that set it: a delta applied again, or late,
changes no key a newer one set."""

SCOPED = "scoped"
"""The field of a session's ``SESSION`` holding its newest event's ``app:`` and ``user:``
deltas and their stamp (``{"at": [...], "app": {...}, "user": {...}}``): written with the event,
applied to the state records after it, and applied again by a reader that finds it not
applied (the writer stopped between the two)."""


def scoped_of(meta: Mapping[str, Any]) -> dict[str, Any] | None:
    """A session's ``SCOPED`` (``None``: none, or not an object)."""
    scoped = meta.get(SCOPED)
    return scoped if isinstance(scoped, dict) else None


# -- keys -------------------------------------------------------------------------------------


def escape(part: str) -> str:
    return part.replace("%", "%25").replace("/", "%2F")


def unescape(part: str) -> str:
    return part.replace("%2F", "/").replace("%25", "%")


def checked_id(name: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError(f"{name} must be a non-empty string, got {value!r}")
    if not value.isprintable():
        raise InvalidArgumentError(f"{name} {value!r} holds a control or non-printable character")
    return value


def listed_id(name: str, value: object) -> str:
    """An app or user id to list the sessions of: ``""`` as it is (no session has it, so
    ADK's own services list none), any other as ``checked_id`` takes it."""
    return "" if value == "" else checked_id(name, value)


def session_key(app_name: str, user_id: str, session_id: str) -> str:
    """The key a session's record is stored under."""
    parts = (
        checked_id("app_name", app_name),
        checked_id("user_id", user_id),
        checked_id("session_id", session_id),
    )
    return KEY_PREFIX + "/".join(escape(p) for p in parts)


def app_key(app: str) -> str:
    return STATE_PREFIX + escape(app)


def user_key(app: str, user: str) -> str:
    return f"{STATE_PREFIX}{escape(app)}/{escape(user)}"


def agent_id(app: str) -> str:
    return f"adk:{app}"


def parsed(key: str) -> tuple[str, str, str] | None:
    parts = key[len(KEY_PREFIX) :].split("/")
    if not key.startswith(KEY_PREFIX) or len(parts) != 3:
        return None
    app, user, sid = (unescape(p) for p in parts)
    return app, user, sid


# -- state ------------------------------------------------------------------------------------


def json_of(what: str, value: Any) -> Any:
    try:
        return to_jsonable_python(value)
    except (PydanticSerializationError, ValueError, TypeError) as exc:
        raise InvalidArgumentError(f"{what} is not JSON: {exc}; nothing was stored") from exc


@dataclass(frozen=True, slots=True)
class Scopes:
    """A state (or a state delta) split as ADK scopes it; ``temp:`` keys left out."""

    app: dict[str, Any]
    user: dict[str, Any]
    session: dict[str, Any]

    @classmethod
    def of(cls, state: Mapping[str, Any]) -> Scopes:
        scopes = cls({}, {}, {})
        for key, value in state.items():
            if key.startswith(State.APP_PREFIX):
                scopes.app[key.removeprefix(State.APP_PREFIX)] = value
            elif key.startswith(State.USER_PREFIX):
                scopes.user[key.removeprefix(State.USER_PREFIX)] = value
            elif not key.startswith(State.TEMP_PREFIX):
                scopes.session[key] = value
        return scopes


def merged(session: Mapping[str, Any], app: Mapping[str, Any], user: Mapping[str, Any]) -> Any:
    merged = dict(session)
    merged.update((State.APP_PREFIX + k, v) for k, v in app.items())
    merged.update((State.USER_PREFIX + k, v) for k, v in user.items())
    return merged


def state_of(record: Record | None, store: Store) -> dict[str, Any]:
    return stamped_state(record, store)[0]


def stamped_state(
    record: Record | None, store: Store
) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """An app or user state record's state and the stamps of its keys."""
    if record is None:
        return {}, {}
    data = store.decode_json(record)["data"]
    state, stamps = data.get(STATE), data.get(STAMPS)
    return (
        dict(state) if isinstance(state, dict) else {},
        dict(stamps) if isinstance(stamps, dict) else {},
    )


def newer(stamp: list[Any], than: Any) -> bool:
    """Whether a delta stamped ``stamp`` is newer than the stamp ``than`` a key holds (none:
    any delta is)."""
    return not isinstance(than, list) or stamp > than


# -- events and messages ----------------------------------------------------------------------


def _parts(event: Mapping[str, Any]) -> list[Any]:
    content = event.get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    return parts if isinstance(parts, list) else []


def to_message(event: dict[str, Any]) -> Message:
    """Our message for an event's JSON (which it keeps, its text taken out where one part
    holds it all)."""
    parts = [p for p in _parts(event) if isinstance(p, dict)]
    texts = [
        (i, p["text"])
        for i, p in enumerate(_parts(event))
        if isinstance(p, dict) and isinstance(p.get("text"), str) and not p.get("thought")
    ]
    thoughts = tuple(
        ThinkingBlock("thinking", p["text"])
        for p in parts
        if p.get("thought") and isinstance(p.get("text"), str)
    )
    calls = tuple(
        ToolCall(
            str(call.get("id") or ""),
            str(call.get("name") or ""),
            call["args"] if isinstance(call.get("args"), dict) else {},
        )
        for p in parts
        if isinstance(call := p.get("function_call"), dict)
    )
    responses = [r for p in parts if isinstance(r := p.get("function_response"), dict)]
    text = "".join(t for _, t in texts)
    extra: dict[str, Any] = {EVENT: event}
    if len(texts) == 1 and text:
        _parts(event)[texts[0][0]]["text"] = None
        extra[TEXT] = texts[0][0]
    fields: dict[str, Any] = {"thinking_blocks": thoughts or None, "tool_calls": calls or None}
    if responses:
        role = "tool"
        if len(responses) == 1:
            fields["tool_call_id"] = str(responses[0].get("id") or "")
            fields["tool_name"] = str(responses[0].get("name") or "")
        # the responses' JSON as the tool message's text: what a reader of the history wants
        text = text or "\n".join(_compact(r.get("response")) for r in responses)
    else:
        role = "user" if event.get("author") == "user" else "assistant"
    return Message(role, text, extra=extra, **fields)


def _compact(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return str(value)


def _event_json(entry: Mapping[str, Any]) -> dict[str, Any] | None:
    """The event a history entry (message JSON) keeps, its text put back; ``None`` for a
    message another tool wrote."""
    kept = entry.get(EVENT)
    if not isinstance(kept, dict):
        return None
    at, parts = entry.get(TEXT), _parts(kept)
    part = parts[at] if type(at) is int and 0 <= at < len(parts) else None
    if isinstance(part, dict) and part.get("text") is None:
        part["text"] = entry.get("content", "")
    return kept


def event_of(key: str, i: int, entry: Any, saved_at: float) -> Event:
    if not isinstance(entry, dict):
        raise unreadable(f"session {key!r}: history[{i}] is not a message")
    kept = _event_json(entry)
    try:
        if kept is not None:
            return Event.model_validate(kept)
        # a message another tool wrote: its role and text, as the user's or the model's
        text, role = entry.get("content"), entry.get("role")
        by_user = role == "user"
        content = {"role": "user" if by_user else "model", "parts": [{"text": text}]}
        return Event.model_validate(
            {
                "id": f"message-{i}",
                "invocation_id": "",
                "author": "user" if by_user else "model",
                "content": content if isinstance(text, str) and text else None,
                "timestamp": saved_at,
            }
        )
    except ValidationError as exc:
        raise unreadable(
            f"session {key!r}: history[{i}] holds no event ADK can read: {exc}"
        ) from exc


def timestamp_of(entry: Any) -> float:
    kept = entry.get(EVENT) if isinstance(entry, dict) else None
    stamp = kept.get("timestamp") if isinstance(kept, dict) else None
    return float(stamp) if isinstance(stamp, (int, float)) else 0.0


def latest(history: list[Any], recent: int | None, after: float | None) -> list[Any]:
    """As ADK's in-memory service filters: the ``recent`` newest, then of those the ones
    after the newest event older than ``after``."""
    if recent is not None:
        history = history[-recent:] if recent else []
    if after is not None:
        i = len(history) - 1
        while i >= 0 and timestamp_of(history[i]) >= after:
            i -= 1
        history = history[i + 1 :]
    return history


def unreadable(message: str) -> UnreadableEnvelopeError:
    return UnreadableEnvelopeError(message, session_id=None, stored_preview="")
