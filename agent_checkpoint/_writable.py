"""The writer's checks: a put stores only what every backend holds and reads back as itself.

The door (``_validation.py``) refuses what the runtime refuses. JSON and the backends have limits
of their own, and a put that passed the door but broke one of them was acknowledged and then
could not be read back, or was stored by one backend and refused by another. So every write
path (``put``, ``put_record``, and through them ``copy``, ``migrate`` and ``rekey``) checks,
before any backend sees the record:

- nesting: at most ``MAX_DEPTH`` levels of objects and arrays, the envelope being the first
  (orjson's write limit). Reads apply the same limit: a stored record nested deeper is
  unreadable (``UnreadableEnvelopeError``), never absent;
- numbers: finite (JSON has no NaN or Infinity; orjson would write ``null``), and integers
  within 64 bits;
- strings: no lone surrogate (UTF-8 cannot carry one), anywhere; no NUL in the fields backends
  index (``runId``, ``identity.principal``, ``agent.id``, ``failurePoint.phase``), which
  PostgreSQL text cannot hold, and an integer ``failurePoint.iteration`` within the signed 64
  bits every index holds;
- ``savedAt``: a whole number of milliseconds from 0 to ``MAX_SAVED_AT``, which every backend
  orders and every listing shows;
- ``failurePoint.stage``: ``check_stage``.

A refusal is an ``InvalidCheckpointError`` (``UnsafeStageError`` for a stage) that names the
rule and where the value is, as a path into the envelope; nothing is stored.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from typing import Any

import orjson

from ._envelope import preview_stored
from .errors import InvalidCheckpointError, UnreadableEnvelopeError, UnsafeStageError

__all__ = [
    "LLM_STAGE",
    "MAX_DEPTH",
    "MAX_SAVED_AT",
    "check_indexed",
    "check_saved_at",
    "check_stage",
    "check_tree",
    "check_writable",
    "dumps",
    "too_deep",
    "unreadable_depth",
]

MAX_DEPTH = 254
"""Levels of objects and arrays a stored envelope may nest (the envelope object is level 1, its
``data`` level 2): the most orjson writes, and so the most this library reads."""

MAX_SAVED_AT = 253_402_300_799_999
"""The latest ``savedAt``: the last millisecond of the year 9999 (UTC)."""

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_UINT64_MAX = 2**64 - 1


def writable_int(value: int) -> bool:
    """Whether orjson writes ``value`` (and reads it back as an int): 64 bits, signed or not."""
    return _INT64_MIN <= value <= _UINT64_MAX


_NOT_STORED = "cannot store this checkpoint"
_NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


_CONTAINERS = frozenset((dict, list))
_PLAIN = frozenset((str, int, bool, type(None)))


def too_deep(value: Any, level: int = 1) -> bool:
    """Whether ``value``, at nesting ``level``, nests past ``MAX_DEPTH``. One pass over the
    containers, level by level: no recursion, however deep ``value`` is."""
    current = [value] if type(value) in _CONTAINERS else []
    for _ in range(level, MAX_DEPTH + 1):
        if not current:
            return False
        current = [
            item
            for container in current
            for item in (container.values() if type(container) is dict else container)
            if type(item) in _CONTAINERS
        ]
    return bool(current)


def _fine(value: Any, level: int) -> bool:
    """``too_deep``'s pass, also checking each number is finite; ``False`` also for a value
    of a type it does not know (tuples, subclasses), which ``_walk`` then looks at."""
    if type(value) not in _CONTAINERS:
        return _leaf_fine(value)
    current = [value]
    for _ in range(level, MAX_DEPTH + 1):
        current = [
            item
            for container in current
            for item in (container.values() if type(container) is dict else container)
            if type(item) not in _PLAIN
        ]
        if not _CONTAINERS.issuperset(map(type, current)):  # floats, or types it does not know
            for item in current:
                kind = type(item)
                if kind is float and item - item != 0.0:  # NaN and ±inf give NaN
                    return False
                if kind is not float and kind not in _CONTAINERS:
                    return False
            current = [item for item in current if type(item) is not float]
        if not current:
            return True
    return False


def _leaf_fine(value: Any) -> bool:
    return not isinstance(value, float) or math.isfinite(value)


def check_tree(value: Any, *, level: int = 1, where: str = "", first: int = 0) -> None:
    """Refuse ``value`` (found at nesting ``level``, at path ``where``) if it nests past
    ``MAX_DEPTH`` or holds NaN or Infinity. ``first``: the index of ``value``'s first item
    when it is a slice of a longer array (the messages a put appends)."""
    if _fine(value, level):
        return
    for path, item, depth in _walk(value, level, where, first):
        if depth > MAX_DEPTH:
            raise _nested_too_deep(path)
        if isinstance(item, float) and not math.isfinite(item):
            raise InvalidCheckpointError(
                f"{_NOT_STORED}: {_short(path)} is {_NON_FINITE[repr(item)]}, which JSON cannot "
                "carry (it would be written as null and read back as something else)"
            )


def _nested_too_deep(path: str) -> InvalidCheckpointError:
    return InvalidCheckpointError(
        f"{_NOT_STORED}: it nests objects and arrays deeper than {MAX_DEPTH} levels (at "
        f"{_short(path)}); MAX_DEPTH is the limit for writing and reading alike"
    )


def _walk(value: Any, level: int, where: str, first: int) -> Iterator[tuple[str, Any, int]]:
    """Every value under ``value`` with its path and nesting level, depth first, in order;
    a container past ``MAX_DEPTH`` is yielded but not entered. Only for finding what a fast
    check refused: it builds a path per value."""
    stack: list[tuple[str, Any, int]] = [(where, value, level)]
    while stack:
        path, item, depth = stack.pop()
        yield path, item, depth
        if depth > MAX_DEPTH:
            continue
        if isinstance(item, Mapping):
            children = [(f"{path}{_member(k)}", v, depth + 1) for k, v in item.items()]
        elif isinstance(item, (list, tuple)):
            start = first if item is value else 0
            children = [(f"{path}[{start + i}]", v, depth + 1) for i, v in enumerate(item)]
        else:
            continue
        stack.extend(reversed(children))


def _member(key: Any) -> str:
    if isinstance(key, str) and key.isidentifier():
        return f".{key}"
    return f"[{_shown(key)}]"


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return repr(value.encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace"))
    return repr(value)


def _short(path: str) -> str:
    path = path.lstrip(".") or "the envelope"
    return path if len(path) <= 120 else f"{path[:120]}…"


def dumps(value: Any, *, level: int = 1, where: str = "", first: int = 0, option: int = 0) -> bytes:
    """``orjson.dumps(value, option=option)``; what orjson refuses (nesting past
    ``MAX_DEPTH``, a lone surrogate, an integer past 64 bits, a key that is not a string, a
    type JSON lacks) is refused as ``InvalidCheckpointError`` naming the value's path (see
    ``check_tree`` for the other arguments)."""
    try:
        return orjson.dumps(value, option=option)
    except TypeError as exc:
        raise _unencodable(value, level, where, first, exc) from exc


def _unencodable(
    value: Any, level: int, where: str, first: int, exc: TypeError
) -> InvalidCheckpointError:
    for path, item, depth in _walk(value, level, where, first):
        if depth > MAX_DEPTH:
            return _nested_too_deep(path)
        if isinstance(item, Mapping):
            for key in item:
                if not isinstance(key, str):
                    return InvalidCheckpointError(
                        f"{_NOT_STORED}: {_short(path)} has the key {key!r} "
                        f"({type(key).__name__}); JSON object keys are strings"
                    )
                if not _utf8(key):
                    return _surrogate(f"a key of {_short(path)}", key)
            continue
        if isinstance(item, (list, tuple)):
            continue
        if isinstance(item, str) and not _utf8(item):
            return _surrogate(_short(path), item)
        if isinstance(item, int) and not isinstance(item, bool):
            if not writable_int(item):
                return InvalidCheckpointError(
                    f"{_NOT_STORED}: {_short(path)} is the integer {item}, beyond the 64 bits "
                    "JSON numbers are written and read back with"
                )
            continue
        try:
            orjson.dumps(item)
        except TypeError:
            return InvalidCheckpointError(
                f"{_NOT_STORED}: {_short(path)} is a {type(item).__name__}, which is not JSON"
            )
    return InvalidCheckpointError(f"{_NOT_STORED}: {exc}")


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _surrogate(where: str, text: str) -> InvalidCheckpointError:
    lone = next(ch for ch in text if 0xD800 <= ord(ch) <= 0xDFFF)
    return InvalidCheckpointError(
        f"{_NOT_STORED}: {where} holds a lone surrogate (U+{ord(lone):04X}), which UTF-8 "
        "cannot carry; a string must be valid Unicode"
    )


def check_saved_at(saved_at: Any) -> None:
    """Refuse a ``savedAt`` that is not a whole number of ms from 0 to ``MAX_SAVED_AT``."""
    if (
        isinstance(saved_at, int)
        and not isinstance(saved_at, bool)
        and 0 <= saved_at <= MAX_SAVED_AT
    ):
        return
    raise InvalidCheckpointError(
        f"{_NOT_STORED}: savedAt must be a whole number of milliseconds since the epoch, from 0 "
        f"to {MAX_SAVED_AT} (the end of the year 9999 UTC), which every backend orders and "
        f"lists; got {_shown(saved_at)}"
    )


_INDEXED = (
    (("runId",), "runId"),
    (("identity", "principal"), "identity.principal"),
    (("agent", "id"), "agent.id"),
    (("failurePoint", "phase"), "failurePoint.phase"),
)


def check_indexed(conversation: Mapping[str, Any], where: str = "data") -> None:
    """Refuse values every backend's index cannot hold alike: NUL in a string field the index
    keeps, an integer ``failurePoint.iteration`` past signed 64 bits."""
    for path, name in _INDEXED:
        value: Any = conversation
        for part in path:
            value = value.get(part) if isinstance(value, dict) else None
        if isinstance(value, str) and "\x00" in value:
            raise InvalidCheckpointError(
                f"{_NOT_STORED}: {where}.{name} holds NUL (U+0000), which the stores' indexes "
                "cannot hold (PostgreSQL text refuses it); no backend stores it"
            )
    fp = conversation.get("failurePoint")
    iteration = fp.get("iteration") if isinstance(fp, dict) else None
    if isinstance(iteration, int) and not _INT64_MIN <= iteration <= _INT64_MAX:
        raise InvalidCheckpointError(
            f"{_NOT_STORED}: {where}.failurePoint.iteration is {iteration}, beyond the signed "
            "64-bit integers the stores' indexes hold"
        )


def check_writable(doc: Mapping[str, Any], conversation: Mapping[str, Any], where: str) -> None:
    """The writer's checks of an envelope the door accepted, past its JSON (``check_tree``,
    ``dumps``): ``savedAt``, the indexed fields and the failure stage of ``conversation``
    (found at path ``where``)."""
    check_saved_at(doc.get("savedAt"))
    check_indexed(conversation, where)
    fp = conversation.get("failurePoint")
    if isinstance(fp, dict) and "stage" in fp:
        check_stage(fp["stage"])


def unreadable_depth(doc: Any, key: str | None) -> UnreadableEnvelopeError:
    """The refusal of a stored envelope nested past ``MAX_DEPTH``."""
    return UnreadableEnvelopeError(
        f"record {key!r} is present but unreadable: it nests objects and arrays deeper than "
        f"{MAX_DEPTH} levels; MAX_DEPTH is the limit for reading and writing alike",
        session_id=key,
        stored_preview=preview_stored(doc),
    )


# -- failurePoint.stage --------------------------------------------------------------------

LLM_STAGE = "call-llm"
"""The ``failurePoint.stage`` of a failure inside the model call."""

_TOOL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,127}")
_CREDENTIALS = (
    (
        re.compile(
            r"^(sk|pk|rk)[-_]|^xox[abpr]-|^gh[pousr]_|^github_pat_|^(AKIA|ASIA)[A-Z0-9]{8}|^AIza|"
            r"^eyJ|^gl(pat|dt|ptt|rt|soat|cbt|ft|imt|oas)-|^pypi-|^key-[A-Za-z0-9]{16}|"
            r"^(npm|hf|shpat|dop_v1)_[A-Za-z0-9]{16}",
            re.IGNORECASE,
        ),
        "an access token",
    ),
    (re.compile(r":[A-Za-z0-9]*[0-9][A-Za-z0-9]*(?=:|$)"), "a name:password pair"),
    (re.compile(r"[0-9A-Fa-f]{16,}"), "a hex token"),
    (re.compile(r"[0-9A-Fa-f]{8}(-[0-9A-Fa-f]{4}){3}-[0-9A-Fa-f]{12}"), "a UUID"),
)
_RUN = re.compile(r"[A-Za-z0-9]{16,}")
_DIGITS = re.compile(r"[0-9]+")


def _looks_random(run: str) -> bool:
    """A run of letters and digits no one would name a tool: mixed case with digits (base64
    keys), or digits strewn through it in three or more places (generated tokens)."""
    digits = sum(c.isdigit() for c in run)
    upper = sum(c.isupper() for c in run)
    mixed = len(run) >= 24 and digits >= 3 and upper >= 2 and len(run) - digits - upper >= 2
    return mixed or (len(_DIGITS.findall(run)) >= 3 and len(run) - digits >= 3)


def _stage_refusal(stage: Any) -> str | None:
    if not isinstance(stage, str):
        return "a stage is a string"
    if not _TOOL_NAME.fullmatch(stage):
        return "not a tool name, and it could carry a URL or message content"
    for pattern, what in _CREDENTIALS:
        if pattern.search(stage):
            return f"it looks like {what}"
    if any(_looks_random(run) for run in _RUN.findall(stage)):
        return "it looks like a generated key or token"
    return None


def check_stage(stage: str) -> str:
    """``stage`` if it is ``'call-llm'`` or looks like a declared tool name; otherwise refuse
    it, because a checkpoint is read by whoever is on call and a stage that could carry a URL,
    a credential or message content must never be persisted. The refusal does not quote the
    value: it may be the secret."""
    if stage == LLM_STAGE:
        return stage
    why = _stage_refusal(stage)
    if why is not None:
        size = f"{len(stage)} characters" if isinstance(stage, str) else type(stage).__name__
        raise UnsafeStageError(
            f"failurePoint.stage must be 'call-llm' or a declared tool name; refused {size}: {why}"
        )
    return stage
