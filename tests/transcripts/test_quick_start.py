"""The seed README's quick start, run verbatim as a user would, and the reference adapter."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRANSCRIPT = [
    {"role": "user", "content": "What's the capital of France?"},
    {"role": "assistant", "content": "Paris."},
    {"role": "user", "content": "And Germany?"},
    {"role": "assistant", "content": "Berlin."},
]
SHOWN = """\
{"model": "gpt-4o-mini", "messages": [
  {"role": "user", "content": "What's the capital of France?"},
  {"role": "assistant", "content": "Paris."},
  {"role": "user", "content": "And Germany?"},
  {"role": "assistant", "content": "Berlin."},
  {"role": "user", "content": "What about Italy?"}
]}
"""


def sh(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


def test_the_seed_quick_start_prints_what_the_readme_shows(tmp_path: Path) -> None:
    (tmp_path / "transcript.json").write_text(json.dumps(TRANSCRIPT), encoding="utf-8")
    saved = sh(
        "-m", "agent_checkpoint", "save", "transcript.json", "-o", "checkpoint.jsonl", cwd=tmp_path
    )
    assert (saved.returncode, saved.stdout, saved.stderr) == (
        0,
        "Saved 4 turns to checkpoint.jsonl\n",
        "",
    )
    resumed = sh(
        "-m", "agent_checkpoint", "resume", "checkpoint.jsonl", "--",
        sys.executable, "-m", "agent_checkpoint.adapters.openai_minimal", "What about Italy?",
        "--print-request",
        cwd=tmp_path,
    )  # fmt: skip
    assert (resumed.returncode, resumed.stdout, resumed.stderr) == (0, SHOWN, "")
    assert json.loads(resumed.stdout)["messages"][-1] == {
        "role": "user",
        "content": "What about Italy?",
    }


def test_the_adapter_without_a_checkpoint_sends_only_the_new_turn(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "AGENT_CHECKPOINT_INIT"}
    ran = sh(
        "-m",
        "agent_checkpoint.adapters.openai_minimal",
        "hi",
        "--print-request",
        cwd=tmp_path,
        env=env,
    )
    assert ran.returncode == 0
    assert json.loads(ran.stdout) == {
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": "hi"}],
    }


@pytest.mark.skipif(importlib.util.find_spec("openai") is not None, reason="openai is installed")
def test_the_adapter_without_openai_says_how_to_get_it(tmp_path: Path) -> None:
    ran = sh("-m", "agent_checkpoint.adapters.openai_minimal", "hi", cwd=tmp_path)
    assert ran.returncode == 2 and ran.stdout == ""
    assert ran.stderr == "openai_minimal: error: pip install openai, or use --print-request\n"


def test_selfcheck_passes() -> None:
    ran = sh(str(ROOT / "selfcheck.py"), cwd=ROOT)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("selfcheck: ok")
