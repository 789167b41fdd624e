"""The public surface is pinned: what ``agent_checkpoint`` exports is listed here, and so are the
modules that are public by name (no component of the dotted name starts with a single ``_``),
so a name or a module that leaks in or goes away fails CI; and every error the library defines
is in one tree under ``CheckpointError``, exported from ``agent_checkpoint.errors`` and from the
package itself."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import subprocess
import sys

import pytest

import agent_checkpoint
from agent_checkpoint import errors

PUBLIC = [
    "AsyncClaim",
    "AsyncStore",
    "DEFAULT_STORE_PATH",
    "KEYS_ENV",
    "MAX_KEY_LENGTH",
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

PUBLIC_MODULES = [
    "agent_checkpoint",
    "agent_checkpoint.__main__",  # python -m agent_checkpoint
    "agent_checkpoint.adapters",
    "agent_checkpoint.adapters.openai_minimal",  # run as python -m (README, docs/interchange.md)
    "agent_checkpoint.backends",
    "agent_checkpoint.envelope",  # the envelope layer without a Store, and fnv1a
    "agent_checkpoint.errors",
    "agent_checkpoint.integrations",
    "agent_checkpoint.integrations.adk",  # extra `adk`
    "agent_checkpoint.integrations.keys",  # no extra: the integrations' key layouts
    "agent_checkpoint.integrations.langgraph",  # extra `langgraph`
    "agent_checkpoint.integrations.openai_agents",  # extra `openai-agents`
    "agent_checkpoint.resume",
    "agent_checkpoint.testing",
    "agent_checkpoint.transcripts",
]
"""Every module a user may import by name; everything else is internal (``_store``,
``backends._redis``, ``transcripts._turns``...) and may change without notice."""

MOVED_TO_ENVELOPE = [
    "PausedRun",
    "check_envelope",
    "fnv1a",
    "read_envelope",
    "read_paused_run",
    "to_envelope",
    "to_paused_envelope",
]
"""Top-level names of 0.4 that moved in 0.5: still importable from ``agent_checkpoint`` until
0.6, with a DeprecationWarning naming the new home, and outside ``__all__``."""

BACKENDS_PUBLIC = [
    "Backend",
    "BackendEntry",
    "Batched",
    "Expiring",
    "Forgetting",
    "Namespaced",
    "Query",
    "Record",
    "Repairable",
    "Summary",
    "backend_class",
    "mask_url",
    "open_backend",
    "plan_save",
    "register_backend",
    "registry",
    "resolve_owner",
    "translate_errors",
]
"""What a backend author imports: the record types, the optional capability protocols
(docs/backends.md), the helpers every backend needs and the scheme registry."""


TRANSCRIPTS = [
    "ConversionReport",
    "DANGLING_RESULT",
    "Detected",
    "DiffResult",
    "Difference",
    "DivergedError",
    "EXPORT_FORMATS",
    "EmptyTranscriptError",
    "ExportFormat",
    "Exported",
    "FORMATS",
    "Fork",
    "Format",
    "IntegrityPlan",
    "IntegrityReport",
    "MAX_RECORD_BYTES",
    "MalformedTranscriptError",
    "NotCarried",
    "Policy",
    "Side",
    "TURN_KEYS",
    "Transcript",
    "TranscriptError",
    "TranscriptNotFoundError",
    "Turn",
    "UnrecognizedFormatError",
    "checkpoint_to_turns",
    "detect",
    "diff_turns",
    "export_turns",
    "find_fork",
    "iso_utc",
    "make_tool_call",
    "make_tool_result",
    "merged_turns",
    "messages_to_turns",
    "open_transcript",
    "plan_integrity",
    "read_turns",
    "repair",
    "turn_from_json",
    "turns_to_chat_messages",
    "turns_to_checkpoint",
    "turns_to_messages",
    "write_export",
    "write_turns",
]
"""What ``agent_checkpoint.transcripts`` exports: the interchange's readers, converters and
writers (``export_turns``: a conversation in another tool's format)."""

BACKEND_CLASSES = [
    "DiskBackend",
    "FsspecBackend",
    "MemoryBackend",
    "PostgresBackend",
    "RedisBackend",
    "S3Backend",
    "SqliteBackend",
    "TimedConnection",
    "VolatileRedisWarning",
]
"""Served lazily by ``agent_checkpoint.backends`` (each loads its driver), outside its ``__all__``."""

INTERNAL_SIGNALS = {
    # raised and caught inside the PostgreSQL backend (driver-typed, so psycopg's pool handles
    # them); what escapes is a BackendError
    "agent_checkpoint.backends._postgres_connections.ReadTimeoutError",
    "agent_checkpoint.backends._postgres_connections.CannotConnectError",
    # the CLI's one-line failure with its exit code, caught by cli.main
    "agent_checkpoint._cli._common.CommandError",
    # stdout closed under a command that had its answer (diff | head), caught by cli.main
    "agent_checkpoint._cli._common.ReaderLeftError",
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


def test_a_moved_name_still_imports_from_the_top_level_with_a_warning_naming_its_home() -> None:
    home = "agent_checkpoint.envelope"
    for name in MOVED_TO_ENVELOPE:
        assert name not in agent_checkpoint.__all__ and name not in dir(agent_checkpoint), name
        with pytest.warns(DeprecationWarning, match=rf"from {home} import {name}\b"):
            old = getattr(agent_checkpoint, name)
        assert old is getattr(importlib.import_module(home), name), name
    with pytest.warns(DeprecationWarning, match="agent_checkpoint.envelope"):
        from agent_checkpoint import fnv1a  # the spelling of 0.4 code
    assert fnv1a("hello") == "4f9f2cab"
    with pytest.raises(AttributeError, match="no_such_name"):
        agent_checkpoint.no_such_name  # noqa: B018


def test_importing_the_package_or_star_warns_of_nothing() -> None:
    probe = (
        "import warnings\n"
        "warnings.simplefilter('error')\n"
        "import agent_checkpoint\n"
        "from agent_checkpoint import *\n"
        "from agent_checkpoint.envelope import *\n"
        "assert 'fnv1a' not in dir() or fnv1a('hello') == '4f9f2cab'\n"
    )
    subprocess.run([sys.executable, "-c", probe], check=True, timeout=60)


def test_the_interchange_exports_exactly_the_pinned_names() -> None:
    from agent_checkpoint import transcripts

    assert sorted(transcripts.__all__) == sorted(TRANSCRIPTS)


def _is_public(dotted: str) -> bool:
    return not any(
        part.startswith("_") and not (part.startswith("__") and part.endswith("__"))
        for part in dotted.split(".")
    )


def _all_modules() -> list[pkgutil.ModuleInfo]:
    return list(pkgutil.walk_packages(agent_checkpoint.__path__, "agent_checkpoint."))


def test_the_modules_public_by_name_are_exactly_the_pinned_ones() -> None:
    modules = _all_modules()
    assert len(modules) > 60  # the walk found the library's modules, private ones included
    public = sorted(["agent_checkpoint", *(m.name for m in modules if _is_public(m.name))])
    assert public == sorted(PUBLIC_MODULES)


def test_each_public_package_exports_names_that_resolve() -> None:
    packages = ["agent_checkpoint", *(m.name for m in _all_modules() if m.ispkg)]
    public = [name for name in packages if _is_public(name)]
    assert len(public) >= 5
    for name in public:
        module = importlib.import_module(name)
        exported = getattr(module, "__all__", None)
        assert isinstance(exported, list), f"{name} declares no __all__"
        assert len(set(exported)) == len(exported), f"{name}.__all__ repeats a name"
        for attr in exported:
            assert hasattr(module, attr), f"{name}.__all__ names {attr}, which it lacks"


def test_backends_exports_the_authors_surface() -> None:
    import agent_checkpoint.backends as backends

    assert sorted(backends.__all__) == sorted(BACKENDS_PUBLIC)
    for name in ("Namespaced", "Batched", "Expiring", "Forgetting", "Repairable"):
        protocol = getattr(backends, name)
        assert getattr(protocol, "_is_protocol", False), name  # isinstance-checkable capability
    assert isinstance(backends.MemoryBackend(), backends.Namespaced)


def test_the_backend_classes_are_public_from_backends_and_load_lazily() -> None:
    import agent_checkpoint.backends as backends

    for name in BACKEND_CLASSES:
        value = getattr(backends, name)
        assert isinstance(value, type) and value.__name__ == name, name
        assert name not in backends.__all__ and name in dir(backends), name
    assert not hasattr(backends, "NoSuchBackend")
    probe = (
        "import sys\n"
        "from agent_checkpoint.backends import *\n"
        "from agent_checkpoint.backends import DiskBackend, MemoryBackend\n"
        "drivers = ('redis', 'psycopg', 'psycopg_pool', 'boto3', 'fsspec')\n"
        "assert not [d for d in drivers if d in sys.modules], sys.modules.keys() & set(drivers)\n"
    )
    subprocess.run([sys.executable, "-c", probe], check=True, timeout=60)


def _defined_exceptions() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for info in _all_modules():
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
