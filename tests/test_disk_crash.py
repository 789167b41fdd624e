"""Writers killed with SIGKILL never leave a torn record or a lying index; the index's pending
mark is on the disk before a record file changes."""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from support.services import service_missing

from agent_checkpoint import open_store
from agent_checkpoint.backends._disk import file_name
from agent_checkpoint.backends._disk_files import is_record_file
from agent_checkpoint.testing import checkpoint

WRITER = r"""
import sys
from agent_checkpoint import Message, RunCheckpoint, open_store

store = open_store(sys.argv[1])
start = int(sys.argv[2])
keys = [f"key-{i}" for i in range(5)]
histories = {key: () for key in keys}  # growing histories: most puts append a segment
version = start
while True:
    version += 1
    for key in keys:
        text = f"{key} v{version} " + "x" * (version * 997 % 5000)
        histories[key] = (*histories[key], Message("user", text))
        ckpt = RunCheckpoint.new(text, histories[key], run_id=f"{key}-v{version}")
        store.put(ckpt, key=key)
        print(f"{key} {version}", flush=True)
"""


def test_sigkill_during_puts_leaves_old_or_new_records_and_a_true_listing(tmp_path: Path) -> None:
    rng = random.Random(20261129)
    acked: dict[str, int] = {}
    in_flight: dict[str, set[int]] = {}  # versions that may have landed without an ack
    version = 0
    for _trial in range(20):
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tmp_path), str(version)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        first = proc.stdout.readline()  # the writer is running and has written once
        assert first, "writer did not start"
        time.sleep(rng.uniform(0.0, 0.25))
        os.kill(proc.pid, signal.SIGKILL)
        rest = proc.stdout.read()
        proc.wait()
        last = ("", 0)
        for line in [first, *rest.splitlines()]:
            if line.strip():
                key, v = line.split()
                acked[key] = max(acked.get(key, 0), int(v))
                last = (key, int(v))
        index = int(last[0].rsplit("-", 1)[1])
        unacked = (f"key-{index + 1}", last[1]) if index < 4 else ("key-0", last[1] + 1)
        in_flight.setdefault(unacked[0], set()).add(unacked[1])
        version = max(acked.values()) + 1  # past the put that was in flight

        with open_store(str(tmp_path)) as store:
            listed = {s.key: s for s in store.iter_summaries()}
            for key in (f"key-{i}" for i in range(5)):
                record = store.get_record(key)
                if record is None:
                    assert key not in acked and key not in listed
                    continue
                ckpt = store.get(key)  # decodes, or raises: a torn record fails the test
                assert ckpt is not None
                stored_version = int(ckpt.run_id.rsplit("-v", 1)[1])
                # the last acknowledged write, or a later one that was in flight at a kill
                later = {v for v in in_flight.get(key, ()) if v > acked.get(key, 0)}
                assert stored_version in {acked.get(key), *later}, (key, stored_version)
                assert listed[key].revision == record.summary.revision
                assert listed[key].saved_at == record.summary.saved_at
                assert listed[key].run_id == ckpt.run_id
                assert ckpt.history[-1].content.startswith(f"{key} v{stored_version} ")


DELETER = r"""
import sys
from agent_checkpoint import Message, RunCheckpoint, open_store

store = open_store(sys.argv[1])
keys = [f"key-{i}" for i in range(4)]
round_ = int(sys.argv[2])
while True:
    round_ += 1
    for n, key in enumerate(keys):
        ckpt = RunCheckpoint.new("hi", [Message("user", f"{key} {round_}")], run_id=key)
        print(f"P {key} {store.put(ckpt, key=key).revision}", flush=True)
        if (round_ + n) % 2:
            store.delete(key)
            print(f"D {key}", flush=True)
"""


def test_sigkill_during_puts_and_deletes_never_lets_a_key_repeat_a_revision(
    tmp_path: Path,
) -> None:
    """A delete removes the key's file after raising the store's floor past its revision: a
    writer killed at any instant leaves the record (and perhaps a higher floor) or no record
    and a floor past it, so the key's next write never repeats a revision it had."""
    rng = random.Random(20261207)
    highest: dict[str, int] = {}  # the highest revision each key was acknowledged at
    round_ = 0
    for _trial in range(12):
        proc = subprocess.Popen(
            [sys.executable, "-c", DELETER, str(tmp_path), str(round_)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first, "writer did not start"
        time.sleep(rng.uniform(0.0, 0.3))
        os.kill(proc.pid, signal.SIGKILL)
        lines = [first, *proc.stdout.read().splitlines()]
        proc.wait()
        round_ += len(lines)  # past every round the writer reached
        for line in lines:
            if line.startswith("P "):
                _, key, revision = line.split()
                highest[key] = max(highest.get(key, 0), int(revision))
        with open_store(str(tmp_path)) as store:
            listed = {s.key: s.revision for s in store.iter_summaries()}
            for key in highest:
                head = store.head(key)
                assert listed.get(key) == (head.revision if head else None), key
                if head is not None:
                    assert store.get(key) is not None  # readable, never torn
                    highest[key] = max(highest[key], head.revision)  # an unacked put landed
    with open_store(str(tmp_path)) as store:
        for key, revision in highest.items():
            assert store.put(checkpoint(key), key=key).revision > revision, key
    files = {p.name for p in (tmp_path / "records").iterdir() if is_record_file(p.name)}
    assert files == {file_name(key) for key in highest}  # no file of a deleted key stays


TRACED = r"""
import sqlite3, sys
from agent_checkpoint import Message, RunCheckpoint, open_store

store = open_store(sys.argv[1])
index = sqlite3.connect(f"{sys.argv[1]}/index.sqlite3")  # what other processes see


def marked():
    found = index.execute("SELECT 1 FROM pending WHERE key = 'k'").fetchone() is not None
    print(f"MARKED {found}", flush=True)


history = [Message("user", "hi")]
for step in ("create", "append", "rewrite", "again"):
    if step == "rewrite":
        history = [Message("user", "a history that does not extend the stored one")]
    else:
        history.append(Message("assistant", step))
    print(f"STEP {step}", flush=True)
    store.put(RunCheckpoint.new("hi", history, run_id="r"), key="k")
    marked()
print("STEP delete", flush=True)
store.delete("k")
marked()
print("STEP end", flush=True)
"""


def test_the_pending_mark_reaches_the_disk_before_the_record_changes(tmp_path: Path) -> None:
    """The index is not fsynced on every commit, so after a power loss it may miss its last
    ones; the pending mark that makes the next listing re-read the record from its file must
    therefore be on the disk before the record file is replaced or removed. Checked on the
    system calls of a real writer: a sync of the index's WAL precedes each rename or unlink,
    unless the key's mark stayed from a write before (marks are made only in synced commits),
    and the mark a replaced record keeps saves the next write of that key its sync."""
    strace = shutil.which("strace")
    if strace is None:
        service_missing("strace", "the strace binary is not installed (scripts/services.sh)")
    log = tmp_path / "strace.log"
    store = tmp_path / "store"
    subprocess.run(
        [strace, "-f", "-y", "-o", str(log), "-e",
         "trace=fsync,fdatasync,rename,renameat,renameat2,unlink,unlinkat,write,pwrite64",
         sys.executable, "-c", TRACED, str(store)],
        check=True, capture_output=True,
    )  # fmt: skip
    steps: dict[str, list[str]] = {}
    marked: dict[str, bool] = {}  # whether the key's mark is in the index after the step
    current: list[str] | None = None
    for line in log.read_text().splitlines():
        if "STEP " in line and "write(1" in line:
            current = steps.setdefault(re.findall(r"STEP (\w+)", line)[0], [])
        elif "MARKED " in line and "write(1" in line:
            marked[list(steps)[-1]] = "MARKED True" in line
        elif current is not None and _call(line) != "write":
            current.append(line)
    order = ["create", "append", "rewrite", "again", "delete"]
    assert list(steps) == [*order, "end"]
    # a created key's mark is cleared; a replaced one's stays; a removed one's is cleared
    assert marked == {"create": False, "append": True, "rewrite": True, "again": True,
                      "delete": False}  # fmt: skip
    records = f"{store}/records/"
    for before, step in zip([None, *order], order, strict=False):
        calls = steps[step]
        changes = [
            i for i, call in enumerate(calls)
            if ("rename" in call and f'"{records}' in call.split(",", 1)[1])
            or ("unlink" in call and f'"{records}' in call and ".tmp" not in call)
            or (_call(call) == "pwrite64" and f"<{records}" in call)  # an appended frame
        ]  # fmt: skip
        assert changes, (step, calls)
        synced = [
            i for i, call in enumerate(calls)
            if _call(call) in ("fsync", "fdatasync")
            and "index.sqlite3-wal>" in call
        ]  # fmt: skip
        if before is not None and marked[before]:
            assert not synced, (step, calls)  # the mark on the disk already covers it
        else:
            assert synced and synced[0] < changes[0], (step, calls)
    # a delete raises the store's floor past the key's revision, on the disk (renamed, the
    # folder synced), before the record file goes: then the key's revisions never repeat
    calls = steps["delete"]
    floor = [i for i, call in enumerate(calls) if "rename" in call and '/revision-floor"' in call]
    folder = [i for i, call in enumerate(calls) if _call(call) == "fsync" and f"<{store}>" in call]
    gone = [i for i, call in enumerate(calls) if "unlink" in call and f'"{records}' in call]
    assert floor and gone and floor[0] < gone[0], calls
    assert any(floor[0] < i < gone[0] for i in folder), calls


def _call(line: str) -> str:
    """The system call an strace line shows."""
    return line.split("(", 1)[0].split()[-1] if "(" in line else ""


def test_a_frame_left_torn_is_not_read_and_the_next_write_replaces_the_file(
    tmp_path: Path,
) -> None:
    """A rewrite appends its frame to the record file; a writer killed mid-append (or a power
    loss before its fsync) leaves a torn frame: a reader gets the record before it, and the
    next write replaces the file instead of appending after the torn bytes."""
    from agent_checkpoint import Message, RunCheckpoint
    from agent_checkpoint.backends._disk import file_name

    def put(store: Any, n: int) -> None:
        history = tuple(Message("user", f"m{i}") for i in range(n))
        store.put(RunCheckpoint.new("hi", history, run_id=f"r{n}"), key="k")

    for case in ("short", "zeros", "header"):
        root = tmp_path / case
        record_file = root / "records" / file_name("k")
        with open_store(str(root)) as store:
            put(store, 1)
            put(store, 2)  # appended to the file
            whole = record_file.read_bytes()
        frame = whole[whole.index(b'{"key"', 1) :]  # the newest frame, appended again torn
        torn = {
            "short": frame[: len(frame) // 2],
            "zeros": frame[:-8] + b"\0" * 8,  # its last page never written (a power loss)
            "header": frame[:20],
        }[case]
        record_file.write_bytes(whole + torn)
        with open_store(str(root)) as store:
            ckpt = store.get("k")
            assert ckpt is not None and ckpt.run_id == "r2"
            assert [s.run_id for s in store.list()] == ["r2"]
            put(store, 3)
            assert not record_file.read_bytes().startswith(whole)  # replaced, not appended to
            ckpt = store.get("k")
            assert ckpt is not None and ckpt.run_id == "r3"
            assert [(s.run_id, s.revision) for s in store.list()] == [("r3", 3)]


def test_a_record_file_with_a_damaged_frame_header_reads_as_unreadable(tmp_path: Path) -> None:
    """A frame header whose length is not a length (a damaged or forged file) makes the record
    unreadable: never absent, never a reader that loops."""
    import orjson

    from agent_checkpoint import Message, RunCheckpoint, UnreadableEnvelopeError
    from agent_checkpoint.backends._disk import file_name

    record_file = tmp_path / "records" / file_name("k")
    with open_store(str(tmp_path)) as store:
        store.put(RunCheckpoint.new("hi", (Message("user", "m"),), run_id="r"), key="k")
        header, _, body = record_file.read_bytes().partition(b"\n")
        for length in (-len(header) - 1, -1, "12", 1.5, None):
            fields = {**orjson.loads(header), "frame": length}
            record_file.write_bytes(orjson.dumps(fields) + b"\n" + body)
            try:
                store.get("k")
            except UnreadableEnvelopeError:
                continue
            raise AssertionError(f"a frame length of {length!r} was read")
