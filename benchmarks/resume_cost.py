"""What resuming costs: reading the checkpoint back, against re-running the model.

Saves the six-turn transcript of ``selfcheck.py`` as a checkpoint and times
``read_turns`` on it (the adapter's whole resume work), best of many runs.

    python benchmarks/resume_cost.py
"""

from __future__ import annotations

import json
import sys
import tempfile
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_checkpoint.transcripts import open_transcript, plan_integrity, read_turns, write_turns
from selfcheck import TRANSCRIPT


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        source, checkpoint = Path(tmp) / "transcript.json", Path(tmp) / "checkpoint.jsonl"
        source.write_text(json.dumps(TRANSCRIPT), encoding="utf-8")
        transcript = open_transcript(source)
        turns = write_turns(checkpoint, plan_integrity(transcript).apply(transcript))
        runs = 2000
        best = min(timeit.repeat(lambda: list(read_turns(checkpoint)), number=runs, repeat=5))
        size = checkpoint.stat().st_size
    print(f"checkpoint: {turns} turns, {size / 1024:.1f} KB on disk")
    print(f"resume read_turns: {best / runs * 1000:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
