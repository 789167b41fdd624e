"""The shipped suites, run unchanged against an ``AsyncStore``: ``BlockingStore`` gives an
``AsyncStore`` the ``Store``'s synchronous face, each call a coroutine run to completion on an
event loop of its own thread::

    class TestMyAsyncStore(StoreConformance, ClaimsConformance):
        @pytest.fixture
        def store(self):
            with BlockingStore(open_async_store("myscheme://...")) as store:
                yield store

What the suites reach past the store (``store.backend``: a second writer, an encrypted store
over the same records) is the async store's backend, each of its calls run the way the
``AsyncStore`` runs it (on the loop, through the bridge, or on its thread pool).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from collections.abc import Callable, Coroutine, Iterator
from types import TracebackType
from typing import Any, TypeVar

from .._async_store import AsyncClaim, AsyncStore
from .._bridge import Bridge

__all__ = ["BlockingStore", "EventLoopThread"]

T = TypeVar("T")


class EventLoopThread:
    """An event loop running in a daemon thread; ``run`` waits for a coroutine's result."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="agent-checkpoint-loop", daemon=True
        )
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class BlockingStore:
    """An ``AsyncStore`` with the ``Store``'s synchronous methods (see the module docstring);
    closing it closes the async store and its loop."""

    def __init__(self, store: AsyncStore, loop: EventLoopThread | None = None) -> None:
        self.async_store = store
        self._own_loop = loop is None
        self._loop = loop or EventLoopThread()
        self._loop.run(store.open())
        self.backend = _blocking_backend(store.backend, store, self._loop)

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.async_store, name)
        if not callable(method):
            return method

        def call(*args: Any, **kwargs: Any) -> Any:
            result = method(*args, **kwargs)
            return self._loop.run(result) if inspect.iscoroutine(result) else result

        return call

    @property
    def closed(self) -> bool:
        return self.async_store.closed

    def __contains__(self, key: object) -> bool:
        return self._loop.run(self.async_store.exists(key))

    def iter_summaries(self, **filters: Any) -> Iterator[Any]:
        async def collect() -> list[Any]:
            return [s async for s in self.async_store.iter_summaries(**filters)]

        return iter(self._loop.run(collect()))

    def iter_json(self, **options: Any) -> Iterator[Any]:
        async def collect() -> list[Any]:
            return [pair async for pair in self.async_store.iter_json(**options)]

        return iter(self._loop.run(collect()))

    def claim(self, key: str, worker: str, *, ttl: float) -> BlockingClaim:
        return BlockingClaim(self._loop.run(self.async_store.claim(key, worker, ttl=ttl)), self)

    def close(self) -> None:
        """Close the async store (its loop runs on, for calls that should now refuse)."""
        self._loop.run(self.async_store.close())

    def __enter__(self) -> BlockingStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.close()
        finally:
            if self._own_loop:
                self._loop.close()


class BlockingClaim:
    """An ``AsyncClaim`` with the ``Claim``'s synchronous methods."""

    def __init__(self, claim: AsyncClaim, store: BlockingStore) -> None:
        self.async_claim = claim
        self.store = store

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.async_claim, name)
        if not callable(value):
            return value
        loop = self.store._loop

        def call(*args: Any, **kwargs: Any) -> Any:
            return loop.run(value(*args, **kwargs))

        return call

    def __enter__(self) -> BlockingClaim:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.store._loop.run(self.async_claim.release())


def _read(backend: Any, name: str, face: Any) -> Any:
    return getattr(backend, name)


def _blocking_backend(backend: Any, store: AsyncStore, loop: EventLoopThread) -> Any:
    """``backend`` as a synchronous backend: itself where the store runs it on threads;
    under the bridge, a face with the same methods, each run through the bridge on ``loop``."""
    runner = store._runner
    if not isinstance(runner, Bridge):
        return backend

    def forward(name: str) -> Callable[..., Any]:
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            result = loop.run(runner.run(getattr(backend, name), *args, **kwargs))
            if name == "namespace":
                return _blocking_backend(result, store, loop)
            return result

        call.__name__ = name
        return call

    kind = type(backend)
    members: dict[str, Any] = {}
    for name in dir(kind):
        if name.startswith("_"):
            continue
        if isinstance(getattr(kind, name), property):  # read from the backend (no I/O)
            members[name] = property(functools.partial(_read, backend, name))
        elif callable(getattr(backend, name)):
            members[name] = forward(name)
        else:
            members[name] = getattr(backend, name)
    face = type(f"Blocking{kind.__name__}", (), members)()
    for name, value in vars(backend).items():
        if not name.startswith("_") and not callable(value):
            setattr(face, name, value)
    return face
