"""Resuming runs: the seed of the next run, and failure capture for agent loops."""

from ._failure import (
    LLM_STAGE,
    RunCheckpointError,
    UnsafeStageError,
    can_resume,
    check_stage,
    classify_error,
    failure_point,
)
from ._seed import ResumeSeed, assert_continuable, continue_from, resume_on_error
from ._worker import Handler, WorkerReport, resume_failed_runs

__all__ = [
    "LLM_STAGE",
    "Handler",
    "ResumeSeed",
    "RunCheckpointError",
    "UnsafeStageError",
    "WorkerReport",
    "assert_continuable",
    "can_resume",
    "check_stage",
    "classify_error",
    "continue_from",
    "failure_point",
    "resume_failed_runs",
    "resume_on_error",
]
