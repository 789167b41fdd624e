"""``diff`` of stored runs and of what ``get`` prints, through the installed command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent_checkpoint import Message, open_store
from agent_checkpoint._cli import EXIT
from agent_checkpoint.testing import checkpoint


def cli(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent_checkpoint", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def error_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("agent-checkpoint: error: "), done.stderr
    return lines[0]


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """A disk store holding ``first`` and ``retried``: the same run with one more answer."""
    ckpt = checkpoint("r1", messages=2)
    with open_store(str(tmp_path / "store"), create=True) as store:
        store.put(ckpt, key="first")
        store.put(ckpt.evolve(history=(*ckpt.history, Message("user", "Thanks!"))), key="retried")
        store.put(ckpt, key="again")
    return tmp_path


def test_diff_with_store_compares_two_stored_runs(runs: Path) -> None:
    done = cli(runs, "diff", "--store", "store", "first", "retried")
    assert done.returncode == EXIT["differ"], done.stderr
    assert done.stdout.splitlines() == [
        "different",
        "A has 2 turns, B has 3: 1 inserted, 0 removed, 0 changed",
        '+ B turn 3 (user) inserted: "Thanks!"',
    ]
    same = cli(runs, "--store", "store", "diff", "first", "again", "--json")
    assert same.returncode == EXIT["ok"], same.stderr
    assert json.loads(same.stdout) == {
        "identical": True,
        "aTurns": 2,
        "bTurns": 2,
        "differences": [],
    }


def test_diff_reads_what_get_prints_checkpoint_and_envelope(runs: Path) -> None:
    for key, flags in (("first", ()), ("retried", ("--envelope",))):
        done = cli(runs, "get", key, "--store", "store", *flags)
        assert done.returncode == 0, done.stderr
        (runs / f"{key}.json").write_text(done.stdout)
    history = json.loads((runs / "first.json").read_text())["history"]
    (runs / "chat.json").write_text(json.dumps(history))  # the same messages, as OpenAI chat
    done = cli(runs, "diff", "first.json", "retried.json")
    assert done.returncode == EXIT["differ"], done.stderr
    assert done.stdout.splitlines()[-1] == '+ B turn 3 (user) inserted: "Thanks!"'
    assert cli(runs, "diff", "chat.json", "first.json").returncode == EXIT["ok"]


def test_diff_of_a_missing_key_names_the_nearest_and_exits_3(runs: Path) -> None:
    done = cli(runs, "diff", "--store", "store", "first", "retired")
    assert done.returncode == EXIT["not_found"]
    assert "no checkpoint stored under 'retired'; did you mean 'retried'?" in error_line(done)


def test_diff_refuses_a_file_that_is_neither_transcript_nor_checkpoint(runs: Path) -> None:
    (runs / "other.json").write_text('{"name": "not a conversation"}')
    (runs / "broken.json").write_text('{"version": 1, "history": "none"}')
    (runs / "a.json").write_text(json.dumps([{"role": "user", "content": "hello 0"}]))
    done = cli(runs, "diff", "a.json", "other.json")
    assert done.returncode == EXIT["invalid"]
    line = error_line(done)
    assert "other.json: neither a transcript" in line and "nor a run checkpoint" in line
    broken = cli(runs, "diff", "a.json", "broken.json")
    assert broken.returncode == EXIT["invalid"]
    assert "broken.json: not a run checkpoint or an envelope of one" in error_line(broken)


def test_diff_with_store_refuses_an_input_format(runs: Path) -> None:
    done = cli(runs, "diff", "--store", "store", "first", "again", "--input-format", "turns")
    assert done.returncode == EXIT["usage"]
    assert "with --store, A and B are keys of the store" in error_line(done)
