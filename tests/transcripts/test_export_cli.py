"""``agent-checkpoint export CKPT --to FORMAT`` and ``resume --to FORMAT``: the file written,
the notes on what it could not hold, and the exit codes every interchange command has."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent_checkpoint.transcripts import EXPORT_FORMATS, open_transcript

Ran = Any  # the conftest's Ran(code, out, err)
Run = Callable[..., Ran]
Fixture = Callable[[str], Path]
PY = sys.executable
NOTE = "agent-checkpoint: note: "


def test_export_writes_the_file_and_says_what_it_could_not_hold(
    run: Run, tmp_path: Path, fixture_path: Fixture
) -> None:
    source = fixture_path("transcripts/anthropic_messages.json")
    out = tmp_path / "chat.json"
    ran = run("export", str(source), "--to", "openai-chat", "-o", str(out))
    assert ran.code == 0, ran.err
    assert ran.out == (
        f"Exported 7 turns to {out} as openai-chat; 1 kind of content not carried (see the notes)\n"
    )
    assert (
        f"{NOTE}not carried into the openai-chat file: thinking block (a chat message holds "
        "none), 2 times, at turns 3, 5\n" in ran.err
    )
    body = json.loads(out.read_text())
    roles = ["system", "user", "assistant", "tool", "assistant", "user", "assistant"]
    assert [m["role"] for m in body["messages"]] == roles
    assert open_transcript(out).format == "openai-chat"


def test_export_to_stdout_puts_the_summary_on_stderr(run: Run, fixture_path: Fixture) -> None:
    source = fixture_path("transcripts/openai_chat_tools.json")
    ran = run("export", str(source), "--to", "anthropic")
    assert ran.code == 0, ran.err
    body = json.loads(ran.out)
    assert body["system"] == "You are a weather assistant."
    assert ran.err.endswith(f"{NOTE}Exported 11 turns to stdout as anthropic\n")
    # the unanswered call at the end is cut, as save and resume cut it
    assert "tool call call_book (book_flight) at turn 12 has no result" in ran.err


def test_export_claude_code_names_its_session_and_reads_back(
    run: Run, tmp_path: Path, fixture_path: Fixture
) -> None:
    source = fixture_path("claude-code/parallel_calls.jsonl")
    out = tmp_path / "0b7c0e62-3f1e-4d8a-9c55-6a1f2d3e4b5c.jsonl"
    ran = run(
        "export",
        str(source),
        "--to",
        "claude-code",
        "--session-id",
        "0b7c0e62-3f1e-4d8a-9c55-6a1f2d3e4b5c",
        "-o",
        str(out),
        "--json",
    )
    assert ran.code == 0, ran.err
    assert json.loads(ran.out) == {
        "turns": 7,
        "format": "claude-code",
        "output": str(out),
        "sessionId": "0b7c0e62-3f1e-4d8a-9c55-6a1f2d3e4b5c",
        "notCarried": [],
    }
    before = [t.compared() for t in open_transcript(source)]
    assert [t.compared() for t in open_transcript(out)] == before


def test_export_reads_a_key_of_a_store(run: Run, tmp_path: Path, fixture_path: Fixture) -> None:
    store = str(tmp_path / "store")
    source = fixture_path("transcripts/openai_chat_tools.json")
    assert run("save", str(source), "--store", store, "--key", "weather").code == 0
    out = tmp_path / "rollout.jsonl"
    ran = run("export", "weather", "--store", store, "--to", "codex", "-o", str(out))
    assert ran.code == 0, ran.err
    assert ran.out.startswith(f"Exported 10 turns to {out} as codex (session ")
    turns = list(open_transcript(out))
    assert open_transcript(out).format == "codex"
    assert [t.role for t in turns][:3] == ["user", "assistant", "tool"]
    absent = run("export", "nokey", "--store", store, "--to", "codex")
    assert absent.code == 3 and "no checkpoint under key 'nokey'" in absent.err


@pytest.mark.parametrize(
    ("args", "code", "said"),
    [
        (["--to", "gemini"], 2, "invalid choice: 'gemini' (choose from 'openai-chat', "),
        ([], 2, "the following arguments are required: --to"),
        (["--to", "aider", "--format", "nope"], 2, "invalid choice: 'nope'"),
        (["--to", "codex", "--session-id", "s-1"], 2, "session_id must be a UUID"),
    ],
)
def test_export_refuses_bad_arguments(
    run: Run, fixture_path: Fixture, args: list[str], code: int, said: str
) -> None:
    ran = run("export", str(fixture_path("transcripts/openai_chat_tools.json")), *args)
    assert ran.code == code and said in ran.err and ran.out == ""


def test_export_fails_as_every_interchange_command_does(run: Run, tmp_path: Path) -> None:
    missing = run("export", str(tmp_path / "none.json"), "--to", "anthropic")
    assert missing.code == 3 and "no such file" in missing.err
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    assert run("export", str(bad), "--to", "anthropic").code == 5
    good = tmp_path / "t.json"
    good.write_text(json.dumps([{"role": "user", "content": "hi"}]))
    before = good.read_bytes()
    over = run("export", str(good), "--to", "openai-chat", "-o", str(good))
    assert over.code == 2 and "writing there would replace it" in over.err
    assert good.read_bytes() == before
    nowhere = run("export", str(good), "--to", "aider", "-o", str(tmp_path / "no" / "x.md"))
    assert nowhere.code == 2 and "cannot write" in nowhere.err


@pytest.mark.parametrize("fmt", EXPORT_FORMATS)
def test_resume_to_a_format_hands_the_command_that_file(
    run: Run, tmp_path: Path, fixture_path: Fixture, fmt: str
) -> None:
    source = fixture_path("transcripts/openai_chat_tools.json")
    keep = tmp_path / "handed"
    copy = "import os, shutil; p = os.environ['AGENT_CHECKPOINT_INIT']; print(p)"
    copy += f"; shutil.copy(p, {str(keep)!r})"
    ran = run("resume", str(source), "--to", fmt, "--", PY, "-c", copy)
    assert ran.code == 0, ran.err
    handed = Path(ran.out.strip())
    suffix = {"aider": ".md", "codex": ".jsonl", "claude-code": ".jsonl", "turns": ".jsonl"}
    assert handed.suffix == suffix.get(fmt, ".json") and not handed.exists()  # removed after
    assert f"(openai-chat) as {fmt}" in ran.err
    if fmt in ("openai-chat", "openai-responses", "anthropic", "codex", "claude-code", "turns"):
        held = 10 if fmt == "claude-code" else 11  # a Claude Code log holds no system prompt
        assert len(list(open_transcript(keep))) == held
