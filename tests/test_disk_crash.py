"""A writer killed with SIGKILL at random moments never leaves a torn record or a lying index."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from agent_checkpoint import open_store

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
