"""Fixtures of the interchange tests: fixture paths, reading a transcript, running the CLI."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.shared_fixtures import PREFIX, shared_fixture

from agent_checkpoint._cli import main
from agent_checkpoint.transcripts import Turn, open_transcript, plan_integrity

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str


@pytest.fixture
def fixture_path() -> Callable[[str], Path]:
    """``fixture_path("transcripts/openai_chat_tools.json")`` is one of ours, in tests/fixtures;
    ``fixture_path("shared/claude-code/edge_cases.jsonl")`` a third-party transcript, read from
    the shared fixtures folder (``support.shared_fixtures``: a skip where it is absent)."""

    def fixture_path(name: str) -> Path:
        if name.startswith(PREFIX):
            return shared_fixture(name.removeprefix(PREFIX))
        return FIXTURES / name

    return fixture_path


@pytest.fixture
def saved() -> Callable[..., list[Turn]]:
    """What ``save`` keeps of a transcript: its turns after the integrity repair."""

    def saved(path: Path | str, **options: object) -> list[Turn]:
        transcript = open_transcript(path, format=options.pop("format", None))  # type: ignore[arg-type]
        plan = plan_integrity(transcript, **options)  # type: ignore[arg-type]
        return list(plan.apply(transcript))

    return saved


@pytest.fixture
def run(capfd: pytest.CaptureFixture[str]) -> Callable[..., Ran]:
    """Run ``agent-checkpoint ARGS...`` in this process; output of child processes included."""

    def run(*args: str) -> Ran:
        capfd.readouterr()
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse's own usage errors
            code = int(exc.code or 0)
        out, err = capfd.readouterr()
        return Ran(code, out, err)

    return run
