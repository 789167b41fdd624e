"""Crash campaign: a writer process killed with SIGKILL at a random moment during its puts.

Each trial forks one writer (from a fork server that has the library imported already, so a
trial costs milliseconds, not an interpreter start), which opens the store and loops over a
seeded mix of writes to a handful of keys:

- ``g*``: growing histories (most puts append one message: the segment path), restarting
  every ``GENERATION`` versions (a full rewrite);
- ``r*``: plain rewrites, each a different history of different size;
- ``c*``: growing histories written with ``if_revision`` (compare-and-swap);
- ``n<trial>-<j>``: create-only writes of fresh keys;
- ``stale``: writes the store must refuse (an old or future ``if_revision``, ``create_only``
  on an existing key); they must raise ``ConflictError`` and change nothing.

Before each put the writer logs ``B idx kind key version`` and after it ``A idx revision
savedAt`` (``C`` for a correct refusal, ``W`` for a wrong acceptance, ``E`` for an error), each
with one ``write`` on an ``O_APPEND`` file, so what survives the kill is exactly what happened.
The put in flight at the kill is the last ``B`` without an outcome: only it may have landed
without an ack. After the kill the campaign reads every key the trial touched and checks:

- the key holds its last acknowledged version, or the in-flight one (nothing else: an older
  version is a lost acknowledged put, an unknown one a torn or wrongly accepted write);
- the record decodes and its whole history is exactly the one of its version (not torn);
- its revision is the acknowledged one, or one more for the in-flight put (not applied twice);
- the listing agrees with the records: every record saved since the trial began is listed with
  its revision, savedAt and runId, and nothing else is; every 100 trials (and at the end) the
  whole listing is compared with every key's last observed state.

The disk store is reopened after every kill (its index reconciles writes that died midway).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sys
import time
import warnings
import zlib
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from agent_checkpoint import Identity, Message, RunCheckpoint, Store
from agent_checkpoint import errors as library_errors
from agent_checkpoint._envelope import conversation_of
from agent_checkpoint._model import now_ms
from agent_checkpoint.errors import CheckpointError, ConflictError

from .common import Tally, Target, fork_context, main_for, open_target

GENERATION = 24
"""A growing history restarts (a full, non-extending write) every this many versions."""
FULL_CHECK_EVERY = 100
KINDS = ("grow", "rewrite", "cas", "create", "stale")
WEIGHTS = (30, 20, 25, 13, 12)
PERSISTENT = {"grow": ("g0", "g1"), "rewrite": ("r0", "r1"), "cas": ("c0", "c1")}
SIZES = (8, 64, 512, 4096, 16384)
SETTLE = {"redis": 0.005, "postgres": 0.01, "s3": 0.05}
"""A request that reached the server before the kill still completes there (an S3 PUT can
commit a few hundred ms after its client died, a PostgreSQL COMMIT tens of ms): before a trial
is judged, the server's connections from the dead writer must be closed, and then the in-flight
key must read the same twice, this far apart."""
SETTLE_LIMIT = 20.0
KILL_WITHIN = 8
"""The kill comes after a uniform random delay of up to this many puts' time (adapted to the
backend's measured put latency), so it lands anywhere inside a put."""
FIRST_DELAY = {"disk": 0.08, "redis": 0.04, "postgres": 0.05, "s3": 0.3}
FIRST = -1
"""Stands for "a new key's first revision": any positive number."""


# -- what each version of each key holds -----------------------------------------------------


def _text(key: str, j: int, part: int) -> str:
    tag = f"{key}:{j}:{part}|"
    size = SIZES[zlib.crc32(tag.encode()) % len(SIZES)]
    return f"{key} v{j}.{part} " + (tag * (size // len(tag) + 1))[:size]


def expected_history(key: str, version: int) -> list[tuple[str, str]]:
    """(role, content) of every message the record of ``key`` holds at ``version``."""
    if key[0] in "gc":
        start = (version - 1) // GENERATION * GENERATION + 1
        parts = [(j, 0) for j in range(start, version + 1)]
    elif key[0] == "r":
        parts = [(version, part) for part in range(1 + version % 4)]
    else:
        parts = [(version, 0)]
    return [("user" if j % 2 else "assistant", _text(key, j, part)) for j, part in parts]


def checkpoint_for(key: str, version: int | None) -> RunCheckpoint:
    """The checkpoint written as ``version`` of ``key`` (``None``: a write to be refused)."""
    if version is None:
        history = [Message("user", f"{key} refused write")]
        run_id = f"{key}-refused"
    else:
        history = [Message(role, text) for role, text in expected_history(key, version)]
        run_id = f"{key}-v{version}"
    return RunCheckpoint.new(
        history[-1].content[:40],
        history,
        run_id=run_id,
        last_completed_iteration=version or 0,
        identity=Identity(key, principal="crash-owner"),
    )


def version_of(run_id: str) -> int | None:
    """The version a stored run id names; ``None`` for a write that had to be refused."""
    _, sep, tail = run_id.rpartition("-v")
    return int(tail) if sep and tail.isdigit() else None


# -- the writer (a forked child process) ------------------------------------------------------


@dataclass(frozen=True)
class WriterPlan:
    trial: int
    seed: int
    state: dict[str, tuple[int, int]]
    """``key -> (version, revision)`` as the campaign observed it before this trial."""


def writer_main(target: Target, plan: WriterPlan, log_path: str, ready: Connection) -> None:
    """Loop over seeded writes, logging intents and outcomes, until killed."""
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def emit(line: str) -> None:
        os.write(log, (line + "\n").encode())

    warnings.simplefilter("ignore")  # a Redis without persistence warns once per store
    try:
        store = target.open()
        state = dict(plan.state)
        rng = random.Random(plan.seed)
        ready.send_bytes(b"R")
        ready.close()
        created = 0
        idx = 0
        while True:
            kind = rng.choices(KINDS, WEIGHTS)[0]
            if_revision: int | None = None
            create_only = False
            if kind == "create":
                key, version = f"n{plan.trial}-{created}", 1
                created += 1
                create_only = True
            elif kind == "stale":
                existing = sorted(k for k in state if k[0] in "gc")
                if not existing:
                    continue
                key = rng.choice(existing)
                version, revision = 0, state[key][1]
                how = rng.randrange(3)
                if how == 0:
                    create_only = True
                else:
                    if_revision = revision - 1 if how == 1 and revision > 1 else revision + 7
            else:
                key = rng.choice(PERSISTENT[kind])
                version = state[key][0] + 1 if key in state else 1
                if kind == "cas":
                    if key in state:
                        if_revision = state[key][1]
                    else:
                        create_only = True
            ckpt = checkpoint_for(key, version or None)
            emit(f"B {idx} {kind} {key} {version}")
            try:
                summary = store.put(ckpt, key=key, if_revision=if_revision, create_only=create_only)
            except ConflictError as exc:
                if kind != "stale":
                    emit(f"E {idx} {type(exc).__name__} {str(exc)[:200]!r}")
                    os._exit(3)
                emit(f"C {idx}")
            except Exception as exc:
                emit(f"E {idx} {type(exc).__name__} {str(exc)[:200]!r}")
                os._exit(3)
            else:
                if kind == "stale":
                    emit(f"W {idx} {summary.revision}")
                    os._exit(3)
                emit(f"A {idx} {summary.revision} {summary.saved_at}")
                state[key] = (version, summary.revision)
            idx += 1
    except BaseException as exc:  # before the loop: opening the store failed
        emit(f"E -1 {type(exc).__name__} {str(exc)[:200]!r}")
        os._exit(3)


# -- waiting for the server ---------------------------------------------------------------


def server_port(target: Target) -> int | None:
    """The TCP port of the server behind ``target`` (``None`` for a folder on disk)."""
    url = target.s3.endpoint_url if target.s3 is not None else target.url
    if target.backend == "disk":
        return None
    parts = urlsplit(url)
    return parts.port or {"redis": 6379, "postgres": 5432, "s3": 443}.get(target.backend)


def closing_connections(port: int) -> int:
    """Server-side sockets on ``port`` whose client has gone (TCP state CLOSE_WAIT): the
    server has not finished with them yet. 0 where ``/proc/net/tcp`` cannot be read."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if (
                len(fields) > 3
                and fields[3] == "08"
                and int(fields[1].rsplit(":", 1)[1], 16) == port
            ):
                count += 1
    return count


# -- the campaign ---------------------------------------------------------------------------


@dataclass
class Op:
    idx: int
    kind: str
    key: str
    version: int
    outcome: str = ""  # A, C, W, E or "" (in flight at the kill)
    revision: int = 0
    saved_at: int = 0
    error: str = ""


def parse_log(data: bytes) -> tuple[list[Op], list[str]]:
    """The writer's operations in order, and errors it hit outside of any put."""
    ops: dict[int, Op] = {}
    stray: list[str] = []
    for raw in data.decode(errors="replace").splitlines():
        fields = raw.split(" ", 4)
        if len(fields) < 2 or not fields[1].lstrip("-").isdigit():
            continue
        tag, idx = fields[0], int(fields[1])
        if tag == "B" and len(fields) == 5:
            ops[idx] = Op(idx, fields[2], fields[3], int(fields[4]))
        elif idx in ops and tag in ("A", "C", "W", "E"):
            op = ops[idx]
            op.outcome = tag
            if tag == "A":
                op.revision, op.saved_at = int(fields[2]), int(fields[3])
            elif tag == "W":
                op.revision = int(fields[2])
            elif tag == "E":
                op.error = " ".join(fields[2:])
        elif tag == "E":
            stray.append(" ".join(fields[2:]))
    return [ops[i] for i in sorted(ops)], stray


def _library_error(name: str) -> bool:
    cls = getattr(library_errors, name, None)
    return isinstance(cls, type) and issubclass(cls, CheckpointError)


class Campaign:
    def __init__(self, target: Target, workdir: Path, seed: int) -> None:
        self.target = target
        self.tally = Tally(target.backend)
        self.rng = random.Random(seed)
        self.state: dict[str, tuple[int, int]] = {}
        self.log = workdir / f"crash-{target.backend}-{os.getpid()}.log"
        self.ctx = fork_context()
        self.per_put = FIRST_DELAY.get(target.backend, 0.1) / 12

    @property
    def reopen(self) -> bool:
        return self.target.backend == "disk"

    def run(self, trials: int) -> Tally:
        started = time.monotonic()
        checker = None if self.reopen else self.target.open()
        try:
            for trial in range(trials):
                self.trial(trial, checker)
                if (trial + 1) % FULL_CHECK_EVERY == 0 or trial == trials - 1:
                    if checker is not None:
                        self.check_full_listing(checker)
                    else:
                        with self.target.open() as store:
                            self.check_full_listing(store)
        finally:
            if checker is not None:
                checker.close()
            self.log.unlink(missing_ok=True)
        self.tally.seconds = time.monotonic() - started
        return self.tally

    def trial(self, trial: int, checker: Store | None) -> None:
        tally = self.tally
        plan = WriterPlan(trial, self.rng.getrandbits(32), dict(self.state))
        self.log.write_bytes(b"")
        since = now_ms()
        receive, send = self.ctx.Pipe(duplex=False)
        proc = self.ctx.Process(
            target=writer_main, args=(self.target, plan, str(self.log), send), daemon=True
        )
        proc.start()
        send.close()
        ready = False
        with contextlib.suppress(EOFError):
            ready = receive.poll(60) and receive.recv_bytes() == b"R"
        delay = 0.0 if self.rng.random() < 0.05 else self.rng.uniform(0, KILL_WITHIN * self.per_put)
        time.sleep(delay if ready else 0)
        if proc.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
        proc.join(30)
        receive.close()
        tally.trials += 1
        ops, stray = parse_log(self.log.read_bytes())
        for message in stray:
            self._logged_error(message, "opening the store")
        if not ready and not stray:
            tally.violation("stalled", f"trial {trial}: the writer never started")
        if ops and delay > 0:  # how long a put takes here, to aim the next kill
            self.per_put = 0.8 * self.per_put + 0.2 * (delay / len(ops))
        if checker is not None:
            self.settle(checker, ops)
            self.check(checker, trial, ops, since)
        else:
            with self.target.open() as store:
                self.check(store, trial, ops, since)

    def settle(self, store: Store, ops: list[Op]) -> None:
        """Wait until the server has finished with the dead writer's connections, so the put in
        flight at the kill (if any) has landed or never will: a server closes a connection whose
        client died (CLOSE_WAIT ends) only after the request it was serving is done."""
        port = server_port(self.target)
        if port is None or not ops or ops[-1].outcome not in ("", "E"):
            return
        deadline = time.monotonic() + SETTLE_LIMIT
        waited = False
        while closing_connections(port) and time.monotonic() < deadline:
            waited = True
            time.sleep(0.005)
        if waited:
            self.tally.extra["settled late"] += 1
        # and the in-flight key reads the same twice in a row (no request still queued)
        key = ops[-1].key
        seen = store.get_record(key)
        for _ in range(50):
            time.sleep(SETTLE.get(self.target.backend, 0.01))
            now = store.get_record(key)
            if (now is None and seen is None) or (
                now is not None and seen is not None and now.summary == seen.summary
            ):
                return
            self.tally.extra["settled late"] += 1
            seen = now

    def _logged_error(self, message: str, where: str) -> None:
        name = message.split(" ", 1)[0]
        self.tally.errors[name] += 1
        if not _library_error(name):
            self.tally.violation("foreign", f"{where}: {message[:300]}")

    def check(self, store: Store, trial: int, ops: list[Op], since: int) -> None:
        tally = self.tally
        last_acked: dict[str, Op] = {}
        ambiguous: dict[str, Op] = {}  # a put that may have landed without an ack
        for op in ops:
            if op.outcome == "A":
                tally.acknowledged += 1
                last_acked[op.key] = op
                ambiguous.pop(op.key, None)
            elif op.outcome == "W":
                tally.violation(
                    "wrongly_accepted", f"trial {trial}: refused write #{op.idx} to {op.key} landed"
                )
            elif op.outcome == "C":
                tally.extra["refused"] += 1
            elif op.outcome == "E":
                self._logged_error(op.error, f"trial {trial} put #{op.idx} {op.kind} {op.key}")
                if op.kind != "stale":
                    ambiguous[op.key] = op
            elif op.kind != "stale":
                ambiguous[op.key] = op  # in flight at the kill
        touched = sorted({op.key for op in ops})
        records = {}
        for key in touched:
            record = self.check_key(store, trial, key, last_acked.get(key), ambiguous.get(key))
            if record is not None:
                records[key] = record
        # The listing from the index: every record saved since the trial began, nothing else.
        listed = {s.key: s for s in store.iter_summaries(since=since)}
        for key, summary in records.items():
            if summary.saved_at < since:
                continue
            entry = listed.get(key)
            if entry is None:
                tally.violation("index", f"trial {trial}: {key} saved but not listed")
            elif (entry.revision, entry.saved_at, entry.run_id) != (
                summary.revision,
                summary.saved_at,
                summary.run_id,
            ):
                tally.violation(
                    "index",
                    f"trial {trial}: {key} listed as rev {entry.revision} {entry.run_id} "
                    f"at {entry.saved_at}, stored rev {summary.revision} {summary.run_id} "
                    f"at {summary.saved_at}",
                )
        for key in listed.keys() - records.keys():
            tally.violation("index", f"trial {trial}: {key} listed but not saved in this trial")

    def check_key(
        self, store: Store, trial: int, key: str, acked: Op | None, pending: Op | None
    ) -> Any:
        tally = self.tally
        before = self.state.get(key)
        if acked is not None:
            base: tuple[int, int] | None = (acked.version, acked.revision)
        else:
            base = before
        # a live key's revision moves by exactly one per write; a new key's first revision is
        # any positive number (Redis and PostgreSQL number new keys past a store-wide high-water)
        allowed: dict[int | None, int] = {None if base is None else base[0]: base[1] if base else 0}
        if pending is not None:
            allowed[pending.version] = base[1] + 1 if base else FIRST
        where = f"trial {trial}: {key}"
        record = store.get_record(key)
        if record is None:
            if base is not None:
                tally.violation("lost", f"{where} is gone; version {base[0]} was acknowledged")
            return None
        try:
            ckpt = conversation_of(store.decode(record))
        except CheckpointError as exc:
            tally.violation("torn", f"{where} does not decode: {type(exc).__name__}: {exc}"[:300])
            return None
        assert ckpt is not None
        version = version_of(ckpt.run_id)
        if version is None:
            tally.violation("wrongly_accepted", f"{where} holds a write that had to be refused")
            return record.summary
        history = [(m.role, m.content) for m in ckpt.history]
        if history != expected_history(key, version):
            tally.violation("torn", f"{where} version {version} holds another history")
        if version not in allowed:
            if base is not None and version < base[0]:
                tally.violation(
                    "lost", f"{where} went back to version {version}; {base[0]} was acknowledged"
                )
            else:
                tally.violation("torn", f"{where} holds version {version}, never written")
        else:
            revision = record.summary.revision
            if revision != allowed[version] and not (allowed[version] == FIRST and revision >= 1):
                tally.violation(
                    "duplicated",
                    f"{where} version {version} is at revision {revision}, "
                    f"expected {allowed[version]}",
                )
            if (
                acked is not None
                and version == acked.version
                and record.summary.saved_at != acked.saved_at
            ):
                tally.violation("index", f"{where} savedAt differs from its acknowledgement")
            if pending is not None and version == pending.version:
                tally.extra["in-flight landed"] += 1
        if record.summary.run_id != ckpt.run_id:
            tally.violation("index", f"{where} summary runId {record.summary.run_id}")
        self.state[key] = (version, record.summary.revision)
        return record.summary

    def check_full_listing(self, store: Store) -> None:
        """The whole listing against the last observed state of every key."""
        tally = self.tally
        listed = {s.key: s for s in store.iter_summaries(page_size=1000)}
        for key, (version, revision) in self.state.items():
            entry = listed.pop(key, None)
            if entry is None:
                tally.violation("index", f"full listing: {key} is missing")
            elif (entry.revision, entry.run_id) != (revision, f"{key}-v{version}"):
                tally.violation(
                    "index",
                    f"full listing: {key} listed at rev {entry.revision} {entry.run_id}, "
                    f"stored rev {revision} v{version}",
                )
        for key in listed:
            tally.violation("index", f"full listing: {key} listed but never stored")
        tally.extra["listing checks"] += 1


def run_backend(
    backend: str, trials: int, workdir: Path, s3: Any = None, *, seed: int | None = None
) -> Tally:
    """``trials`` crash trials on a fresh store of ``backend``; the tally of what was found."""
    with open_target(backend, workdir, s3=s3) as target:
        return Campaign(target, workdir, seed if seed is not None else random.randrange(2**32)).run(
            trials
        )


EXTRAS = (
    ("in-flight landed", "in-flight landed"),
    ("refused", "refused ok"),
    ("settled late", "settled late"),
)


def main(argv: list[str] | None = None) -> int:
    return main_for(
        __doc__.split("\n", 1)[0] if __doc__ else "crash campaign",
        run_backend,
        size_flag="trials",
        full=1000,
        small=20,
        title="Crash campaign: writer killed with SIGKILL during puts",
        extras=EXTRAS,
        argv=argv,
    )


if __name__ == "__main__":
    sys.exit(main())
