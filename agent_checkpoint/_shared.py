"""One backend per process for each store URL and its options: the shared, counted pools.

Agent services open a store per request (an integration's session object made from a URL)
and rarely close it. Were each opening to make its own backend, each would hold its own
connection pool, and a server's connections would run out after a few hundred requests. So
``open_store`` and ``open_async_store`` take their backend from this registry: the first
opening of a URL with given backend options makes it, later ones share it, each holding a
reference (a ``Lease``), and the backend closes when its last reference goes. Options of the
``Store`` itself (keyring, compression, retries, migrations, record limit) are the store's
own: stores that differ only in those share the backend.

A reference goes when its store is closed, or, for one dropped without ``close()``, when it
is garbage collected (``weakref.finalize``). Whatever is still open when the interpreter
exits is closed then, each close bounded by ``_home.EXIT_WAIT``: a process that leaves stores
open still exits. A process that holds more than ``POOL_WARNING`` distinct pools at once is
warned, once, with the fix: open stores with the same URL and options, or pass one ``Store``.

Not shared: a store on a client you pass (``client=``: yours, as is its pool), on backend
options that cannot be compared (unhashable values), and ``memory://``, whose every opening is
a new, empty store by contract. A forked child starts with an empty registry: its parent's
connections are not its to use or to close.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import weakref
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from . import _home
from ._bridge import bridged

__all__ = ["POOL_WARNING", "Lease", "Shared", "acquire", "borrow", "key_for", "live", "track"]

POOL_WARNING = 8
"""Distinct live shared backends past which a process is warned (once) that it opens too many."""

log = logging.getLogger("agent_checkpoint")


@dataclass(eq=False)
class Shared:
    """One shared backend and what runs it: ``value`` (for an ``AsyncStore``, the backend and
    its runner), ``closer`` (closes it: blocking, or from a bridged call), ``refs``."""

    key: Hashable
    value: Any
    closer: Callable[[], None]
    bridge: Any = None
    """The ``Bridge`` its closer must run in (an asyncio driver's backend), else ``None``."""
    refs: int = 0
    borrowers: int = 0
    closed: bool = field(default=False)

    def close(self) -> None:
        """Close now, here (an explicit ``close()`` of the last store)."""
        if self.bridge is not None and not bridged():
            self.close_later(wait=_home.EXIT_WAIT)
        elif not self.closed:
            self.closed = True
            self.closer()

    def close_later(self, wait: float | None = None) -> None:
        """Close without blocking the caller (a garbage collection may run anywhere: in a
        driver's own thread, say), or waiting ``wait`` seconds at most (at exit)."""
        if self.closed:
            return
        self.closed = True
        if self.bridge is not None:
            bridge, closer = self.bridge, self.closer
            _home.run_at_home(lambda: bridge.run(closer), wait)
            return
        thread = threading.Thread(target=_quietly, args=(self.closer,), daemon=True)
        thread.name = "agent-checkpoint-close"
        thread.start()
        if wait is not None:
            thread.join(wait)


def _quietly(fn: Callable[[], None]) -> None:
    try:
        fn()
    except Exception:  # closing what nobody uses any more: log it, go on
        log.debug("closing a shared store backend failed", exc_info=True)


_lock = threading.RLock()  # a finalizer may run inside a locked section: reentrant
_live: dict[Hashable, Shared] = {}
_warned = False


class Lease:
    """One reference to a shared backend; ``release()`` gives it back (once), and returns the
    ``Shared`` to close when it was the last one. A borrowed lease (``borrow``) is a ``Store``
    built on the backend itself: it keeps a backend its owners dropped from being closed by
    the garbage collector, but an owner's explicit ``close()`` closes it all the same."""

    __slots__ = ("__weakref__", "_entry", "_released", "borrowed")

    def __init__(self, entry: Shared, *, borrowed: bool = False) -> None:
        self._entry = entry
        self._released = False
        self.borrowed = borrowed

    @property
    def value(self) -> Any:
        return self._entry.value

    def release(self, *, closing: bool = False) -> Shared | None:
        with _lock:
            if self._released:
                return None
            self._released = True
            entry = self._entry
            if self.borrowed:
                entry.borrowers -= 1
                return entry if entry.refs <= 0 and entry.borrowers <= 0 else None
            entry.refs -= 1
            if entry.refs > 0:
                return None
            if _live.get(entry.key) is entry:
                del _live[entry.key]
            return entry if closing or entry.borrowers <= 0 else None

    def close(self) -> None:
        """Release; close the backend here if this was its last owner."""
        last = self.release(closing=True)
        if last is not None:
            last.close()

    def dropped(self) -> None:
        """Release, for an object garbage collected without ``close()``."""
        last = self.release()
        if last is not None:
            last.close_later()


def key_for(kind: str, url: str, options: dict[str, Any], *extra: Hashable) -> Hashable | None:
    """The registry key of a backend of ``kind`` for ``url`` and ``options``, or ``None`` when
    it must not be shared (a ready client given, or options that cannot be compared)."""
    if url.startswith("memory:") or options.get("client") is not None:
        return None
    try:
        key = (kind, url, tuple(sorted(options.items())), *extra)
        hash(key)
    except TypeError:
        return None
    return key


def acquire(
    key: Hashable,
    make: Callable[[], tuple[Any, Callable[[], None], Any]],
) -> Lease:
    """A reference to the shared backend under ``key``, made by ``make()`` (returning the
    value, its closer and the ``Bridge`` the closer runs in, or ``None``) when there is none,
    or none still open."""
    with _lock:
        found = _live.get(key)
        if found is not None and not _closed(found):
            found.refs += 1
            return Lease(found)
    # made outside the lock: making a pool may take a while (a DNS lookup, boto3's imports)
    made = Shared(key, *make(), refs=1)
    with _lock:
        found = _live.get(key)
        if found is None or _closed(found):
            _live[key] = made
            _warn_if_many()
            return Lease(made)
        found.refs += 1
    made.close_later()  # another thread made one meanwhile: keep theirs
    return Lease(found)


def borrow(backend: object) -> Lease | None:
    """A borrowed lease (see ``Lease``) on the shared backend that ``backend`` is, or ``None``
    when it is not one."""
    with _lock:
        for entry in _live.values():
            if _backend_of(entry) is backend and not _closed(entry):
                entry.borrowers += 1
                return Lease(entry, borrowed=True)
    return None


def _backend_of(entry: Shared) -> Any:
    return entry.value[0] if isinstance(entry.value, tuple) else entry.value


def _closed(entry: Shared) -> bool:
    """Closed, here or directly (``store.backend.close()``): an opening gets a new one."""
    return entry.closed or getattr(_backend_of(entry), "closed", False) is True


def _warn_if_many() -> None:
    global _warned
    if len(_live) > POOL_WARNING and not _warned:
        _warned = True
        log.warning(
            "agent_checkpoint: this process holds %d store backends, each with its own "
            "connections. Stores opened from the same URL with the same backend options "
            "share one: open them alike, or open one Store and pass it around.",
            len(_live),
        )


def live() -> int:
    """How many shared backends are open in this process."""
    with _lock:
        return len(_live)


def track(obj: object, lease: Lease) -> weakref.finalize[[], object]:
    """Release ``lease`` when ``obj`` is garbage collected without being closed; calling the
    returned finalizer releases it now (once)."""
    finalizer = weakref.finalize(obj, lease.dropped)
    finalizer.atexit = False  # at exit, _close_all closes the backends themselves
    return finalizer


def _close_all() -> None:
    with _lock:
        entries = list(_live.values())
        _live.clear()
    for entry in entries:
        entry.close_later(wait=_home.EXIT_WAIT)


def _forget_in_child() -> None:
    global _lock, _warned
    _lock, _warned = threading.RLock(), False
    for entry in _live.values():
        entry.closed = True  # the parent's connections: never closed (or used) from here
    _live.clear()


os.register_at_fork(after_in_child=_forget_in_child)
atexit.register(_close_all)
