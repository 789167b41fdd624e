"""agent-checkpoint: durable, vendor-neutral checkpoints for AI-agent runs.

Save a run's state as the runtime's ``AgentRunCheckpoint`` v1 JSON, keep it in a store (disk by
default; Redis, PostgreSQL, S3 or any fsspec URL), and resume from it later, anywhere::

    from agent_checkpoint import RunCheckpoint, Message, open_store

    store = open_store("./.agent-checkpoints")
    store.put(RunCheckpoint.new("hello", [Message("user", "hello")]))
"""

import importlib
import warnings
from typing import TYPE_CHECKING, Any

from ._claims import Claim, LeaseInfo
from ._codec import Codec
from ._container import KEYS_ENV, Keyring, Sealer, keyring_from_env
from ._envelope import Envelope
from ._migrations import Migrations
from ._model import (
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
)
from ._store import (
    DEFAULT_STORE_PATH,
    MAX_KEY_LENGTH,
    STORE_ENV,
    Forgotten,
    Page,
    RetryPolicy,
    Store,
    VerifyReport,
    open_store,
)
from ._validation import validate_checkpoint
from ._version import __version__ as __version__  # one figure, read by _telemetry too
from .backends import Backend, Query, Record, Summary, register_backend
from .errors import (
    BackendError,
    BackendUnavailableError,
    CheckpointError,
    ClaimedError,
    ConflictError,
    ConversationMismatchError,
    DecryptionError,
    DivergedError,
    EmptyTranscriptError,
    EnvelopeError,
    InvalidArgumentError,
    InvalidCheckpointError,
    InvalidKeyError,
    InvalidPausedRunError,
    LeaseError,
    MalformedTranscriptError,
    MigrationError,
    MissingDependencyError,
    NotFoundError,
    NotReplicatedError,
    OwnershipConflictError,
    RecordTooLargeError,
    RunCheckpointError,
    StoreClosedError,
    StoreConfigurationError,
    StoreError,
    StoreNotFoundError,
    TranscriptError,
    TranscriptNotFoundError,
    UnknownFormatError,
    UnreadableEnvelopeError,
    UnrecognizedFormatError,
    UnsafeStageError,
    UnsupportedOperationError,
    WriteOutcomeUnknownError,
    WrongEnvelopeKindError,
)

if TYPE_CHECKING:
    from ._async_store import AsyncClaim, AsyncStore, open_async_store
    from ._maintenance import (
        CopyReport,
        MigrateReport,
        RekeyReport,
        copy_records,
        migrate_records,
        rekey_records,
    )
    from .resume import (
        ResumeSeed,
        WorkerReport,
        continue_from,
        failure_point,
        resume_failed_runs,
        resume_on_error,
    )

_LAZY = {
    **dict.fromkeys(("AsyncClaim", "AsyncStore", "open_async_store"), "._async_store"),
    **dict.fromkeys(
        ("CopyReport", "MigrateReport", "RekeyReport", "copy_records", "migrate_records"),
        "._maintenance",
    ),
    "rekey_records": "._maintenance",
    **dict.fromkeys(
        ("ResumeSeed", "WorkerReport", "continue_from", "failure_point", "resume_failed_runs"),
        ".resume",
    ),
    "resume_on_error": ".resume",
}
"""Names imported on first use: the async store, maintenance and resume cost a command that
does not use them most of its start-up (benchmarks/startup.py)."""


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


if TYPE_CHECKING:
    from .envelope import PausedRun as PausedRun
    from .envelope import check_envelope as check_envelope
    from .envelope import fnv1a as fnv1a
    from .envelope import read_envelope as read_envelope
    from .envelope import read_paused_run as read_paused_run
    from .envelope import to_envelope as to_envelope
    from .envelope import to_paused_envelope as to_paused_envelope


_MOVED = {
    "PausedRun": "agent_checkpoint.envelope",
    "check_envelope": "agent_checkpoint.envelope",
    "fnv1a": "agent_checkpoint.envelope",
    "read_envelope": "agent_checkpoint.envelope",
    "read_paused_run": "agent_checkpoint.envelope",
    "to_envelope": "agent_checkpoint.envelope",
    "to_paused_envelope": "agent_checkpoint.envelope",
}
"""Names that left the top level in 0.5, each with its new home; the old spelling works until
0.6 with a DeprecationWarning (module ``__getattr__``, so ``import *`` never brings them)."""


if not TYPE_CHECKING:  # type checkers see the names above, and a typo stays an error

    def __getattr__(name: str) -> Any:
        lazy = _LAZY.get(name)
        if lazy is not None:  # loaded now, once
            value = getattr(importlib.import_module(lazy, __name__), name)
            globals()[name] = value
            return value
        home = _MOVED.get(name)
        if home is None:
            raise AttributeError(f"module 'agent_checkpoint' has no attribute {name!r}")
        warnings.warn(
            f"agent_checkpoint.{name} is deprecated and goes away in 0.6: "
            f"import it from {home} (from {home} import {name})",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(home), name)


__all__ = [
    "DEFAULT_STORE_PATH",
    "KEYS_ENV",
    "MAX_KEY_LENGTH",
    "STORE_ENV",
    "AgentRef",
    "AsyncClaim",
    "AsyncStore",
    "Backend",
    "BackendError",
    "BackendUnavailableError",
    "CheckpointError",
    "Claim",
    "ClaimedError",
    "Codec",
    "ConflictError",
    "ConversationMismatchError",
    "CopyReport",
    "DecryptionError",
    "DivergedError",
    "EmptyTranscriptError",
    "Envelope",
    "EnvelopeError",
    "EvidenceRecovery",
    "FailurePoint",
    "FoldedSpan",
    "Forgotten",
    "Identity",
    "InvalidArgumentError",
    "InvalidCheckpointError",
    "InvalidKeyError",
    "InvalidPausedRunError",
    "Keyring",
    "LeaseError",
    "LeaseInfo",
    "MalformedTranscriptError",
    "Message",
    "MigrateReport",
    "MigrationError",
    "Migrations",
    "MissingDependencyError",
    "NotFoundError",
    "NotReplicatedError",
    "OriginalInput",
    "OwnershipConflictError",
    "Page",
    "Query",
    "Record",
    "RecordTooLargeError",
    "RekeyReport",
    "ResumeSeed",
    "RetryPolicy",
    "RunCheckpoint",
    "RunCheckpointError",
    "Sealer",
    "Store",
    "StoreClosedError",
    "StoreConfigurationError",
    "StoreError",
    "StoreNotFoundError",
    "Summary",
    "ThinkingBlock",
    "ToolCall",
    "TranscriptError",
    "TranscriptNotFoundError",
    "UnknownFormatError",
    "UnreadableEnvelopeError",
    "UnrecognizedFormatError",
    "UnsafeStageError",
    "UnsupportedOperationError",
    "VerifyReport",
    "WorkerReport",
    "WriteOutcomeUnknownError",
    "WrongEnvelopeKindError",
    "continue_from",
    "copy_records",
    "failure_point",
    "keyring_from_env",
    "migrate_records",
    "open_async_store",
    "open_store",
    "register_backend",
    "rekey_records",
    "resume_failed_runs",
    "resume_on_error",
    "validate_checkpoint",
]
