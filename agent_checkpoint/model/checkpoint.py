"""`AgentRunCheckpoint` v1 (spec §2.1) and the parts it carries besides messages."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from ._struct import (
    Field,
    Json,
    JsonObject,
    Mismatch,
    Struct,
    encode_part,
    encode_parts,
    listed,
    number,
    obj,
    part,
    parts,
    same,
    strings,
    text,
)
from .messages import Message

CHECKPOINT_VERSION = 1
"""The record version this library writes and its door accepts."""

Phase = Literal["iteration", "tool", "llm", "unknown"]


@dataclass(frozen=True, slots=True)
class OriginalInput(Struct):
    message: str
    extra: JsonObject = field(default_factory=dict, repr=False)
    key_order: tuple[str, ...] | None = field(default=None, repr=False, compare=False)

    FIELDS = (Field("message", "message", text, same),)


@dataclass(frozen=True, slots=True)
class FailurePoint(Struct):
    """Where a run failed (spec §2.7). ``stage`` is ``'call-llm'`` or a declared tool name."""

    iteration: int | float
    phase: str
    stage: str | None = None
    extra: JsonObject = field(default_factory=dict, repr=False)
    key_order: tuple[str, ...] | None = field(default=None, repr=False, compare=False)

    FIELDS = (
        Field("iteration", "iteration", number, same),
        Field("phase", "phase", text, same),
        Field("stage", "stage", text, same),
    )


@dataclass(frozen=True, slots=True)
class FoldedSpan(Struct):
    """A span of history folded into a summary; joined to it by ``summary_fingerprint``."""

    summary_fingerprint: str
    run_id: str
    iteration: int | float
    folded_at_ms: int | float
    model: str
    message_count: int | float
    removed_stage_ids: tuple[str, ...]
    retained: str
    messages: tuple[Message, ...] | None = None
    extra: JsonObject = field(default_factory=dict, repr=False)
    key_order: tuple[str, ...] | None = field(default=None, repr=False, compare=False)

    FIELDS = (
        Field("summaryFingerprint", "summary_fingerprint", text, same),
        Field("runId", "run_id", text, same),
        Field("iteration", "iteration", number, same),
        Field("foldedAtMs", "folded_at_ms", number, same),
        Field("model", "model", text, same),
        Field("messageCount", "message_count", number, same),
        Field("removedStageIds", "removed_stage_ids", strings, listed),
        Field("retained", "retained", text, same),
        Field("messages", "messages", parts(Message), encode_parts),
    )


@dataclass(frozen=True, slots=True)
class Identity(Struct):
    """``MemoryIdentity``: who a conversation belongs to. ``principal`` is the store's owner."""

    conversation_id: str
    tenant: str | None = None
    principal: str | None = None
    extra: JsonObject = field(default_factory=dict, repr=False)
    key_order: tuple[str, ...] | None = field(default=None, repr=False, compare=False)

    FIELDS = (
        Field("tenant", "tenant", text, same),
        Field("principal", "principal", text, same),
        Field("conversationId", "conversation_id", text, same),
    )


@dataclass(frozen=True, slots=True)
class AgentRef(Struct):
    id: str
    extra: JsonObject = field(default_factory=dict, repr=False)
    key_order: tuple[str, ...] | None = field(default=None, repr=False, compare=False)

    FIELDS = (Field("id", "id", text, same),)


def _spent(value: Json) -> Literal[True]:
    if value is not True:
        raise Mismatch
    return True


def _pending(value: Json) -> str:
    if not isinstance(value, dict) or not isinstance(value.get("instruction"), str):
        raise Mismatch
    return str(value["instruction"])


@dataclass(frozen=True, slots=True)
class EvidenceRecovery(Struct):
    """The same request's spent repair budget and any instruction not yet sent (spec §2.5)."""

    revision_spent: Literal[True] = True
    pending_instruction: str | None = None
    extra: JsonObject = field(default_factory=dict, repr=False)
    key_order: tuple[str, ...] | None = field(default=None, repr=False, compare=False)

    FIELDS = (
        Field("revisionSpent", "revision_spent", _spent, same),
        Field("pending", "pending_instruction", _pending, lambda s: {"instruction": s}),
    )


def _rows(value: Json) -> tuple[JsonObject, ...]:
    if not isinstance(value, list):
        raise Mismatch
    return tuple(value)


class _Unread:
    """A history as read, kept as JSON until the checkpoint's ``history`` is first used."""

    __slots__ = ("messages",)

    def __init__(self, messages: list[JsonObject]) -> None:
        self.messages = messages


def _history(value: Json) -> _Unread:
    if not isinstance(value, list):
        raise Mismatch
    for m in value:  # a loop, not all(): a history holds thousands
        if not isinstance(m, dict):
            raise Mismatch
    return _Unread(value)


def _encode_history(value: tuple[Message, ...] | _Unread) -> Json:
    if isinstance(value, _Unread):
        return [dict(m) for m in value.messages]
    return [m.to_json() for m in value]


_run_counter = itertools.count(1)


def new_run_id() -> str:
    """A run id in the runtime's form ``run-<epochMs>-<counter>``."""
    return f"run-{int(time.time() * 1000)}-{next(_run_counter)}"


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class RunCheckpoint(Struct):
    """The runtime's ``AgentRunCheckpoint`` v1 as an immutable value.

    ``from_json`` expects a document the door accepted (``validation.validate_checkpoint``);
    ``to_json`` gives back the same JSON value with the same key order, unknown keys included.
    Optional fields are ``None`` when absent and are then omitted, never written as null.
    ``findings_ledger`` rows and ``claim_verification`` are kept as the plain JSON they are.

    A checkpoint read from JSON types its ``history`` on first use: the messages were
    validated on the way in, and a read that only looks at the run's state (its failure
    point, iteration, owner) need not build a thousand ``Message`` values.
    """

    run_id: str
    history: tuple[Message, ...]
    last_completed_iteration: int | float
    original_input: OriginalInput
    version: int = CHECKPOINT_VERSION
    checkpointed_at: int | float | None = None
    failure_point: FailurePoint | None = None
    folded: tuple[FoldedSpan, ...] | None = None
    identity: Identity | None = None
    agent: AgentRef | None = None
    skill_cursor: str | None = None
    evidence_recovery: EvidenceRecovery | None = None
    findings_ledger: tuple[JsonObject, ...] | None = None
    turn_number: int | None = None
    claim_verification: JsonObject | None = None
    extra: JsonObject = field(default_factory=dict, repr=False)
    key_order: tuple[str, ...] | None = field(default=None, repr=False, compare=False)

    FIELDS = (
        Field("version", "version", number, same),
        Field("runId", "run_id", text, same),
        Field("history", "history", _history, _encode_history),
        Field("lastCompletedIteration", "last_completed_iteration", number, same),
        Field("originalInput", "original_input", part(OriginalInput), encode_part),
        Field("checkpointedAt", "checkpointed_at", number, same),
        Field("failurePoint", "failure_point", part(FailurePoint), encode_part),
        Field("folded", "folded", parts(FoldedSpan), encode_parts),
        Field("identity", "identity", part(Identity), encode_part),
        Field("agent", "agent", part(AgentRef), encode_part),
        Field("skillCursor", "skill_cursor", text, same),
        Field("evidenceRecovery", "evidence_recovery", part(EvidenceRecovery), encode_part),
        Field("findingsLedger", "findings_ledger", _rows, listed),
        Field("turnNumber", "turn_number", number, same),
        Field("claimVerification", "claim_verification", obj, same),
    )

    @classmethod
    def new(
        cls,
        message: str,
        history: list[Message] | tuple[Message, ...] = (),
        *,
        run_id: str | None = None,
        last_completed_iteration: int = 0,
        **optional: Any,
    ) -> RunCheckpoint:
        """A checkpoint written now: a fresh run id unless given, ``checkpointedAt`` = now."""
        return cls(
            run_id=run_id or new_run_id(),
            history=tuple(history),
            last_completed_iteration=last_completed_iteration,
            original_input=OriginalInput(message),
            checkpointed_at=optional.pop("checkpointed_at", now_ms()),
            **optional,
        )

    @classmethod
    def from_json(cls, data: JsonObject) -> RunCheckpoint:
        checkpoint = super().from_json(data)
        state = checkpoint.__dict__
        if isinstance(state.get("history"), _Unread):
            state["_unread"] = state.pop("history")
        return checkpoint

    if not TYPE_CHECKING:  # for mypy, ``history`` is the plain field it declares

        def __getattr__(self, name: str) -> Any:
            state = self.__dict__
            if name != "history" or "_unread" not in state:
                raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
            history = Message.from_json_many(state["_unread"].messages)
            state["history"] = history  # frozen for callers; filled once, by the reader
            return history

    def to_json(self) -> dict[str, Json]:
        state = self.__dict__
        if "history" in state or "_unread" not in state:
            return super().to_json()
        twin = object.__new__(RunCheckpoint)  # private: the history stays as it was read
        twin.__dict__.update(state)
        twin.__dict__["history"] = state["_unread"]
        return twin.to_json()

    @property
    def default_key(self) -> str:
        """The store key when none is given: ``identity.conversationId``, else ``runId``."""
        if self.identity is not None and self.identity.conversation_id:
            return self.identity.conversation_id
        return self.run_id

    @property
    def owner(self) -> str | None:
        return self.identity.principal if self.identity is not None else None

    def evolve(self, **changes: Any) -> RunCheckpoint:
        """A copy with ``changes`` applied (``dataclasses.replace``)."""
        return replace(self, **changes)
