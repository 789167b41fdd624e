"""Every error the library raises, under one root.

::

    CheckpointError                         (Exception)
    ├── InvalidCheckpointError              (TypeError)   the door (spec §3) or writer refused it
    ├── EnvelopeError                       (TypeError)
    │   ├── UnknownFormatError                            envelope `format` not on the allow-list
    │   ├── WrongEnvelopeKindError                        a paused run read as a conversation, or back
    │   ├── InvalidPausedRunError                         a `flowchart-v1` payload missing its parts
    │   └── UnreadableEnvelopeError                       present but unreadable; never "absent"
    │       └── DecryptionError                           encrypted under a key not given, or tampered
    ├── InvalidArgumentError    (ValueError, TypeError)   an argument the library cannot use
    ├── RunCheckpointError                                a run failed; carries its last good checkpoint
    ├── UnsafeStageError                    (ValueError)  a failurePoint.stage that could leak a secret
    ├── MigrationError                      (ValueError)  a migration step that misbehaved
    ├── ConversationMismatchError                         agent ids differ (ERR_CONVERSATION_MISMATCH)
    ├── TranscriptError                     (ValueError)  a transcript or turn file cannot be used
    │   ├── TranscriptNotFoundError         (LookupError) the path names no file
    │   ├── EmptyTranscriptError                          the file holds no record at all
    │   ├── UnrecognizedFormatError                       content matches no known format
    │   ├── MalformedTranscriptError                      not JSON, binary, truncated, oversized
    │   └── DivergedError                                 merge: both sides go on past a fork
    └── StoreError
        ├── InvalidKeyError                 (ValueError)  a key or cursor the store cannot take
        ├── NotFoundError                   (LookupError) an operation that needs a record found none
        │   └── StoreNotFoundError                        no store there (a missing folder, setup() not run)
        ├── ConflictError                                 a lost compare-and-swap or create-only race
        │   ├── OwnershipConflictError                    another principal owns the key (spec §6)
        │   ├── ClaimedError                              another worker holds a live claim on the run
        │   └── LeaseError                                a write under a lease that is no longer held
        ├── RecordTooLargeError             (ValueError)
        ├── UnsupportedOperationError                     the backend cannot do this natively
        ├── MissingDependencyError          (ImportError) a URL scheme whose extra is not installed
        └── BackendError                                  the backend failed; the driver's error is `__cause__`
            ├── StoreClosedError                          an operation after `close()`
            ├── StoreConfigurationError                   the server refused the store's settings (credentials, database)
            ├── NotReplicatedError                        fewer replicas than asked confirmed a write
            └── BackendUnavailableError                   transient faults outlasted the retry budget
                └── WriteOutcomeUnknownError              a retried write may have landed; read it back

Each class has a stable ``code`` for programs that match on codes rather than classes. Drivers'
exceptions never escape a backend: they are raised ``from`` as the most specific class above.
"""

from __future__ import annotations

from typing import Any

from ._resumable import describe_failure

__all__ = [
    "BackendError",
    "BackendUnavailableError",
    "CheckpointError",
    "ClaimedError",
    "ConflictError",
    "ConversationMismatchError",
    "DecryptionError",
    "DivergedError",
    "EmptyTranscriptError",
    "EnvelopeError",
    "InvalidArgumentError",
    "InvalidCheckpointError",
    "InvalidKeyError",
    "InvalidPausedRunError",
    "LeaseError",
    "MalformedTranscriptError",
    "MigrationError",
    "MissingDependencyError",
    "NotFoundError",
    "NotReplicatedError",
    "OwnershipConflictError",
    "RecordTooLargeError",
    "RunCheckpointError",
    "StoreClosedError",
    "StoreConfigurationError",
    "StoreError",
    "StoreNotFoundError",
    "TranscriptError",
    "TranscriptNotFoundError",
    "UnknownFormatError",
    "UnreadableEnvelopeError",
    "UnrecognizedFormatError",
    "UnsafeStageError",
    "UnsupportedOperationError",
    "WriteOutcomeUnknownError",
    "WrongEnvelopeKindError",
]


class CheckpointError(Exception):
    """Root of every error this library raises."""

    code = "ERR_CHECKPOINT"


class InvalidArgumentError(CheckpointError, ValueError, TypeError):
    """An argument the library cannot use: a naive datetime, a non-positive ttl, a keyring key
    of the wrong size, an unknown transcript format, a put of something that is no checkpoint.
    Also a ``ValueError`` and a ``TypeError``, what such mistakes raised before."""

    code = "ERR_INVALID_ARGUMENT"


class RunCheckpointError(CheckpointError):
    """A run failed; ``checkpoint`` is its last good state and ``__cause__`` the failure."""

    code = "ERR_RUN_CHECKPOINT"

    def __init__(self, cause: BaseException, checkpoint: Any) -> None:
        super().__init__(describe_failure(cause, checkpoint))
        self.checkpoint = checkpoint
        self.__cause__ = cause


class InvalidCheckpointError(CheckpointError, TypeError):
    """The validation door refused a record, with the runtime's message word for word; or the
    writer did (``_writable.py``: what JSON and every backend hold), naming the rule and where
    in the envelope the value is."""

    code = "ERR_INVALID_CHECKPOINT"


class EnvelopeError(CheckpointError, TypeError):
    """An envelope `{format, data, savedAt}` that cannot be read as asked."""

    code = "ERR_ENVELOPE"


class UnknownFormatError(EnvelopeError):
    code = "ERR_UNKNOWN_FORMAT"


class WrongEnvelopeKindError(EnvelopeError):
    code = "ERR_WRONG_ENVELOPE_KIND"


class InvalidPausedRunError(EnvelopeError):
    code = "ERR_INVALID_PAUSED_RUN"


class UnreadableEnvelopeError(EnvelopeError):
    """Stored bytes exist but do not decode to an envelope.

    Raised instead of reporting the record absent: an unreadable conversation and a missing one
    are different facts, and only the second is safe to answer with a fresh start.
    ``stored_preview`` quotes at most ``envelope.STORED_PREVIEW_LIMIT`` UTF-16 units.
    """

    code = "ERR_UNREADABLE_ENVELOPE"

    def __init__(self, message: str, *, session_id: str | None, stored_preview: str) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.stored_preview = stored_preview


class DecryptionError(UnreadableEnvelopeError):
    """An encrypted record this store cannot open: its key id is unknown, or it fails
    authentication (wrong key, tampered bytes, or bytes moved from another record)."""

    code = "ERR_DECRYPTION"


class MigrationError(CheckpointError, ValueError):
    code = "ERR_MIGRATION"


class UnsafeStageError(CheckpointError, ValueError):
    """A ``failurePoint.stage`` that could carry a URL, a credential or content was refused."""

    code = "ERR_UNSAFE_STAGE"


class ConversationMismatchError(CheckpointError):
    """A conversation recorded by one explicitly named agent was handed to another."""

    code = "ERR_CONVERSATION_MISMATCH"

    def __init__(self, message: str, *, stored_agent_id: str, agent_id: str) -> None:
        super().__init__(message)
        self.stored_agent_id = stored_agent_id
        self.agent_id = agent_id


class TranscriptError(CheckpointError, ValueError):
    """A transcript or canonical turn file that cannot be read as asked; the message names the
    file and, where it helps, the line or byte."""

    code = "ERR_TRANSCRIPT"


class TranscriptNotFoundError(TranscriptError, LookupError):
    code = "ERR_TRANSCRIPT_NOT_FOUND"


class EmptyTranscriptError(TranscriptError):
    code = "ERR_TRANSCRIPT_EMPTY"


class UnrecognizedFormatError(TranscriptError):
    code = "ERR_TRANSCRIPT_FORMAT"


class MalformedTranscriptError(TranscriptError):
    code = "ERR_TRANSCRIPT_MALFORMED"


class DivergedError(TranscriptError):
    """Two conversations share ``fork`` turns and then both go on differently."""

    code = "ERR_TRANSCRIPTS_DIVERGED"

    def __init__(self, message: str, *, fork: int, a_rest: int, b_rest: int) -> None:
        super().__init__(message)
        self.fork = fork
        self.a_rest = a_rest
        self.b_rest = b_rest


class StoreError(CheckpointError):
    """A store operation failed."""

    code = "ERR_STORE"


class InvalidKeyError(StoreError, ValueError):
    code = "ERR_INVALID_KEY"


class NotFoundError(StoreError, LookupError):
    code = "ERR_NOT_FOUND"


class StoreNotFoundError(NotFoundError):
    """The store itself does not exist: a disk folder that is missing (opened with
    ``create=False``), or a table ``setup()`` has not created. Nothing was created."""

    code = "ERR_STORE_NOT_FOUND"


class ConflictError(StoreError):
    """A conditional write lost: the stored revision was not the expected one. Nothing changed."""

    code = "ERR_CONFLICT"

    def __init__(self, message: str, *, key: str | None = None, **details: Any) -> None:
        super().__init__(message)
        self.key = key
        self.details = details


class OwnershipConflictError(ConflictError):
    """A different principal tried to write a key another principal owns. Nothing changed."""

    code = "ERR_SESSION_OWNERSHIP_CONFLICT"


class ClaimedError(ConflictError):
    """Another worker holds a live claim on the run."""

    code = "ERR_CLAIMED"


class LeaseError(ConflictError):
    code = "ERR_LEASE"


class RecordTooLargeError(StoreError, ValueError):
    code = "ERR_RECORD_TOO_LARGE"


class UnsupportedOperationError(StoreError):
    code = "ERR_UNSUPPORTED"


class MissingDependencyError(StoreError, ImportError):
    code = "ERR_MISSING_DEPENDENCY"


class BackendError(StoreError):
    """The backend failed. ``backend`` and ``operation`` name where; ``__cause__`` is the driver's."""

    code = "ERR_BACKEND"

    def __init__(self, message: str, *, backend: str = "", operation: str = "") -> None:
        super().__init__(message)
        self.backend = backend
        self.operation = operation


class StoreClosedError(BackendError):
    """The store (or the backend under it) was closed: its connections, pools and threads are
    gone, and an operation would leak new ones. Open the store again."""

    code = "ERR_STORE_CLOSED"


class StoreConfigurationError(BackendError, ValueError):
    """The server refused what the store was opened with, not a fault of the moment: no
    credentials for S3, a Redis database number the server does not have. Retrying cannot
    help; fix the URL or the environment."""

    code = "ERR_STORE_CONFIGURATION"


class NotReplicatedError(BackendError):
    """A write the primary applied, which fewer replicas than the store asks for (Redis
    ``wait_replicas``) confirmed within its ``wait_timeout``: a failover now could lose it. Not
    retried: the write is in place on the primary. Read it back, or put again."""

    code = "ERR_NOT_REPLICATED"

    def __init__(
        self,
        message: str,
        *,
        backend: str = "",
        operation: str = "",
        key: str = "",
        wanted: int = 0,
        confirmed: int = 0,
    ) -> None:
        super().__init__(message, backend=backend, operation=operation)
        self.key = key
        self.wanted = wanted
        self.confirmed = confirmed


class BackendUnavailableError(BackendError):
    """Transient faults (connection, timeout, throttling, 5xx) outlasted the retry budget."""

    code = "ERR_BACKEND_UNAVAILABLE"


class WriteOutcomeUnknownError(BackendUnavailableError):
    """A write whose reply was lost may have landed, and the record changed before the retry
    could tell: neither "written" nor "refused" would be true. Read the record back."""

    code = "ERR_WRITE_OUTCOME_UNKNOWN"
