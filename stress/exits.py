"""Exit campaign: a process that leaves its stores open always exits.

Each trial runs ``tests/support/leave_open.py`` as a process of its own on the backend's store:
it opens a sync store, an async store awaited from the main loop and from ``asyncio.run`` in
three threads, and Agents SDK sessions made from the URL, puts concurrently through all of
them, leaves a get in flight when its loops end, and returns without closing anything. The
process must then exit with status 0 on its own, within ``LIMIT`` seconds (a generous bound on
a loaded machine: a hang is what it catches, not slowness). ``PARALLEL`` trials run at once.

A trial that does not exit in time is ``stalled`` (killed); one that exits with another status
is ``foreign`` (its last stderr line is kept as a problem).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .common import REPO, Tally, main_for, open_target

LIMIT = 120.0
PARALLEL = 4
ROUNDS = 20
BACKENDS = ("disk", "redis", "postgres")


def trial(url: str) -> tuple[str, str]:
    """One process that leaves its stores open: ``("exited", "")``, ``("stalled", "")`` or
    ``("foreign", why)``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "tests"), str(REPO), *sys.path])
    try:
        done = subprocess.run(
            [sys.executable, "-m", "support.leave_open", url, str(ROUNDS)],
            env=env,
            capture_output=True,
            text=True,
            timeout=LIMIT,
        )
    except subprocess.TimeoutExpired:
        return "stalled", ""
    if done.returncode != 0 or not done.stdout.strip().endswith("done"):
        lines = done.stderr.strip().splitlines() or [f"exit status {done.returncode}"]
        return "foreign", lines[-1]
    return "exited", ""


def run_backend(backend: str, trials: int, workdir: Path, s3: Any = None) -> Tally:
    tally = Tally(backend)
    started = time.monotonic()
    with open_target(backend, workdir, s3=s3) as target, ThreadPoolExecutor(PARALLEL) as pool:
        for outcome, why in pool.map(trial, [target.url] * trials):
            tally.trials += 1
            if outcome == "stalled":
                tally.stalled += 1
                tally.problems.append(f"a process did not exit within {LIMIT:g} s")
            elif outcome == "foreign":
                tally.foreign += 1
                tally.problems.append(why)
            else:
                tally.extra["exited"] += 1
    tally.seconds = time.monotonic() - started
    return tally


def main(argv: list[str] | None = None) -> int:
    return main_for(
        __doc__.split("\n", 1)[0] if __doc__ else "exit campaign",
        run_backend,
        size_flag="trials",
        full=200,
        small=6,
        backends=BACKENDS,
        title="Exit campaign: processes that leave their stores open",
        extras=(("exited", "exited"),),
        argv=argv,
    )


if __name__ == "__main__":
    sys.exit(main())
