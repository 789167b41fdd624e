"""What the CLI says of a stored record the library refuses: one line with the key, what is
wrong with it and what to do about it.

The library's own messages stay as they are: the reader's door words its refusals as the
runtime does, for readers that match on them (spec §3), and those words were written for
another runtime's users (``toEnvelope()``, "a future agentfootprint version"). The CLI says it
in an operator's terms here, and ``--verbose`` prints the library's message whole.
"""

from __future__ import annotations

import re
import shlex

from .. import (
    KEYS_ENV,
    CheckpointError,
    DecryptionError,
    EnvelopeError,
    InvalidCheckpointError,
    MigrationError,
    Store,
    UnknownFormatError,
    UnreadableEnvelopeError,
)

__all__ = ["RECORD_ERRORS", "read_refusal", "record_problem", "stored_problem"]

RECORD_ERRORS = (EnvelopeError, InvalidCheckpointError, MigrationError)
"""The errors that say a stored record cannot be read (``DecryptionError`` among them)."""

_TAG = re.compile(r"^\[[A-Za-z]+\]\s*")
_VERSION = re.compile(r"unsupported checkpoint version: (.*?)\. This (?:runtime|library)", re.S)
_FORMAT = re.compile(r"unknown checkpoint format '(.*?)'\. This runtime reads: (.*?)\. ", re.S)
_KEY_ID = re.compile(r"key id '([^']*)'")
_WHAT = 160
"""The most characters of a message's first sentence quoted as what is wrong."""


def record_problem(key: str, exc: BaseException, *, current: int) -> str:
    """``KEY: what is wrong; remedy`` for the error reading ``key`` (``current``: the
    checkpoint version the store reads and writes)."""
    what, remedy = _diagnosis(key, exc, current)
    return f"{key}: {what}; {remedy}"


def read_refusal(key: str, exc: BaseException, *, current: int) -> str:
    """``record_problem`` as the error of a command that read ``key`` alone (get, show)."""
    what, remedy = _diagnosis(key, exc, current)
    return f"record {key!r} is stored, but this library cannot read it: {what}; {remedy}"


def stored_problem(store: Store, key: str, *, migrating: bool = False) -> CheckpointError | None:
    """The error reading ``key`` again raises (as ``migrate`` reads it with ``migrating``):
    reports keep a reason's text, not the error; ``None`` if it reads now."""
    try:
        record = store.get_record(key)
        if record is not None:
            store.migrated(record) if migrating else store.decode(record)
    except RECORD_ERRORS as exc:
        return exc
    return None


def _diagnosis(key: str, exc: BaseException, current: int) -> tuple[str, str]:
    message = " ".join(str(exc).split())
    rm = f"agent-checkpoint rm {shlex.quote(key)}"
    drop = f"restore it from a copy, or delete it: {rm}"
    if isinstance(exc, DecryptionError):
        kid = _KEY_ID.search(message)
        named = f"key id {kid.group(1)!r}" if kid else "a key"
        if "without keys" in message or "does not hold" in message:
            return f"encrypted under {named}, which was not given", f"set {KEYS_ENV} to hold it"
        if "failed authentication" in message:
            return f"fails authentication under {named} (its bytes were altered)", drop
        return "encrypted, but its container is damaged", drop
    if isinstance(exc, UnreadableEnvelopeError):
        if message.startswith("[hosting]"):
            preview = _printable(exc.stored_preview)
            return f"not a checkpoint envelope; its bytes begin {preview}", drop
        return _first_sentence(message.partition(" unreadable: ")[2] or message), drop
    if isinstance(exc, UnknownFormatError):
        found = _FORMAT.search(message)
        if found is None or found.group(1) == "undefined":
            return "its envelope names no format (damaged, or written by other software)", drop
        return (
            f"its envelope format {found.group(1)!r} is not one this version reads "
            f"({found.group(2)})",
            f"read it with the software that wrote it, or delete it: {rm}",
        )
    if isinstance(exc, InvalidCheckpointError) and (found := _VERSION.search(message)):
        return _version_problem(found.group(1), current, drop)
    if isinstance(exc, MigrationError):
        return (
            f"a migration step fails on it: {_first_sentence(message)}",
            "fix the step (migrate --migrations), then run migrate again",
        )
    return f"its checkpoint is refused: {_first_sentence(message)}", drop


def _version_problem(shown: str, current: int, drop: str) -> tuple[str, str]:
    if shown == "undefined":
        return "its checkpoint has no version (damaged, or written by other software)", drop
    try:
        version = int(shown)
    except ValueError:
        return f"its checkpoint version is {shown[:40]!r}, not a number", drop
    if version > current:
        return (
            f"its checkpoint is version {version}, newer than this version reads ({current})",
            "read it with a newer localab-checkpoint (pip install -U localab-checkpoint)",
        )
    return (
        f"its checkpoint is version {version}, and no migration step leads from it to {current}",
        "migrate it with steps that do: agent-checkpoint migrate --migrations MODULE:ATTR",
    )


def _first_sentence(message: str) -> str:
    text = _TAG.sub("", message)
    end = text.find(". ")
    text = (text[:end] if end > 0 else text).rstrip(".")
    return text if len(text) <= _WHAT else text[: _WHAT - 1] + "…"


def _printable(text: str) -> str:
    """``text`` with control characters escaped, so stored bytes cannot drive a terminal."""
    return "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in text)
