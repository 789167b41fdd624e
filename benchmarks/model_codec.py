"""The model's own cost: ``RunCheckpoint.from_json`` and ``to_json`` of a 1,000-message run.

Times, on the conversation of ``workload.py``, each in rounds that alternate and keep their
medians (so load from other processes affects all alike):

- ``from_json``: reading the decoded JSON into a checkpoint (the history stays JSON until used);
- ``from_json+history``: the same, then typing every message (``checkpoint.history``) as a
  first read does (nothing remembered from an earlier typing);
- ``to_json (read)``: writing a checkpoint that was read from JSON back out;
- ``to_json (typed)``: writing a checkpoint built from ``Message`` values.

    python benchmarks/model_codec.py [--n 1000] [--rounds 15]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import workload

from agent_checkpoint import RunCheckpoint

try:  # histories typed before are remembered (since _model/_history.py): time a first typing
    from agent_checkpoint._model._history import TYPED

    forget = TYPED.clear
except ImportError:

    def forget() -> None:
        pass


def _typed_first_time(doc: dict[str, object]) -> object:
    forget()
    return RunCheckpoint.from_json(doc).history


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    typed = RunCheckpoint.new(
        "codec", workload.ours(workload.conversation(args.n)), run_id="run-1", checkpointed_at=1
    )
    doc = typed.to_json()
    read = RunCheckpoint.from_json(doc)
    assert read.to_json() == doc and RunCheckpoint.from_json(doc).history == typed.history
    cases = {
        "from_json": lambda: RunCheckpoint.from_json(doc),
        "from_json+history": lambda: _typed_first_time(doc),
        "to_json (read)": read.to_json,
        "to_json (typed)": typed.to_json,
    }
    number = 20
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.rounds):
        for name, case in cases.items():
            times[name].append(timeit.timeit(case, number=number) / number)
    print(f"{args.n} messages, median of {args.rounds} rounds:")
    for name, spent in times.items():
        print(f"  {name:18} {statistics.median(spent) * 1e6:10.1f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
