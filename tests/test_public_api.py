"""The public surface is pinned: what ``agent_checkpoint`` exports is listed here, so a name
that leaks in or goes away fails CI; and every error the library defines is in one tree under
``CheckpointError``, exported from ``agent_checkpoint.errors`` and from the package itself."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import agent_checkpoint
from agent_checkpoint import errors

PUBLIC = [
    "DEFAULT_STORE_PATH",
    "KEYS_ENV",
    "STORE_ENV",
    "AgentRef",
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
    "PausedRun",
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
    "check_envelope",
    "continue_from",
    "copy_records",
    "failure_point",
    "fnv1a",
    "keyring_from_env",
    "migrate_records",
    "open_store",
    "read_envelope",
    "read_paused_run",
    "register_backend",
    "rekey_records",
    "resume_failed_runs",
    "resume_on_error",
    "to_envelope",
    "to_paused_envelope",
    "validate_checkpoint",
]

INTERNAL_SIGNALS = {
    # raised and caught inside the PostgreSQL backend (driver-typed, so psycopg's pool handles
    # them); what escapes is a BackendError
    "agent_checkpoint.backends._postgres_connections.ReadTimeoutError",
    "agent_checkpoint.backends._postgres_connections.CannotConnectError",
    # the CLI's one-line failure with its exit code, caught by cli.main
    "agent_checkpoint._cli._common.CommandError",
    # a typed field holding another shape: the model keeps the value verbatim instead
    "agent_checkpoint._model._struct.Mismatch",
    # the JSON reader's depth refusal, turned into MalformedTranscriptError or
    # UnreadableEnvelopeError by its callers
    "agent_checkpoint.transcripts._jsonio.TooDeepError",
}


def test_the_package_exports_exactly_the_pinned_names() -> None:
    assert sorted(agent_checkpoint.__all__) == sorted(PUBLIC)
    for name in PUBLIC:
        assert getattr(agent_checkpoint, name) is not None, name


def _defined_exceptions() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(agent_checkpoint.__path__, "agent_checkpoint."):
        if info.name.endswith("__main__"):
            continue  # runs the CLI
        module = importlib.import_module(info.name)
        for _, value in inspect.getmembers(module, inspect.isclass):
            if (
                issubclass(value, Exception)
                and not issubclass(value, Warning)
                and value.__module__ == module.__name__
            ):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return found


def test_every_error_the_library_defines_is_in_the_one_tree_and_exported() -> None:
    defined = _defined_exceptions()
    assert len(defined) > 30  # the walk found the library's modules
    for where, cls in defined.items():
        if where in INTERNAL_SIGNALS:
            continue
        assert issubclass(cls, errors.CheckpointError), f"{where} is outside the error tree"
        assert cls.__module__ == "agent_checkpoint.errors", f"{where}: define it in errors.py"
        assert cls.__name__ in errors.__all__ and cls.__name__ in agent_checkpoint.__all__, where
        assert cls.__name__ in (errors.__doc__ or ""), f"{where} is missing from the drawn tree"


def test_every_error_has_its_own_code() -> None:
    classes = [getattr(errors, name) for name in errors.__all__]
    codes = [cls.code for cls in classes]
    assert all(code.startswith("ERR_") for code in codes)
    assert len(set(codes)) == len(codes), "two error classes share a code"
