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

from .._model import FailurePoint, Phase
from .._resumable import can_resume, describe_failure, type_names
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


def classify_error(exc: BaseException) -> Phase:
    """The phase a failure happened in, judged from the exception (the runtime's fallback)."""
    message = str(exc)
    names = type_names(exc)
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
