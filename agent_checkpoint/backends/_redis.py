"""Redis backend on redis-py: plain Redis 6+, no modules, atomic through Lua scripts.

Layout (encoded by ``_redis_layout.py``), for prefix ``P`` (all keys share the hash tag ``{P}``,
so one store is one cluster slot; shard across nodes with several prefixes):

- ``{P}:r:<key>``: hash of one record: its summary fields, its index positions and ``body``.
  A record that version 0.4 stored in segments has ``head``, ``dig`` and ``segs`` instead
  of ``body``, and its segments in the list ``{P}:s:<key>``: still read (``_legacy``), and
  removed by the next write or drop of the key. Long histories are now the store's segment
  layer's business (``_segments.py``): its pieces are records of the namespace ``segments``.
- ``{P}:new``, ``{P}:o:<owner>``, ``{P}:a:<agent>``, ``{P}:f``, ``{P}:p:<phase>``: sorted sets,
  score 0, members ``<17 digits: OFFSET - 1 - saved_at>:<key>``, so lexicographic order is
  (saved_at DESC, key ASC) and a keyset position is a ZRANGEBYLEX bound.
- ``{P}:old``: the same with ``<17 digits: saved_at + OFFSET>:<key>`` for oldest first.
- ``{P}:ix``: names of the per-owner, per-agent and per-phase indexes, for ``repair``.
- ``{P}:rev``: a counter every write moves on, at or above every revision issued: a new key
  (or one deleted or expired) starts there, so no key repeats a revision (never expires).

A namespace ``N`` of the store (``namespace``; claims live in one) has the same layout under
``{P}#N:``: in the store's slot, and out of reach of any other store, whose prefix cannot hold
a brace.

With ``ttl`` every write gives the record's hash a fresh expiry; index members of expired
records are skipped and removed when a scan meets them, or by ``repair``. The store's
namespaces (the pieces of long histories, claims) expire too, after twice the ttl, and the
segment layer refreshes the pieces a record keeps referring to before each write of that
record (``keep``): a long history expires with its record, and one refresh lost to a crash
still leaves its pieces the record's lifetime. Writes are Lua
scripts (``_redis_scripts.py``); a read is one HMGET, the pieces of a long history one pipeline
of them (``load_many``). A put and a get are one round trip each (and one more for the pieces,
where a history has any).

On a Redis Cluster (``?cluster=true``, or a ``RedisCluster`` client) all of the above runs
unchanged on the node that owns the store's slot; a cluster pipeline refuses scripts, so a
write that waits for replicas runs on that node's own connection.

With ``wait_replicas=N`` every write is followed, in the same round trip and on the same
connection, by ``WAIT N wait_timeout``: it returns once N replicas confirmed it, and raises
``NotReplicatedError`` when the primary applied it but fewer confirmed it in time.
"""

from __future__ import annotations

import traceback
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from redis.commands.core import Script
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError

from .._codec import join_parts
from ..errors import (
    InvalidArgumentError,
    InvalidKeyError,
    NotReplicatedError,
    UnsupportedOperationError,
)
from ._base import (
    Closable,
    Query,
    Record,
    Summary,
    exists_refused,
    is_after,
    matches,
    plan_drop,
    resolve_owner,
    revision_refused,
    translate_errors,
)
from ._redis_connect import (
    DEFAULT_WAIT_TIMEOUT,
    FATAL,
    TRANSIENT,
    AsyncClient,
    Client,
    connect,
    load_topology,
    misconfigured,
    node_client,
    refresh_topology,
)
from ._redis_durability import DurabilityCheck, VolatileRedisWarning
from ._redis_layout import (
    FIELDS,
    LOADED,
    SAVED_AT_LIMIT,
    bounds,
    candidate_indexes,
    newest,
    oldest,
    opt,
    page_filter,
    summary_of,
)
from ._redis_scripts import DROP, KEEP, LEGACY, PAGE, READ, WRITE
from ._url_options import DEFAULT_PREFIX

__all__ = ["DEFAULT_PREFIX", "RedisBackend", "VolatileRedisWarning"]

MAX_BATCH = 2000
STAGE_BYTES = 64 * 1024
"""Bodies this large are stored under a key of their own, not passed to Lua (``WRITE``)."""
STAGE_TTL_MS = 60_000
READS = 8  # optimistic reads of a body stored apart before the atomic one (``READ``)


class RedisBackend(Closable):
    name = "redis"

    def __init__(
        self,
        client: Client,
        *,
        prefix: str = DEFAULT_PREFIX,
        ttl: float | None = None,
        wait_replicas: int = 0,
        wait_timeout: float = DEFAULT_WAIT_TIMEOUT,
        owns_client: bool = False,
        namespace: str | None = None,
    ) -> None:
        if not prefix or "{" in prefix or "}" in prefix or not prefix.isprintable():
            raise InvalidKeyError(
                f"redis prefix {prefix!r} must be non-empty, printable and free of braces "
                "(it becomes the {hash tag} of every key of the store)"
            )
        if ttl is not None and ttl <= 0:
            raise InvalidArgumentError(f"ttl must be a positive number of seconds, got {ttl!r}")
        if (
            isinstance(wait_replicas, bool)
            or not isinstance(wait_replicas, int)
            or wait_replicas < 0
        ):
            raise InvalidArgumentError(
                f"wait_replicas must be a whole number >= 0, got {wait_replicas!r}"
            )
        if not wait_timeout > 0:
            raise InvalidArgumentError(
                f"wait_timeout must be a positive number of seconds, got {wait_timeout!r}"
            )
        if client.get_encoder().decode_responses:
            raise InvalidArgumentError(
                "the redis client must not decode responses: bodies are bytes"
            )
        self._client = client
        self._owns = owns_client
        self.prefix = prefix
        self.ttl_ms = 0 if ttl is None else max(1, round(ttl * 1000))
        self.wait_replicas = wait_replicas
        """Replicas that must confirm each write (``WAIT``) before it returns; 0: none."""
        self.wait_timeout = wait_timeout
        self._base = f"{{{prefix}}}:" if namespace is None else f"{{{prefix}}}#{namespace}:"
        self._write = client.register_script(WRITE)
        self._drop = client.register_script(DROP)
        self._keep = client.register_script(KEEP)
        self._page = client.register_script(PAGE)
        self._read = client.register_script(READ)
        self._legacy_read = client.register_script(LEGACY)
        self._durability = DurabilityCheck(client, prefix)
        self._topology = False  # loaded (``load_topology``)
        self._siblings: dict[str, RedisBackend] = {}

    @classmethod
    def from_url(
        cls, url: str, *, client: Any = None, asynchronous: bool = False, **options: Any
    ) -> RedisBackend:
        """A store on ``url``'s server, or on a ready ``client`` (a ``redis.Redis`` or
        ``RedisCluster`` you own and close) with the URL's store options. ``asynchronous``:
        see ``from_url_async``."""
        made, given = connect(url, options, client=client, asynchronous=asynchronous)
        face = AsyncClient(made) if asynchronous else made
        return cls(face, **given.store, owns_client=client is None)  # type: ignore[arg-type]

    @classmethod
    def from_url_async(cls, url: str, **options: Any) -> RedisBackend:
        """The backend an ``AsyncStore`` runs on ``url``'s server (or on a ready
        ``redis.asyncio`` client, ``client=``, you own and close): the same backend, its
        commands awaited through ``redis.asyncio`` on the store's event loop."""
        return cls.from_url(url, asynchronous=True, **options)

    @property
    def max_connections(self) -> int | None:
        """The most connections the client opens (``None``: unbounded, or a cluster's)."""
        return getattr(getattr(self._client, "connection_pool", None), "max_connections", None)

    # -- records -------------------------------------------------------------------------

    def load(self, key: str) -> Record | None:
        with self._errors("load"):
            row: list[Any] = self._client.hmget(self._record_key(key), LOADED)
        if _apart(row):
            with self._errors("load"):
                body = self._client.get(self._body_key(key, row))
            if body is None:  # replaced since the hash was read
                return self.load_many([key])[0]
            row = [body, *row[1:]]
        return self._record(key, row)

    def load_many(self, keys: Sequence[str]) -> list[Record | None]:
        # One pipeline: a store's keys share one hash tag, so on a cluster it goes to one node;
        # the bodies stored apart (``STAGE_BYTES``: under the key WRITE names by revision) in
        # one more. A body gone by then belongs to a record replaced since: read that again,
        # and after ``READS`` tries atomically (``READ``), so busy writers cannot starve it.
        found: list[Record | None] = [None] * len(keys)
        wanted = list(range(len(keys)))
        for attempt in range(READS + 1):
            with self._errors("load"):
                if attempt == READS:
                    args = [self._base, *(keys[i] for i in wanted), *LOADED]
                    rows = dict(
                        zip(
                            wanted,
                            self._read([self._record_key(keys[i]) for i in wanted], args),
                            strict=True,
                        )
                    )
                    apart: list[int] = []
                else:
                    pipe = self._client.pipeline(transaction=False)
                    for i in wanted:
                        pipe.hmget(self._record_key(keys[i]), LOADED)
                    rows = dict(zip(wanted, pipe.execute(), strict=True))
                    apart = [i for i, row in rows.items() if _apart(row)]
                    if apart:
                        pipe = self._client.pipeline(transaction=False)
                        for i in apart:
                            pipe.get(self._body_key(keys[i], rows[i]))
                        for i, body in zip(apart, pipe.execute(), strict=True):
                            rows[i] = [body, *rows[i][1:]]
            wanted = [i for i in apart if rows[i][0] is None]
            for i, row in rows.items():
                if i not in wanted:
                    found[i] = self._record(keys[i], row)
            if not wanted:
                return found
        raise AssertionError("unreachable: the atomic read leaves nothing to read again")

    def _record(
        self, key: str, row: list[Any], segments: list[bytes] | None = None
    ) -> Record | None:
        body, head, count = row[:3]
        if head is not None:  # stored in segments by version 0.4
            if segments is None:
                return self._legacy(key)
            if count is None or int(count) != len(segments):
                body = head  # a lost segment: the head alone does not decode (unreadable)
            else:
                body = join_parts(head, b",".join(s for s in segments if s))
        if body is None:
            return None
        return Record(summary_of(key, row[3:]), body)

    def _legacy(self, key: str) -> Record | None:
        """A record version 0.4 stored in segments: its hash and list in one snapshot."""
        with self._errors("load"):
            row, segments = self._legacy_read(self._keys(key), LOADED)
        return self._record(key, row, segments)

    def head(self, key: str) -> Summary | None:
        with self._errors("head"):
            row: list[Any] = self._client.hmget(self._record_key(key), list(FIELDS))
        return None if row[-1] is None else summary_of(key, row)

    def save(
        self, record: Record, *, expect_revision: int | None = None, create_only: bool = False
    ) -> Summary:
        s = record.summary
        size = s.size or len(record.body)  # a layout record's is its assembled bytes' size
        staged = None
        if len(record.body) >= STAGE_BYTES:  # see WRITE: no big argument for Lua to copy
            staged = (f"{self._base}t:{uuid.uuid4().hex}", record.body)
        body = b"" if staged else record.body
        args = [*self._args(s, create_only, expect_revision, body), str(size)]
        keys = self._keys(s.key) + ([staged[0]] if staged else [])
        reply = self._run("save", self._write, keys, args, staged)
        return self._outcome(s, reply, expect_revision, size)

    def _args(
        self,
        s: Summary,
        create_only: bool,
        revision: int | None,
        body: bytes,
    ) -> list[Any]:
        if not -SAVED_AT_LIMIT <= s.saved_at <= SAVED_AT_LIMIT:
            raise UnsupportedOperationError(
                f"record {s.key!r} has savedAt {s.saved_at}; the redis store orders values "
                f"within ±{SAVED_AT_LIMIT} ms of the epoch"
            )
        return [
            self._base,
            s.key,
            "1" if create_only else "0",
            "" if revision is None else str(revision),
            body,
            newest(s.saved_at),
            oldest(s.saved_at),
            opt(s.owner),
            opt(s.agent_id),
            opt(s.failure_phase),
            s.run_id,
            str(s.saved_at),
            str(s.message_count),
            opt(None if s.failure_iteration is None else str(s.failure_iteration)),
            str(self.ttl_ms),
        ]

    def _outcome(self, s: Summary, reply: list[Any], expected: int | None, size: int) -> Summary:
        """The stored summary for an "ok" reply of the write script; the refusal otherwise."""
        status = reply[0].decode()
        if status == "ok":
            owner = None if reply[2] is None else reply[2].decode()
            return s.revised(owner=owner, revision=int(reply[1]), size=size)
        if status == "owner":
            resolve_owner(s.key, reply[1].decode(), s.owner)  # raises: the stored one refused
        found = None if reply[1] is None else int(reply[1])
        if status == "exists":
            raise exists_refused(s.key, found)
        raise revision_refused(s.key, expected, found)

    def drop(self, key: str, *, expect_revision: int | None = None) -> bool:
        expected = "" if expect_revision is None else str(expect_revision)
        reply = self._run("drop", self._drop, self._keys(key), [self._base, key, expected])
        status: str = reply[0].decode()
        if status == "dropped":
            return True
        found = int(reply[1]) if status == "revision" else None
        return plan_drop(key, found, expect_revision)  # a refusal raises; a missing key: False

    # -- listing -------------------------------------------------------------------------

    def scan(self, query: Query) -> list[Summary]:
        index = self._choose_index(query)
        low, high = bounds(query)
        # Filters the index does not apply drop entries: each further batch is twice as large.
        batch = min(query.limit, MAX_BATCH)
        out: list[Summary] = []
        while True:
            with self._errors("scan"):
                last, removed, rows = self._read_batch(index, low, high, batch, query.prefix)
            for row in rows:
                summary = summary_of(row[0].decode(), row[1:])
                if is_after(summary, query) and matches(summary, query):
                    out.append(summary)
                    if len(out) >= query.limit:
                        return out
            if last is None or len(rows) + removed < batch:
                return out
            low = b"(" + last
            batch = min(batch * 2, MAX_BATCH)

    def repair(self) -> int:
        """Remove index members whose record expired or no longer matches; the count removed."""
        removed = 0
        with self._errors("repair"):
            names = [self._base + "new", self._base + "old", self._base + "f"]
            registered: set[Any] = self._client.smembers(self._base + "ix")
            names += sorted(n.decode() for n in registered)
            for name in names:
                low: bytes = b"-"
                while True:
                    last, gone, _ = self._read_batch(name, low, b"+", MAX_BATCH)
                    removed += gone
                    if last is None:
                        break
                    low = b"(" + last
        return removed

    def namespace(self, name: str) -> RedisBackend:
        sibling = self._siblings.get(name)
        if sibling is None:
            # Same client and slot; keys of its own, never in this store's indexes.
            sibling = RedisBackend(
                self._client,
                prefix=self.prefix,
                ttl=self.ttl_ms * 2 / 1000 if self.ttl_ms else None,  # see ``keep``
                namespace=name,
                wait_replicas=self.wait_replicas,
                wait_timeout=self.wait_timeout,
            )
            sibling._durability.checked = True
            self._siblings[name] = sibling
        return sibling

    def keep(self, keys: Sequence[str]) -> None:
        """A fresh expiry for the records under ``keys`` (``Expiring``); nothing without a
        ttl. One script call."""
        if not self.ttl_ms or not keys:
            return
        hashes = [self._record_key(key) for key in keys]
        self._run("keep", self._keep, hashes, [self._base, str(self.ttl_ms), *keys])

    def close(self) -> None:
        if self._owns and not self._closed:
            self._client.close()
        self._closed = True

    # -- internals -----------------------------------------------------------------------

    def _record_key(self, key: str) -> str:
        return self._base + "r:" + key

    def _body_key(self, key: str, row: list[Any]) -> str:
        """Where the body of the record ``row`` was read from is stored apart (``WRITE``)."""
        return f"{self._base}b:{int(row[-1])}:{key}"

    def _keys(self, key: str) -> list[str]:
        """A record's keys: its hash and the segment list of version 0.4."""
        return [self._base + "r:" + key, self._base + "s:" + key]

    def _run(
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
        with self._errors(operation):
            if not self.wait_replicas and staged is None:
                return script(keys, args)
            client = node_client(self._client, self.prefix)  # cluster pipelines refuse scripts
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
        if reply[0] in (b"ok", b"dropped") and int(confirmed) < self.wait_replicas:
            raise NotReplicatedError(
                f"redis {operation} of key {args[1]!r} applied on the primary, but only "
                f"{confirmed} of the {self.wait_replicas} replicas it waits for "
                f"(wait_replicas) confirmed it within {self.wait_timeout:g} s "
                "(wait_timeout): a failover now could lose it",
                backend=self.name,
                operation=operation,
                key=args[1],
                wanted=self.wait_replicas,
                confirmed=int(confirmed),
            )
        return reply

    @contextmanager
    def _errors(self, operation: str) -> Iterator[None]:
        with translate_errors(
            self.name, operation, transient=TRANSIENT, fatal=FATAL, misconfigured=misconfigured
        ):
            try:
                if not self._topology:
                    load_topology(self._client)
                    self._topology = True
                self._durability()  # a store's first command: redis-py's races can meet it too
                yield
            except TRANSIENT:
                refresh_topology(self._client)  # on a cluster, a failover may have moved the slot
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

    def _choose_index(self, query: Query) -> str:
        """The most selective index for the query's filters (ZCARD decides between several)."""
        candidates = candidate_indexes(self._base, query)
        if len(candidates) < 2:
            return candidates[0]
        with self._errors("scan"):
            pipe = self._client.pipeline(transaction=False)
            for name in candidates:
                pipe.zcard(name)
            sizes = pipe.execute()
        return min(zip(sizes, candidates, strict=True))[1]

    def _read_batch(
        self, index: str, low: bytes, high: bytes, count: int, prefix: str | None = None
    ) -> tuple[bytes | None, int, list[list[Any]]]:
        """The last member read, how many were removed or left unread (without ``prefix``),
        and the rows of the rest."""
        position, column, wanted = page_filter(self._base, index)
        reply = self._page(
            [index], [self._base, low, high, count, position, column, wanted, prefix or ""]
        )
        return reply[0], int(reply[1]) + int(reply[2]), reply[3:]


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
