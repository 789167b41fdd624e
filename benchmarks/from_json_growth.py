"""A checkpoint after every message, from ``Message`` values and from JSON dicts.

Two loops grow one conversation (``workload.py``) to N messages on a memory store and put a
checkpoint after each message:

- ``messages``: the agent keeps ``Message`` values; each put stores
  ``checkpoint.evolve(history=tuple(history))``.
- ``dicts``: the agent keeps the checkpoint as JSON (a resumed run, a service receiving
  dicts); each put stores ``RunCheckpoint.from_json(doc)`` while ``doc["history"]`` grows by
  one message dict.
- ``fresh``: as ``dicts``, but every put gets a freshly decoded copy of the document (a
  service that parses each request's body); the decoding is not timed, ``from_json`` is.

Only ``from_json``/``evolve`` and ``put`` are timed. The loops alternate, each repeated
``--reps`` times; the script prints each loop's median total and its ratio to ``messages``.

    python benchmarks/from_json_growth.py [--n 1000] [--reps 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import workload

from agent_checkpoint import RunCheckpoint, open_store


def _start(n: int) -> tuple[RunCheckpoint, dict[str, Any]]:
    checkpoint = RunCheckpoint.new("grow", run_id="run-1", checkpointed_at=1)
    return checkpoint, checkpoint.to_json()


def messages_loop(n: int) -> float:
    turns = workload.conversation(n)
    values = workload.ours(turns)
    store = open_store("memory://")
    checkpoint, _ = _start(n)
    history: list[Any] = []
    spent = 0.0
    for message in values:
        history.append(message)
        t = time.perf_counter()
        checkpoint = checkpoint.evolve(history=tuple(history))
        store.put(checkpoint, key="k")
        spent += time.perf_counter() - t
    store.close()
    return spent


def dicts_loop(n: int, *, fresh: bool) -> float:
    turns = workload.conversation(n)
    store = open_store("memory://")
    _, doc = _start(n)
    spent = 0.0
    for turn in turns:
        doc["history"].append(workload.message_json(turn))
        data = orjson.loads(orjson.dumps(doc)) if fresh else doc
        t = time.perf_counter()
        store.put(RunCheckpoint.from_json(data), key="k")
        spent += time.perf_counter() - t
    store.close()
    return spent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--no-fresh", action="store_true", help="skip the `fresh` loop")
    args = parser.parse_args()
    loops = {
        "messages": lambda: messages_loop(args.n),
        "dicts": lambda: dicts_loop(args.n, fresh=False),
    }
    if not args.no_fresh:
        loops["fresh"] = lambda: dicts_loop(args.n, fresh=True)
    workload.conversation(args.n)  # built once, outside every loop
    for run in loops.values():  # warm-up
        run()
    times: dict[str, list[float]] = {name: [] for name in loops}
    for _ in range(args.reps):
        for name, run in loops.items():
            times[name].append(run())
    base = statistics.median(times["messages"])
    print(f"{args.n} puts, each after one more message (memory store), median of {args.reps}:")
    for name, spent in times.items():
        median = statistics.median(spent)
        print(
            f"  {name:9} {median * 1e3:9.1f} ms total  {median / args.n * 1e6:8.1f} us/put  "
            f"x{median / base:.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
