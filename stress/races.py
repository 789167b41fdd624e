"""Race campaign: worker PROCESSES contend for one key at a time; exactly one may win.

``WORKERS`` processes (forked from a warm fork server, each with its own store and connections)
wait on a shared barrier, then all write the same key at once. Round kinds, in rotation:

- ``if_revision``: every worker reads the key's record (revision ``r``), appends its own message
  and puts with ``if_revision=r``; losers must raise ``ConflictError``. The keys are reused, so
  histories grow and the winner of the last round writes through the append path;
- ``create``: every worker puts a fresh key with ``create_only=True``; losers ``ConflictError``;
- ``owner``: every worker puts a fresh key unconditionally, each signed by its own
  ``identity.principal``; the first owns it, the others raise ``OwnershipConflictError``;
- ``claim``: every worker claims a stored failed run; the others raise ``ClaimedError``; the
  winner writes through its claim and releases it.

After each round: exactly one winner (more is a wrongly accepted write, none a stall), every
loser raised the expected class (anything else is ``foreign``), the stored record is exactly
the winner's (its history, revision, owner and savedAt: nothing half-written or mixed), the
revision moved by exactly what the winner did, the listing shows the winner's summary, and no
claim is left behind.
"""

from __future__ import annotations

import contextlib
import random
import sys
import time
import warnings
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from agent_checkpoint import Identity, Message, RunCheckpoint, Store
from agent_checkpoint.claims import ClaimedError
from agent_checkpoint.errors import CheckpointError, ConflictError, OwnershipConflictError
from agent_checkpoint.model import FailurePoint

from .common import Tally, Target, fork_context, main_for, open_target

KINDS = ("if_revision", "create", "owner", "claim")
WORKERS = 4
REUSED_KEYS = 6
"""``if_revision`` and ``claim`` rounds rotate over this many keys each."""
EXPECTED: dict[str, type[ConflictError]] = {
    "if_revision": ConflictError,
    "create": ConflictError,
    "owner": OwnershipConflictError,
    "claim": ClaimedError,
}
EXACT = {"if_revision", "create"}
"""Kinds whose losers must raise ``ConflictError`` itself, not a subclass."""


@dataclass(frozen=True)
class Result:
    worker: int
    won: bool
    error: str = ""  # the loser's exception class
    expected: bool = False  # the loser's exception is the one the round calls for
    message: str = ""
    history: tuple[tuple[str, str], ...] = ()
    run_id: str = ""
    revision: int = 0
    saved_at: int = 0
    owner: str | None = None
    base: int = 0  # the revision the worker read before the race (if_revision, claim)


def _ckpt(
    run_id: str,
    history: list[tuple[str, str]],
    *,
    principal: str | None = None,
    key: str,
    failed: bool = False,
) -> RunCheckpoint:
    return RunCheckpoint.new(
        history[-1][1][:40],
        [Message(role, text) for role, text in history],
        run_id=run_id,
        last_completed_iteration=1,
        identity=Identity(key, principal=principal) if principal else None,
        failure_point=FailurePoint(2, "llm", "call-llm") if failed else None,
    )


def race_worker(target: Target, index: int, conn: Connection, barrier: Any) -> None:
    """One contender: for each task, prepare, wait for the others, write, report."""
    warnings.simplefilter("ignore")
    store = target.open()
    conn.send("ready")
    try:
        while True:
            task = conn.recv()
            if task is None:
                return
            kind, key, round_no = task
            try:
                result = _contend(store, index, kind, key, round_no, barrier)
            except Exception as exc:  # reported to the campaign, which judges it
                result = Result(index, False, f"{type(exc).__name__}: {str(exc)[:300]}")
            conn.send(result)
    finally:
        store.close()


def _contend(store: Store, index: int, kind: str, key: str, round_no: int, barrier: Any) -> Result:
    message = f"{key} round {round_no} by w{index}"
    base = 0
    history: list[tuple[str, str]] = []
    principal = None
    if kind == "if_revision":
        record = store.get_record(key)
        assert record is not None, f"{key} was seeded"
        base = record.summary.revision
        current = store.get(key)
        assert current is not None
        history = [(m.role, m.content) for m in current.history]
    elif kind == "claim":
        head = store.head(key)
        assert head is not None, f"{key} was seeded"
        base = head.revision
    elif kind == "owner":
        principal = f"p{index}"
    history.append(("user" if len(history) % 2 == 0 else "assistant", message))
    run_id = f"{key}-r{round_no}-w{index}"
    ckpt = _ckpt(run_id, history, principal=principal, key=key)
    barrier.wait(60)
    claim = None
    try:
        if kind == "if_revision":
            summary = store.put(ckpt, key=key, if_revision=base)
        elif kind == "create":
            summary = store.put(ckpt, key=key, create_only=True)
        elif kind == "owner":
            summary = store.put(ckpt, key=key)
        else:
            claim = store.claim(key, f"w{index}", ttl=60)
            summary = claim.put(ckpt)
    except ConflictError as exc:
        wanted = EXPECTED[kind]
        expected = type(exc) is wanted if kind in EXACT else isinstance(exc, wanted)
        return Result(index, False, type(exc).__name__, expected, message, base=base)
    finally:
        if kind == "claim":
            # the winner holds its lease until every contender has tried: a claim taken after
            # the release would be a new claim, not a second winner of this one
            barrier.wait(120)
            if claim is not None:
                claim.release()
    return Result(
        index,
        True,
        message=message,
        history=tuple(history),
        run_id=run_id,
        revision=summary.revision,
        saved_at=summary.saved_at,
        owner=summary.owner,
        base=base,
    )


class Campaign:
    def __init__(self, target: Target, seed: int, workers: int = WORKERS) -> None:
        self.target = target
        self.tally = Tally(target.backend)
        self.rng = random.Random(seed)
        self.workers = workers
        self.ctx = fork_context()

    def run(self, rounds: int) -> Tally:
        started = time.monotonic()
        barrier = self.ctx.Barrier(self.workers)
        pipes = []
        procs = []
        try:
            for index in range(self.workers):
                mine, theirs = self.ctx.Pipe()
                proc = self.ctx.Process(
                    target=race_worker, args=(self.target, index, theirs, barrier), daemon=True
                )
                proc.start()
                theirs.close()
                pipes.append(mine)
                procs.append(proc)
            for pipe in pipes:
                if not pipe.poll(120) or pipe.recv() != "ready":
                    raise RuntimeError("a race worker did not start")
            with self.target.open() as store:
                self.seed(store)
                for round_no in range(rounds):
                    kind = KINDS[round_no % len(KINDS)]
                    self.round(store, pipes, kind, round_no)
                self.check_listing(store)
        finally:
            for pipe in pipes:
                with contextlib.suppress(OSError):
                    pipe.send(None)
            for proc in procs:
                proc.join(30)
                if proc.is_alive():
                    proc.kill()
                    proc.join(5)
        self.tally.seconds = time.monotonic() - started
        wins = ", ".join(f"w{i} {self.tally.extra[f'won by w{i}']}" for i in range(self.workers))
        self.tally.notes.append(f"rounds won per worker: {wins}")
        return self.tally

    def seed(self, store: Store) -> None:
        for i in range(REUSED_KEYS):
            for prefix, failed in (("cas", False), ("run", True)):
                key = f"{prefix}-{i}"
                store.put(
                    _ckpt(f"{key}-seed", [("user", f"{key} seed")], key=key, failed=failed), key=key
                )

    def key_for(self, kind: str, round_no: int) -> str:
        slot = round_no // len(KINDS) % REUSED_KEYS
        return {
            "if_revision": f"cas-{slot}",
            "claim": f"run-{slot}",
            "create": f"new-{round_no}",
            "owner": f"own-{round_no}",
        }[kind]

    def round(self, store: Store, pipes: list[Connection], kind: str, round_no: int) -> None:
        tally = self.tally
        key = self.key_for(kind, round_no)
        before = store.head(key)
        for pipe in pipes:
            pipe.send((kind, key, round_no))
        results: list[Result] = []
        for pipe in pipes:
            if not pipe.poll(180):
                raise RuntimeError(f"round {round_no}: a worker did not answer in 180 s")
            results.append(pipe.recv())
        tally.trials += 1
        tally.extra[f"{kind} rounds"] += 1
        where = f"round {round_no} {kind} {key}"
        winners = [r for r in results if r.won]
        for r in results:
            if r.won:
                continue
            name = r.error.split(":", 1)[0]
            tally.errors[name] += 1
            if not r.expected:
                tally.violation("foreign", f"{where}: w{r.worker} raised {r.error}")
        if not winners:
            tally.violation("stalled", f"{where}: nobody won")
            return
        tally.acknowledged += len(winners)
        if len(winners) > 1:
            tally.violation(
                "wrongly_accepted",
                f"{where}: {len(winners)} winners ({[w.worker for w in winners]})",
            )
        winner = winners[0]
        tally.extra[f"won by w{winner.worker}"] += 1
        record = store.get_record(key)
        if record is None:
            tally.violation("lost", f"{where}: w{winner.worker} won, the key is missing")
            return
        try:
            ckpt = store.get(key)
        except CheckpointError as exc:
            tally.violation("torn", f"{where}: does not decode: {type(exc).__name__}: {exc}")
            return
        assert ckpt is not None
        history = tuple((m.role, m.content) for m in ckpt.history)
        if ckpt.run_id != winner.run_id or history != winner.history:
            holder = ckpt.run_id.rpartition("-w")[2]
            tally.violation(
                "torn" if ckpt.run_id == winner.run_id else "lost",
                f"{where}: holds {ckpt.run_id} (w{holder}'s), w{winner.worker} won",
            )
        summary = record.summary
        if (summary.revision, summary.saved_at, summary.owner) != (
            winner.revision,
            winner.saved_at,
            winner.owner,
        ):
            tally.violation(
                "torn",
                f"{where}: stored rev {summary.revision} owner {summary.owner}, the winner was "
                f"told rev {winner.revision} owner {winner.owner}",
            )
        step = 2 if kind == "claim" else 1  # claiming rewrites the run once (the fence)
        base = before.revision if before is not None else 0
        if summary.revision != base + step:
            tally.violation(
                "duplicated", f"{where}: revision {base} -> {summary.revision}, expected +{step}"
            )
        if kind == "owner" and summary.owner != f"p{winner.worker}":
            tally.violation("wrongly_accepted", f"{where}: owned by {summary.owner}")
        if kind == "claim" and any(c.key == key for c in store.claims()):
            tally.violation("stalled", f"{where}: the winner's claim was not released")
        listed = store.list(since=summary.saved_at, before=summary.saved_at + 1, limit=100)
        entry = next((s for s in listed if s.key == key), None)
        if entry is None or (entry.revision, entry.run_id) != (summary.revision, ckpt.run_id):
            tally.violation("index", f"{where}: listed as {entry}")

    def check_listing(self, store: Store) -> None:
        """Every key once in the listing, with its record's summary."""
        seen: dict[str, Any] = {}
        for s in store.iter_summaries(page_size=1000):
            if s.key in seen:
                self.tally.violation("index", f"{s.key} listed twice")
            seen[s.key] = s
        for key, s in seen.items():
            head = store.head(key)
            if head is None or head.revision != s.revision:
                self.tally.violation("index", f"{key}: listed rev {s.revision}, stored {head}")
        self.tally.extra["listed keys"] = len(seen)


def run_backend(
    backend: str, rounds: int, workdir: Path, s3: Any = None, *, seed: int | None = None
) -> Tally:
    """``rounds`` races (the four kinds in rotation) on a fresh store of ``backend``."""
    with open_target(backend, workdir, s3=s3) as target:
        chosen = seed if seed is not None else random.randrange(2**32)
        return Campaign(target, chosen).run(rounds)


EXTRAS = tuple((f"{kind} rounds", f"{kind}") for kind in KINDS)


def main(argv: list[str] | None = None) -> int:
    return main_for(
        "Race campaign: worker processes contend for one key; exactly one may win",
        run_backend,
        size_flag="rounds",
        full=1000,
        small=24,
        title=f"Race campaign: {WORKERS} worker processes per round",
        trial_word="rounds",
        extras=EXTRAS,
        argv=argv,
    )


if __name__ == "__main__":
    sys.exit(main())
