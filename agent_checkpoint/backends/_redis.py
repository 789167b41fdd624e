"""Redis backend on redis-py: plain Redis 6+, no modules, atomic through Lua scripts.

Layout (encoded by ``_redis_layout.py``), for prefix ``P`` (all keys share the hash tag ``{P}``,
so one store is one cluster slot; shard across nodes with several prefixes):

- ``{P}:r:<key>``: hash of one record: its summary fields, its index positions and ``body``.
  A record that version 0.4 stored in segments has ``head``, ``dig`` and ``segs`` instead
  of ``body``, and its segments in the list ``{P}:s:<key>``: still read (``Commands.legacy_row``), and
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
still leaves its pieces the record's lifetime. Writes are Lua scripts (``_redis_scripts.py``);
a read is one HMGET, the pieces of a long history one pipeline of them (``load_many``). A put
and a get are one round trip each (and one more for the pieces, where a history has any).
``_redis_commands.py`` runs the scripts and the reads (a big body staged, ``WAIT``, a script
the server lost loaded again, a body stored apart read optimistically).

On a Redis Cluster (``?cluster=true``, or a ``RedisCluster`` client) all of the above runs
unchanged on the node that owns the store's slot; a cluster pipeline refuses scripts, so a
write that waits for replicas runs on that node's own connection.

With ``wait_replicas=N`` every write is followed, in the same round trip and on the same
connection, by ``WAIT N wait_timeout``: it returns once N replicas confirmed it, and raises
``NotReplicatedError`` when the primary applied it but fewer confirmed it in time.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from ..errors import InvalidArgumentError, InvalidKeyError
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
)
from ._redis_commands import Commands
from ._redis_connect import DEFAULT_WAIT_TIMEOUT, AsyncClient, Client, connect
from ._redis_durability import VolatileRedisWarning
from ._redis_layout import (
    FIELDS,
    bounds,
    candidate_indexes,
    page_filter,
    summary_of,
    write_args,
)
from ._redis_scripts import DROP, KEEP, PAGE, WRITE
from ._url_options import DEFAULT_PREFIX

__all__ = ["DEFAULT_PREFIX", "RedisBackend", "VolatileRedisWarning"]

MAX_BATCH = 2000
STAGE_BYTES = 64 * 1024
"""Bodies this large are stored under a key of their own, not passed to Lua (``WRITE``)."""
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
        self._base = f"{{{prefix}}}:" if namespace is None else f"{{{prefix}}}#{namespace}:"
        self._commands = Commands(
            client,
            prefix=prefix,
            base=self._base,
            wait_replicas=wait_replicas,
            wait_timeout=wait_timeout,
        )
        self._write = client.register_script(WRITE)
        self._drop = client.register_script(DROP)
        self._keep = client.register_script(KEEP)
        self._page = client.register_script(PAGE)
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
    def wait_replicas(self) -> int:
        """Replicas that must confirm each write (``WAIT``) before it returns; 0: none."""
        return self._commands.wait_replicas

    @property
    def wait_timeout(self) -> float:
        return self._commands.wait_timeout

    @property
    def max_connections(self) -> int | None:
        """The most connections the client opens (``None``: unbounded, or a cluster's)."""
        return getattr(getattr(self._client, "connection_pool", None), "max_connections", None)

    # -- records -------------------------------------------------------------------------

    def load(self, key: str) -> Record | None:
        return self._record(key, self._commands.row(key, READS))

    def load_many(self, keys: Sequence[str]) -> list[Record | None]:
        rows = self._commands.rows(keys, READS)
        return [self._record(key, row) for key, row in zip(keys, rows, strict=True)]

    def _record(self, key: str, row: list[Any]) -> Record | None:
        if row[1] is not None:  # a head: stored in segments by version 0.4
            row = self._commands.legacy_row(self._keys(key))
        return None if row[0] is None else Record(summary_of(key, row[3:]), row[0])

    def in_old_layout(self, key: str) -> bool:
        with self._commands.errors("load"):
            return bool(self._client.hexists(self._commands.record_key(key), "head"))

    def head(self, key: str) -> Summary | None:
        with self._commands.errors("head"):
            row: list[Any] = self._client.hmget(self._commands.record_key(key), list(FIELDS))
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
        args = write_args(self._base, s, create_only, expect_revision, body, self.ttl_ms)
        args.append(str(size))
        keys = self._keys(s.key) + ([staged[0]] if staged else [])
        reply = self._commands.run("save", self._write, keys, args, staged)
        return self._outcome(s, reply, expect_revision, size)

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
        reply = self._commands.run("drop", self._drop, self._keys(key), [self._base, key, expected])
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
            with self._commands.errors("scan"):
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
        with self._commands.errors("repair"):
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
            sibling._commands.durability.checked = True
            self._siblings[name] = sibling
        return sibling

    def keep(self, keys: Sequence[str]) -> None:
        """A fresh expiry for the records under ``keys`` (``Expiring``); nothing without a
        ttl. One script call."""
        if not self.ttl_ms or not keys:
            return
        hashes = [self._commands.record_key(key) for key in keys]
        self._commands.run("keep", self._keep, hashes, [self._base, str(self.ttl_ms), *keys])

    def close(self) -> None:
        if self._owns and not self._closed:
            self._client.close()
        self._closed = True

    # -- internals -----------------------------------------------------------------------

    def _keys(self, key: str) -> list[str]:
        """A record's keys: its hash and the segment list of version 0.4."""
        return [self._commands.record_key(key), self._base + "s:" + key]

    def _choose_index(self, query: Query) -> str:
        """The most selective index for the query's filters (ZCARD decides between several)."""
        candidates = candidate_indexes(self._base, query)
        if len(candidates) < 2:
            return candidates[0]
        with self._commands.errors("scan"):
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
