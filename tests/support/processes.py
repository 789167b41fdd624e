"""A support module run as a process of its own (``python -m support.<name> ...``), as an agent
in another process would run: the integrations' restart tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def run_module(
    module: str, *args: str, env: dict[str, str] | None = None, ok: tuple[int, ...] = (0,)
) -> subprocess.CompletedProcess[str]:
    """``python -m support.<module> args...`` with the tests folder importable; its exit code
    must be one of ``ok`` (its stderr is the assertion's message otherwise)."""
    done = subprocess.run(
        [sys.executable, "-m", f"support.{module}", *args],
        env={
            **os.environ,
            **(env or {}),
            "PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path]),
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in ok, done.stderr
    return done


def turn_in_a_process_of_its_own(module: str, url: str, session_id: str, question: str) -> str:
    """One turn of a session's conversation in another process: the agent's answer, which
    the module prints as ``{"output": ...}``."""
    output: str = json.loads(run_module(module, url, session_id, question).stdout)["output"]
    return output
