"""Failure capture for Python agent loops: where a run failed, and whether resuming can help.

``failure_point`` records what was open when the run failed: ``'call-llm'`` for the model call
or the name of a declared tool. When nothing was open, the phase is classified from the
exception the way the runtime does (spec §2.7) and ``stage`` stays absent, the honest answer.
``stage`` is persisted and read by whoever is on call, so a value that could carry a secret,
a URL or message content is refused (``UnsafeStageError``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from .._model import FailurePoint, Phase, RunCheckpoint
from .._writable import LLM_STAGE, check_stage
from ..errors import RunCheckpointError, UnsafeStageError

__all__ = [
    "LLM_STAGE",
    "RunCheckpointError",
    "UnsafeStageError",
    "can_resume",
    "check_stage",
    "classify_error",
    "describe_failure",
    "failure_point",
]

_LLM_NAMES = re.compile(r"Anthropic|OpenAI|BedrockError")
_LLM_MESSAGE = re.compile(r"\b(LLM|provider|anthropic|openai|bedrock)\b", re.IGNORECASE)
_TOOL_NAMES = re.compile(r"tool|tool_call", re.IGNORECASE)
_TOOL_MESSAGE = re.compile(r"\bTool\b")
_ITERATION_MESSAGE = re.compile(r"iteration", re.IGNORECASE)
_OVERFLOW = re.compile(
    r"context[ _-]?(length|window)|maximum context|prompt is too long|too many tokens|"
    r"input is too long|exceeds? the (model'?s? )?(maximum|context)",
    re.IGNORECASE,
)
_AUTH_NAMES = re.compile(
    r"Authentication|PermissionDenied|Unauthorized|Forbidden|UnrecognizedClient|"
    r"InvalidSignature|ExpiredToken|AccessDenied|InvalidClientTokenId",
)
_AUTH_MESSAGE = re.compile(r"invalid (x-)?api[ _-]?key|incorrect api key", re.IGNORECASE)
_NOT_RETRYABLE_STATUS = {400, 401, 403, 404, 422}


def _names(exc: BaseException) -> str:
    return " ".join(f"{c.__module__}.{c.__name__}" for c in type(exc).__mro__[:-2])


def _status(exc: BaseException) -> int | None:
    for source in (exc, getattr(exc, "response", None)):
        for attr in ("status_code", "status", "http_status"):
            value = getattr(source, attr, None)
            if isinstance(value, int):
                return value
    response = getattr(exc, "response", None)
    if isinstance(response, dict):  # botocore ClientError
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if isinstance(status, int):
            return status
    return None


def classify_error(exc: BaseException) -> Phase:
    """The phase a failure happened in, judged from the exception (the runtime's fallback)."""
    message = str(exc)
    names = _names(exc)
    if getattr(exc, "code", None) == "ERR_CIRCUIT_OPEN" or _LLM_NAMES.search(names):
        return "llm"
    if _LLM_MESSAGE.search(message):
        return "llm"
    if _TOOL_NAMES.search(type(exc).__name__) or _TOOL_MESSAGE.search(message):
        return "tool"
    if _ITERATION_MESSAGE.search(message):
        return "iteration"
    return "unknown"


def failure_point(
    iteration: int,
    *,
    open_stage: str | None = None,
    error: BaseException | None = None,
    declared_tools: Iterable[str] | None = None,
) -> FailurePoint:
    """Where a run failed. ``open_stage`` is what was open when it threw: ``'call-llm'`` or the
    name of a running tool (checked against ``declared_tools`` when given)."""
    if open_stage is not None:
        stage = check_stage(open_stage)
        if stage == LLM_STAGE:
            return FailurePoint(iteration, "llm", stage)
        if declared_tools is not None and stage not in set(declared_tools):
            raise UnsafeStageError(f"failurePoint.stage {stage!r} is not a declared tool name")
        return FailurePoint(iteration, "tool", stage)
    return FailurePoint(iteration, classify_error(error) if error is not None else "unknown")


def can_resume(exc: BaseException) -> bool:
    """Whether resuming from a checkpoint can succeed: not after a context-window overflow,
    an authentication failure, or an HTTP 400/404/422, which would fail identically again."""
    for err in _chain(exc):
        message = str(err)
        if _OVERFLOW.search(message) or _AUTH_MESSAGE.search(message):
            return False
        if _AUTH_NAMES.search(_names(err)):
            return False
        code = getattr(err, "response", None)
        if isinstance(code, dict):
            error_code = code.get("Error", {}).get("Code", "")
            if isinstance(error_code, str) and _AUTH_NAMES.search(error_code):
                return False
        if _status(err) in _NOT_RETRYABLE_STATUS:
            return False
    return True


def _chain(exc: BaseException) -> Iterable[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


_WHERE = {
    "llm": "during the LLM call",
    "tool": "during a tool call",
    "iteration": "between iteration boundaries",
    "unknown": "at an unidentified point",
}


def describe_failure(cause: BaseException, checkpoint: RunCheckpoint) -> str:
    """The message of ``RunCheckpointError``: where the run failed, and whether resuming can
    help (the runtime's wording)."""
    fp = checkpoint.failure_point
    if fp is None:
        where = "(phase unknown — nothing was open when it threw)"
        at: Any = "?"
    else:
        where = _WHERE.get(fp.phase, _WHERE["unknown"])
        if fp.stage:
            where += f" (stage: {fp.stage})"
        at = fp.iteration
    advice = (
        "Pass to agent.resumeOnError(checkpoint) to continue."
        if can_resume(cause)
        else "Resuming would fail the same way: fix the cause first."
    )
    return (
        f"[agent run] failed at iteration {at} {where}. Last-good checkpoint captured at "
        f"iteration {checkpoint.last_completed_iteration}. {advice} Underlying error: {cause}"
    )
