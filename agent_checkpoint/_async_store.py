"""``AsyncStore``: the ``Store``'s whole surface as coroutines, for asyncio programs.

It is the ``Store`` itself, run through the bridge of ``_bridge.py``: every method awaits the
same method of a ``Store``, so planning, encoding, the segment layer, conflict rules, errors and
the retry policy are the Store's own (its retry waits on the loop's clock). On Redis and
PostgreSQL the I/O is the drivers' asyncio API (``redis.asyncio``, psycopg's
``AsyncConnectionPool``), run on the process's home loop (``_home.py``) whatever loop awaits
the store; the disk, memory, S3 and fsspec backends, whose drivers block, run on a bounded
thread pool (``threads=``), awaited from any loop. Neither holds a lock across calls:
concurrent tasks run concurrently, up to the backend's connection pool.

One ``AsyncStore`` serves every loop and thread at once: a request loop, ``asyncio.run`` in
worker threads, the frameworks' sync wrappers. Nothing in it belongs to a loop: it opens once,
in a thread of its own, into a future any loop can await (``_ready``); the drivers' pools live
on the home loop; a thread pool is awaited from any loop. An asyncio client you pass
(``client=``) is yours and bound to your loop: its calls stay on the loop that awaits them.

``open_async_store`` takes its backend (with its pool and runner) from the process's shared
backends (``_shared.py``): async stores of one URL and backend options share one pool, and
``close()``, or the garbage collection of a store never closed, gives back only its share.

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
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Hashable
from concurrent.futures import Future
from types import TracebackType
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, Protocol, TypeVar

from ._bridge import Bridge, Threads
from ._claims import Claim, Lease
from ._container import Compression, Keyring
from ._envelope import Envelope
from ._migrations import Migrations
from ._shared import acquire, key_for
from ._store import Store, check_options, held_store, store_on, store_url
from ._store_types import RetryPolicy, check_count
from ._telemetry import start
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

    operation: str | None = getattr(method, "__operation__", None)

    async def call(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
        target, runner = await self._ready()
        op = None if operation is None else start(target.backend.name, operation)
        if op is None:
            result: R = await runner.run(method, target, *args, **kwargs)
            return result
        with op.traced():  # in the awaiting task: its span is the parent
            result = await runner.run(op.within(method), target, *args, **kwargs)
            op.returned(result)
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
        self._lock = threading.Lock()  # never held across an await: guards _opening only
        self._opening: Future[tuple[Store, _Runner]] | None = None
        self._store: Store | None = None
        self._runner: _Runner | None = None
        self._closed = False
        self._owns_runner = False  # over(): the threads are this store's alone

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

        # Opening runs in a thread of its own, into a future that is no loop's: every loop
        # that awaits the store meanwhile waits for the same opening.
        with self._lock:
            opening = self._opening
            if opening is None:
                opening = self._opening = Future()
                threading.Thread(
                    target=self._open, args=(opening,), name="agent-checkpoint-open", daemon=True
                ).start()
        try:
            opened = await asyncio.shield(asyncio.wrap_future(opening))
        except asyncio.CancelledError:
            raise
        except Exception:
            with self._lock:
                if self._opening is opening:
                    self._opening = None  # the next call tries again
            raise
        return opened

    def _open(self, opening: Future[tuple[Store, _Runner]]) -> None:
        try:
            store, runner = self._opener()
        except BaseException as exc:
            opening.set_exception(exc)
            return
        self._store, self._runner = store, runner
        opening.set_result((store, runner))

    @classmethod
    def over(cls, store: Store, *, threads: int = DEFAULT_THREADS) -> AsyncStore:
        """An ``AsyncStore`` that runs a ``Store`` you already have on ``threads`` threads of
        its own (never the loop's default executor). Closing it closes ``store``."""
        made = cls(lambda: (store, Threads(threads)))
        made._owns_runner = True
        return made

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

    _json_page = _awaiting(Store._json_page)

    async def iter_json(
        self, *, last: int | None = None, page_size: int = 500, **filters: Any
    ) -> AsyncIterator[tuple[Summary, dict[str, Any]]]:
        """Every record matching ``filters`` with its JSON, newest first, a page at a time
        (``Store.iter_json``)."""
        cursor: str | None = None
        while True:
            pairs, cursor = await self._json_page(last, page_size, cursor, filters)
            for pair in pairs:
                yield pair
            if cursor is None:
                return

    async def claim(self, key: str, worker: str, *, ttl: float) -> AsyncClaim:
        """An exclusive lease on run ``key`` for ``worker`` (``Store.claim``)."""
        store, runner = await self._ready()
        op = start(store.backend.name, "claim")
        if op is None:
            claim = await runner.run(store.claim, key, worker, ttl=ttl)
        else:
            with op.traced():
                claim = await runner.run(op.within(store.claim), key, worker, ttl=ttl)
        return AsyncClaim(claim, runner)

    claims = _awaiting(Store.claims)

    async def close(self) -> None:
        """Close the store; idempotent. A store opened from a URL shares its backend with the
        process's other stores of that URL and options (``_shared.py``): closing releases
        this store's reference, and the backend closes with its last one."""
        opening = self._opening
        if self._store is None and opening is not None:
            with contextlib.suppress(Exception):  # opening failed: nothing to close
                await self._ready()
        self._closed = True
        store, runner = self._store, self._runner
        if store is None or runner is None:
            return
        try:
            if not store.closed:
                await runner.run(store.close)
        finally:
            if self._owns_runner or not store._shares:  # not the shared backend's runner
                runner.close()

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
        native = _native(module, name)
        key: Hashable | None
        if native is not None:
            key = key_for("asyncio", url, backend_options)

            def make() -> tuple[tuple[Any, _Runner], Callable[[], None], Any]:
                backend = native(url, **backend_options)
                limit = getattr(backend, "max_connections", None) or DEFAULT_CONCURRENCY
                if limit >= 2**16:  # a client of yours whose pool is unbounded: a bound of ours
                    limit = DEFAULT_CONCURRENCY
                # a client of yours belongs to your loop: its calls stay there
                bridge = Bridge(limit, at_home=backend_options.get("client") is None)
                return (backend, bridge), backend.close, bridge

        else:
            key = key_for("threads", url, backend_options, create, threads)

            def make() -> tuple[tuple[Any, _Runner], Callable[[], None], Any]:
                backend = open_backend(url, create=create, **backend_options)
                runner = Threads(threads)

                def close() -> None:
                    try:
                        backend.close()
                    finally:
                        runner.close()

                return (backend, runner), close, None

        if key is None:  # not shared: the store's own backend and runner, closed with it
            (backend, runner), _, _ = make()
            return store_on(
                backend,
                retry,
                max_record_bytes,
                keyring=keyring,
                compress=compress,
                migrations=migrations,
            ), runner
        lease = acquire(key, make)
        backend, runner = lease.value
        store = held_store(lease, backend, retry, max_record_bytes, keyring, compress, migrations)
        return store, runner

    return AsyncStore(opener)


def _native(module: str, name: str) -> Callable[..., Any] | None:
    """``from_url_async`` of the backend class for a scheme, where it has an asyncio driver,
    else ``None``."""
    try:
        cls = getattr(importlib.import_module(module), name)
    except ImportError:
        return None  # open_backend names the extra to install
    make = getattr(cls, "from_url_async", None)
    return make if callable(make) else None
