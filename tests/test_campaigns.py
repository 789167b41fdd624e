"""The reliability campaigns of ``stress/`` at CI size, on every backend (RELIABILITY.md has the
full runs): crash (a writer SIGKILLed during puts), faults (proxy faults and server restarts
under load), races (worker processes contending for one key), cancel (AsyncStore puts
cancelled at random instants) and fuzz (every untrusted-input reader). Each asserts zero lost, torn, duplicated, wrongly accepted or unlisted records, and no
exception that is not the library's.

Violations explained by an open library bug (``stress.common.KNOWN_BUGS``) turn a run into an
expected failure (xfail) instead of a failure, and each open bug has a minimal reproduction
below, marked ``xfail(strict=True)``: once the bug is fixed it passes, the strict marker fails
the suite, and the marker (and the bug's entry) must go. The bugs already fixed keep their
reproductions as regression tests.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any

import pytest
from support.services import service_missing

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the stress/ package

from agent_checkpoint import Message, RunCheckpoint, Store
from agent_checkpoint.backends import Record, Summary
from agent_checkpoint.backends._memory import MemoryBackend
from agent_checkpoint.errors import (
    BackendUnavailableError,
    CheckpointError,
    ConflictError,
    WriteOutcomeUnknownError,
)
from agent_checkpoint.transcripts import open_transcript, turns_to_checkpoint
from stress import cancel, crash, faults, fuzz, graph_races, races
from stress.common import ServiceUnavailable, Tally, print_table

pytestmark = [
    pytest.mark.filterwarnings("ignore::agent_checkpoint.backends.VolatileRedisWarning"),
    pytest.mark.timeout(600),
    pytest.mark.slow,
]

ALL = ["disk", "redis", "postgres", "s3"]


def server_for(backend: str, request: pytest.FixtureRequest) -> Any:
    """The session's SeaweedFS server (``conftest.s3_server``) for S3, else nothing."""
    return request.getfixturevalue("s3_server") if backend == "s3" else None


def judge(title: str, tally: Tally, **table: Any) -> None:
    print_table(title, [tally], **table)
    assert tally.unexplained == 0, "\n".join(tally.problems)
    if tally.known:
        bugs = ", ".join(f"{bug} x{count}" for bug, count in sorted(tally.known.items()))
        pytest.xfail(f"only known library bugs were found: {bugs}")


def campaign(run: Any, backend: str, size: int, tmp_path: Path, server: Any) -> Tally:
    try:
        tally: Tally = run(backend, size, tmp_path, server)
    except ServiceUnavailable as exc:
        service_missing(exc.backend, exc.reason)
    return tally


@pytest.mark.parametrize("backend", ALL)
def test_crash_sigkilled_writer_leaves_old_or_new_records_and_a_true_listing(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    tally = campaign(crash.run_backend, backend, 20, tmp_path, server_for(backend, request))
    assert tally.trials == 20 and tally.acknowledged > 0
    judge("crash", tally, extras=crash.EXTRAS)


@pytest.mark.parametrize("backend", faults.BACKENDS)
def test_faults_under_load_lose_nothing_acknowledged_and_raise_only_library_errors(
    backend: str, tmp_path: Path
) -> None:
    def run(backend: str, cycles: int, workdir: Path, server: Any) -> Tally:
        return faults.run_backend(backend, cycles, workdir, server, scale=0.5)

    tally = campaign(run, backend, 1, tmp_path, None)
    assert tally.trials == len(faults.EPISODES) and tally.acknowledged > 0
    judge("faults", tally, trial_word="episodes", extras=faults.EXTRAS)


@pytest.mark.parametrize("backend", ALL)
def test_races_between_processes_have_exactly_one_winner(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    rounds = 12 if backend == "s3" else 24  # SeaweedFS makes losing racers wait for their 412
    tally = campaign(races.run_backend, backend, rounds, tmp_path, server_for(backend, request))
    assert tally.trials == rounds and tally.acknowledged == rounds
    judge("races", tally, trial_word="rounds", extras=races.EXTRAS)


@pytest.mark.parametrize("backend", ALL)
def test_two_processes_starting_a_graph_on_one_empty_thread_leave_one_lineage(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Issue 40 item 10: of two runs that read the same empty thread, one starts it and the
    other gets ConflictError; the thread has one lineage, the winner's."""
    rounds = 6
    run = graph_races.run_backend
    tally = campaign(run, backend, rounds, tmp_path, server_for(backend, request))
    assert tally.trials == rounds and tally.acknowledged == rounds
    assert tally.errors == {"ConflictError": rounds}
    judge("graph races", tally, trial_word="rounds", extras=graph_races.EXTRAS)


@pytest.mark.parametrize("backend", cancel.BACKENDS)
def test_cancelled_async_puts_never_replace_an_acknowledged_put(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    tally = campaign(cancel.run_backend, backend, 60, tmp_path, server_for(backend, request))
    assert tally.trials == 60 and tally.acknowledged >= 60
    judge("cancel", tally, extras=cancel.EXTRAS)


def test_fuzz_readers_raise_only_documented_errors_without_hangs() -> None:
    tally, harness = fuzz.run_fuzz(3000)
    probe = fuzz.memory_probe(tally, 8)
    fuzz.print_figures(tally, harness)
    print(probe)
    assert tally.trials >= 2900
    judge("fuzz", tally)


# -- what the campaigns found: regressions of the fixed bugs, reproductions of the open ones ---
# KB-1..KB-5 were fixed in bd561f8, KB-6 right after; these tests keep them fixed.


class LosesOneAppendReply(MemoryBackend):
    """The first conditional save lands, then its reply is lost (a reset after the server
    applied it). The store's segment layer commits an append with a conditional save."""

    lost = False

    def save(
        self, record: Record, *, expect_revision: int | None = None, create_only: bool = False
    ) -> Summary:
        landed = super().save(record, expect_revision=expect_revision, create_only=create_only)
        if expect_revision is not None and not self.lost:
            self.lost = True
            raise BackendUnavailableError(
                "memory append failed: reply lost", backend="memory", operation="append"
            )
        return landed


def test_a_retried_append_that_landed_is_recognised_not_reported_as_a_conflict() -> None:
    store = Store(LosesOneAppendReply())
    history = [Message("user", "hello")]
    first = store.put(RunCheckpoint.new("hi", history, run_id="r"), key="k")
    history.append(Message("assistant", "world"))
    landed = store.put(
        RunCheckpoint.new("hi", history, run_id="r"), key="k", if_revision=first.revision
    )
    assert landed.revision == 2 and store.head("k") == landed  # recognised, not rewritten
    assert store.backend.lost  # type: ignore[attr-defined]


class ReplyLostAfterAnotherWrite(MemoryBackend):
    """A conditional save lands; before its reply arrives another writer saves on top; then the
    reply is lost (a connection reset), so the Store retries."""

    armed = False

    def save(self, record: Record, **options: Any) -> Summary:
        landed = super().save(record, **options)
        if self.armed:
            self.armed = False
            other = RunCheckpoint.new("b", [Message("user", "writer B")], run_id="b")
            Store(self).put(other, key=record.key)
            raise BackendUnavailableError(
                "memory save failed: reply lost", backend="memory", operation="save"
            )
        return landed


def _overtaken_put() -> WriteOutcomeUnknownError:
    backend = ReplyLostAfterAnotherWrite()
    store = Store(backend)
    first = store.put(RunCheckpoint.new("a", [Message("user", "v1")], run_id="a"), key="k")
    backend.armed = True
    mine = RunCheckpoint.new("a", [Message("user", "writer A")], run_id="a2")
    with pytest.raises(WriteOutcomeUnknownError) as caught:
        store.put(mine, key="k", if_revision=first.revision)
    return caught.value


def test_kb1_a_retried_conditional_put_that_may_have_landed_is_not_reported_as_refused() -> None:
    # it landed as revision 2, writer B's is 3: "refused" (ConflictError) would be false
    exc = _overtaken_put()
    assert not isinstance(exc, ConflictError)
    assert (exc.backend, exc.operation) == ("memory", "put")


def test_kb6_the_unknown_outcome_error_names_backend_and_operation_in_its_message() -> None:
    exc = _overtaken_put()
    assert str(exc).startswith("memory put failed"), str(exc)


def _transcript(tmp_path: Path, data: bytes, fmt: Any = None) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(data)
    with contextlib.suppress(CheckpointError):  # a documented refusal is fine
        turns_to_checkpoint(list(open_transcript(path, format=fmt)))


def test_kb2_a_deeply_nested_transcript_line_is_refused_as_malformed(tmp_path: Path) -> None:
    _transcript(
        tmp_path, b'{"role":"user","content":"hi"}\n{"x":' + b"[" * 1100 + b"]" * 1100 + b"}\n"
    )


@pytest.mark.parametrize(
    ("data", "fmt"),
    [
        (b'{"type": [], "role": "user", "content": "hi"}\n', None),  # KB-3, _detect.py
        (b'{"role": ["user"], "content": "hi"}\n', None),  # KB-3, _detect.py
        (b'[{"role": {}, "content": "hi"}]', "openai-chat"),  # KB-3, _openai_chat.py
        (b'{"type":"session_meta","payload":{}}\n{"type":{},"payload":{}}\n', "codex"),  # KB-3
        (b'[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":5}]', None),  # KB-5
        (b'[{"role":"user","content":"hi"},{"type":"reasoning","id":"r","summary":900}]', None),
        (
            b'[{"role":"user","content":"hi"},'
            b'{"type":"reasoning","id":"r","summary":[{"type":"summary_text","text":1}]}]',
            None,
        ),
    ],
)
def test_kb3_kb5_fields_of_the_wrong_json_type_are_refused_not_crashed_on(
    tmp_path: Path, data: bytes, fmt: Any
) -> None:
    _transcript(tmp_path, data, fmt)


def test_kb4_refusing_a_decompression_bomb_takes_bounded_memory() -> None:
    size, peak_mb = fuzz.bomb_probe(8)  # an 8 KiB record holding 8 MiB of zeros
    assert peak_mb <= fuzz.AMPLIFICATION_LIMIT * 8, f"{size} bytes in, {peak_mb:.0f} MB peak"


@pytest.mark.parametrize(
    "command",
    [
        ["stress.crash", "--backend", "disk,redis", "--trials", "2"],
        ["stress.races", "--backend", "disk,redis", "--rounds", "2"],
        ["stress.faults", "--backend", "redis", "--cycles", "1", "--episodes", "latency"],
        ["stress.fuzz", "--inputs", "20"],
        ["stress.exits", "--backend", "disk,redis", "--trials", "2"],
    ],
    ids=lambda command: command[0],
)
def test_each_campaign_runs_as_documented_with_python_m(command: list[str]) -> None:
    """RELIABILITY.md runs the campaigns as ``python -m stress.<name>``; the tests above import
    them. A program started with ``-m`` is ``__main__``, which once made the Redis durability
    warning raise ImportError in every write of the crash campaign."""
    import socket
    import subprocess

    try:
        socket.create_connection(("127.0.0.1", 6379), timeout=2).close()
    except OSError as exc:
        service_missing("redis", str(exc))
    ran = subprocess.run(
        [sys.executable, "-m", *command],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert "Traceback" not in ran.stderr, ran.stderr[-3000:]
    output = ran.stdout + ran.stderr  # the fault campaign reports on stderr
    rows = [line for line in output.splitlines() if line.startswith("|")]
    assert len(rows) >= 3, output  # a header, its rule and at least one backend's row
