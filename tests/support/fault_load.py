"""Write load under injected faults, shared by the backends' fault tests: writers putting
distinct keys while connections are reset or refused, a backend wrapper counting the transient
faults the writers met, and the check that no acknowledged write was lost."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agent_checkpoint import Store
from agent_checkpoint.errors import BackendUnavailableError
from agent_checkpoint.testing import checkpoint
from support.faultproxy import FaultProxy


class CountingBackend:
    """Delegates to a backend, counting the transient faults its saves met before any retry."""

    def __init__(self, backend: Any) -> None:
        self.inner = backend
        self.name = backend.name
        self.transient = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _counted(self, write: Callable[[], Any]) -> Any:
        try:
            return write()
        except BackendUnavailableError:
            self.transient += 1
            raise

    def save(self, record: Any, **options: Any) -> Any:
        return self._counted(lambda: self.inner.save(record, **options))


def count_faults(backend: Any) -> CountingBackend:
    """``backend`` wrapped to count its transient faults (the Store's segment layer commits
    every write with a ``save``, so those are all of them)."""
    return CountingBackend(backend)


@dataclass
class WriterLoop:
    """Puts distinct keys (half of them create-only) until stopped, recording each outcome."""

    store: Store
    writers: int = 2
    patience: float = 20.0  # seconds ``acked_after`` waits for progress
    acked: dict[str, str] = field(default_factory=dict)
    failed: list[BaseException] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self, name: str) -> None:
        i = 0
        while not self.stop.is_set():
            key, text = f"{name}-{i}", f"payload {name} {i}"
            try:
                self.store.put(checkpoint(key, text=text), key=key, create_only=i % 2 == 0)
                self.acked[key] = text
            except Exception as exc:  # every outcome is asserted on below
                self.failed.append(exc)
            i += 1

    def during(self, faults: Callable[[], None]) -> None:
        threads = [threading.Thread(target=self.run, args=(f"w{n}",)) for n in range(self.writers)]
        for t in threads:
            t.start()
        try:
            faults()
        finally:
            self.stop.set()
            for t in threads:
                t.join(60)

    def acked_after(self, count: int) -> None:
        deadline = time.monotonic() + self.patience
        target = len(self.acked) + count
        while len(self.acked) < target and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(self.acked) >= target, "the writers made no progress"


def resets_and_refusals(loop: WriterLoop, proxy: FaultProxy, *, between: int, after: int) -> None:
    """Four rounds of every connection reset, then refusals for 0.3 s; ``between`` writes are
    acknowledged before each round and at the end, ``after`` writes after each reset."""
    for _ in range(4):
        loop.acked_after(between)
        proxy.reset_all()
        loop.acked_after(after)
        with proxy.refusing():
            time.sleep(0.3)
    loop.acked_after(between)


def assert_nothing_acknowledged_was_lost(
    loop: WriterLoop, reader: Store, backend: str, *, operations: tuple[str, ...] = ("save",)
) -> None:
    """Every acknowledged write reads back, and every failure is ``backend``'s error of one of
    the ``operations`` a put makes (over the store's segment layer, a put of a key it has not
    written reads the record it replaces first: ``load``)."""
    assert loop.acked
    for key, text in loop.acked.items():
        got = reader.get(key)
        assert got is not None, f"acknowledged write {key!r} was lost"
        assert got.history[0].content == f"{text} 0"
    for exc in loop.failed:
        assert isinstance(exc, BackendUnavailableError), repr(exc)
        assert exc.backend == backend and exc.operation in operations, repr(exc)
        assert str(exc).startswith(f"{backend} {exc.operation} failed")
