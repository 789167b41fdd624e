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
version = start
while True:
    version += 1
    for key in keys:
        text = f"{key} v{version} " + "x" * (version * 997 % 20000)
        store.put(RunCheckpoint.new(text, [Message("user", text)], run_id=f"{key}-v{version}"), key=key)
        print(f"{key} {version}", flush=True)
"""


def test_sigkill_during_puts_leaves_old_or_new_records_and_a_true_listing(tmp_path: Path) -> None:
    rng = random.Random(20261129)
    acked: dict[str, int] = {}
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
        for line in [first, *rest.splitlines()]:
            if line.strip():
                key, v = line.split()
                acked[key] = max(acked.get(key, 0), int(v))
        version = max(acked.values())

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
                if key in acked:  # the acknowledged write, or the one in flight at the kill
                    assert stored_version in (acked[key], acked[key] + 1), (key, stored_version)
                assert listed[key].revision == record.summary.revision
                assert listed[key].saved_at == record.summary.saved_at
                assert listed[key].run_id == ckpt.run_id
        version += 1  # the next writer starts past anything the killed one may have begun
