"""``resume_on_error`` and ``continue_from``: the seed of the next run (spec §4).

Both validate through the door first and apply the agent-id rule (``assert_continuable``),
then return a ``ResumeSeed``: what the next run starts from. They do not run an agent; the
caller's loop does, and writes its next checkpoint with ``ResumeSeed.checkpoint``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .._model import (
    AgentRef,
    EvidenceRecovery,
    FailurePoint,
    FoldedSpan,
    Identity,
    JsonObject,
    Message,
    RunCheckpoint,
    new_run_id,
    now_ms,
)
from .._validation import validate_checkpoint
from ..errors import ConversationMismatchError, InvalidArgumentError

__all__ = ["ResumeSeed", "assert_continuable", "continue_from", "resume_on_error"]

Door = Literal["Agent.resumeOnError", "Agent.run({ continueFrom })"]


@dataclass(frozen=True)
class ResumeSeed:
    """Where the next run starts.

    ``run_id`` is fresh; ``iteration`` restarts at 1 with the full budget; ``history`` is what
    the run's model sees (for ``continue_from`` it ends with the new user turn); ``message`` is
    the input the run answers. ``skill_cursor`` is a default the run may honour, not a lock.
    ``resumed_from`` is the stored checkpoint's run id, for correlation only.
    """

    mode: Literal["resume", "continue"]
    run_id: str
    message: str
    history: tuple[Message, ...]
    resumed_from: str
    iteration: int = 1
    identity: Identity | None = None
    agent_id: str | None = None
    folded: tuple[FoldedSpan, ...] | None = None
    findings_ledger: tuple[JsonObject, ...] | None = None
    evidence_recovery: EvidenceRecovery | None = None
    turn_number: int | None = None
    skill_cursor: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def checkpoint(
        self,
        history: list[Message] | tuple[Message, ...] | None = None,
        *,
        last_completed_iteration: int = 0,
        failure_point: FailurePoint | None = None,
        answer: str | None = None,
        **changes: Any,
    ) -> RunCheckpoint:
        """The checkpoint this run writes: its own run id, the carried fields, and ``history``
        (default: the seed's). ``answer``, if non-empty, is appended as the assistant turn,
        as the runtime's ``checkpoint()`` does."""
        if isinstance(history, (str, bytes)):  # tuple("hello") is five messages of one letter
            raise InvalidArgumentError(
                f"checkpoint's history is a list of Messages, not the text {history[:40]!r}: "
                "give the assistant's reply as answer="
            )
        if answer is not None and not isinstance(answer, str):
            raise InvalidArgumentError(f"answer must be the assistant's text, got {answer!r}")
        turns = tuple(self.history if history is None else history)
        if answer:
            turns = (*turns, Message("assistant", answer))
        fields: dict[str, Any] = {
            "run_id": self.run_id,
            "history": turns,
            "last_completed_iteration": last_completed_iteration,
            "original_input": RunCheckpoint.new(self.message).original_input,
            "checkpointed_at": now_ms(),
            "failure_point": failure_point,
            "folded": self.folded,
            "identity": self.identity,
            "agent": AgentRef(self.agent_id) if self.agent_id is not None else None,
            "skill_cursor": self.skill_cursor,
            "evidence_recovery": self.evidence_recovery,
            "findings_ledger": self.findings_ledger,
            "turn_number": self.turn_number,
        }
        fields.update(changes)
        return RunCheckpoint(**fields)


def _as_checkpoint(checkpoint: RunCheckpoint | Mapping[str, Any]) -> RunCheckpoint:
    if isinstance(checkpoint, RunCheckpoint):
        validate_checkpoint(checkpoint.to_json())
        return checkpoint
    return RunCheckpoint.from_json(validate_checkpoint(checkpoint))


def assert_continuable(checkpoint: RunCheckpoint, agent_id: str | None, door: Door) -> None:
    """Refuse only when the stored agent id exists, the reader named itself explicitly
    (``agent_id`` is not ``None``; a reader explicitly named ``'agent'`` is named), and the
    two differ."""
    stored = checkpoint.agent.id if checkpoint.agent is not None else None
    if stored is None or agent_id is None or stored == agent_id:
        return
    raise ConversationMismatchError(
        f"{door}: this conversation was recorded by agent '{stored}' and was handed to agent "
        f"'{agent_id}'. Both agents named themselves with Agent.create({{ id }}), and the names "
        "differ — a conversation recorded by one agent is not answered by another. Continue it "
        "with the agent that recorded it, or start a new conversation.",
        stored_agent_id=stored,
        agent_id=agent_id,
    )


def resume_on_error(
    checkpoint: RunCheckpoint | Mapping[str, Any],
    *,
    agent_id: str | None = None,
    identity: Identity | None = None,
) -> ResumeSeed:
    """Crash recovery: the same turn again, from the last completed iteration boundary.

    The history is restored exactly as stored, with no user turn appended (the failing turn's
    message is already its last user entry); the message is ``originalInput.message``. Folded
    spans, the findings ledger, evidence recovery and the turn number are carried as stored.
    Tools of the failed iteration will run again: mutating tools must be idempotent.
    """
    ckpt = _as_checkpoint(checkpoint)
    assert_continuable(ckpt, agent_id, "Agent.resumeOnError")
    return ResumeSeed(
        mode="resume",
        run_id=new_run_id(),
        message=ckpt.original_input.message,
        history=ckpt.history,
        resumed_from=ckpt.run_id,
        identity=identity if identity is not None else ckpt.identity,
        agent_id=agent_id,
        folded=ckpt.folded,
        findings_ledger=ckpt.findings_ledger,
        evidence_recovery=ckpt.evidence_recovery,
        turn_number=ckpt.turn_number,
        skill_cursor=ckpt.skill_cursor,
    )


def continue_from(
    checkpoint: RunCheckpoint | Mapping[str, Any],
    message: str,
    *,
    agent_id: str | None = None,
    identity: Identity | None = None,
) -> ResumeSeed:
    """The next turn of a conversation: ``message`` appended as a user turn.

    Evidence recovery is not carried (a new turn gets a fresh repair budget); the turn number
    becomes the stored one plus one; folded spans and the findings ledger are carried.
    """
    if not isinstance(message, str):
        raise InvalidArgumentError(f"message must be a string, not {type(message).__name__}")
    ckpt = _as_checkpoint(checkpoint)
    assert_continuable(ckpt, agent_id, "Agent.run({ continueFrom })")
    return ResumeSeed(
        mode="continue",
        run_id=new_run_id(),
        message=message,
        history=(*ckpt.history, Message("user", message)),
        resumed_from=ckpt.run_id,
        identity=identity if identity is not None else ckpt.identity,
        agent_id=agent_id,
        folded=ckpt.folded,
        findings_ledger=ckpt.findings_ledger,
        evidence_recovery=None,
        turn_number=ckpt.turn_number + 1 if ckpt.turn_number is not None else None,
        skill_cursor=ckpt.skill_cursor,
    )
