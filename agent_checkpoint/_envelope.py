"""Envelopes ``{format, data, savedAt}`` and the law "present but unreadable is not absent" (spec §5).

``read_format`` is the single inspection point: anything that is not an object is an
``UnreadableEnvelopeError`` quoting a short preview, an object whose ``format`` is not on the
allow-list is an ``UnknownFormatError``. The two readers refuse each other's format by name.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from ._model import Json, JsonObject, RunCheckpoint, now_ms
from ._model._struct import kind_of
from ._validation import validate_checkpoint
from .errors import (
    InvalidArgumentError,
    InvalidPausedRunError,
    UnknownFormatError,
    UnreadableEnvelopeError,
    WrongEnvelopeKindError,
)

__all__ = [
    "CONVERSATION",
    "FORMATS",
    "PAUSED_RUN",
    "STORED_PREVIEW_LIMIT",
    "Envelope",
    "PausedRun",
    "check_envelope",
    "conversation_of",
    "envelope_owner",
    "envelope_transcript",
    "preview_pieces",
    "preview_stored",
    "read_envelope",
    "read_format",
    "read_paused_run",
    "to_envelope",
    "to_paused_envelope",
    "unreadable",
    "validate_envelope",
    "validate_paused_run",
]

CONVERSATION: Final = "conversation-v1"
PAUSED_RUN: Final = "flowchart-v1"
FORMATS: tuple[str, ...] = (CONVERSATION, PAUSED_RUN)
"""The envelope formats this library reads. Add, never redefine."""

STORED_PREVIEW_LIMIT = 64
"""How many UTF-16 units of unreadable stored bytes an error may quote."""

Format = Literal["conversation-v1", "flowchart-v1"]


@dataclass(frozen=True, slots=True)
class PausedRun:
    """A run paused on a question: the flowchart cursor, the conversation, what it waits on."""

    checkpoint: JsonObject
    conversation: RunCheckpoint
    pending: JsonObject
    extra: JsonObject = field(default_factory=dict, repr=False)

    def to_json(self) -> dict[str, Json]:
        return {
            "checkpoint": self.checkpoint,
            "conversation": self.conversation.to_json(),
            "pending": self.pending,
            **self.extra,
        }


@dataclass(frozen=True, slots=True)
class Envelope:
    """What stores keep: ``data`` is a ``RunCheckpoint`` (conversation) or a ``PausedRun``."""

    format: Format
    data: RunCheckpoint | PausedRun
    saved_at: int

    @property
    def conversation(self) -> RunCheckpoint:
        return self.data if isinstance(self.data, RunCheckpoint) else self.data.conversation

    def to_json(self) -> dict[str, Json]:
        return {"format": self.format, "data": self.data.to_json(), "savedAt": self.saved_at}


def to_envelope(checkpoint: RunCheckpoint, *, saved_at: int | None = None) -> Envelope:
    if not isinstance(checkpoint, RunCheckpoint):
        raise InvalidArgumentError(
            f"to_envelope takes a RunCheckpoint, not {kind_of(checkpoint)} (a checkpoint's "
            "JSON: RunCheckpoint.from_json)"
        )
    return Envelope(CONVERSATION, checkpoint, now_ms() if saved_at is None else saved_at)


def to_paused_envelope(paused: PausedRun, *, saved_at: int | None = None) -> Envelope:
    if not isinstance(paused, PausedRun):
        raise InvalidArgumentError(f"to_paused_envelope takes a PausedRun, not {kind_of(paused)}")
    return Envelope(PAUSED_RUN, paused, now_ms() if saved_at is None else saved_at)


def _utf16_units(text: str) -> int:
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def _utf16_prefix(text: str, units: int) -> str:
    out, used = [], 0
    for ch in text:
        width = 2 if ord(ch) > 0xFFFF else 1
        if used + width > units:
            break
        out.append(ch)
        used += width
    return "".join(out)


def preview_stored(value: Any) -> str:
    """A short, safe description of what a store handed back (``previewStored``)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return preview_pieces([value])
    if isinstance(value, str):
        n = _utf16_units(value)
        if n <= STORED_PREVIEW_LIMIT:
            return f'"{value}"'
        return f'"{_utf16_prefix(value, STORED_PREVIEW_LIMIT)}…" ({n} chars)'
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {'true' if value else 'false'}"
    if isinstance(value, (int, float)):
        return f"number {value}"
    if isinstance(value, list):
        return f"an array of {len(value)} item{'' if len(value) == 1 else 's'}"
    if isinstance(value, dict):
        if not value:
            return "an object with no keys"
        keys = list(value)
        shown = ", ".join(str(k) for k in keys[:8])
        return f"an object with keys: {shown}{'…' if len(keys) > 8 else ''}"
    return "undefined"


_COUNT_CHUNK = 1 << 20
_PREFIX_BYTES = 4 * STORED_PREVIEW_LIMIT  # a UTF-8 character takes at most 4 bytes


def preview_pieces(pieces: Iterable[bytes | bytearray | memoryview]) -> str:
    """``preview_stored`` of stored bytes as UTF-8 (errors replaced), given a piece at a time:
    only the quoted prefix is decoded whole, and the length in UTF-16 units is counted a chunk
    at a time, so a huge record costs neither a huge string nor more than one pass."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    prefix = b""
    units = 0
    for piece in pieces:
        view = memoryview(piece).cast("B")
        if len(prefix) < _PREFIX_BYTES:
            prefix += bytes(view[: _PREFIX_BYTES + 1 - len(prefix)])
        for start in range(0, len(view), _COUNT_CHUNK):
            text = decoder.decode(view[start : start + _COUNT_CHUNK])
            # Only characters past U+FFFF take two units: there are none in ASCII text.
            units += len(text) if text.isascii() else len(text.encode("utf-16-le")) // 2
    units += len(decoder.decode(b"", final=True))
    if len(prefix) <= _PREFIX_BYTES:
        return preview_stored(prefix.decode("utf-8", "replace"))
    shown = _utf16_prefix(prefix[:_PREFIX_BYTES].decode("utf-8", "replace"), STORED_PREVIEW_LIMIT)
    return f'"{shown}…" ({units} chars)'


def unreadable(
    value: Any, session_id: str | None = None, *, preview: str | None = None
) -> UnreadableEnvelopeError:
    """The refusal of ``value`` (or of what ``preview`` describes), as ``readFormat`` words it."""
    preview = preview_stored(value) if preview is None else preview
    opening = (
        f"session '{session_id}' has a STORED conversation this runtime cannot read"
        if session_id is not None
        else "a stored session is present but unreadable"
    )
    return UnreadableEnvelopeError(
        f"[hosting] {opening}. An unreadable stored conversation and an absent one are different "
        "facts, and only one of them is safe to answer with a fresh start — so this refuses "
        "instead of starting over on top of a conversation that exists. What the store handed "
        f"back looks like: {preview}. Only a short prefix is ever quoted here — the rest of those "
        "bytes is the conversation. Expected { format, data, savedAt } as written by "
        "toEnvelope() / toPausedEnvelope(). A store that keeps its own encoding must decode back "
        "to that object before handing it over.",
        session_id=session_id,
        stored_preview=preview,
    )


def read_format(value: Any, session_id: str | None = None) -> Format:
    """The envelope's format, or the refusal the runtime gives (``readFormat``)."""
    if not isinstance(value, dict):
        raise unreadable(value, session_id)
    fmt = value.get("format")
    if fmt not in FORMATS:
        shown = "undefined" if "format" not in value else str(fmt)
        raise UnknownFormatError(
            f"[hosting] unknown checkpoint format '{shown}'. This runtime reads: "
            f"{', '.join(FORMATS)}. Refusing rather than restoring a session it cannot read — a "
            "newer envelope needs a runtime that knows the format that wrote it."
        )
    return fmt  # type: ignore[no-any-return]


def _saved_at(value: Mapping[str, Any]) -> int:
    saved = value.get("savedAt")
    return saved if isinstance(saved, int) and not isinstance(saved, bool) else 0


def read_envelope(value: Any, session_id: str | None = None) -> RunCheckpoint:
    """The conversation in a ``conversation-v1`` envelope, validated by the door."""
    if read_format(value, session_id) == PAUSED_RUN:
        raise _paused_is_not_a_conversation()
    return _conversation_in(value)


def _conversation_in(value: Mapping[str, Any]) -> RunCheckpoint:
    return RunCheckpoint.from_json(validate_checkpoint(value.get("data")))


def _paused_is_not_a_conversation() -> WrongEnvelopeKindError:
    return WrongEnvelopeKindError(
        "[hosting] this envelope holds a PAUSED RUN ('flowchart-v1'), not a conversation. "
        "Read it with readPausedRun(envelope) — it is waiting on a decision, and answering it "
        "as a conversation would drop the question."
    )


def conversation_of(envelope: Envelope) -> RunCheckpoint:
    """The checkpoint of a ``conversation-v1`` envelope; a paused run is refused by name."""
    if isinstance(envelope.data, RunCheckpoint):
        return envelope.data
    raise _paused_is_not_a_conversation()


def _paused_refusal(detail: str) -> InvalidPausedRunError:
    return InvalidPausedRunError(f"[hosting] paused run {detail}")


def validate_paused_run(data: Any) -> Mapping[str, Any]:
    """``validatePausedRun``: the flowchart cursor, the pending ask and a valid conversation."""
    if not isinstance(data, dict):
        raise _paused_refusal("is not an object.")
    cp = data.get("checkpoint")
    if not isinstance(cp, dict):
        raise _paused_refusal("missing required field: checkpoint.")
    if not isinstance(cp.get("pausedStageId"), str) or not isinstance(cp.get("sharedState"), dict):
        raise _paused_refusal("checkpoint missing required fields (pausedStageId, sharedState).")
    if not isinstance(cp.get("subflowPath"), list):
        raise _paused_refusal("checkpoint missing required field: subflowPath.")
    if not isinstance(data.get("pending"), dict):
        raise _paused_refusal("missing required field: pending.")
    validate_checkpoint(data.get("conversation"))
    return data


def read_paused_run(value: Any, session_id: str | None = None) -> PausedRun:
    """The paused run in a ``flowchart-v1`` envelope."""
    if read_format(value, session_id) == CONVERSATION:
        raise WrongEnvelopeKindError(
            "[hosting] this envelope holds a conversation ('conversation-v1'), not a paused run. "
            "Read it with readEnvelope(envelope). Nothing is waiting on a decision here."
        )
    return _paused_in(value)


def _paused_in(value: Mapping[str, Any]) -> PausedRun:
    data = validate_paused_run(value.get("data"))
    return PausedRun(
        checkpoint=data["checkpoint"],
        conversation=RunCheckpoint.from_json(data["conversation"]),
        pending=data["pending"],
        extra={k: v for k, v in data.items() if k not in ("checkpoint", "conversation", "pending")},
    )


def validate_envelope(value: Any, session_id: str | None = None) -> Format:
    """Validate an envelope of either format without building values; return its format."""
    fmt = read_format(value, session_id)
    if fmt == CONVERSATION:
        validate_checkpoint(value.get("data"))
    else:
        validate_paused_run(value.get("data"))
    return fmt


def check_envelope(value: Any, session_id: str | None = None) -> Envelope:
    """Validate an envelope of either format (``checkEnvelope``): stores call it both ways."""
    if read_format(value, session_id) == CONVERSATION:
        return Envelope(CONVERSATION, _conversation_in(value), _saved_at(value))
    return Envelope(PAUSED_RUN, _paused_in(value), _saved_at(value))


def envelope_owner(value: Any) -> str | None:
    """``identity.principal`` of the conversation inside, or ``None``; never raises."""
    try:
        data = value["data"]
        conversation = data["conversation"] if value.get("format") == PAUSED_RUN else data
        owner = conversation["identity"]["principal"]
    except (KeyError, TypeError, AttributeError):
        return None
    return owner if isinstance(owner, str) else None


def envelope_transcript(value: Any) -> list[JsonObject]:
    """User and assistant messages with non-empty string content, in order."""
    try:
        data = value["data"]
        conversation = data["conversation"] if value.get("format") == PAUSED_RUN else data
        history = conversation["history"]
    except (KeyError, TypeError, AttributeError):
        return []
    return [
        m
        for m in history
        if isinstance(m, dict)
        and m.get("role") in ("user", "assistant")
        and isinstance(m.get("content"), str)
        and m["content"]
    ]
