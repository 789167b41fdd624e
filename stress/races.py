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
  winner writes through its claim and releases it;
- ``recreate`` (delete and re-create under a stale compare-and-swap): every worker reads a fresh
  key's revision ``r``; then w0 deletes the key and writes it anew while the others put with
  ``if_revision=r``. Only w0 may win: a re-created key never gets a revision it had before, so
  every stale put must raise ``ConflictError`` (with revisions restarting at 1 they landed);
- ``late_release`` (a lease released twice): w0 claims with a lease that expires, w1 claims and
  releases, w2 claims, then w0's late ``release()`` runs and w3 claims. w3 must raise
  ``ClaimedError`` (w2's lease is live) and w2 writes through its claim: the late release must
  not drop a lease it was not granted;
- ``prune`` (delete and re-create during a prune): the campaign stores ``PRUNED`` keys, takes a
  cutoff, then w0 runs ``forget_older_than(cutoff)`` while w1..w3 delete and re-create them. No
  re-created record (saved after the cutoff) may be deleted by the prune; every key nobody
  re-created is gone.

After each round: exactly one winner (more is a wrongly accepted write, none a stall), every
loser raised the expected class (anything else is ``foreign``), the stored record is exactly
the winner's (its history, revision, owner and savedAt: nothing half-written or mixed), the
revision moved by exactly what the winner did, the listing shows the winner's summary, and no
claim is left behind. Prune rounds are judged on their own keys (``Campaign.judge_prune``).
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
from agent_checkpoint._claims import ClaimedError
from agent_checkpoint._model import FailurePoint
from agent_checkpoint.backends import Summary
from agent_checkpoint.errors import CheckpointError, ConflictError, OwnershipConflictError

from .common import Tally, Target, fork_context, main_for, open_target

KINDS = ("if_revision", "create", "owner", "claim", "recreate", "late_release", "prune")
WORKERS = 4
REUSED_KEYS = 6
"""``if_revision`` and ``claim`` rounds rotate over this many keys each."""
PRUNED = 12
"""Keys a prune round stores before its cutoff; w1..w3 re-create a third of them each."""
SHORT_TTL = 0.3
"""Seconds of the lease w0 lets expire in ``late_release`` rounds."""
EXPECTED: dict[str, type[ConflictError]] = {
    "if_revision": ConflictError,
    "create": ConflictError,
    "owner": OwnershipConflictError,
    "claim": ClaimedError,
    "recreate": ConflictError,
    "late_release": ClaimedError,
    "prune": ConflictError,  # nobody loses a prune round
}
EXACT = {"if_revision", "create", "recreate"}
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
    recreated: tuple[tuple[str, str], ...] = ()  # prune rounds: (key, runId) re-created


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
                if kind == "prune":
                    result = _prune(store, index, key, round_no, barrier)
                elif kind == "late_release":
                    result = _late_release(store, index, key, round_no, barrier)
                else:
                    result = _contend(store, index, kind, key, round_no, barrier)
            except Exception as exc:  # reported to the campaign, which judges it
                result = Result(index, False, f"{type(exc).__name__}: {str(exc)[:300]}")
            conn.send(result)
    finally:
        store.close()


def _won(
    index: int,
    message: str,
    history: list[tuple[str, str]],
    run_id: str,
    summary: Summary,
    base: int,
) -> Result:
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


def _contend(store: Store, index: int, kind: str, key: str, round_no: int, barrier: Any) -> Result:
    message = f"{key} round {round_no} by w{index}"
    base = 0
    history: list[tuple[str, str]] = []
    principal = None
    if kind in ("if_revision", "recreate"):
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
        if kind == "recreate" and index == 0:
            store.delete(key)
            summary = store.put(ckpt, key=key)
            barrier.wait(60)  # re-created before the others write
        elif kind == "recreate":
            barrier.wait(60)
            summary = store.put(ckpt, key=key, if_revision=base)
        elif kind == "if_revision":
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
    return _won(index, message, history, run_id, summary, base)


def _late_release(store: Store, index: int, key: str, round_no: int, barrier: Any) -> Result:
    """One part of a ``late_release`` round; the steps are ordered by the barrier."""
    message = f"{key} round {round_no} by w{index}"
    head = store.head(key)
    assert head is not None, f"{key} was seeded"
    base = head.revision
    history = [("user", message)]
    run_id = f"{key}-r{round_no}-w{index}"
    late = store.claim(key, f"w{index}", ttl=SHORT_TTL) if index == 0 else None
    barrier.wait(60)  # 1: w0 holds a lease that is about to expire
    if index == 1:
        time.sleep(SHORT_TTL + 0.05)
        store.claim(key, "w1", ttl=60).release()
    barrier.wait(60)  # 2: w0's lease expired, w1 claimed and released
    held = store.claim(key, "w2", ttl=60) if index == 2 else None
    barrier.wait(60)  # 3: w2 holds a live lease
    if late is not None:
        late.release()  # must not drop w2's lease
    barrier.wait(60)  # 4: the late release ran
    outcome: Result | None = None
    if index == 3:
        try:
            store.claim(key, "w3", ttl=60).release()
        except ClaimedError as exc:
            outcome = Result(index, False, type(exc).__name__, True, message, base=base)
        else:
            outcome = Result(index, False, "claimed a run w2 held", False, message, base=base)
    elif held is not None:
        summary = held.put(_ckpt(run_id, history, key=key))
        outcome = _won(index, message, history, run_id, summary, base)
    barrier.wait(120)  # 5: w3 tried while w2 held the lease
    if held is not None:
        held.release()
    # w0 and w1 did their part without error; they neither win nor lose the run
    part = "late release" if index == 0 else "claimed and released"
    return outcome or Result(index, False, part, True, message, base=base)


def _prune(store: Store, index: int, prefix: str, round_no: int, barrier: Any) -> Result:
    """w0 prunes everything saved before the cutoff (encoded in ``prefix``, ``name@cutoff``);
    w1..w3 delete and re-create their third of the round's keys meanwhile."""
    name, _, cutoff = prefix.partition("@")
    mine = [f"{name}-{i}" for i in range(PRUNED) if i % (WORKERS - 1) == index - 1]
    barrier.wait(60)
    if index == 0:
        forgotten = store.forget_older_than(int(cutoff), limit=10_000)
        return Result(index, False, "pruned", True, f"pruned {forgotten.forgotten}")
    recreated = []
    for key in mine:
        store.delete(key)
        run_id = f"{key}-again-w{index}"
        store.put(_ckpt(run_id, [("user", f"{key} again")], key=key), key=key)
        recreated.append((key, run_id))
    return Result(index, False, "recreated", True, recreated=tuple(recreated))


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
                if store.head(key) is not None:
                    continue
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
            "recreate": f"aba-{round_no}",
            "late_release": f"lease-{round_no}",
            "prune": f"old-{round_no}",
        }[kind]

    def prepare(self, store: Store, kind: str, key: str) -> str:
        """Store what a round needs that the seed did not; the key the workers are sent."""
        if kind in ("recreate", "late_release"):
            store.put(
                _ckpt(f"{key}-seed", [("user", f"{key} seed")], key=key, failed=True), key=key
            )
        elif kind == "prune":
            for i in range(PRUNED):
                old = f"{key}-{i}"
                store.put(_ckpt(f"{old}-seed", [("user", f"{old} seed")], key=old), key=old)
            time.sleep(0.002)
            cutoff = store._now()
            time.sleep(0.002)  # every re-created record is saved strictly after the cutoff
            return f"{key}@{cutoff}"
        return key

    def round(self, store: Store, pipes: list[Connection], kind: str, round_no: int) -> None:
        tally = self.tally
        key = self.key_for(kind, round_no)
        sent = self.prepare(store, kind, key)
        before = store.head(key)
        for pipe in pipes:
            pipe.send((kind, sent, round_no))
        results: list[Result] = []
        for pipe in pipes:
            if not pipe.poll(180):
                raise RuntimeError(f"round {round_no}: a worker did not answer in 180 s")
            results.append(pipe.recv())
        tally.trials += 1
        tally.extra[f"{kind} rounds"] += 1
        where = f"round {round_no} {kind} {key}"
        if kind == "prune":
            self.judge_prune(store, where, key, results)
            self.seed(store)  # the prune took the other rounds' keys too (all saved before)
            return
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
        # a live key moves by one per write (claiming rewrites the run once: the fence); a new
        # or re-created key starts past every revision it had, by any amount
        step = {"claim": 2, "late_release": 4}.get(kind, 1)
        base = before.revision if before is not None else 0
        if kind in ("create", "owner", "recreate"):
            if summary.revision <= base:
                tally.violation(
                    "duplicated", f"{where}: revision {base} -> {summary.revision}, a repeat"
                )
        elif summary.revision != base + step:
            tally.violation(
                "duplicated", f"{where}: revision {base} -> {summary.revision}, expected +{step}"
            )
        if kind == "owner" and summary.owner != f"p{winner.worker}":
            tally.violation("wrongly_accepted", f"{where}: owned by {summary.owner}")
        if kind in ("claim", "late_release") and any(c.key == key for c in store.claims()):
            tally.violation("stalled", f"{where}: the winner's claim was not released")
        listed = store.list(since=summary.saved_at, before=summary.saved_at + 1, limit=100)
        entry = next((s for s in listed if s.key == key), None)
        if entry is None or (entry.revision, entry.run_id) != (summary.revision, ckpt.run_id):
            tally.violation("index", f"{where}: listed as {entry}")

    def judge_prune(self, store: Store, where: str, name: str, results: list[Result]) -> None:
        tally = self.tally
        recreated = dict(pair for r in results for pair in r.recreated)
        for r in results:
            if not r.expected:
                tally.violation("foreign", f"{where}: w{r.worker} raised {r.error}")
        tally.acknowledged += 1 if all(r.expected for r in results) else 0
        tally.extra["re-created during a prune"] += len(recreated)
        for i in range(PRUNED):
            key = f"{name}-{i}"
            record = store.get(key)
            if key in recreated:
                if record is None:
                    tally.violation(
                        "lost", f"{where}: the prune deleted {key}, re-created after it"
                    )
                elif record.run_id != recreated[key]:
                    tally.violation("torn", f"{where}: {key} holds {record.run_id}")
            elif record is not None:
                tally.violation("stalled", f"{where}: {key} is older than the cutoff, not pruned")

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
