"""The process's driver loop: the one event loop on which every asyncio driver pool lives.

An ``AsyncStore`` is used from any event loop and any thread: a web service's request loop,
``asyncio.run`` in a worker thread, the frameworks' sync wrappers (the Agents SDK's
``Runner.run_sync``, ADK's ``Runner.run``), each a loop of its own, often one per call. A
``redis.asyncio`` client and a psycopg ``AsyncConnectionPool`` belong to the loop they first
ran on (their connections, locks and workers are bound to it), and stop working, or hang a
shutdown, on any other. So they never run on a caller's loop: they live on one loop of this
library's, in a daemon thread (``home()``), and a call made on any other loop is handed to it
(``on_home``) and its outcome handed back.

Why one home loop rather than a driver pool per caller's loop: a pool per loop multiplies the
connections by the loops (16 threads, each with its ``asyncio.run``, would open 16 pools of a
PostgreSQL server's connections: the shared pool of ``_shared.py`` exists to prevent that), a
loop closed by ``asyncio.run`` leaves its pool's connections and workers to be closed on a
loop that no longer runs, and a pool's workers on the caller's loop are what hangs that
loop's ``asyncio.run`` at exit. With one home loop a pool is made once, used by every loop,
and closed at exit on the loop it belongs to, with a bounded wait. The cost is a hand-over
between two threads for each store call (not each driver command: a whole call, with all its
round trips, runs on the home loop).

Cancellation keeps its meaning: cancelling the caller cancels the call on the home loop, and
the caller's ``CancelledError`` is raised once that call has stopped, so what a cancelled
write did is settled before the caller goes on.
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import asyncio

__all__ = ["home", "on_home", "on_home_thread", "run_at_home", "stop_home"]

T = TypeVar("T")

EXIT_WAIT = 5.0
"""Seconds the interpreter's exit waits for what is still open on the home loop to close."""

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None


def home() -> asyncio.AbstractEventLoop:
    """The home loop, started on first use (a daemon thread: it never keeps a process alive)."""
    global _loop, _thread
    loop = _loop
    if loop is not None:
        return loop
    import asyncio

    with _lock:
        if _loop is None:
            made = asyncio.new_event_loop()
            ready = threading.Event()

            def serve() -> None:
                asyncio.set_event_loop(made)
                made.call_soon(ready.set)
                made.run_forever()

            _thread = threading.Thread(target=serve, name="agent-checkpoint-io", daemon=True)
            _thread.start()
            ready.wait()
            _loop = made
        return _loop


def on_home_thread() -> bool:
    """Whether the caller runs on the home loop's thread."""
    return _thread is not None and threading.current_thread() is _thread


async def on_home(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """``await make()``, run on the home loop, awaited from the running loop (directly when
    that is the home loop). Cancelling the caller cancels it there and waits for it to stop."""
    import asyncio

    loop = home()
    caller = asyncio.get_running_loop()
    if caller is loop:
        return await make()
    done: asyncio.Future[T] = caller.create_future()
    task: asyncio.Task[T] | None = None

    def settle(finished: asyncio.Task[T]) -> None:
        if done.done():
            return
        if finished.cancelled():
            done.cancel()
        elif (error := finished.exception()) is not None:
            done.set_exception(error)
        else:
            done.set_result(finished.result())

    def report(finished: asyncio.Task[T]) -> None:
        try:
            caller.call_soon_threadsafe(settle, finished)
        except RuntimeError:  # the caller's loop is closed: nobody waits for the outcome
            if not finished.cancelled():
                finished.exception()

    def start() -> None:
        nonlocal task
        task = loop.create_task(make())
        task.add_done_callback(report)

    def cancel() -> None:
        if task is not None:
            task.cancel()

    loop.call_soon_threadsafe(start)
    cancelled: asyncio.CancelledError | None = None
    while not done.done():
        try:
            await asyncio.wait({done})
        except asyncio.CancelledError as exc:  # the caller: stop the call, wait until it has
            if cancelled is None:
                loop.call_soon_threadsafe(cancel)
            cancelled = cancelled or exc
    if cancelled is not None:
        if not done.cancelled():
            done.exception()  # retrieved: the caller hears of its cancellation instead
        raise cancelled
    return done.result()


def run_at_home(make: Callable[[], Coroutine[Any, Any, Any]], wait: float | None) -> None:
    """Run ``make()`` on the home loop from a thread that is not its own, waiting up to
    ``wait`` seconds for it (``None``: not at all). Its errors are dropped: for closing."""
    import asyncio

    loop = home()
    if on_home_thread():
        loop.create_task(make())
        return
    try:
        future = asyncio.run_coroutine_threadsafe(make(), loop)
    except RuntimeError:  # the home loop is closed (the interpreter is exiting)
        return
    if wait is not None:
        try:
            future.result(wait)
        except BaseException:  # closing: nothing to report to, nothing to retry
            future.cancel()


def stop_home() -> None:
    """Stop the home loop (at exit, after what ran on it was closed)."""
    global _loop, _thread
    with _lock:
        loop, thread, _loop, _thread = _loop, _thread, None, None
    if loop is None or thread is None:
        return
    try:
        loop.call_soon_threadsafe(loop.stop)
    except RuntimeError:
        return
    thread.join(EXIT_WAIT)


def _forget_in_child() -> None:
    """A forked child has no home thread: its first async call starts one of its own."""
    global _lock, _loop, _thread
    _lock, _loop, _thread = threading.Lock(), None, None


os.register_at_fork(after_in_child=_forget_in_child)
atexit.register(stop_home)  # registered first, so it runs after _shared's closing (LIFO)
