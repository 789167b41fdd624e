"""What resuming costs: reading the checkpoint back, against the seed package's reader.

Saves the six-turn transcript of ``selfcheck.py`` as a canonical turn file and times, on the
same file in the same process, ``read_turns`` (the adapter's whole resume read: every line
decoded and checked into a ``Turn``) and the seed package's reader (``read_jsonl`` of
localab-checkpoint 0.3.1, reproduced below as published: ``json.loads`` per line, no checks).
The two are timed in alternating rounds and each keeps its best round, so load from other
processes affects both alike.

    python benchmarks/resume_cost.py [--rounds 15]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import timeit
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_checkpoint.transcripts import open_transcript, plan_integrity, read_turns, write_turns
from selfcheck import TRANSCRIPT


def seed_read_jsonl(path: Path) -> list[Any]:
    """localab-checkpoint 0.3.1, ``agent_checkpoint/format.py``: ``read_jsonl``, verbatim."""
    envelopes = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line:
                envelopes.append(json.loads(line))
    return envelopes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        source, checkpoint = Path(tmp) / "transcript.json", Path(tmp) / "checkpoint.jsonl"
        source.write_text(json.dumps(TRANSCRIPT), encoding="utf-8")
        transcript = open_transcript(source)
        turns = write_turns(checkpoint, plan_integrity(transcript).apply(transcript))
        assert len(list(read_turns(checkpoint))) == len(seed_read_jsonl(checkpoint)) == turns
        number = 2000
        best = {"seed": float("inf"), "ours": float("inf")}
        for _ in range(args.rounds):
            for name, read in (
                ("seed", lambda: seed_read_jsonl(checkpoint)),
                ("ours", lambda: list(read_turns(checkpoint))),
            ):
                best[name] = min(best[name], timeit.timeit(read, number=number) / number)
        size = checkpoint.stat().st_size
    print(f"checkpoint: {turns} turns, {size / 1024:.1f} KB on disk")
    print(f"seed read_jsonl (0.3.1):    {best['seed'] * 1e3:.4f} ms")
    print(f"resume read_turns (ours):   {best['ours'] * 1e3:.4f} ms")
    print(f"ours / seed:                {best['ours'] / best['seed']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
