"""How the Redis backend (``_redis.py``) talks to the server: its write scripts run in one round
trip (a big body staged beside them, ``WAIT`` after them, a script the server lost loaded
again), its optimistic reads of records whose bodies are stored apart (and its reads of those
version 0.4 stored in segments), and redis-py's errors translated into the library's.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from redis.commands.core import Script
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError

from ..errors import NotReplicatedError
from ._base import translate_errors
from ._legacy import whole_body
from ._redis_connect import (
    FATAL,
    TRANSIENT,
    Client,
    load_topology,
    misconfigured,
    node_client,
    refresh_topology,
)
from ._redis_durability import DurabilityCheck
from ._redis_layout import LOADED
from ._redis_scripts import LEGACY, READ

__all__ = ["Commands"]

STAGE_TTL_MS = 60_000


class Commands:
    """The commands of one store (``base``: the prefix of its keys) on ``client``."""

    def __init__(
        self,
        client: Client,
        *,
        prefix: str,
        base: str,
        wait_replicas: int,
        wait_timeout: float,
    ) -> None:
        self.client = client
        self.prefix = prefix
        self.base = base
        self.wait_replicas = wait_replicas
        self.wait_timeout = wait_timeout
        self.durability = DurabilityCheck(client, prefix)
        self._read = client.register_script(READ)
        self._legacy = client.register_script(LEGACY)
        self._topology = False  # loaded (``load_topology``)

    def record_key(self, key: str) -> str:
        return self.base + "r:" + key

    def body_key(self, key: str, row: list[Any]) -> str:
        """Where the body of the record ``row`` was read from is stored apart (``WRITE``)."""
        return f"{self.base}b:{int(row[-1])}:{key}"

    # -- reads ---------------------------------------------------------------------------

    def row(self, key: str, tries: int) -> list[Any]:
        """The fields ``LOADED`` of ``key``'s record, its body read where it is stored apart:
        one HMGET, and one GET for a body stored apart."""
        with self.errors("load"):
            row: list[Any] = self.client.hmget(self.record_key(key), LOADED)
        if _apart(row):
            with self.errors("load"):
                body = self.client.get(self.body_key(key, row))
            if body is None:  # replaced since the hash was read
                return self.rows([key], tries)[0]
            row = [body, *row[1:]]
        return row

    def rows(self, keys: Sequence[str], tries: int) -> list[list[Any]]:
        # One pipeline: a store's keys share one hash tag, so on a cluster it goes to one node;
        # the bodies stored apart (``STAGE_BYTES``: under the key WRITE names by revision) in
        # one more. A body gone by then belongs to a record replaced since: read that again,
        # and after ``tries`` tries atomically (``READ``), so busy writers cannot starve it.
        found: list[list[Any]] = [[]] * len(keys)
        wanted = list(range(len(keys)))
        for attempt in range(tries + 1):
            with self.errors("load"):
                if attempt == tries:
                    rows, apart = self._read_atomically(keys, wanted), []
                else:
                    rows = self._read_hashes(keys, wanted)
                    apart = [i for i, row in rows.items() if _apart(row)]
                    if apart:
                        self._read_bodies(keys, rows, apart)
            wanted = [i for i in apart if rows[i][0] is None]
            for i, row in rows.items():
                if i not in wanted:
                    found[i] = row
            if not wanted:
                return found
        raise AssertionError("unreachable: the atomic read leaves nothing to read again")

    def _read_hashes(self, keys: Sequence[str], wanted: list[int]) -> dict[int, list[Any]]:
        pipe = self.client.pipeline(transaction=False)
        for i in wanted:
            pipe.hmget(self.record_key(keys[i]), LOADED)
        return dict(zip(wanted, pipe.execute(), strict=True))

    def _read_bodies(
        self, keys: Sequence[str], rows: dict[int, list[Any]], apart: list[int]
    ) -> None:
        pipe = self.client.pipeline(transaction=False)
        for i in apart:
            pipe.get(self.body_key(keys[i], rows[i]))
        for i, body in zip(apart, pipe.execute(), strict=True):
            rows[i] = [body, *rows[i][1:]]

    def _read_atomically(self, keys: Sequence[str], wanted: list[int]) -> dict[int, list[Any]]:
        args = [self.base, *(keys[i] for i in wanted), *LOADED]
        replies = self._read([self.record_key(keys[i]) for i in wanted], args)
        return dict(zip(wanted, replies, strict=True))

    def legacy_row(self, keys: list[str]) -> list[Any]:
        """The row of a record version 0.4 stored in segments (``keys``: its hash and segment
        list), both read in one snapshot, its body assembled (``_legacy.py``)."""
        with self.errors("load"):
            row, segments = self._legacy(keys, LOADED)
        return [whole_body(row[0], row[1], row[2], segments), *row[1:]]

    # -- writes --------------------------------------------------------------------------

    def run(
        self,
        operation: str,
        script: Script,
        keys: list[str],
        args: list[Any],
        staged: tuple[str, bytes] | None = None,
    ) -> Any:
        """Run a write script in one round trip and return its reply. ``args`` start with the
        prefix and the key, as every write script's do. ``staged``: a body SET under a
        staging key (with an expiry, should the script not run) just before the script. With
        ``wait_replicas``, a ``WAIT`` follows on the same connection, and a write the script
        applied (``ok``, ``dropped``) that too few replicas confirmed raises
        ``NotReplicatedError``."""
        with self.errors(operation):
            if not self.wait_replicas and staged is None:
                return script(keys, args)
            reply, confirmed = self._pipelined(script, keys, args, staged)
        if reply[0] in (b"ok", b"dropped") and int(confirmed) < self.wait_replicas:
            raise NotReplicatedError(
                f"redis {operation} of key {args[1]!r} applied on the primary, but only "
                f"{confirmed} of the {self.wait_replicas} replicas it waits for "
                f"(wait_replicas) confirmed it within {self.wait_timeout:g} s "
                "(wait_timeout): a failover now could lose it",
                backend="redis",
                operation=operation,
                key=args[1],
                wanted=self.wait_replicas,
                confirmed=int(confirmed),
            )
        return reply

    def _pipelined(
        self, script: Script, keys: list[str], args: list[Any], staged: tuple[str, bytes] | None
    ) -> tuple[Any, Any]:
        """The script's reply and the replicas ``WAIT`` counted (0 without ``wait_replicas``)."""
        client = node_client(self.client, self.prefix)  # cluster pipelines refuse scripts
        for _ in range(2):
            pipe = client.pipeline(transaction=False)
            if staged is not None:
                pipe.set(staged[0], staged[1], px=STAGE_TTL_MS)
            pipe.evalsha(script.sha, len(keys), *keys, *args)
            if self.wait_replicas:
                pipe.wait(self.wait_replicas, max(1, round(self.wait_timeout * 1000)))
            replies = pipe.execute(raise_on_error=False)[1 if staged else 0 :]
            reply = replies[0]
            confirmed = replies[1] if self.wait_replicas else 0
            if not isinstance(reply, NoScriptError):
                break
            script.sha = client.script_load(script.script)  # a new or flushed server
        for answer in replies:
            if isinstance(answer, Exception):
                raise answer
        return reply, confirmed

    # -- errors --------------------------------------------------------------------------

    @contextmanager
    def errors(self, operation: str) -> Iterator[None]:
        with translate_errors(
            "redis", operation, transient=TRANSIENT, fatal=FATAL, misconfigured=misconfigured
        ):
            try:
                if not self._topology:
                    load_topology(self.client)
                    self._topology = True
                self.durability()  # a store's first command: redis-py's races can meet it too
                yield
            except TRANSIENT:
                refresh_topology(self.client)  # on a cluster, a failover may have moved the slot
                raise
            except AttributeError as exc:
                if not _connection_dropped(exc):
                    raise
                raise RedisConnectionError(f"connection closed under the command ({exc})") from exc
            except RuntimeError as exc:
                if not _of_a_closed_loop(exc):
                    raise
                raise RedisConnectionError(
                    "a connection made on an event loop that is closed since (an AsyncStore "
                    "used from a new asyncio.run()); redis-py replaces it on the next attempt"
                ) from exc


def _connection_dropped(exc: AttributeError) -> bool:
    """Whether ``exc`` is redis-py's asyncio connection writing to a socket it has just dropped.
    Seen with redis-py 8.1's cluster client and concurrent commands: after a node's connection
    fails, redis-py disconnects the node's free connections, and a command that took one of
    them meanwhile writes to ``None``. Nothing was sent, so it is a lost connection like any
    other, which the Store retries."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = frames[-1].filename.replace("\\", "/") if frames else ""
    return "NoneType" in str(exc) and where.endswith("redis/asyncio/connection.py")


def _of_a_closed_loop(exc: RuntimeError) -> bool:
    """Whether ``exc`` is redis-py's asyncio connection, made on an event loop since closed,
    failing to read its reply (and then to close itself) on another loop. The command may
    have been sent: it is a connection lost under a command, which the Store retries and,
    for a write, reads back. redis-py then connects again on the running loop."""
    frames = traceback.extract_tb(exc.__traceback__)
    return str(exc) == "Event loop is closed" and any(
        f.filename.replace("\\", "/").endswith("redis/asyncio/connection.py") for f in frames
    )


def _apart(row: list[Any]) -> bool:
    """Whether a record read (``LOADED``) has its body stored apart: a live record (it has a
    revision) with neither a ``body`` field nor a 0.4 ``head``."""
    return row[0] is None and row[1] is None and row[-1] is not None
