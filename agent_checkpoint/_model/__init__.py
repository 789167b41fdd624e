"""The record: typed, immutable values that keep unknown keys and key order."""

from ._struct import Json, JsonObject
from .checkpoint import (
    CHECKPOINT_VERSION,
    AgentRef,
    EvidenceRecovery,
    FailurePoint,
    FoldedSpan,
    Identity,
    OriginalInput,
    Phase,
    RunCheckpoint,
    new_run_id,
    now_ms,
)
from .fingerprint import fnv1a, folded_span_for, identity_namespace, span_fingerprint
from .messages import InjectedBy, Message, Role, ThinkingBlock, ToolCall

__all__ = [
    "CHECKPOINT_VERSION",
    "AgentRef",
    "EvidenceRecovery",
    "FailurePoint",
    "FoldedSpan",
    "Identity",
    "InjectedBy",
    "Json",
    "JsonObject",
    "Message",
    "OriginalInput",
    "Phase",
    "Role",
    "RunCheckpoint",
    "ThinkingBlock",
    "ToolCall",
    "fnv1a",
    "folded_span_for",
    "identity_namespace",
    "new_run_id",
    "now_ms",
    "span_fingerprint",
]
