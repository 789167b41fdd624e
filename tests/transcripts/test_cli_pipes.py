"""A command's output piped into a reader that stops early (``| head``), through a real pipe."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TURNS = 3000
"""Enough differences that the diff's output is far larger than a pipe's buffer."""


def conversation(path: Path, word: str) -> Path:
    lines = (json.dumps({"role": "user", "content": f"message {i}: {word}"}) for i in range(TURNS))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def read_a_little_and_close(*argv: str) -> tuple[int, bytes, str]:
    """Run the CLI with stdout on a pipe whose reader takes a few bytes and leaves, as
    ``head -c 64`` does; the exit code, those bytes, and stderr."""
    child = subprocess.Popen(
        [sys.executable, "-m", "agent_checkpoint", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    assert child.stdout is not None and child.stderr is not None
    first = os.read(child.stdout.fileno(), 64)
    child.stdout.close()
    err = child.stderr.read().decode()
    return child.wait(), first, err


@pytest.mark.parametrize("output", [[], ["--json"]], ids=["text", "json"])
def test_diff_piped_into_head_still_exits_1_when_the_conversations_differ(
    tmp_path: Path, output: list[str]
) -> None:
    a = conversation(tmp_path / "a.jsonl", "from A")
    b = conversation(tmp_path / "b.jsonl", "from B, not the same")
    code, first, err = read_a_little_and_close("diff", str(a), str(b), *output)
    assert first  # the reader saw the start of the answer before it left
    assert (code, err) == (1, "")
