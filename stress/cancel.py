"""Cancellation campaign: ``AsyncStore`` puts cancelled at random instants, on every backend.

``WORKERS`` tasks share one ``AsyncStore`` (so its thread pool or connection pool is busy, and
a call may be cancelled while it waits for a thread or a connection), each on keys of its own
whose histories grow, so puts go through the segment layer's append path as well as full
writes. A trial, on one key:

1. put the next version ``A`` (most often the stored history and a few messages more, now and
   then a different history: a full write) in a task cancelled at a random instant: after a
   random number of turns of the event loop, or after a random time up to twice the typical
   put's;
2. read the key: it holds the last acknowledged version, or ``A`` (the cancelled put landed, or
   finished before the cancellation came); ``A`` if the put returned; anything else is torn;
3. put ``B`` (what was read, plus a message), acknowledged, and read it back.

A cancelled put may land, but never over a put acknowledged after its cancellation. At the end,
after ``SETTLE`` seconds that let anything still running finish, every key must hold its last
acknowledged version, read through the same store and through one opened anew (where the
backend keeps data across openings), and ``verify`` must find every record readable and the
index true.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent_checkpoint import Message, RunCheckpoint, open_store
from agent_checkpoint._async_store import AsyncStore, open_async_store

from .common import Tally, main_for, open_target

BACKENDS = ("disk", "memory", "redis", "postgres", "s3", "fsspec")
WORKERS = 4
KEYS = 3
"""Keys per worker."""
LONGEST = 120
"""A history that grows past this many messages starts again (a full write)."""
SETTLE = 0.5
"""Seconds the campaign waits before its last reads: a put still running after its caller
was cancelled (the bug this campaign looks for) lands within them."""


@dataclass
class Worker:
    """One task's keys: the history of each key's last acknowledged put."""

    name: str
    rng: random.Random
    acked: dict[str, tuple[Message, ...]] = field(default_factory=dict)
    versions: int = 0


class Campaign:
    def __init__(self, backend: str, store: AsyncStore, seed: int) -> None:
        self.backend = backend
        self.store = store
        self.seed = seed
        self.tally = Tally(backend)
        self.durations: list[float] = [0.005]

    def message(self, worker: Worker, key: str, i: int, rng: random.Random) -> Message:
        worker.versions += 1
        text = f"{key}:{i}:v{worker.versions} " + "x" * rng.choice((40, 400, 4000))
        return Message("user" if i % 2 == 0 else "assistant", text)

    def next_version(
        self, worker: Worker, key: str, base: tuple[Message, ...]
    ) -> tuple[Message, ...]:
        rng = worker.rng
        if len(base) >= LONGEST or rng.random() < 0.15:  # a different history: a full write
            return tuple(self.message(worker, key, i, rng) for i in range(rng.randint(1, 8)))
        more = rng.randint(1, 4)
        return base + tuple(self.message(worker, key, len(base) + i, rng) for i in range(more))

    def typical(self) -> float:
        return statistics.median(self.durations[-50:])

    async def cancel_soon(self, rng: random.Random) -> None:
        if rng.random() < 0.5:
            for _ in range(rng.randint(0, 40)):
                await asyncio.sleep(0)
        else:
            await asyncio.sleep(rng.uniform(0, 2 * self.typical()))

    async def put(self, key: str, history: tuple[Message, ...]) -> None:
        began = time.perf_counter()
        await self.store.put(RunCheckpoint.new("cancel campaign", history, run_id=key), key=key)
        self.durations.append(time.perf_counter() - began)

    async def stored(self, key: str) -> tuple[Message, ...] | None:
        got = await self.store.get(key)
        return None if got is None else got.history

    async def trial(self, worker: Worker, key: str) -> None:
        tally = self.tally
        before = worker.acked.get(key, ())
        version_a = self.next_version(worker, key, before)
        task = asyncio.create_task(self.put(key, version_a))
        await self.cancel_soon(worker.rng)
        task.cancel()
        finished = False
        try:
            await task
            finished = True
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # the library's errors only; anything else is foreign
            tally.error(exc, f"{key}: cancelled put")
        tally.trials += 1
        where = f"trial {tally.trials} {key}"
        if finished:
            tally.acknowledged += 1
            tally.extra["finished first"] += 1
            worker.acked[key] = version_a
        found = await self.stored(key)
        if found == version_a:
            worker.acked[key] = version_a
            if not finished:
                tally.extra["cancelled, landed"] += 1
        elif found == (before or None) and not finished:
            tally.extra["cancelled, not landed"] += 1
        elif finished:
            tally.violation("lost", f"{where}: a put that returned is not stored")
        else:
            # an older version: a put cancelled before landed over the last acknowledged one
            tally.violation("lost", f"{where}: neither the acknowledged nor the cancelled version")
        base = found or ()
        version_b = (*base, self.message(worker, key, len(base), worker.rng))
        try:
            await self.put(key, version_b)
        except Exception as exc:
            tally.error(exc, f"{key}: acknowledged put")
            return
        tally.acknowledged += 1
        worker.acked[key] = version_b
        if await self.stored(key) != version_b:
            tally.violation("lost", f"{where}: the put after the cancelled one is not stored")

    async def work(self, worker: Worker, trials: int) -> None:
        keys = [f"{worker.name}-k{k}" for k in range(KEYS)]
        for n in range(trials):
            await self.trial(worker, keys[n % KEYS])

    async def run(self, trials: int) -> dict[str, tuple[Message, ...]]:
        workers = [Worker(f"w{w}", random.Random(self.seed * 100 + w)) for w in range(WORKERS)]
        await self.store.setup()
        shares = [trials // WORKERS + (w < trials % WORKERS) for w in range(WORKERS)]
        await asyncio.gather(*(self.work(w, n) for w, n in zip(workers, shares, strict=True)))
        await asyncio.sleep(SETTLE)
        acked = {key: history for w in workers for key, history in w.acked.items()}
        for key, history in acked.items():
            if await self.stored(key) != history:
                self.tally.violation("lost", f"{key}: after the campaign, not its last acked put")
        report = await self.store.verify()
        for kind in ("unreadable", "stale", "unlisted"):
            for key in getattr(report, kind):
                self.tally.violation("index", f"verify: {key} {kind}")
        self.tally.extra["keys"] = len(acked)
        return acked


@contextmanager
def cancel_target(backend: str, workdir: Path, s3: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """An empty store on ``backend`` as a URL and ``open_store`` options."""
    if backend == "memory":
        yield "memory://", {}
    elif backend == "fsspec":
        path = f"/ac-cancel/{uuid.uuid4().hex[:10]}"
        try:
            yield f"fsspec+memory://{path}", {}
        finally:
            import fsspec

            with contextlib.suppress(FileNotFoundError):
                fsspec.filesystem("memory").rm(path, recursive=True)
    else:
        with open_target(backend, workdir, s3=s3) as target:
            yield target.url, ({"client": target.s3.client()} if target.s3 is not None else {})


def run_backend(
    backend: str, trials: int, workdir: Path, s3: Any = None, *, seed: int | None = None
) -> Tally:
    """``trials`` cancelled puts on a fresh store of ``backend``."""
    chosen = seed if seed is not None else random.randrange(2**32)
    began = time.monotonic()
    with cancel_target(backend, workdir, s3) as (url, options):

        async def campaign() -> tuple[Campaign, dict[str, tuple[Message, ...]]]:
            async with open_async_store(url, **options) as store:
                run = Campaign(backend, store, chosen)
                return run, await run.run(trials)

        run, acked = asyncio.run(campaign())
        if backend != "memory":  # each opening of memory:// is a new, empty store
            with open_store(url, **options) as fresh:
                for key, history in acked.items():
                    got = fresh.get(key)
                    if got is None or got.history != history:
                        run.tally.violation("lost", f"{key}: read anew, not its last acked put")
    run.tally.seconds = time.monotonic() - began
    run.tally.notes.append(f"seed {chosen}")
    return run.tally


EXTRAS = (
    ("cancelled, landed", "cancelled, landed"),
    ("cancelled, not landed", "cancelled, not landed"),
    ("finished first", "finished first"),
)


def main(argv: list[str] | None = None) -> int:
    return main_for(
        __doc__.split("\n", 1)[0] if __doc__ else "cancel campaign",
        run_backend,
        size_flag="trials",
        full=2000,
        small=60,
        backends=BACKENDS,
        title=f"Cancellation campaign: {WORKERS} tasks on one AsyncStore, puts cancelled at random",
        extras=EXTRAS,
        argv=argv,
    )


if __name__ == "__main__":
    sys.exit(main())
