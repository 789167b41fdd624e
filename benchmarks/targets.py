"""What the harness drives: a ``Target`` (one store technology through one API) opens
``Instance``s, each a fresh namespace (prefix, schema, bucket prefix, folder or file) that
``close`` removes.

Timing rule: building the caller's object (a ``RunCheckpoint``, a LangGraph checkpoint, a list
of session items) happens in ``prepare``, outside the clock, as it lives in the agent already;
``put`` (the store call) and ``get`` (the store call that gives the messages back) are timed.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from workload import Turn

LIST_LIMIT = 100


class Unavailable(Exception):
    """This target cannot run here; the message says why (printed, then the run goes on)."""


class Instance(Protocol):
    def prepare(self, key: str, history: Any, n: int, *, step: bool) -> Any:
        """The object ``put`` stores: a checkpoint of ``history[:n]`` or, for an append-only
        session with ``step``, the items added since the previous step. Untimed."""
        ...

    def put(self, key: str, prepared: Any) -> None: ...

    def get(self, key: str) -> int:
        """Read ``key`` back through the API; the number of messages it holds."""
        ...

    def stored_bytes(self) -> int | None:
        """Bytes the server holds for this namespace, measured on the server."""
        ...

    def load_runs(self, count: int, progress: Callable[[int], None]) -> list[str]:
        """Store ``count`` small runs as fast as the API allows; the keys (thread ids) of the
        newest ``LIST_LIMIT``, newest first. Raises ``Unavailable`` when listing is not offered."""
        ...

    def list_newest(self, limit: int) -> list[str]:
        """The keys of the newest ``limit`` runs, through the API, newest first."""
        ...

    def close(self) -> None: ...


class Target(Protocol):
    name: str
    """Row label: ``ours``, ``floor``, or the peer's name."""
    backend: str
    """The kind of storage: memory, disk, sqlite, redis, postgres, s3, fsspec."""
    family: str
    """``ours``, ``floor`` or ``peer``."""
    version: str

    def convert(self, turns: tuple[Turn, ...]) -> Any:
        """The conversation in this API's own message type (untimed, once per N)."""
        ...

    def open(self) -> Instance: ...


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Collect once, then move every live object out of the collector's reach for the block:
    the ``gc.collect()`` before each timed call then walks only what the block created,
    instead of the whole heap (botocore's models, LangChain, the conversations)."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def timed(fn: Callable[[], Any], *, collect: bool = True) -> tuple[float, Any]:
    """Seconds spent in ``fn`` and its result; garbage collected first (when ``collect``) so
    earlier work is not billed to it."""
    if collect:
        gc.collect()
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result
