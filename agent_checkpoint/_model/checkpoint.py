"""`AgentRunCheckpoint` v1 (spec §2.1) and the parts it carries besides messages."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Literal

from ..errors import InvalidArgumentError, InvalidCheckpointError
from ._history import TYPED
from ._struct import (
    NUMBER,
    OBJECT,
    STRINGS,
    Codec,
    Json,
    JsonObject,
    Mismatch,
    Struct,
    copied,
    key,
    kind_of,
    part,
    parts,
)
from ._turns import validate_messages
from .messages import Message, messages_json

CHECKPOINT_VERSION = 1
"""The record version this library writes and its door accepts."""

Phase = Literal["iteration", "tool", "llm", "unknown"]


# The parts every read of a checkpoint builds are not slotted, as messages are not:
# ``Struct.from_json`` then fills an instance's __dict__ in one step, not field by field.
@dataclass(frozen=True)
class OriginalInput(Struct):
    message: str = field(metadata=key("message"))
    extra: JsonObject = field(default_factory=dict, repr=False)
    key_order: tuple[str, ...] | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class FailurePoint(Struct):
    """Where a run failed (spec §2.7). ``stage`` is ``'call-llm'`` or a declared tool name."""

    iteration: int | float = field(metadata=key("iteration", NUMBER))
    phase: str = field(metadata=key("phase"))
    stage: str | None = field(default=None, metadata=key("stage"))
    extra: JsonObject = field(default_factory=dict, repr=False)
    key_order: tuple[str, ...] | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class FoldedSpan(Struct):
    """A span of history folded into a summary; joined to it by ``summary_fingerprint``."""

    summary_fingerprint: str = field(metadata=key("summaryFingerprint"))
    run_id: str = field(metadata=key("runId"))
    iteration: int | float = field(metadata=key("iteration", NUMBER))
    folded_at_ms: int | float = field(metadata=key("foldedAtMs", NUMBER))
    model: str = field(metadata=key("model"))
    message_count: int | float = field(metadata=key("messageCount", NUMBER))
    removed_stage_ids: tuple[str, ...] = field(metadata=key("removedStageIds", STRINGS))
    retained: str = field(metadata=key("retained"))
    messages: tuple[Message, ...] | None = field(
        default=None, metadata=key("messages", parts(Message))
    )
    extra: JsonObject = field(default_factory=dict, repr=False)
    key_order: tuple[str, ...] | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class Identity(Struct):
    """``MemoryIdentity``: who a conversation belongs to. ``principal`` is the store's owner."""

    conversation_id: str = field(metadata=key("conversationId"))
    tenant: str | None = field(default=None, metadata=key("tenant"))
    principal: str | None = field(default=None, metadata=key("principal"))
    extra: JsonObject = field(default_factory=dict, repr=False)
    key_order: tuple[str, ...] | None = field(default=None, repr=False, compare=False)

    RUNTIME_ORDER = ("tenant", "principal", "conversationId")


@dataclass(frozen=True)
class AgentRef(Struct):
    id: str = field(metadata=key("id"))
    extra: JsonObject = field(default_factory=dict, repr=False)
    key_order: tuple[str, ...] | None = field(default=None, repr=False, compare=False)


def _spent(value: Json) -> Literal[True]:
    if value is not True:
        raise Mismatch
    return True


def _pending(value: Json) -> str:
    if not isinstance(value, dict) or not isinstance(value.get("instruction"), str):
        raise Mismatch
    return str(value["instruction"])


def _instruction(value: str) -> Json:
    return {"instruction": value}


@dataclass(frozen=True, slots=True)
class EvidenceRecovery(Struct):
    """The same request's spent repair budget and any instruction not yet sent (spec §2.5)."""

    revision_spent: Literal[True] = field(
        default=True, metadata=key("revisionSpent", Codec(_spent))
    )
    pending_instruction: str | None = field(
        default=None, metadata=key("pending", Codec(_pending, _instruction))
    )
    extra: JsonObject = field(default_factory=dict, repr=False)
    key_order: tuple[str, ...] | None = field(default=None, repr=False, compare=False)


def _rows(value: Json) -> tuple[JsonObject, ...]:
    if not isinstance(value, list):
        raise Mismatch
    return tuple(copied(value))


_TYPING = threading.Lock()


class _Unread:
    """A history as read: its messages' JSON, typed on first use, once. Typing goes through
    ``_history.TYPED``, so a history that extends one typed before reuses its messages."""

    __slots__ = ("_typed", "messages")

    def __init__(self, messages: tuple[JsonObject, ...]) -> None:
        self.messages = messages
        self._typed: tuple[Message, ...] | None = None

    def typed(self, conversation: str) -> tuple[Message, ...]:
        typed = self._typed
        if typed is None:
            try:
                typed = TYPED.type(self.messages, conversation)
            except Mismatch:
                raise _unreadable(self.messages) from None
            with _TYPING:  # threads typing at once all get the first one's messages
                if self._typed is None:
                    self._typed = typed
                typed = self._typed
        return typed

    def to_json(self) -> Json:
        if self._typed is not None:
            return [m.to_json() for m in self._typed]
        return [dict(m) for m in self.messages]


def _unreadable(messages: tuple[JsonObject, ...]) -> Exception:
    """Why a history ``from_json`` took unchecked cannot be typed: the door's message for
    its first bad entry (``from_json`` leaves the checks to the door, and a history is
    typed on first use)."""
    try:
        validate_messages(list(messages))
    except InvalidCheckpointError as refusal:
        return refusal
    return InvalidCheckpointError("checkpoint history holds an entry that is not a message")


def _read_history(value: Json) -> _Unread:
    if not isinstance(value, list):
        raise Mismatch
    if not {dict}.issuperset(map(type, value)):  # in C: a history holds thousands
        for m in value:  # dict subclasses are dicts too
            if not isinstance(m, dict):
                raise Mismatch
    return _Unread(tuple(value))


def _write_history(value: tuple[Message, ...] | _Unread) -> Json:
    if isinstance(value, _Unread):
        return value.to_json()
    return messages_json(value)


def _listed(value: tuple[JsonObject, ...]) -> Json:
    return list(value)


_NO_HISTORY: JsonObject = MappingProxyType({"history": ()})

_run_counter = itertools.count(1)


def new_run_id() -> str:
    """A run id in the runtime's form ``run-<epochMs>-<counter>``."""
    return f"run-{int(time.time() * 1000)}-{next(_run_counter)}"


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class RunCheckpoint(Struct):
    """The runtime's ``AgentRunCheckpoint`` v1 as an immutable value.

    ``from_json`` expects a document the door accepted (``_validation.validate_checkpoint``);
    ``to_json`` gives back the same JSON value with the same key order, unknown keys included.
    Optional fields are ``None`` when absent and are then omitted, never written as null.
    ``findings_ledger`` rows and ``claim_verification`` are kept as the plain JSON they are.

    A checkpoint read from JSON types its ``history`` on first use: the messages were
    validated on the way in, and a read that only looks at the run's state (its failure
    point, iteration, owner) need not build a thousand ``Message`` values. Until then it
    holds the history's JSON (``_Unread``, set when the checkpoint is made, never replaced)
    and writes that back as read. A history that extends one typed before in this process
    types only the messages past it, and shares the earlier ones' ``Message`` objects, so a
    put after every message costs what the same loop with ``Message`` values costs
    (``_history.py`` says how, and why).
    """

    run_id: str = field(metadata=key("runId"))
    history: tuple[Message, ...] = field(
        metadata=key("history", Codec(_read_history, _write_history))
    )
    last_completed_iteration: int | float = field(metadata=key("lastCompletedIteration", NUMBER))
    original_input: OriginalInput = field(metadata=key("originalInput", part(OriginalInput)))
    version: int = field(default=CHECKPOINT_VERSION, metadata=key("version", NUMBER))
    checkpointed_at: int | float | None = field(
        default=None, metadata=key("checkpointedAt", NUMBER)
    )
    failure_point: FailurePoint | None = field(
        default=None, metadata=key("failurePoint", part(FailurePoint))
    )
    folded: tuple[FoldedSpan, ...] | None = field(
        default=None, metadata=key("folded", parts(FoldedSpan))
    )
    identity: Identity | None = field(default=None, metadata=key("identity", part(Identity)))
    agent: AgentRef | None = field(default=None, metadata=key("agent", part(AgentRef)))
    skill_cursor: str | None = field(default=None, metadata=key("skillCursor"))
    evidence_recovery: EvidenceRecovery | None = field(
        default=None, metadata=key("evidenceRecovery", part(EvidenceRecovery))
    )
    findings_ledger: tuple[JsonObject, ...] | None = field(
        default=None, metadata=key("findingsLedger", Codec(_rows, _listed))
    )
    turn_number: int | None = field(default=None, metadata=key("turnNumber", NUMBER))
    claim_verification: JsonObject | None = field(
        default=None, metadata=key("claimVerification", OBJECT)
    )
    extra: JsonObject = field(default_factory=dict, repr=False)
    key_order: tuple[str, ...] | None = field(default=None, repr=False, compare=False)

    RUNTIME_ORDER = (
        "version",
        "runId",
        "history",
        "lastCompletedIteration",
        "originalInput",
        "checkpointedAt",
        "failurePoint",
        "folded",
        "identity",
        "agent",
        "skillCursor",
        "evidenceRecovery",
        "findingsLedger",
        "turnNumber",
        "claimVerification",
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
        if isinstance(history, (str, bytes, Mapping)) or not isinstance(history, Iterable):
            raise InvalidArgumentError(f"history must be a list of Message, not {kind_of(history)}")
        return cls(
            run_id=run_id or new_run_id(),
            history=tuple(history),
            last_completed_iteration=last_completed_iteration,
            original_input=OriginalInput(message),
            checkpointed_at=optional.pop("checkpointed_at", now_ms()),
            **optional,
        )

    def to_json(self) -> dict[str, Json]:
        # The history as held (its JSON while unread), not the typed attribute.
        return self._json({"history": self.__dict__["history"]})

    def _head_json(self) -> dict[str, Json]:
        """``to_json`` with an empty history, the rest as it is: what an append writes beside
        the new messages (without copying the checkpoint, as ``evolve(history=())`` would)."""
        return self._json(_NO_HISTORY)

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


class _History:
    """``RunCheckpoint.history``: the typed messages, whether the checkpoint was made with
    them or read from JSON (``_Unread``). The value itself is set once, by ``__init__`` or by
    ``from_json``, in the instance's ``__dict__``; the frozen dataclass refuses any later
    assignment before it reaches ``__set__``."""

    def __get__(self, obj: RunCheckpoint | None, owner: type | None = None) -> Any:
        if obj is None:
            return self
        held = obj.__dict__["history"]
        return held.typed(obj.default_key) if type(held) is _Unread else held

    def __set__(self, obj: RunCheckpoint, value: tuple[Message, ...]) -> None:
        obj.__dict__["history"] = value


# Installed once the dataclass is made, so that ``history`` stays a plain required field
# (declared above with its JSON key) for ``__init__``, ``replace`` and type checkers.
setattr(RunCheckpoint, "history", _History())  # noqa: B010
