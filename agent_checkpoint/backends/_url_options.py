"""Options that store URLs carry in their query string (``?prefix=..&ttl=..``), read the same
way by every backend: a value that is not what the option takes, or an option the backend does
not know, is refused at ``open_store`` with ``InvalidKeyError`` naming the backend, the option
and the value, before a typo can send checkpoints somewhere else or fail at the first write.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable

from ..errors import InvalidKeyError

__all__ = ["flag", "number", "refuse_unknown", "whole"]

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def number(backend: str, name: str, value: object, *, positive: bool = False) -> float:
    """A finite number of seconds (or a size) ``>= 0``, ``> 0`` when ``positive``."""
    try:
        got = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        got = math.nan
    if not math.isfinite(got) or got < 0 or (positive and got == 0):
        bound = "> 0" if positive else ">= 0"
        raise InvalidKeyError(f"{backend} option {name} must be a number {bound}, not {value!r}")
    return got


def whole(backend: str, name: str, value: object, *, minimum: int = 0) -> int:
    """A whole number ``>= minimum``."""
    try:
        got = int(str(value).strip()) if not isinstance(value, bool) else -1
    except ValueError:
        got = minimum - 1
    if got < minimum:
        raise InvalidKeyError(
            f"{backend} option {name} must be a whole number >= {minimum}, not {value!r}"
        )
    return got


def flag(backend: str, name: str, value: object) -> bool:
    """``true``/``false`` (also ``1``/``0``, ``yes``/``no``, ``on``/``off``), or a bool."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise InvalidKeyError(f"{backend} option {name} must be true or false, not {value!r}")


def refuse_unknown(
    backend: str, given: Iterable[str], known: Collection[str], *, hint: str = ""
) -> None:
    """Refuse options ``known`` does not hold, naming them and ``hint`` (by default, the
    options ``known`` holds)."""
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise InvalidKeyError(
            f"unknown {backend} URL option{'s' if len(unknown) > 1 else ''}: "
            f"{', '.join(unknown)} ({hint or 'known: ' + ', '.join(sorted(known))})"
        )
