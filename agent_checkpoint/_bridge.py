"""Running the store's one implementation on an event loop: the bridge ``AsyncStore`` uses.

The Store's logic (planning, encoding, the segment layer, conflict and retry rules) is written
once, as plain functions that call a backend. ``AsyncStore`` runs that same code on the event
loop, in a greenlet, as SQLAlchemy's asyncio extension runs its ORM: where the code reaches a
backend whose driver is asyncio-native (``redis.asyncio``, psycopg's async pool), the driver's
coroutine is handed to the loop (``await_only``) and the greenlet resumes with its result, so
the loop serves other tasks meanwhile and nothing blocks it. That loop is the process's home
loop (``_home.py``), whichever loop awaits the ``AsyncStore``: the drivers' pools belong to it. A backend without an async driver
(disk, memory, S3 on boto3, fsspec) runs the same code on a bounded thread pool of the store's
own instead (``Threads``), never on the loop's default executor.

Why not the two other ways of sharing one implementation: a sans-IO core (every backend call
a ``yield`` that a sync and an async driver both serve) would turn the whole store, the segment
layer and five backends inside out; and generating the sync code from async code (as httpcore
does) keeps two copies of every module in the tree and in every traceback. Here there is one
copy, and the async path is the sync path: the shared conformance suites prove both at once.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast

from ._home import on_home
from .errors import MissingDependencyError

if TYPE_CHECKING:
    import asyncio

# asyncio is imported where it is used, not here: ``import agent_checkpoint`` (the CLI's start)
# does not pay ~30 ms for it unless an AsyncStore runs.

__all__ = ["Awaiting", "Bridge", "Threads", "await_only", "bridged", "off_loop", "pause"]

P = ParamSpec("P")
T = TypeVar("T")


def _greenlet() -> Any:
    try:
        import greenlet  # type: ignore[import-untyped, unused-ignore]
    except ImportError as exc:  # pragma: no cover - the extra's own check
        raise MissingDependencyError(
            "the async store needs the greenlet package: pip install 'localab-checkpoint[async]'"
        ) from exc
    return greenlet


_BRIDGED: Any = None  # the greenlet class of bridged calls, made on first use
_DONE = object()  # what a worker hands its parent at the end of a call (its outcome: on it)


def _bridged_class() -> Any:
    global _BRIDGED
    if _BRIDGED is None:
        _BRIDGED = type("BridgedCall", (_greenlet().greenlet,), {})
    return _BRIDGED


def _serve() -> None:
    """A worker greenlet's life: wait for a call, run it, hand its parent ``_DONE`` (the
    outcome is on the worker), again. Reused, as making a greenlet costs ~9 us: more than the
    rest of a bridged call's own work. A call comes by ``switch``, never as the greenlet's
    first arguments: greenlet keeps those alive as long as the worker, and a worker outlives
    the stores whose calls it runs (a shared backend's ``Bridge`` serves many)."""
    me = _greenlet().getcurrent()
    while True:
        fn, args, kwargs = me.parent.switch(_DONE)
        try:
            me.result = fn(*args, **kwargs)
        except _greenlet().GreenletExit:  # the worker itself is being discarded
            raise
        except BaseException as exc:
            me.error = exc
        del fn, args, kwargs  # an idle worker keeps nothing of its last call alive


def bridged() -> bool:
    """Whether the caller runs inside ``Bridge.run`` (so may ``await_only``)."""
    module = sys.modules.get("greenlet")
    return module is not None and _BRIDGED is not None and isinstance(module.getcurrent(), _BRIDGED)


def await_only(awaitable: Awaitable[T]) -> T:
    """The result of ``awaitable``, awaited by the event loop that runs this bridged call; the
    greenlet resumes when it is ready, and the loop runs other tasks meanwhile. Its exception
    (a cancellation included) is raised here."""
    current = _greenlet().getcurrent()
    if _BRIDGED is None or not isinstance(current, _BRIDGED):
        if inspect.iscoroutine(awaitable):
            awaitable.close()
        raise RuntimeError(
            "an async backend was called outside AsyncStore (use the backend through an "
            "AsyncStore, or open a Store on the synchronous URL)"
        )
    result: T = current.parent.switch(awaitable)
    return result


def pause(seconds: float) -> None:
    """Sleep: on the event loop's clock inside a bridged call (other tasks run meanwhile),
    else as ``time.sleep``. The retry policy waits with it."""
    if bridged():
        import asyncio

        await_only(asyncio.sleep(seconds))
    else:
        time.sleep(seconds)


async def off_loop(fn: Callable[[], T]) -> T:
    """``fn()`` run in a thread of its own (not the loop's default executor), awaited: for
    one-off work that blocks, such as opening a store."""
    import asyncio

    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def deliver(outcome: Callable[[], None]) -> None:
        if not done.cancelled():
            outcome()

    def work() -> None:
        try:
            result = fn()
        except BaseException as exc:
            loop.call_soon_threadsafe(deliver, functools.partial(done.set_exception, exc))
        else:
            loop.call_soon_threadsafe(deliver, functools.partial(done.set_result, result))

    threading.Thread(target=work, name="agent-checkpoint-open", daemon=True).start()
    return await done


class Bridge:
    """Runs the store's code in a greenlet on the home loop of ``_home.py``, whatever loop
    awaits it (see the module docstring; a worker greenlet serves one call after another),
    ``limit`` calls at a time: as many as the backend has connections. A call past them waits here, before its own work (encoding a
    checkpoint, planning a write) takes the loop: a thousand tasks that put at once then never
    fill one turn of the loop with a thousand encodings while all but ``limit`` of them would
    only wait for a connection."""

    def __init__(self, limit: int, *, at_home: bool = True) -> None:
        self.limit = limit
        self.at_home = at_home
        """``False``: on the loop that awaits it, for an asyncio client of the caller's own
        (``client=``), which belongs to the caller's loop."""
        self._slots: asyncio.Semaphore | None = None
        self._idle: list[Any] = []  # worker greenlets between calls

    async def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        if not self.at_home:
            return await self._bounded(fn, args, kwargs)
        from ._caller import caller_frame  # not at import time: it imports asyncio

        # the caller's line, for a warning the call gives on the home loop's thread
        called_from = caller_frame()
        return await on_home(lambda: self._bounded(fn, args, kwargs, called_from))

    async def _bounded(
        self, fn: Callable[..., T], args: Any, kwargs: Any, called_from: Any = None
    ) -> T:
        if self._slots is None:  # made on the one loop it is used on
            import asyncio

            self._slots = asyncio.Semaphore(self.limit)
        async with self._slots:
            return await self._run(fn, args, kwargs, called_from)

    async def _run(
        self, fn: Callable[..., T], args: Any, kwargs: Any, called_from: Any = None
    ) -> T:
        worker = self._worker()
        worker.gr_context = None  # each call starts in an empty context, as a new greenlet
        worker.called_from = called_from
        outcome = worker.switch(fn, args, kwargs)
        while outcome is not _DONE:
            try:
                value = await self.awaited(outcome)
            except BaseException:  # a cancellation too: raised at the call that awaited
                outcome = worker.throw(*sys.exc_info())
            else:
                outcome = worker.switch(value)
        result, error = worker.result, worker.error
        worker.result = worker.error = worker.called_from = None
        self._idle.append(worker)
        if error is not None:
            raise error
        return cast(T, result)

    def _worker(self) -> Any:
        """An idle worker whose parent is the running greenlet (the one that awaits its
        driver calls), else a new one."""
        current = _greenlet().getcurrent()
        while self._idle:
            worker = self._idle.pop()
            if worker.parent is current:
                return worker
        worker = _bridged_class()(_serve, current)
        worker.result = worker.error = worker.called_from = None
        worker.switch()  # to its wait for a call
        return worker

    async def awaited(self, awaitable: Awaitable[T]) -> T:
        """Each driver call a bridged call awaits goes through here (the tests cancel calls at
        each of them)."""
        return await awaitable

    def close(self) -> None:
        return None


class Threads:
    """Runs the store's code on a bounded pool of threads of its own: for a backend whose
    driver blocks (file I/O and fsync, boto3). A call waits for a free thread; the loop never
    does.

    A cancelled call that has not started never runs. One that has started cannot be stopped
    (a thread cannot be interrupted), so its caller's ``CancelledError`` is raised only once
    it has finished, as Trio's and AnyIO's threads do by default: a put whose caller gave up
    may still land, but before the caller learns of the cancellation, never after a put it
    (or anyone it told) makes next. Raising at once would leave the put running, to land over
    a newer acknowledged one. A conditional put would not need the wait, but every
    last-write-wins put would then read the revision first and retry a lost race, on every
    backend, to protect only the few that are cancelled."""

    def __init__(self, workers: int) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="agent-checkpoint")
        self._closed = False

    async def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        if self._closed:  # the store is closed too: it refuses before any I/O
            return fn(*args, **kwargs)
        import asyncio

        running = self._pool.submit(fn, *args, **kwargs)
        try:
            return await asyncio.wrap_future(running)
        except asyncio.CancelledError:
            if running.cancel():  # still queued (or cancelled by close): it never runs
                raise
            finishing = asyncio.wrap_future(running)
            while not finishing.done():  # a cancellation repeated meanwhile waits too
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(finishing)
            finishing.exception()  # retrieved: its outcome is not the caller's any more
            raise

    def close(self) -> None:
        self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)


_PLAIN = frozenset((bytes, str, int, float, bool, list, tuple, dict, type(None)))


class Awaiting:
    """The synchronous face of an asyncio driver object (a ``redis.asyncio`` client, its
    pipelines and scripts): a method whose result is awaitable returns the awaited result
    (``await_only``); a result that is another driver object (``wrap``) gets a face too."""

    __slots__ = ("_faces", "_target", "_wrap")

    def __init__(self, target: Any, wrap: tuple[type, ...] = ()) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_wrap", wrap)
        object.__setattr__(self, "_faces", {})

    @property
    def target(self) -> Any:
        """The driver object itself."""
        return self._target

    def __getattr__(self, name: str) -> Any:
        face = self._faces.get(name)
        if face is not None:
            return face
        value = getattr(self._target, name)
        if not callable(value):
            return value
        face = self._faces[name] = self._face(value)  # a client's methods: made once
        return face

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._target, name, value)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._face(self._target)(*args, **kwargs)

    def __enter__(self) -> Any:
        entered = await_only(self._target.__aenter__())
        if entered is self._target:
            return self
        return Awaiting(entered, self._wrap) if isinstance(entered, self._wrap) else entered

    def __exit__(self, *exc_info: Any) -> bool:
        return bool(await_only(self._target.__aexit__(*exc_info)))

    def _face(self, method: Callable[..., Any]) -> Callable[..., Any]:
        # No reference to ``self`` in ``call``: a face cached in ``_faces`` would close a
        # cycle, and every cursor, connection and pipeline of a call would then wait for the
        # garbage collector (~60 objects a PostgreSQL call, each adding to its next pass).
        target, wrap = self._target, self._wrap

        def call(*args: Any, **kwargs: Any) -> Any:
            result = method(*args, **kwargs)
            if result is target:  # a pipeline's command, queued: a face of the same pipeline
                return Awaiting(target, wrap)
            if inspect.isawaitable(result):
                result = await_only(result)
            if type(result) in _PLAIN:  # a reply: no need to ask the slower questions below
                return result
            if isinstance(result, wrap) or hasattr(result, "__aenter__"):
                return Awaiting(result, wrap)  # a context manager: ``with`` awaits it
            return result

        return call
