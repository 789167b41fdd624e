"""The LangGraph saver's two listings of the newest 100 threads against our store's own listing,
in one process on one backend: ``saver.threads(limit=100)`` (from the store's index alone) and
``saver.list(None, limit=100)`` (whole checkpoints), each on a new saver per call, after the
same load of one-turn threads as run.py's (c). Alternating rounds of ``--calls`` calls each;
medians, and whether each listing returned the right threads in order.

    benchmarks/.venv-peers/bin/python benchmarks/saver_listing.py redis [--threads 10000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import servers
from saver import SAVER_BACKENDS, Saver


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("backend", choices=SAVER_BACKENDS)
    parser.add_argument("--threads", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    cleanup = servers.Cleanup()
    instance = Saver(args.backend, servers.Context(cleanup)).open()
    try:
        expected = instance.load_runs(args.threads, lambda done: None)
        listings: dict[str, Callable[[], list[str]]] = {
            "our store's list(limit=100)": lambda: instance.space.list_newest(100),
            "saver.threads(limit=100)": instance.threads_lister(100),
            "saver.list(None, limit=100)": lambda: instance.list_newest(100),
        }
        times: dict[str, list[float]] = {name: [] for name in listings}
        right: dict[str, str] = {}
        for _ in range(args.rounds):
            for name, listing in listings.items():
                got = listing()  # our store lists its records' keys, not thread ids
                right[name] = "-" if name.startswith("our") else "yes" if got == expected else "NO"
                for _ in range(args.calls):
                    begun = time.perf_counter()
                    listing()
                    times[name].append(time.perf_counter() - begun)
        ours = statistics.median(times["our store's list(limit=100)"])
        print(f"{args.backend}, the newest 100 of {args.threads:,} threads (median ms)\n")
        print("| listing | ms | ÷ our store's | right, newest first |")
        print("|---|---|---|---|")
        for name in listings:
            median = statistics.median(times[name])
            print(f"| {name} | {1e3 * median:.3f} | {median / ours:.2f}x | {right[name]} |")
    finally:
        instance.close()
        cleanup.run()


if __name__ == "__main__":
    main()
