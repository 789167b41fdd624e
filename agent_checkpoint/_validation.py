"""The reader's door: ``validateCheckpoint`` of the runtime, check for check (spec §3).

The checks run in the runtime's order and the first failure wins, with the runtime's message
word for word, because compatible readers match on those texts. Fields the runtime does not
validate (``checkpointedAt``, ``failurePoint``, ``folded``, ``identity``, ``agent``, roles,
``toolCalls``) are not validated here either, and optional fields only when present.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ._model import CHECKPOINT_VERSION
from ._model._turns import PREFIX as _PREFIX
from ._model._turns import js_typeof, validate_messages
from ._model._turns import refuse as _refuse
from .errors import InvalidCheckpointError

__all__ = [
    "MAX_EVIDENCE_RECOVERY_CHARS",
    "js_typeof",
    "validate_checkpoint",
    "validate_messages",
]

MAX_EVIDENCE_RECOVERY_CHARS = 1_000_000
_MAX_SAFE_INTEGER = 2**53 - 1

_LEDGER_MESSAGE = (
    _PREFIX + "checkpoint `findingsLedger` must be an array of ledger rows when present — each a "
    "plain object whose `kind` is 'basis' (toolCallId, toolName, iteration, basis 'direct' or "
    "'exploratory', expect 'low', 'medium' or 'high' when present), 'standing' (toolCallId, "
    "standing 'fact', 'open', 'noise' or 'ruled-out', assertions, iteration, declaredOn), "
    "'conflict' (key, witnesses, iteration), 'judgment', 'judgment-error', 'contingent', "
    "'unsettled-by-absence', 'argument', 'period', 'grounded', 'steps-unfinished', 'clock', "
    "'clock-on-resume' or 'call' with the fields that kind records. An older runtime refuses a "
    "checkpoint that carries a kind it does not know."
)


def _js_string(value: Any) -> str:
    """``${value}`` in a JS template for any JSON value a version field may hold."""
    if value is None:
        return "null"
    if isinstance(value, list):
        return _js_join(value)
    return _js_scalar(value)


def _js_scalar(value: Any) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, dict):
        return "[object Object]"
    return str(value)


def _js_join(items: list[Any]) -> str:
    """``String(array)``: items joined by commas, nested arrays likewise, null as empty. Walked
    with a stack rather than recursion, so no nesting can exhaust Python's stack."""
    out: list[str] = []
    stack = [iter(items)]
    started = [False]
    while stack:
        for item in stack[-1]:
            if started[-1]:
                out.append(",")
            started[-1] = True
            if isinstance(item, list):
                stack.append(iter(item))
                started.append(False)
                break
            if item is not None:
                out.append(_js_scalar(item))
        else:
            stack.pop()
            started.pop()
    return "".join(out)


def _js_json(value: Any) -> str:
    import orjson

    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return js_typeof(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def validate_checkpoint(doc: Any) -> Mapping[str, Any]:
    """Return ``doc`` if the door accepts it, else raise ``InvalidCheckpointError``."""
    if not isinstance(doc, (dict, list)):
        raise _refuse("checkpoint is not an object.")
    get = doc.get if isinstance(doc, dict) else (lambda _key: None)
    version = get("version")
    if version != CHECKPOINT_VERSION or isinstance(version, bool):
        shown = (
            "undefined" if isinstance(doc, list) or "version" not in doc else _js_string(version)
        )
        raise _refuse(
            f"unsupported checkpoint version: {shown}. This runtime supports version 1; persisted "
            "checkpoints from a future agentfootprint version need a matching runtime to resume."
        )
    assert isinstance(doc, dict)
    if not _is_str(doc.get("runId")) or not isinstance(doc.get("history"), list):
        raise _refuse("checkpoint missing required fields (runId, history).")
    if not _is_number(doc.get("lastCompletedIteration")):
        raise _refuse("checkpoint missing required field: lastCompletedIteration.")
    original = doc.get("originalInput")
    if not original or not isinstance(original, dict) or not _is_str(original.get("message")):
        raise _refuse("checkpoint missing required field: originalInput.message.")
    if "skillCursor" in doc and not _is_str(doc["skillCursor"]):
        raise _refuse(
            "checkpoint `skillCursor` must be a skill id string when present "
            f"(got {js_typeof(doc['skillCursor'])}). It is written by a graph with continuity: "
            "'conversation' and names the node the stored turn ended on."
        )
    if "evidenceRecovery" in doc and not _evidence_ok(doc["evidenceRecovery"]):
        raise _refuse(
            "checkpoint evidenceRecovery must carry a spent revision and optional bounded "
            "instruction."
        )
    if "findingsLedger" in doc and not _ledger_ok(doc["findingsLedger"]):
        raise InvalidCheckpointError(_LEDGER_MESSAGE)
    if "turnNumber" in doc:
        turn = doc["turnNumber"]
        if not _is_safe_positive_int(turn):
            raise _refuse(
                f"checkpoint `turnNumber` must be a positive whole number when present (got "
                f"{_js_json(turn)}). It is the conversation turn the stored history ends on, "
                "written while an honesty layer is armed."
            )
    validate_messages(doc["history"])
    return doc


def _is_safe_positive_int(value: Any) -> bool:
    if not _is_number(value) or (isinstance(value, float) and not math.isfinite(value)):
        return False
    return bool(value == int(value) and 1 <= value <= _MAX_SAFE_INTEGER)


def _utf16_len(text: str) -> int:
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def _evidence_ok(value: Any) -> bool:
    if not isinstance(value, dict) or value.get("revisionSpent") is not True:
        return False
    if not set(value) <= {"revisionSpent", "pending"}:
        return False
    if "pending" not in value:
        return True
    pending = value["pending"]
    if not isinstance(pending, dict) or set(pending) != {"instruction"}:
        return False
    instruction = pending["instruction"]
    return (
        _is_str(instruction)
        and instruction != ""
        and _utf16_len(instruction) <= MAX_EVIDENCE_RECOVERY_CHARS
    )


_BASIS = {"direct", "exploratory"}
_EXPECT = {"low", "medium", "high"}
_STANDING = {"fact", "open", "noise", "ruled-out"}
_CARRIER_STANDING = {"open", "noise", "ruled-out"}
_VERDICTS = {"covered", "partly-held", "not-held", "unknown", "undeclared"}


def _among(value: Any, vocabulary: set[str]) -> bool:
    """``value`` is one of the words of ``vocabulary`` (an array or object never is)."""
    return isinstance(value, str) and value in vocabulary


def _declared_on_ok(value: Any) -> bool:
    return value == "answer" or (isinstance(value, dict) and _is_str(value.get("toolCallId")))


def _what_list_ok(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) > 0
        and all(
            isinstance(v, dict) and _is_str(v.get("what")) and ("why" not in v or _is_str(v["why"]))
            for v in value
        )
    )


def _row_ok(row: Any) -> bool:
    if not isinstance(row, dict):
        return False
    if "turn" in row and not _is_number(row["turn"]):
        return False
    kind = row.get("kind")
    s, n = _is_str, _is_number
    if kind == "basis":
        return (
            s(row.get("toolCallId"))
            and s(row.get("toolName"))
            and n(row.get("iteration"))
            and _among(row.get("basis"), _BASIS)
            and ("expect" not in row or _among(row["expect"], _EXPECT))
        )
    if kind == "standing":
        return (
            s(row.get("toolCallId"))
            and _among(row.get("standing"), _STANDING)
            and isinstance(row.get("assertions"), list)
            and n(row.get("iteration"))
            and _declared_on_ok(row.get("declaredOn"))
        )
    if kind == "conflict":
        return (
            s(row.get("key")) and isinstance(row.get("witnesses"), list) and n(row.get("iteration"))
        )
    if kind == "judgment":
        return (
            s(row.get("toolCallId"))
            and _among(row.get("standing"), _STANDING)
            and n(row.get("iteration"))
        )
    if kind == "judgment-error":
        return s(row.get("toolCallId")) and n(row.get("iteration"))
    if kind == "contingent":
        carriers = row.get("carriers")
        return (
            _declared_on_ok(row.get("declaredOn"))
            and s(row.get("value"))
            and isinstance(carriers, list)
            and len(carriers) >= 1
            and all(
                isinstance(c, dict)
                and s(c.get("toolCallId"))
                and _among(c.get("standing"), _CARRIER_STANDING)
                for c in carriers
            )
            and n(row.get("iteration"))
        )
    if kind == "unsettled-by-absence":
        return (
            s(row.get("toolCallId"))
            and n(row.get("iteration"))
            and all(k not in row or _what_list_ok(row[k]) for k in ("notChecked", "cannotCover"))
            and ("tryInstead" not in row or (s(row["tryInstead"]) and row["tryInstead"] != ""))
        )
    if kind == "argument":
        return (
            s(row.get("toolCallId"))
            and s(row.get("toolName"))
            and "argument" in row
            and n(row.get("iteration"))
            and n(row.get("turn"))
        )
    if kind == "period":
        return (
            s(row.get("toolCallId"))
            and s(row.get("toolName"))
            and n(row.get("iteration"))
            and n(row.get("turn"))
            and _among(row.get("verdict"), _VERDICTS)
        )
    required = _PRESENT_ONLY.get(kind) if isinstance(kind, str) else None
    return required is not None and all(k in row for k in required)


_PRESENT_ONLY: dict[str, tuple[str, ...]] = {
    "grounded": ("turn", "iteration", "posture", "candidates", "lookedUp"),
    "steps-unfinished": ("turn", "iteration", "skillId", "remaining", "total", "action"),
    "clock": ("turn", "iteration", "now", "nowSource", "zone", "zoneSource"),
    "clock-on-resume": ("turn", "iteration", "passed", "kept"),
    "call": ("turn", "iteration", "toolCallId", "toolName", "dispatchedAt"),
}


def _ledger_ok(value: Any) -> bool:
    return isinstance(value, list) and all(_row_ok(row) for row in value)
