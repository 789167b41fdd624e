"""agent-checkpoint: durable, vendor-neutral checkpoints for AI-agent runs.

Save a run's state as the runtime's ``AgentRunCheckpoint`` v1 JSON, keep it in a store (disk by
default; Redis, PostgreSQL, S3 or any fsspec URL), and resume from it later, anywhere::

    from agent_checkpoint import RunCheckpoint, Message, open_store

    store = open_store("./.agent-checkpoints")
    store.put(RunCheckpoint.new("hello", [Message("user", "hello")]))
"""

from .backends import register_backend
from .backends.base import Backend, Query, Record, Summary
from .codec import Codec
from .envelope import (
    Envelope,
    PausedRun,
    check_envelope,
    read_envelope,
    read_paused_run,
    to_envelope,
    to_paused_envelope,
)
from .errors import (
    BackendError,
    BackendUnavailableError,
    CheckpointError,
    ConflictError,
    ConversationMismatchError,
    EnvelopeError,
    InvalidCheckpointError,
    InvalidKeyError,
    MissingDependencyError,
    NotFoundError,
    NotReplicatedError,
    OwnershipConflictError,
    StoreClosedError,
    StoreError,
    StoreNotFoundError,
    UnreadableEnvelopeError,
)
from .migrations import Migrations
from .model import (
    AgentRef,
    EvidenceRecovery,
    FailurePoint,
    FoldedSpan,
    Identity,
    Message,
    OriginalInput,
    RunCheckpoint,
    ThinkingBlock,
    ToolCall,
    fnv1a,
)
from .store import Forgotten, Page, RetryPolicy, Store, open_store
from .validation import validate_checkpoint

__version__ = "0.4.0"

__all__ = [
    "AgentRef",
    "Backend",
    "BackendError",
    "BackendUnavailableError",
    "CheckpointError",
    "Codec",
    "ConflictError",
    "ConversationMismatchError",
    "Envelope",
    "EnvelopeError",
    "EvidenceRecovery",
    "FailurePoint",
    "FoldedSpan",
    "Forgotten",
    "Identity",
    "InvalidCheckpointError",
    "InvalidKeyError",
    "Message",
    "Migrations",
    "MissingDependencyError",
    "NotFoundError",
    "NotReplicatedError",
    "OriginalInput",
    "OwnershipConflictError",
    "Page",
    "PausedRun",
    "Query",
    "Record",
    "RetryPolicy",
    "RunCheckpoint",
    "Store",
    "StoreClosedError",
    "StoreError",
    "StoreNotFoundError",
    "Summary",
    "ThinkingBlock",
    "ToolCall",
    "UnreadableEnvelopeError",
    "check_envelope",
    "fnv1a",
    "open_store",
    "read_envelope",
    "read_paused_run",
    "register_backend",
    "to_envelope",
    "to_paused_envelope",
    "validate_checkpoint",
]
