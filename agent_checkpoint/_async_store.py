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
for ``collect_orphans``, never read). A call on the thread pool that has started cannot be
stopped: its ``CancelledError`` is raised once it has finished (``Threads``), so a cancelled put
never lands over a put made after it.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import AsyncIterator, Callable, Coroutine
from types import TracebackType
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, Protocol, TypeVar

if TYPE_CHECKING:
    import asyncio

from ._bridge import Bridge, Threads, off_loop
from ._claims import Claim, Lease
from ._container import Compression, Keyring
from ._envelope import Envelope
from ._migrations import Migrations
from ._store import Store, check_options, store_on, store_url
from ._store_types import RetryPolicy, check_count
from .backends import open_backend, route
from .backends._base import Record, Summary
from .errors import StoreClosedError

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
    method: Callable[Concatenate[S, P], R], name: str | None = None
) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, R]]:
    """An async method of a wrapper that awaits ``method`` of the object it wraps, on the
    wrapper's runner (both from its ``_ready()``)."""

    async def call(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
        target, runner = await self._ready()
        result: R = await runner.run(method, target, *args, **kwargs)
        return result

    call.__name__ = name or method.__name__
    call.__qualname__ = method.__qualname__.replace(method.__name__, call.__name__)
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
    ``open_async_store(url)``; use it as ``async with``, or ``await store.close()``. It opens
    on its first call (or ``await store.open()``), off the event loop: making a driver's
    client may import modules and read files (boto3 takes ~0.3 s)."""

    def __init__(self, opener: Callable[[], tuple[Store, _Runner]]) -> None:
        self._opener = opener
        self._opening: asyncio.Future[tuple[Store, _Runner]] | None = None
        self._store: Store | None = None
        self._runner: _Runner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the one it opened on
        self._closed = False

    async def open(self) -> AsyncStore:
        """Open the store now (the first call would); idempotent. Raises what opening the
        backend raises (a driver not installed, an option it refuses)."""
        await self._ready()
        return self

    async def _ready(self) -> tuple[Store, _Runner]:
        if self._store is not None and self._runner is not None:
            return self._store, self._runner
        if self._closed:
            raise StoreClosedError("this AsyncStore was closed before it opened")
        import asyncio  # not at import time: see _bridge.py

        if self._opening is None:
            self._opening = asyncio.ensure_future(off_loop(self._opener))
        try:
            store, runner = await asyncio.shield(self._opening)
        except Exception:
            self._opening = None  # the next call tries again
            raise
        self._store, self._runner = store, runner
        self._loop = asyncio.get_running_loop()
        return store, runner

    @classmethod
    def over(cls, store: Store, *, threads: int = DEFAULT_THREADS) -> AsyncStore:
        """An ``AsyncStore`` that runs a ``Store`` you already have on ``threads`` threads of
        its own (never the loop's default executor). Closing it closes ``store``."""
        return cls(lambda: (store, Threads(threads)))

    async def call(
        self, fn: Callable[Concatenate[Store, P], R], *args: P.args, **kwargs: P.kwargs
    ) -> R:
        """``fn(store, *args, **kwargs)``, awaited: synchronous code written against the
        ``Store`` API, run where this store runs its own methods (on Redis and PostgreSQL
        inside the bridge, its I/O awaiting the asyncio driver; elsewhere on the store's
        threads). One implementation serves both a sync and an async caller: the framework
        integrations are written so. ``fn`` must use only ``store`` for I/O."""
        store, runner = await self._ready()
        result: R = await runner.run(fn, store, *args, **kwargs)
        return result

    @property
    def store(self) -> Store:
        """The ``Store`` this one runs, once open. Call it only from the thread pool or
        bridge this store runs on: on Redis and PostgreSQL its backend works only inside
        ``AsyncStore``."""
        if self._store is None:
            raise RuntimeError("the AsyncStore is not open yet: await store.open() first")
        return self._store

    @property
    def backend(self) -> Any:
        return self.store.backend

    @property
    def closed(self) -> bool:
        return self._closed or (self._store is not None and self._store.closed)

    def decode(self, record: Record) -> Envelope:
        """The envelope a record ``get_record(s)`` returned holds (``Store.decode``). No I/O:
        a plain method, once the store is open."""
        return self.store.decode(record)

    def decode_json(self, record: Record) -> dict[str, Any]:
        """``Store.decode_json``: no I/O, a plain method, once the store is open."""
        return self.store.decode_json(record)

    put = _awaiting(Store.put)
    put_record = _awaiting(Store.put_record)
    get = _awaiting(Store.get)
    get_record = _awaiting(Store.get_record)
    get_records = _awaiting(Store.get_records)
    get_envelope = _awaiting(Store.get_envelope)
    get_json = _awaiting(Store.get_json)
    get_json_many = _awaiting(Store.get_json_many)
    head = _awaiting(Store.head)
    owner = _awaiting(Store.owner)
    delete = _awaiting(Store.delete)
    setup = _awaiting(Store.setup)
    verify = _awaiting(Store.verify)

    exists = _awaiting(Store.__contains__, "exists")  # ``key in store`` of the ``Store``
    forget_older_than = _awaiting(Store.forget_older_than)

    list = _awaiting(Store.list)

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
        store, runner = await self._ready()
        claim = await runner.run(store.claim, key, worker, ttl=ttl)
        return AsyncClaim(claim, runner)

    claims = _awaiting(Store.claims)

    async def close(self) -> None:
        """Close the store and its connections; idempotent."""
        if self._store is None and self._opening is not None:
            with contextlib.suppress(Exception):  # opening failed: nothing to close
                await self._ready()
        self._closed = True
        if self._store is None or self._runner is None:
            return
        import asyncio  # not at import time: see _bridge.py

        opened_on = self._loop
        try:
            if (
                isinstance(self._runner, Bridge)
                and opened_on is not None
                and opened_on is not asyncio.get_running_loop()
                and opened_on.is_closed()
            ):
                # The asyncio drivers' pools belong to the loop the store opened on, closed
                # since: their tasks and connections cannot be closed on this one (psycopg's
                # pool then raises CancelledError on Python 3.13, RuntimeError before).
                return
            await self._runner.run(self._store.close)
        except RuntimeError as exc:
            # Connections an asyncio driver made on an event loop closed since (a store used
            # across asyncio.run() calls) cannot be closed on this one; closing the loop
            # already dropped their transports' callbacks, and their sockets close when freed.
            if str(exc) != "Event loop is closed":
                raise
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

    async def _ready(self) -> tuple[Claim, _Runner]:
        return self.claim, self._runner

    def __getattr__(self, name: str) -> Any:
        if name in _CLAIM_FIELDS:
            return getattr(self.claim, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    get = _awaiting(Claim.get)
    put = _awaiting(Claim.put)
    renew = _awaiting(Claim.renew)
    release = _awaiting(Claim.release)

    async def _exit(self) -> None:
        await self.release()


def open_async_store(
    url: str | os.PathLike[str] | None = None,
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
    url = store_url(url)
    check_options(
        create=create, migrations=migrations, retry=retry, max_record_bytes=max_record_bytes
    )
    check_count(threads, "threads", least=1)
    _, entry = route(url)  # an unknown scheme is refused here, at once

    def opener() -> tuple[Store, _Runner]:
        module, _, name = entry.target.partition(":")
        native = _native(module, name, url, backend_options)
        runner: _Runner
        if native is not None:
            limit = getattr(native, "max_connections", None) or DEFAULT_CONCURRENCY
            if limit >= 2**16:  # a client of yours whose pool is unbounded: a bound of ours
                limit = DEFAULT_CONCURRENCY
            backend, runner = native, Bridge(limit)
        else:
            backend = open_backend(url, create=create, **backend_options)
            runner = Threads(threads)
        store = store_on(
            backend,
            retry,
            max_record_bytes,
            keyring=keyring,
            compress=compress,
            migrations=migrations,
        )
        return store, runner

    return AsyncStore(opener)


def _native(module: str, name: str, url: str, options: dict[str, Any]) -> Any:
    """The backend with an asyncio driver for ``url``, where its class offers one
    (``from_url_async``), else ``None``."""
    try:
        cls = getattr(importlib.import_module(module), name)
    except ImportError:
        return None  # open_backend names the extra to install
    make = getattr(cls, "from_url_async", None)
    return make(url, **options) if callable(make) else None
