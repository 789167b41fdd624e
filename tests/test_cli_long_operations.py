"""Long operations tell what they did: copy reports unreadable records and records it left as
they were (never carrying one over silently, never overwriting a record written meanwhile),
progress shows on a terminal, and Ctrl-C says how far a command got."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from agent_checkpoint import Store, open_store
from agent_checkpoint._cli import EXIT, main
from agent_checkpoint._container import Keyring
from agent_checkpoint._maintenance import copy_records
from agent_checkpoint.backends import Record
from agent_checkpoint.backends._disk import file_name
from agent_checkpoint.testing import checkpoint, stamped


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def fill(url: str, n: int, *, fsync: bool = True) -> None:
    with open_store(url) as store:
        store.backend.fsync = fsync  # type: ignore[attr-defined]
        for i in range(n):
            store.put(stamped(checkpoint(f"r{i}"), 1_000 + i), key=f"k{i}")


def tear(store_url: str, key: str) -> bytes:
    record = Path(store_url) / "records" / file_name(key)
    record.write_bytes(record.read_bytes()[:-30])
    return record.read_bytes()


def test_copy_leaves_an_unreadable_record_behind_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, dst = str(tmp_path / "a"), str(tmp_path / "b")
    fill(src, 3)
    tear(src, "k1")
    code, out, err = cli(capsys, "copy", "--store", src, "--to", dst)
    assert code == EXIT["invalid"]
    assert "unreadable: 'k1' (not copied)" in err
    assert "1 unreadable (not copied)" in out and "all decoded" not in out
    with open_store(dst) as target:
        assert sorted(s.key for s in target.list()) == ["k0", "k2"]
    code, out, _ = cli(capsys, "copy", "--json", "--store", src, "--to", dst)
    assert code == EXIT["invalid"]
    assert json.loads(out) == {
        "copied": 0,
        "alreadyThere": 2,
        "conflicts": [],
        "unreadable": ["k1"],
        "unreadableCopied": False,
        "unchecked": 0,
    }


def test_copy_carries_an_unreadable_record_over_only_when_asked_and_still_reports_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, dst = str(tmp_path / "a"), str(tmp_path / "b")
    fill(src, 3)
    torn = tear(src, "k1")
    code, out, err = cli(capsys, "copy", "--include-unreadable", "--store", src, "--to", dst)
    assert code == EXIT["ok"]
    assert "unreadable: 'k1' (copied as it is)" in err
    assert "Copied 3 record(s)" in out and "1 unreadable (copied as they are)" in out
    assert (Path(dst) / "records" / file_name("k1")).read_bytes().endswith(torn[-40:])


def test_copy_of_records_encrypted_under_a_key_not_given_says_they_were_not_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, dst = str(tmp_path / "a"), str(tmp_path / "b")
    with open_store(src, keyring=Keyring({"k1": bytes(range(32))}, "k1")) as store:
        store.put(checkpoint("r"), key="secret")
    code, out, _ = cli(capsys, "copy", "--store", src, "--to", dst)
    assert code == EXIT["ok"]
    assert "1 encrypted under a key not given (copied unchecked)" in out


class RacedTarget(Store):
    """A target another writer writes ``key`` to just after the copy looked at it."""

    def __init__(self, url: str, key: str) -> None:
        super().__init__(open_store(url).backend)
        self.rival = open_store(url)
        self.key = key
        self.raced = False

    def get_record(self, key: str) -> Record | None:
        found = super().get_record(key)
        if key == self.key and not self.raced:
            self.raced = True
            self.rival.put(checkpoint("rival", text="theirs"), key=key)
        return found


@pytest.mark.parametrize("overwrite", [False, True])
def test_copy_never_overwrites_a_record_written_in_the_target_meanwhile(
    tmp_path: Path, overwrite: bool
) -> None:
    src, dst = str(tmp_path / "a"), str(tmp_path / "b")
    fill(src, 3)
    if overwrite:  # an older copy is there: --overwrite may replace it, not the rival's write
        with open_store(dst) as target:
            target.put(checkpoint("old", text="older"), key="k1")
    with open_store(src) as source, RacedTarget(dst, "k1") as target:
        report = copy_records(source, target, overwrite=overwrite, workers=1)
        target.rival.close()
    assert report.conflicts == ["k1"] and report.copied == 2
    with open_store(dst) as target:
        kept = target.get("k1")
        assert kept is not None and kept.history[0].content == "theirs 0"


# -- terminals and Ctrl-C ----------------------------------------------------------------------


def on_a_terminal(*argv: str) -> tuple[int, str, bytes]:
    """Run the CLI with stderr on a pseudo-terminal, as in an operator's shell."""
    master, slave = pty.openpty()
    child = subprocess.Popen(
        [sys.executable, "-m", "agent_checkpoint", *argv],
        stdout=subprocess.PIPE,
        stderr=slave,
        stdin=subprocess.DEVNULL,
    )
    os.close(slave)
    shown = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    out = child.stdout.read().decode() if child.stdout else ""
    os.close(master)
    return child.wait(), out, shown


def test_prune_and_save_show_progress_on_a_terminal(tmp_path: Path) -> None:
    store = str(tmp_path / "s")
    fill(store, 120, fsync=False)
    code, out, shown = on_a_terminal("prune", "--older-than", "1d", "--store", store)
    assert (code, out) == (0, "Deleted 120 checkpoint(s) older than 1d\n")
    assert b"deleting" in shown and b"120/120" in shown
    transcript = Path(__file__).parent / "fixtures" / "transcripts" / "openai_chat_tools.json"
    code, out, shown = on_a_terminal("save", str(transcript), "-o", str(tmp_path / "t.jsonl"))
    assert code == 0 and out.startswith("Saved 11 turns")
    assert b"saving" in shown and b"11/11" in shown


def test_on_a_terminal_the_copy_bar_counts_its_total_while_it_copies(tmp_path: Path) -> None:
    src, dst = str(tmp_path / "a"), str(tmp_path / "b")
    fill(src, 300, fsync=False)
    code, out, shown = on_a_terminal("copy", "--store", src, "--to", dst)
    assert code == 0 and out.startswith("Copied 300 "), out
    assert b"copying" in shown and b"300/300" in shown


@pytest.mark.parametrize("terminal", [False, True], ids=["script", "terminal"])
def test_a_long_operation_lists_its_store_a_second_time_only_for_a_terminals_bar(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, terminal: bool
) -> None:
    """The total of a bar is a second listing of the whole store (on S3, a HEAD per record):
    made only where a bar shows it, and alongside the work rather than before it."""
    src, dst = str(tmp_path / "a"), str(tmp_path / "b")
    fill(src, 30, fsync=False)
    listings: list[int] = []
    listed = Store.iter_summaries

    def counted(self: Store, **kw: Any) -> Any:
        listings.append(kw.get("page_size", 0))
        return listed(self, **kw)

    monkeypatch.setattr(Store, "iter_summaries", counted)
    monkeypatch.setattr(Console, "is_terminal", property(lambda self: terminal))
    assert main(["copy", "--store", src, "--to", dst]) == 0
    assert len(listings) == (2 if terminal else 1), listings
    with open_store(dst) as copied:
        assert len(copied.list(limit=100).items) == 30


# The copy in the child holds its 50th record until Ctrl-C arrives (at most a minute), so the
# signal always lands mid-copy; the wait is in the real disk backend's save, nothing else.
_COPY_THAT_WAITS_FOR_CTRL_C = """
import signal, sys, threading, time
from agent_checkpoint._cli import main
from agent_checkpoint.backends._disk import DiskBackend

lock, saves, arrived = threading.Lock(), 0, threading.Event()
save = DiskBackend.save

def on_ctrl_c(signum, frame):
    arrived.set()
    previous(signum, frame)

def waiting_save(self, *args, **kwargs):
    global saves
    with lock:
        saves += 1
        hold = saves == 50
    if hold:
        print("waiting", file=sys.stderr, flush=True)
        arrived.wait(60)
    return save(self, *args, **kwargs)

previous = signal.getsignal(signal.SIGINT)
signal.signal(signal.SIGINT, on_ctrl_c)
DiskBackend.save = waiting_save
sys.exit(main(sys.argv[1:]))
"""


def test_ctrl_c_during_copy_says_how_far_it_got_and_a_rerun_finishes(tmp_path: Path) -> None:
    src, dst = str(tmp_path / "a"), str(tmp_path / "b")
    total = 1200
    fill(src, total, fsync=False)
    argv = ["copy", "--store", src, "--to", dst]
    child = subprocess.Popen(
        [sys.executable, "-c", _COPY_THAT_WAITS_FOR_CTRL_C, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stderr is not None
    assert child.stderr.readline() == "waiting\n"  # the 50th record is under way
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=120)
    assert child.returncode == EXIT["interrupted"], err
    (line,) = err.splitlines()
    prefix, _, rest = line.partition("copying stopped after ")
    assert prefix == "agent-checkpoint: interrupted: " and out == ""
    done = int(rest.split()[0])
    assert 50 <= done < total  # the records under way when Ctrl-C came are finished
    # no terminal, no bar: the source was not listed a second time to count it
    assert rest == f"{done} record(s); running the same command again carries on"
    rerun = subprocess.run(
        [sys.executable, "-m", "agent_checkpoint", "copy", "--store", src, "--to", dst],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert rerun.returncode == 0, rerun.stderr
    copied = int(rerun.stdout.split("Copied ")[1].split()[0])
    there = int(rerun.stdout.split("; ")[1].split()[0])
    assert copied + there == total and there >= done
