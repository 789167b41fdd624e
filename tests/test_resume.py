"""resume_on_error and continue_from reproduce the runtime's behaviour (spec §3, §4)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from agent_checkpoint import Claim, ConversationMismatchError, InvalidCheckpointError, open_store
from agent_checkpoint._model import (
    AgentRef,
    EvidenceRecovery,
    FailurePoint,
    FoldedSpan,
    Identity,
    Message,
    RunCheckpoint,
    ToolCall,
)
from agent_checkpoint.errors import InvalidArgumentError, UnsafeStageError
from agent_checkpoint.resume import (
    ResumeSeed,
    RunCheckpointError,
    can_resume,
    classify_error,
    continue_from,
    failure_point,
    resume_failed_runs,
    resume_on_error,
)

HISTORY = (
    Message("user", "refund order 41200"),
    Message("assistant", "", tool_calls=(ToolCall("c1", "lookup_order", {"id": 41200}),)),
    Message("tool", '{"status": "shipped"}', tool_call_id="c1", tool_name="lookup_order"),
)


def crash_checkpoint(**changes: object) -> RunCheckpoint:
    base = RunCheckpoint.new(
        "refund order 41200",
        HISTORY,
        run_id="run-1795988831171-1",
        last_completed_iteration=2,
        failure_point=FailurePoint(3, "llm", "call-llm"),
        identity=Identity("conv-9", tenant="acme", principal="alice"),
        agent=AgentRef("billing"),
        folded=(FoldedSpan("7ee0d143", "run-0", 1, 5, "m", 2, ("seed#0",), "discard"),),
        findings_ledger=({"kind": "judgment-error", "toolCallId": "c1", "iteration": 1},),
        evidence_recovery=EvidenceRecovery(True, "Cite the tool result for 41200."),
        turn_number=4,
        skill_cursor="refunds",
    )
    return base.evolve(**changes)


def test_resume_on_error_restores_the_same_turn_with_a_fresh_run() -> None:
    ckpt = crash_checkpoint()
    seed = resume_on_error(ckpt, agent_id="billing")
    assert seed.run_id != ckpt.run_id and seed.run_id.startswith("run-")
    assert seed.resumed_from == ckpt.run_id
    assert seed.iteration == 1
    assert seed.history == ckpt.history  # as stored, no user turn appended
    assert seed.message == "refund order 41200"
    assert seed.identity == ckpt.identity
    assert (seed.folded, seed.findings_ledger) == (ckpt.folded, ckpt.findings_ledger)
    assert seed.evidence_recovery == ckpt.evidence_recovery
    assert seed.turn_number == 4
    assert seed.skill_cursor == "refunds"


def test_continue_from_appends_the_user_turn_with_a_fresh_repair_budget() -> None:
    ckpt = crash_checkpoint(failure_point=None)
    seed = continue_from(ckpt, "and the second order?", agent_id="billing")
    assert seed.history == (*ckpt.history, Message("user", "and the second order?"))
    assert seed.message == "and the second order?"
    assert seed.evidence_recovery is None
    assert seed.turn_number == 5
    assert seed.findings_ledger == ckpt.findings_ledger and seed.folded == ckpt.folded
    nxt = seed.checkpoint(last_completed_iteration=1, answer="It shipped too.")
    doc = nxt.to_json()
    assert doc["originalInput"] == {"message": "and the second order?"}
    assert doc["history"][-1] == {"role": "assistant", "content": "It shipped too."}
    assert doc["turnNumber"] == 5 and "evidenceRecovery" not in doc
    assert doc["identity"] == {"tenant": "acme", "principal": "alice", "conversationId": "conv-9"}


def test_billing_conversation_handed_to_support_is_refused_by_name() -> None:
    with pytest.raises(ConversationMismatchError) as caught:
        resume_on_error(crash_checkpoint(), agent_id="support")
    err = caught.value
    assert err.code == "ERR_CONVERSATION_MISMATCH"
    assert (err.stored_agent_id, err.agent_id) == ("billing", "support")
    assert str(err).startswith(
        "Agent.resumeOnError: this conversation was recorded by agent 'billing' and was handed to agent 'support'."
    )
    with pytest.raises(ConversationMismatchError, match=r"^Agent\.run\(\{ continueFrom \}\)"):
        continue_from(crash_checkpoint(), "hi", agent_id="support")


def test_an_unnamed_agent_may_resume_and_keeps_the_identity() -> None:
    seed = resume_on_error(crash_checkpoint())
    assert seed.identity == Identity("conv-9", tenant="acme", principal="alice")
    doc = seed.checkpoint(last_completed_iteration=1).to_json()
    assert "agent" not in doc  # only an explicitly named agent stamps itself
    assert doc["identity"]["conversationId"] == "conv-9"


def test_an_agent_explicitly_named_agent_is_a_name() -> None:
    with pytest.raises(ConversationMismatchError):
        resume_on_error(crash_checkpoint(), agent_id="agent")
    assert (
        resume_on_error(crash_checkpoint(agent=AgentRef("agent")), agent_id="agent").agent_id
        == "agent"
    )


def test_a_checkpoint_without_an_agent_is_accepted_by_any_agent() -> None:
    seed = resume_on_error(crash_checkpoint(agent=None), agent_id="support")
    assert seed.checkpoint().to_json()["agent"] == {"id": "support"}


def test_an_explicit_identity_wins_over_the_stored_one() -> None:
    mine = Identity("conv-new", principal="bob")
    assert resume_on_error(crash_checkpoint(), identity=mine).identity == mine
    assert continue_from(crash_checkpoint(), "x", identity=mine).identity == mine


def test_the_door_runs_before_anything_else() -> None:
    bad = crash_checkpoint().to_json()
    bad["history"].append({"role": "user"})
    with pytest.raises(InvalidCheckpointError, match=r"history\[3\] is missing text"):
        resume_on_error(bad, agent_id="support")  # not a mismatch: the door refused first


def test_resume_from_a_stored_checkpoint(tmp_path: object) -> None:
    store = open_store("memory://")
    store.put(crash_checkpoint())
    stored = store.get("conv-9")
    assert stored is not None
    assert resume_on_error(stored).history == HISTORY


def test_a_worker_leaves_alone_a_run_another_worker_resumed_after_it_was_listed() -> None:
    """Workers list the same failed runs: one resumed meanwhile by another is skipped without
    a claim, whose fencing would rewrite it (its revision moves) for nothing."""
    store = open_store("memory://")
    for key in ("a", "b", "c"):
        store.put(crash_checkpoint(), key=key)
    after: dict[str, int] = {}

    def handler(seed: ResumeSeed, claim: Claim) -> None:
        for key in ("a", "b", "c"):  # another worker resumes the two runs still listed
            if key != claim.key:
                after[key] = store.put(crash_checkpoint(failure_point=None), key=key).revision

    report = resume_failed_runs(store, handler, worker="w1")
    assert len(report.resumed) == 1 and report.skipped == 2 and report.failed == []
    for key, revision in after.items():
        summary = store.head(key)
        assert summary is not None and summary.revision == revision, key
    assert store.list(failed=True).items == []


# -- failure capture ------------------------------------------------------------------------


def test_failure_point_records_what_was_open() -> None:
    assert failure_point(3, open_stage="call-llm") == FailurePoint(3, "llm", "call-llm")
    assert failure_point(
        2, open_stage="lookup_order", declared_tools=["lookup_order"]
    ) == FailurePoint(2, "tool", "lookup_order")
    fp = failure_point(4, error=RuntimeError("boom"))
    assert fp == FailurePoint(4, "unknown") and fp.stage is None


STAGES = [  # (stage, accepted): refused values could carry a URL, a credential or content
    ("call-llm", True),
    ("lookup_order", True),
    ("retrieve_customer_billing_history_v2", True),
    ("search.web", True),
    ("db:query", True),
    ("s3:GetObject", True),
    ("namespace:tool_v2", True),
    ("mcp__github__create_issue", True),
    ("Bash", True),
    ("WebFetch", True),
    ("getWeatherForecast2024", True),
    ("ec2_describe_instances", True),
    ("translate_v3", True),
    ("sha256_file", True),
    ("key-value-store", True),
    ("count_tokens", True),  # tool names may name what they handle: only values look secret
    ("reset_password", True),
    ("rotate_api_key", True),
    ("get_secret", True),
    ("refresh_bearer_token", True),
    ("https://api.example.com/v1", False),
    ("sk-ant-api03-abcdefghijklmnop", False),
    ("Bearer abc", False),
    ("AKIAIOSFODNN7EXAMPLE", False),
    ("hello world, the user said", False),
    ("tool name?", False),
    ("aB3dE5fG7hJ9kL1mN3pQ5rS7", False),
    ("admin:hunter2", False),  # name:password
    ("root:123456", False),
    ("localhost:8080", False),
    ("e83c5163316f89bfbde7d9ab23ca2e25", False),  # 32 hex
    ("da39a3ee5e6b4b0d3255bfef95601890afd80709", False),  # 40 hex (a SHA-1, a token)
    ("key-0123456789abcdef0123456789abcdef", False),
    ("key-3ax6xnjp29jd6fds4gc373sgvjxteol0", False),
    ("glpat-x8Jm2kQ9vR4tLp7nZ3wY", False),
    ("glpat-abcdefghij1234567890", False),
    ("github_pat_11ABCDEFG0abcdefghijklmnop", False),
    ("npm_abcdefghijklmnopqrstuvwxyz0123456789", False),
    ("f47ac10b-58cc-4372-a567-0e02b2c3d479", False),  # a UUID
    ("x8jm2kq9vr4tlp7nz3wy", False),  # a generated token, lower case
]


@pytest.mark.parametrize(("stage", "accepted"), STAGES)
def test_a_stage_is_kept_only_when_it_is_a_tool_name(stage: str, accepted: bool) -> None:
    doc = RunCheckpoint.new("m", run_id="r", failure_point=FailurePoint(1, "tool", stage))
    store = open_store("memory://")
    if accepted:
        assert failure_point(1, open_stage=stage).stage == stage
        assert store.put(doc).failure_phase == "tool"
        return
    with pytest.raises(UnsafeStageError) as caught:
        failure_point(1, open_stage=stage)
    assert stage not in str(caught.value)  # the refusal does not print what may be a secret
    with pytest.raises(UnsafeStageError):
        store.put(doc)
    assert store.list().items == []


def test_an_undeclared_tool_name_is_refused() -> None:
    with pytest.raises(UnsafeStageError):
        failure_point(1, open_stage="rm_rf", declared_tools=["lookup_order"])


class OpenAIError(Exception):
    pass


class ToolCallError(Exception):
    pass


class CircuitOpen(Exception):
    code = "ERR_CIRCUIT_OPEN"


@pytest.mark.parametrize(
    ("exc", "phase"),
    [
        (CircuitOpen("open"), "llm"),
        (OpenAIError("rate limited"), "llm"),
        (RuntimeError("the provider returned 500"), "llm"),
        (RuntimeError("Anthropic overloaded"), "llm"),
        (ToolCallError("bad args"), "tool"),
        (RuntimeError("Tool lookup crashed"), "tool"),
        (RuntimeError("max iterations reached"), "iteration"),
        (RuntimeError("disk full"), "unknown"),
    ],
)
def test_classify_error_follows_the_runtime_heuristic(exc: BaseException, phase: str) -> None:
    assert classify_error(exc) == phase


class HTTPError(Exception):
    def __init__(self, status: int, message: str = "") -> None:
        super().__init__(message or f"HTTP {status}")
        self.status_code = status


class AuthenticationError(Exception):
    pass


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (HTTPError(500), True),
        (HTTPError(429), True),
        (TimeoutError("read timed out"), True),
        (HTTPError(400), False),
        (HTTPError(404), False),
        (HTTPError(422), False),
        (HTTPError(401), False),
        (AuthenticationError("nope"), False),
        (RuntimeError("Invalid API key provided"), False),
        (RuntimeError("This model's maximum context length is 128000 tokens"), False),
        (RuntimeError("prompt is too long: 540000 tokens > 200000 maximum"), False),
    ],
)
def test_can_resume_refuses_failures_that_would_repeat(exc: BaseException, expected: bool) -> None:
    assert can_resume(exc) is expected


def test_run_checkpoint_error_says_where_and_what_to_do() -> None:
    err = RunCheckpointError(HTTPError(503, "upstream 503"), crash_checkpoint())
    assert err.code == "ERR_RUN_CHECKPOINT"
    assert str(err) == (
        "[agent run] failed at iteration 3 during the LLM call (stage: call-llm). Last-good "
        "checkpoint captured at iteration 2. Pass to agent.resumeOnError(checkpoint) to "
        "continue. Underlying error: upstream 503"
    )
    err = RunCheckpointError(RuntimeError("x"), crash_checkpoint(failure_point=None))
    assert "failed at iteration ? (phase unknown — nothing was open when it threw)" in str(err)


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda seed: seed.checkpoint("hello"), "not the text 'hello': give the assistant's reply"),
        (lambda seed: seed.checkpoint(answer=5), "answer must be the assistant's text, got 5"),
    ],
)
def test_a_seed_refuses_text_where_messages_go(call: Any, named: str) -> None:
    # seed.checkpoint("hello") made a history of five one-letter items
    failed = RunCheckpoint.new("task", [Message("user", "task")], run_id="r").evolve(
        failure_point=FailurePoint(3, "llm", "call-llm")
    )
    seed = resume_on_error(failed)
    with pytest.raises(InvalidArgumentError, match=re.escape(named)):
        call(seed)
