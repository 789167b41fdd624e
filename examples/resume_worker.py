"""A resume worker in a few lines: claim failed runs one at a time and resume each.

    python examples/resume_worker.py ./.agent-checkpoints

Run several copies at once (on one machine or many, against a shared store URL): each run is
claimed by exactly one of them, and a worker that dies mid-run loses its claim when the lease
expires, after which another worker takes the run over; the dead worker's late write is refused.
"""

from __future__ import annotations

import sys

from agent_checkpoint import Claim, ResumeSeed, RunCheckpoint, open_store, resume_failed_runs


def run_agent(seed: ResumeSeed, claim: Claim) -> RunCheckpoint:
    # Replace this with your agent loop: start a run with seed.run_id from seed.history,
    # answering seed.message, and return the checkpoint it ends with.
    answer = f"(resumed {seed.resumed_from} as {seed.run_id})"
    return seed.checkpoint(last_completed_iteration=1, answer=answer)


if __name__ == "__main__":
    with open_store(sys.argv[1] if len(sys.argv) > 1 else None) as store:
        report = resume_failed_runs(store, run_agent, worker="example-worker", ttl=120)
    print(f"resumed {len(report.resumed)}, failed {len(report.failed)}, skipped {report.skipped}")
