"""What starting the command costs: `agent-checkpoint --version` and `ls` of an empty disk store,
beside `python -c "import orjson, rich.console"` (the dependencies every command needs) and a
bare `python -c pass`, each a fresh process. The runs are taken in turn (one of each, then
again), so load from other processes affects them alike; each prints its median wall time and
CPU time (user + system: what load from other processes changes least), and their difference
from those of `import orjson, rich.console`, which issue 48 bounds at 100 ms.

    python benchmarks/startup.py [--runs 20] [--root DIR]   # DIR: another checkout to time
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed(argv: list[str], cwd: str, env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run of ``argv``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to time")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        # compiled once, as an install is: without its bytecode a run compiles every module
        # it imports (PYTHONDONTWRITEBYTECODE=1 doubled each command's time here)
        env = {**os.environ, "PYTHONPATH": str(args.root.resolve())}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(Path(folder) / "pycache")
        store = str(Path(folder) / "store")
        cli = [sys.executable, "-m", "agent_checkpoint"]
        subprocess.run([*cli, "setup", "--store", store], env=env, check=True, capture_output=True)
        cases = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "import orjson, rich.console": [sys.executable, "-c", "import orjson, rich.console"],
            "agent-checkpoint --version": [*cli, "--version"],
            "agent-checkpoint ls (empty disk store)": [*cli, "ls", "--store", store],
        }
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
        for argv in cases.values():  # the bytecode written
            timed(argv, folder, env)
        for _ in range(args.runs):
            for name, argv in cases.items():
                times[name].append(timed(argv, folder, env))

    def medians(name: str) -> tuple[float, float]:
        found = times[name]
        return statistics.median(w for w, _ in found), statistics.median(c for _, c in found)

    base_wall, base_cpu = medians("import orjson, rich.console")
    print(f"| command ({args.runs} runs each, in turn) | wall | over the imports | CPU | over |")
    print("|---|---|---|---|---|")
    for name in times:
        wall, cpu = medians(name)
        print(
            f"| `{name}` | {wall * 1000:.0f} ms | {(wall - base_wall) * 1000:+.0f} ms "
            f"| {cpu * 1000:.0f} ms | {(cpu - base_cpu) * 1000:+.0f} ms |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
