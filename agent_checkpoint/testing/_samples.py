"""Sample checkpoints and keys the conformance suites are built from."""

from __future__ import annotations

from .._envelope import Envelope, to_envelope
from .._model import AgentRef, FailurePoint, Identity, Message, RunCheckpoint
from .._store import MAX_KEY_LENGTH

AWKWARD_KEYS = [
    "plain",
    "with space",
    "slash/inside",
    "trailing/",
    "/leading",
    "..",
    ".",
    "../../etc/passwd",
    "..\\..\\windows",
    "*",
    "a*b?c[d]",
    "100%",
    "%2F",
    "a:b:c",
    "{tag}",
    "'; DROP TABLE checkpoints; --",
    'quote"and\\backslash',
    "ünïcødé-日本語-😀",
    "Case",
    "case",
    "k" * MAX_KEY_LENGTH,
    "~tilde",
    "$dollar",
    "#hash?query=1&x=2",
]


def checkpoint(
    run_id: str = "run-1",
    *,
    principal: str | None = None,
    conversation_id: str | None = None,
    agent: str | None = None,
    failed: str | None = None,
    messages: int = 2,
    text: str = "hello",
) -> RunCheckpoint:
    """A small valid checkpoint for tests."""
    history = []
    for i in range(messages):
        role = "user" if i % 2 == 0 else "assistant"
        history.append(Message(role, f"{text} {i}"))
    identity = None
    if principal is not None or conversation_id is not None:
        identity = Identity(conversation_id or run_id, principal=principal)
    return RunCheckpoint.new(
        "hello",
        history,
        run_id=run_id,
        last_completed_iteration=1,
        identity=identity,
        agent=AgentRef(agent) if agent else None,
        failure_point=FailurePoint(2, failed, "call-llm") if failed else None,
    )


def stamped(ckpt: RunCheckpoint, saved_at: int) -> Envelope:
    """An envelope with a chosen ``savedAt``, for ordering tests."""
    return to_envelope(ckpt, saved_at=saved_at)
