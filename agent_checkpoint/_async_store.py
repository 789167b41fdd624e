"""``AsyncStore``: the ``Store``'s whole surface as coroutines, for asyncio programs.

It is the ``Store`` itself, run through the bridge of ``_bridge.py``: every method awaits the
same method of a ``Store``, so planning, encoding, the segment layer, conflict rules, errors and
the retry policy are the Store's own (its retry waits on the loop's clock). On Redis and
PostgreSQL the I/O is the drivers' asyncio API (``redis.asyncio``, psycopg's
``AsyncConnectionPool``), awaited by the loop; the disk, memory, S3 and fsspec backends, whose
drivers block, run on a bounded thread pool of the store's own (``threads=``). Neither holds a
lock across calls: concurrent tasks run concurrently, up to the backend's connection pool.

Cancelling a call cancels its I/O where the driver is async (the write stops at an await: the
record holds its old or its new revision, and a piece written before the commit is an orphan
for ``collect_orphans``, never read), and leaves a call on the thread pool to finish.
"""

from __future__ import annotations

import builtins
import importlib
import os
from collections.abc import AsyncIterator, Callable, Coroutine
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, Protocol, TypeVar

from ._bridge import Bridge, Threads
from ._claims import Claim, Lease
from ._container import Compression, Keyring
from ._migrations import Migrations
from ._store import DEFAULT_STORE_PATH, STORE_ENV, Store, store_on
from ._store_types import Forgotten, RetryPolicy
from .backends import open_backend, route
from .backends._base import Summary

__all__ = ["AsyncClaim", "AsyncStore", "open_async_store"]

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")

_CLAIM_FIELDS = frozenset(("key", "worker", "token", "expires_at", "lease", "fence"))

DEFAULT_THREADS = 8
"""Threads an ``AsyncStore`` on a blocking backend (disk, memory, S3, fsspec) runs calls on."""

DEFAULT_CONCURRENCY = 32
"""Calls an ``AsyncStore`` on an asyncio driver runs at once, where its backend does not say
how many connections it has (``max_connections``); the others wait their turn."""


class _Runner(Protocol):
    async def run(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R: ...

    def close(self) -> None: ...


def _awaiting(
    method: Callable[Concatenate[S, P], R], inner: str
) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, R]]:
    """An async method of the wrapper that awaits ``method`` of its attribute ``inner``."""

    async def call(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
        result: R = await self._runner.run(method, getattr(self, inner), *args, **kwargs)
        return result

    call.__name__ = method.__name__
    call.__qualname__ = method.__qualname__
    call.__doc__ = method.__doc__
    return call


class _Closing:
    """``async with``: on exit, ``_exit`` (close a store, release a claim)."""

    async def _exit(self) -> None:
        raise NotImplementedError

    async def __aenter__(self: S) -> S:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._exit()


class AsyncStore(_Closing):
    """A ``Store`` whose methods are coroutines (see the module docstring). Open one with
    ``open_async_store(url)``; use it as ``async with``, or ``await store.close()``."""

    def __init__(self, store: Store, runner: _Runner) -> None:
        self._store = store
        self._runner = runner

    @property
    def store(self) -> Store:
        """The ``Store`` this one runs. Call it only from the thread pool or bridge this store
        runs on: on Redis and PostgreSQL its backend works only inside ``AsyncStore``."""
        return self._store

    @property
    def backend(self) -> Any:
        return self._store.backend

    @property
    def closed(self) -> bool:
        return self._store.closed

    put = _awaiting(Store.put, "_store")
    put_record = _awaiting(Store.put_record, "_store")
    get = _awaiting(Store.get, "_store")
    get_record = _awaiting(Store.get_record, "_store")
    get_envelope = _awaiting(Store.get_envelope, "_store")
    get_json = _awaiting(Store.get_json, "_store")
    head = _awaiting(Store.head, "_store")
    owner = _awaiting(Store.owner, "_store")
    delete = _awaiting(Store.delete, "_store")
    setup = _awaiting(Store.setup, "_store")
    verify = _awaiting(Store.verify, "_store")

    async def exists(self, key: str) -> bool:
        """Whether ``key`` holds a record (``key in store`` of the ``Store``)."""
        return await self._runner.run(self._store.__contains__, key)

    async def forget_older_than(
        self, cutoff: datetime | int | float, *, limit: int = 1000
    ) -> Forgotten:
        return await self._runner.run(self._store.forget_older_than, cutoff, limit=limit)

    list = _awaiting(Store.list, "_store")

    async def iter_summaries(
        self, *, page_size: int = 500, **filters: Any
    ) -> AsyncIterator[Summary]:
        """Every summary matching ``filters``, newest first, a page at a time."""
        cursor: str | None = None
        while True:
            page = await self.list(limit=page_size, cursor=cursor, **filters)
            for summary in page.items:
                yield summary
            if page.cursor is None:
                return
            cursor = page.cursor

    async def claim(self, key: str, worker: str, *, ttl: float) -> AsyncClaim:
        """An exclusive lease on run ``key`` for ``worker`` (``Store.claim``)."""
        claim = await self._runner.run(self._store.claim, key, worker, ttl=ttl)
        return AsyncClaim(claim, self._runner)

    async def claims(self, *, limit: int = 1000) -> builtins.list[Any]:
        return await self._runner.run(self._store.claims, limit=limit)

    async def close(self) -> None:
        """Close the store and its connections; idempotent."""
        try:
            await self._runner.run(self._store.close)
        finally:
            self._runner.close()

    async def _exit(self) -> None:
        await self.close()


class AsyncClaim(_Closing):
    """A ``Claim`` whose methods are coroutines; ``async with`` releases it. Its ``key``,
    ``worker``, ``token``, ``expires_at``, ``lease`` and ``fence`` are the claim's."""

    if TYPE_CHECKING:
        key: str
        worker: str
        token: str
        expires_at: int
        lease: Lease
        fence: int

    def __init__(self, claim: Claim, runner: _Runner) -> None:
        self.claim = claim
        self._runner = runner

    def __getattr__(self, name: str) -> Any:
        if name in _CLAIM_FIELDS:
            return getattr(self.claim, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    get = _awaiting(Claim.get, "claim")
    put = _awaiting(Claim.put, "claim")
    renew = _awaiting(Claim.renew, "claim")
    release = _awaiting(Claim.release, "claim")

    async def _exit(self) -> None:
        await self.release()


def open_async_store(
    url: str | None = None,
    *,
    create: bool = True,
    keyring: Keyring | None = None,
    compress: Compression | None = None,
    migrations: Migrations | None = None,
    retry: RetryPolicy | None = None,
    max_record_bytes: int | None = None,
    threads: int = DEFAULT_THREADS,
    **backend_options: Any,
) -> AsyncStore:
    """An ``AsyncStore`` on the backend ``url`` names: the same URLs and options as
    ``open_store``. Redis and PostgreSQL URLs get the drivers' asyncio clients (their pool
    options as usual: ``max_size=``...); other backends run on ``threads`` threads."""
    url = url or os.environ.get(STORE_ENV) or DEFAULT_STORE_PATH
    _, entry = route(url)
    module, _, name = entry.target.partition(":")
    native = _native(module, name, url, backend_options)
    runner: _Runner
    if native is not None:
        limit = getattr(native, "max_connections", None) or DEFAULT_CONCURRENCY
        if limit >= 2**16:  # a client of yours whose pool is unbounded: a bound of ours
            limit = DEFAULT_CONCURRENCY
        backend, runner = native, Bridge(limit)
    else:
        backend, runner = open_backend(url, create=create, **backend_options), Threads(threads)
    store = store_on(
        backend,
        retry,
        max_record_bytes,
        keyring=keyring,
        compress=compress,
        migrations=migrations,
    )
    return AsyncStore(store, runner)


def _native(module: str, name: str, url: str, options: dict[str, Any]) -> Any:
    """The backend with an asyncio driver for ``url``, where its class offers one
    (``from_url_async``), else ``None``."""
    try:
        cls = getattr(importlib.import_module(module), name)
    except ImportError:
        return None  # open_backend names the extra to install
    make = getattr(cls, "from_url_async", None)
    return make(url, **options) if callable(make) else None
