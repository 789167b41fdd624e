"""What printing a listing costs: `agent-checkpoint ls --all` of N rows as a table (fitted to
80 columns, and unbounded as when piped) against `--json`, on the same disk store, in one
process. Each form keeps its best of a few rounds, taken in turn, so load from other
processes affects them alike. The table should cost about what the JSON costs: both are
linear in the rows shown.

    python benchmarks/ls_table.py [--rows 4000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_checkpoint import open_store
from agent_checkpoint._cli import main as cli
from agent_checkpoint.testing import checkpoint, stamped


def fill(url: str, rows: int) -> None:
    with open_store(url) as store:
        store.backend.fsync = False  # type: ignore[attr-defined]
        for i in range(rows):
            ckpt = checkpoint(f"run-{i}", principal=f"user{i % 7}@acme.test", agent="billing")
            store.put(stamped(ckpt, 1_795_988_831_000 + i), key=f"conversation-{i:06d}")


def timed(argv: list[str], columns: str | None) -> float:
    if columns is None:
        os.environ.pop("COLUMNS", None)
    else:
        os.environ["COLUMNS"] = columns
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
        started = time.perf_counter()
        cli(argv)
        return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = str(Path(tmp) / "store")
        fill(url, args.rows)
        forms = {
            "table, 80 columns": (["ls", "--all", "--store", url], "80"),
            "table, piped": (["ls", "--all", "--store", url], None),
            "--json": (["ls", "--all", "--json", "--store", url], None),
        }
        best = dict.fromkeys(forms, float("inf"))
        for _ in range(args.rounds):
            for name, (argv, columns) in forms.items():
                best[name] = min(best[name], timed(argv, columns))
    print(f"ls --all of {args.rows} rows (listing and printing, best of {args.rounds}):")
    for name, seconds in best.items():
        print(f"  {name:<18} {seconds * 1000:8.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
