"""Whether resuming a failed run can help, and the message ``RunCheckpointError`` carries (the
runtime's wording). On the ground floor with ``errors.py``, which builds that message: it reads
the checkpoint's fields and the exception chain, and imports nothing of the package at run time.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._model import RunCheckpoint

__all__ = ["can_resume", "describe_failure", "type_names"]

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


def type_names(exc: BaseException) -> str:
    """The qualified names of the classes of ``exc``, its own first (for matching by name)."""
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


def can_resume(exc: BaseException) -> bool:
    """Whether resuming from a checkpoint can succeed: not after a context-window overflow,
    an authentication failure, or an HTTP 400/404/422, which would fail identically again."""
    for err in _chain(exc):
        message = str(err)
        if _OVERFLOW.search(message) or _AUTH_MESSAGE.search(message):
            return False
        if _AUTH_NAMES.search(type_names(err)):
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
