"""A resume worker process for race tests: resumes failed runs and logs every handler call.

    python race_worker.py URL WORKER LOGDIR [--ttl S] [--hang-on-first]

Each handler call appends "<key>" to LOGDIR/<WORKER>.log before returning the resumed
checkpoint; with --hang-on-first the first handler call writes LOGDIR/<WORKER>.claimed and
waits until LOGDIR/<WORKER>.go exists (the test stops, kills or resumes it meanwhile).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from agent_checkpoint import open_store
from agent_checkpoint._claims import Claim
from agent_checkpoint._model import RunCheckpoint
from agent_checkpoint.resume import ResumeSeed, resume_failed_runs


def main() -> int:
    url, worker, logdir = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    ttl = float(sys.argv[sys.argv.index("--ttl") + 1]) if "--ttl" in sys.argv else 60.0
    hang = "--hang-on-first" in sys.argv
    log = open(logdir / f"{worker}.log", "a", buffering=1)  # noqa: SIM115 - lives as long as the process
    calls = 0

    def handler(seed: ResumeSeed, claim: Claim) -> RunCheckpoint:
        nonlocal calls
        calls += 1
        if hang and calls == 1:
            # written whole, then renamed: the test polls for the file and reads it at once
            (logdir / f"{worker}.claimed.tmp").write_text(claim.key)
            (logdir / f"{worker}.claimed.tmp").replace(logdir / f"{worker}.claimed")
            while not (logdir / f"{worker}.go").exists():
                time.sleep(0.02)
        log.write(f"{claim.key}\n")
        return seed.checkpoint(last_completed_iteration=1, answer=f"resumed by {worker}")

    with open_store(url) as store:
        report = resume_failed_runs(store, handler, worker=worker, ttl=ttl)
    print(f"{len(report.resumed)} {len(report.failed)} {report.skipped}", flush=True)
    for key, why in report.failed:
        print(f"FAILED {key} {why}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
