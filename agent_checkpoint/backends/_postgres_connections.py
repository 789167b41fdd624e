"""PostgreSQL connections: the pool ``PostgresBackend.from_url`` builds, the connection class
that bounds every wait for the server (``read_timeout``), and the pool's health check.

libpq waits for a reply forever: a server that stopped answering (a network that drops
packets, a stalled host, a statement queued behind a lock an idle session holds) would hang
the agent that checkpoints. ``TimedConnection`` ends every wait after ``read_timeout``
seconds: it asks the server to cancel the statement, so nothing it sent applies later, closes
the session, and raises an ``OperationalError`` that the Store retries and finally reports as
``BackendUnavailableError``. Whether a write that timed out applied is unknown, as after any
lost reply; the Store's retry settles it.
"""

from __future__ import annotations

import inspect
import re
import select
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import urlsplit

import psycopg
from psycopg.abc import PQGen
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from .._bridge import Awaiting, await_only
from ..errors import (
    BackendError,
    InvalidKeyError,
    MissingDependencyError,
    StoreError,
    StoreNotFoundError,
)
from ._url_options import DEFAULT_READ_TIMEOUT, SCHEMES, Given

__all__ = [
    "DEFAULT_READ_TIMEOUT",
    "AsyncCheckedPool",
    "AsyncPool",
    "AsyncTimedConnection",
    "CannotConnectError",
    "CheckedPool",
    "ReadTimeoutError",
    "TimedConnection",
    "conninfo",
    "make_pool",
    "unbounded",
]

RV = TypeVar("RV")

if "timeout" not in inspect.signature(psycopg.Connection.wait).parameters:  # before 3.3.6
    raise MissingDependencyError(
        f"the postgresql:// store needs psycopg 3.3.7 or later: psycopg {psycopg.__version__} "
        "cannot bound a wait for the server by the store's read_timeout (from 3.3.6): "
        "pip install -U 'localab-checkpoint[postgres]'"
    )

_CANCEL_WAIT = 2.0  # a server that answers nothing will not answer a cancel request either


class ReadTimeoutError(psycopg.OperationalError):
    """The server sent no complete reply within the connection's ``read_timeout``."""


class TimedConnection(psycopg.Connection[TupleRow]):
    """A psycopg connection whose every wait for the server ends after ``read_timeout``
    seconds (``None``: no limit). Pass ``connection_class=TimedConnection`` and a
    ``configure`` that sets ``read_timeout`` to a pool of your own to get the same bound."""

    read_timeout: float | None = None

    def wait(
        self,
        gen: PQGen[RV],
        interval: float = 0.1,  # psycopg's own: how often a wait checks for Ctrl-C
        timeout: float | None = None,
    ) -> RV:
        limit = self.read_timeout if timeout is None else timeout
        if limit is None or timeout is not None:
            return super().wait(gen, interval, timeout)
        started = time.monotonic()
        try:
            return super().wait(gen, interval, limit)
        except psycopg.OperationalError as exc:
            if time.monotonic() - started < limit:
                raise
            self._abandon()
            raise _timed_out(limit) from exc

    def _abandon(self) -> None:
        """Cancel what the session was running (a statement queued on a lock would otherwise
        apply once the lock is free) and close it, so no one reads its late reply."""
        try:
            if psycopg.capabilities.has_cancel_safe():
                self.cancel_safe(timeout=_CANCEL_WAIT)
        except psycopg.Error:
            pass  # unreachable server: closing is all that is left
        finally:
            self.close()


class AsyncTimedConnection(psycopg.AsyncConnection[TupleRow]):
    """``TimedConnection`` for psycopg's asyncio API (``AsyncStore``): the same bound."""

    read_timeout: float | None = None

    async def wait(
        self,
        gen: PQGen[RV],
        interval: float = 0.1,
        timeout: float | None = None,
    ) -> RV:
        limit = self.read_timeout if timeout is None else timeout
        if limit is None or timeout is not None:
            return await super().wait(gen, interval, timeout)
        started = time.monotonic()
        try:
            return await super().wait(gen, interval, limit)
        except psycopg.OperationalError as exc:
            if time.monotonic() - started < limit:
                raise
            try:
                if psycopg.capabilities.has_cancel_safe():
                    await self.cancel_safe(timeout=_CANCEL_WAIT)
            except psycopg.Error:
                pass
            finally:
                await self.close()
            raise _timed_out(limit) from exc


def _timed_out(limit: float) -> ReadTimeoutError:
    return ReadTimeoutError(
        f"no reply from the server within {limit:g} s (read_timeout); the statement "
        "was cancelled and the session closed"
    )


@contextmanager
def unbounded(conn: Any) -> Iterator[None]:
    """No read timeout on ``conn`` (a ``TimedConnection``, or an ``AsyncTimedConnection``
    behind ``AsyncPool``'s face) while the block runs."""
    timed = getattr(conn, "target", conn)
    if not isinstance(timed, TimedConnection | AsyncTimedConnection):
        yield
        return
    bound, timed.read_timeout = timed.read_timeout, None
    try:
        yield
    finally:
        timed.read_timeout = bound


# What libpq says when retrying cannot help: the server refused this client, or (before a pool
# ever connected) nothing listens at that address or the host name does not resolve.
_REFUSED_FOR_GOOD = re.compile(
    r"password authentication failed|authentication failed|no pg_hba\.conf entry|"
    r'(database|role) "[^"]*" does not exist|no password supplied|invalid \w+ value',
    re.I,
)
_NOTHING_THERE = re.compile(
    r"Connection refused|No such file or directory|could not translate host name|"
    r"Name or service not known|nodename nor servname",
    re.I,
)


class CannotConnectError(psycopg.Error):
    """A connection failure retrying cannot fix; ``store_error`` is the library's error for it.
    Not an ``OperationalError``, so it is never retried."""

    def __init__(self, cause: psycopg.OperationalError) -> None:
        text = " ".join(str(cause).split())
        reason = text.rpartition("FATAL:")[2].strip() if "FATAL:" in text else text
        super().__init__(f"cannot connect to the PostgreSQL server: {reason}")
        self.reason = reason

    def store_error(self, operation: str) -> StoreError:
        message = f"postgres {operation} failed: {self}"
        if re.search(r'database "[^"]*" does not exist', self.reason):
            return StoreNotFoundError(message + " (create it, or fix the URL)")
        if _REFUSED_FOR_GOOD.search(self.reason):
            return InvalidKeyError(message + " (check the URL: its user, password and options)")
        return BackendError(
            message + " (nothing answers at that address)", backend="postgres", operation=operation
        )


class CheckedPool(ConnectionPool[TimedConnection]):
    """The pool ``make_pool`` builds. psycopg_pool retries a failed connection in the
    background and only logs why, so a wrong password, database or role, or a server that is
    not there at all, would make every request wait for ``timeout`` and the Store retry it for
    its whole budget. This pool remembers a failure retrying cannot fix and fails the requests
    waiting for a connection, and later ones, at once with ``CannotConnectError``. Connection
    refused counts only until the pool first connected: after that it is an outage."""

    refused: CannotConnectError | None = None
    connected: bool = False

    def _connect(self, timeout: float | None = None) -> TimedConnection:
        try:
            conn = super()._connect(timeout)
        except psycopg.OperationalError as exc:
            if _for_good(exc, self.connected):
                self.refused = CannotConnectError(exc)
                self._fail_waiting(self.refused)
            raise
        self.connected, self.refused = True, None
        return conn

    def _fail_waiting(self, error: CannotConnectError) -> None:
        # psycopg_pool has no public way to end the waits of clients it cannot serve.
        with self._lock:
            waiting = list(getattr(self, "_waiting", ()))
        for client in waiting:
            client.fail(error)

    def getconn(self, timeout: float | None = None) -> TimedConnection:
        if self.refused is not None:
            raise self.refused
        return super().getconn(timeout)


class AsyncCheckedPool(AsyncConnectionPool[AsyncTimedConnection]):
    """``CheckedPool`` for psycopg's asyncio API (``AsyncStore``): the same checks."""

    refused: CannotConnectError | None = None
    connected: bool = False

    async def _connect(self, timeout: float | None = None) -> AsyncTimedConnection:
        try:
            conn = await super()._connect(timeout)
        except psycopg.OperationalError as exc:
            if _for_good(exc, self.connected):
                self.refused = CannotConnectError(exc)
                async with self._lock:
                    waiting = list(getattr(self, "_waiting", ()))
                for client in waiting:
                    await client.fail(self.refused)
            raise
        self.connected, self.refused = True, None
        return conn

    async def getconn(self, timeout: float | None = None) -> AsyncTimedConnection:
        if self.refused is not None:
            raise self.refused
        return await super().getconn(timeout)


def _for_good(exc: psycopg.OperationalError, connected: bool) -> bool:
    """Whether a failed connection attempt is one retrying cannot fix (``CheckedPool``)."""
    text = str(exc)
    return bool(_REFUSED_FOR_GOOD.search(text) or (not connected and _NOTHING_THERE.search(text)))


def conninfo(given: Given) -> str:
    """The conninfo for libpq of a PostgreSQL URL whose options ``given`` read: the URL's
    query without this library's options (``SCHEMES["postgres"]``), with a connect timeout."""
    # libpq waits forever to connect by default
    made = given.driver_url(connect_timeout="5")
    try:
        conninfo_to_dict(made)  # libpq's own parse: refuses a parameter it does not know
    except psycopg.ProgrammingError as exc:
        why = " ".join(str(exc).split())
        password = urlsplit(given.url).password
        if password is not None:  # libpq quotes what it cannot parse: maybe the password
            why = why.replace(password, "***")
        raise InvalidKeyError(
            f"postgres URL refused: {why} (this library's options: "
            f"{', '.join(SCHEMES['postgres'].names)}; anything else goes to libpq)"
        ) from None
    return made


def make_pool(
    conninfo: str,
    *,
    min_size: int,
    max_size: int,
    pool_timeout: float,
    read_timeout: float | None,
    asynchronous: bool = False,
) -> Any:
    """An opening pool of ``TimedConnection`` sessions in autocommit (a single-statement read
    is one round trip; writes open explicit transactions). ``asynchronous``: an
    ``AsyncCheckedPool`` of ``AsyncTimedConnection``, opened by its first use on the loop."""

    def configure(conn: TimedConnection | AsyncTimedConnection) -> None:
        conn.read_timeout = read_timeout

    async def configure_async(conn: AsyncTimedConnection) -> None:
        configure(conn)

    async def check_async(conn: AsyncTimedConnection) -> None:
        if conn.closed:
            raise psycopg.OperationalError("the connection is closed")
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
        if readable:
            await AsyncConnectionPool.check_connection(conn)

    options: dict[str, Any] = {
        "kwargs": {"autocommit": True},
        "min_size": min_size,
        "max_size": max(max_size, min_size),
        # Bounds the wait for a healthy connection; the Store's retry policy governs the rest.
        "timeout": pool_timeout,
        "open": False,
        "name": "agent-checkpoint",
    }
    if asynchronous:
        return AsyncCheckedPool(
            conninfo,
            connection_class=AsyncTimedConnection,
            configure=configure_async,
            check=check_async,
            **options,
        )
    pool = CheckedPool(
        conninfo,
        connection_class=TimedConnection,
        configure=configure,
        check=check_connection,
        **options,
    )
    pool.open(wait=False)
    return pool


class AsyncPool(Awaiting):
    """An ``AsyncCheckedPool`` with the synchronous pool's face, for a backend that
    ``AsyncStore`` runs (``_bridge.py``): it opens on its first use, on the store's loop, and
    its connections, cursors and transactions are awaited there."""

    __slots__ = ("_opened",)

    def __init__(self, pool: AsyncConnectionPool[Any]) -> None:
        super().__init__(pool, (psycopg.AsyncCursor, psycopg.AsyncTransaction))
        object.__setattr__(self, "_opened", False)

    @contextmanager
    def connection(self, timeout: float | None = None) -> Iterator[Any]:
        if not self._opened:
            object.__setattr__(self, "_opened", True)
            await_only(self.target.open(wait=False))
        with Awaiting(self.target.connection(timeout)) as conn:
            yield Awaiting(conn, self._wrap)


def check_connection(conn: Any) -> None:
    """The pool's check of a connection before handing it out, without a round trip when it
    can tell: an idle, healthy session has nothing to read, while one the server or the network
    reset (or the server is shutting down) has an error or end-of-file waiting on its socket,
    and only then is it probed (and discarded when the probe fails). A session whose peer
    vanished silently fails at its next use, as a transient fault the Store retries."""
    if conn.closed:
        raise psycopg.OperationalError("the connection is closed")
    readable, _, _ = select.select([conn.fileno()], [], [], 0)
    if readable:
        ConnectionPool.check_connection(conn)
