"""The door's check of history entries (``_validation.py``, spec §3 step 10), kept in the model:
a history ``from_json`` took unchecked is typed on first use, and an entry that cannot be
typed is reported with the door's own message without the model importing the door.
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidCheckpointError

__all__ = ["PREFIX", "js_typeof", "refuse", "validate_messages"]

PREFIX = "[resumeOnError] "


def js_typeof(value: Any) -> str:
    """What JavaScript's ``typeof`` says of a decoded JSON value."""
    if value is None or isinstance(value, (dict, list)):
        return "object"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "undefined"


def refuse(message: str) -> InvalidCheckpointError:
    return InvalidCheckpointError(PREFIX + message)


def validate_messages(messages: list[Any], start: int = 0) -> None:
    """The door's per-message check (step 10) for ``messages``, numbered from ``start``: a
    writer that extends a validated history checks only what it adds."""
    for i, message in enumerate(messages, start):
        if not isinstance(message, dict):
            got = "null" if message is None else js_typeof(message)
            raise refuse(
                f"checkpoint history[{i}] is not a message (got {got}). Each entry must be "
                "{ role, content }."
            )
        role, content = message.get("role"), message.get("content")
        if not isinstance(role, str) or not isinstance(content, str):
            shown = "missing" if "content" not in message else js_typeof(content)
            role_type = "undefined" if "role" not in message else js_typeof(role)
            raise refuse(
                f"checkpoint history[{i}] is missing text: `role` is {role_type}, `content` is "
                f"{shown}. Every turn in a stored conversation must carry {{ role: string, "
                "content: string } — a turn without content cannot be composed into the next "
                "request, and the failure would otherwise surface deep inside the run rather "
                "than here."
            )
