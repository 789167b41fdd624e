"""Redis backend on redis-py: plain Redis 6+, no modules, atomic through Lua scripts.

Layout, for prefix ``P`` (all keys share the hash tag ``{P}``, so one store is one cluster slot;
shard across nodes with several prefixes):

- ``{P}:r:<key>``: hash of one record: ``body`` plus its summary fields and its index positions.
- ``{P}:new``, ``{P}:o:<owner>``, ``{P}:a:<agent>``, ``{P}:f``, ``{P}:p:<phase>``: sorted sets,
  score 0, members ``<17 digits: OFFSET - 1 - saved_at>:<key>``, so lexicographic order is
  (saved_at DESC, key ASC) and a keyset position is a ZRANGEBYLEX bound.
- ``{P}:old``: the same with ``<17 digits: saved_at + OFFSET>:<key>`` for oldest first.
- ``{P}:ix``: names of the per-owner, per-agent and per-phase indexes, for ``repair``.

With ``ttl`` the record hash (the only per-record key) gets a fresh expiry on every write; index
members of expired records are skipped and removed when a scan meets them, or by ``repair``.
"""

from __future__ import annotations

import threading
import warnings
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ReadOnlyError, RedisError, ResponseError, TryAgainError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from ..errors import (
    ConflictError,
    InvalidKeyError,
    OwnershipConflictError,
    UnsupportedOperationError,
)
from .base import Query, Record, Summary, is_after, matches, translate_errors

__all__ = ["DEFAULT_PREFIX", "RedisBackend", "VolatileRedisWarning"]

DEFAULT_PREFIX = "agent-checkpoint"
OFFSET = 10**16
SAVED_AT_LIMIT = 10**15
"""``saved_at`` values this layout can order, in either direction from the epoch."""
WIDTH = 17
MAX_BATCH = 2000

TRANSIENT = (RedisConnectionError, RedisTimeoutError, TryAgainError, ReadOnlyError)
FIELDS = ("run", "at", "own", "agent", "phase", "iter", "msgs", "size", "rev")


class VolatileRedisWarning(RuntimeWarning):
    """The Redis server keeps no data on disk: a restart loses every checkpoint."""


# Shared by save and drop: remove the index members of the summary stored now, where ``cur``
# is HMGET rev own sn so agent phase. Index keys are built from the store's base, so they sit in
# the record's slot (undeclared same-slot keys are allowed for scripts without a shebang).
_UNINDEX = """
local base = ARGV[1]
local function forget(ix, n)
  redis.call("ZREM", ix, n)
  if redis.call("EXISTS", ix) == 0 then redis.call("SREM", base .. "ix", ix) end
end
local function unindex(cur, key)
  local n = cur[3] .. ":" .. key
  redis.call("ZREM", base .. "new", n)
  redis.call("ZREM", base .. "old", cur[4] .. ":" .. key)
  if cur[2] then forget(base .. "o:" .. cur[2], n) end
  if cur[5] then forget(base .. "a:" .. cur[5], n) end
  if cur[6] then
    redis.call("ZREM", base .. "f", n)
    forget(base .. "p:" .. cur[6], n)
  end
end
"""

# plan_save's rules, in its order: create_only, then the expected revision, then the owner.
_SAVE = (
    _UNINDEX
    + """
local rec, key = KEYS[1], ARGV[2]
local cur = redis.call("HMGET", rec, "rev", "own", "sn", "so", "agent", "phase")
local rev = cur[1]
if rev and ARGV[3] == "1" then return {"exists", rev} end
if ARGV[4] ~= "" and rev ~= ARGV[4] then return {"revision", rev} end
local function opt(s) if s == "" then return false end return string.sub(s, 2) end
local owner, agent, phase, iter = opt(ARGV[8]), opt(ARGV[9]), opt(ARGV[10]), opt(ARGV[14])
if cur[2] and owner and owner ~= cur[2] then return {"owner", cur[2]} end
owner = cur[2] or owner
if rev then
  unindex(cur, key)
  redis.call("DEL", rec)
end
local newrev = rev and tonumber(rev) + 1 or 1
local sn, so = ARGV[6], ARGV[7]
local f = {"body", ARGV[5], "sn", sn, "so", so, "run", ARGV[11], "at", ARGV[12],
  "msgs", ARGV[13], "size", string.len(ARGV[5]), "rev", string.format("%d", newrev)}
if owner then table.insert(f, "own"); table.insert(f, owner) end
if agent then table.insert(f, "agent"); table.insert(f, agent) end
if phase then table.insert(f, "phase"); table.insert(f, phase) end
if iter then table.insert(f, "iter"); table.insert(f, iter) end
redis.call("HSET", rec, unpack(f))
if tonumber(ARGV[15]) > 0 then redis.call("PEXPIRE", rec, ARGV[15]) end
local n = sn .. ":" .. key
redis.call("ZADD", base .. "new", 0, n)
redis.call("ZADD", base .. "old", 0, so .. ":" .. key)
local function add(ix) redis.call("ZADD", ix, 0, n); redis.call("SADD", base .. "ix", ix) end
if owner then add(base .. "o:" .. owner) end
if agent then add(base .. "a:" .. agent) end
if phase then redis.call("ZADD", base .. "f", 0, n); add(base .. "p:" .. phase) end
return {"ok", newrev, owner}
"""
)

_DROP = (
    _UNINDEX
    + """
local cur = redis.call("HMGET", KEYS[1], "rev", "own", "sn", "so", "agent", "phase")
if not cur[1] then return {"missing"} end
if ARGV[3] ~= "" and cur[1] ~= ARGV[3] then return {"revision", cur[1]} end
unindex(cur, ARGV[2])
redis.call("DEL", KEYS[1])
return {"dropped"}
"""
)

# One batch of an index, checked against the records in the same atomic step: a member whose
# record is gone (expired) or no longer matches that index is removed, never returned.
# ARGV: base, min, max, count, position field (sn|so), column to check (0: none), wanted value
# ("" only that the column is set, "=v" that it equals v).
_PAGE = """
local base = ARGV[1]
local col, want = tonumber(ARGV[6]), ARGV[7]
local members = redis.call("ZRANGEBYLEX", KEYS[1], ARGV[2], ARGV[3], "LIMIT", 0, ARGV[4])
local out = {members[#members] or false, 0}
for _, m in ipairs(members) do
  local sep = string.find(m, ":", 1, true)
  local key = string.sub(m, sep + 1)
  local row = redis.call("HMGET", base .. "r:" .. key, ARGV[5], "run", "at", "own", "agent",
    "phase", "iter", "msgs", "size", "rev")
  local live = row[1] == string.sub(m, 1, sep - 1)
  if live and col > 0 then
    if want == "" then live = row[col] ~= false else live = row[col] == string.sub(want, 2) end
  end
  if live then
    row[1] = key
    table.insert(out, row)
  else
    redis.call("ZREM", KEYS[1], m)
    out[2] = out[2] + 1
  end
end
if want ~= "" and redis.call("EXISTS", KEYS[1]) == 0 then
  redis.call("SREM", base .. "ix", KEYS[1])
end
return out
"""


class RedisBackend:
    name = "redis"

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str = DEFAULT_PREFIX,
        ttl: float | None = None,
        owns_client: bool = False,
    ) -> None:
        if not prefix or "{" in prefix or "}" in prefix or not prefix.isprintable():
            raise InvalidKeyError(
                f"redis prefix {prefix!r} must be non-empty, printable and free of braces "
                "(it becomes the {hash tag} of every key of the store)"
            )
        if ttl is not None and ttl <= 0:
            raise ValueError(f"ttl must be a positive number of seconds, got {ttl!r}")
        if client.get_encoder().decode_responses:
            raise ValueError("the redis client must not decode responses: bodies are bytes")
        self._client = client
        self._owns = owns_client
        self._closed = False
        self.prefix = prefix
        self.ttl_ms = 0 if ttl is None else max(1, round(ttl * 1000))
        self._base = f"{{{prefix}}}:"
        self._save = client.register_script(_SAVE)
        self._drop = client.register_script(_DROP)
        self._page = client.register_script(_PAGE)
        self._checked = False
        self._check_lock = threading.Lock()
        self._siblings: dict[str, RedisBackend] = {}

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RedisBackend:
        parts = urlsplit(url)
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        prefix = options.pop("prefix", query.pop("prefix", DEFAULT_PREFIX))
        ttl = options.pop("ttl", query.pop("ttl", None))
        url = urlunsplit(parts._replace(query=urlencode(query)))
        # The Store's tenacity policy governs retries; redis-py's own would hide outages.
        options.setdefault("retry", Retry(NoBackoff(), 0))
        options.setdefault("retry_on_error", [])
        options.setdefault("socket_connect_timeout", 5.0)
        options.setdefault("socket_timeout", 10.0)
        options["decode_responses"] = False
        with translate_errors(cls.name, "connect", transient=TRANSIENT, fatal=(RedisError,)):
            client = redis.Redis.from_url(url, **options)
        return cls(
            client,
            prefix=prefix,
            ttl=None if ttl in (None, "") else float(ttl),
            owns_client=True,
        )

    # -- records -------------------------------------------------------------------------

    def load(self, key: str) -> Record | None:
        with self._errors("load"):
            row: list[Any] = self._client.hmget(self._record_key(key), ["body", *FIELDS])
        if row[0] is None:
            return None
        return Record(_summary(key, row[1:]), row[0])

    def head(self, key: str) -> Summary | None:
        with self._errors("head"):
            row: list[Any] = self._client.hmget(self._record_key(key), list(FIELDS))
        return None if row[-1] is None else _summary(key, row)

    def save(
        self, record: Record, *, expect_revision: int | None = None, create_only: bool = False
    ) -> Summary:
        s = record.summary
        if not -SAVED_AT_LIMIT <= s.saved_at <= SAVED_AT_LIMIT:
            raise UnsupportedOperationError(
                f"record {s.key!r} has savedAt {s.saved_at}; the redis store orders values "
                f"within ±{SAVED_AT_LIMIT} ms of the epoch"
            )
        args = [
            self._base,
            s.key,
            "1" if create_only else "0",
            "" if expect_revision is None else str(expect_revision),
            record.body,
            _newest(s.saved_at),
            _oldest(s.saved_at),
            _opt(s.owner),
            _opt(s.agent_id),
            _opt(s.failure_phase),
            s.run_id,
            str(s.saved_at),
            str(s.message_count),
            _opt(None if s.failure_iteration is None else str(s.failure_iteration)),
            str(self.ttl_ms),
        ]
        keys = [self._record_key(s.key), self._base + "new", self._base + "old"]
        with self._errors("save"):
            reply = self._save(keys, args)
        status = reply[0].decode()
        if status == "ok":
            owner = None if reply[2] is None else reply[2].decode()
            return replace(s, owner=owner, revision=int(reply[1]), size=len(record.body))
        if status == "owner":
            stored = reply[1].decode()
            raise OwnershipConflictError(
                f"key {s.key!r} is owned by principal {stored!r}; a write signed by "
                f"{s.owner!r} was refused and nothing was changed",
                key=s.key,
                owner=stored,
                principal=s.owner,
            )
        found = None if reply[1] is None else int(reply[1])
        if status == "exists":
            raise ConflictError(
                f"key {s.key!r} already exists (revision {found}); create_only refused it",
                key=s.key,
                revision=found,
            )
        shown = "no record" if found is None else f"revision {found}"
        raise ConflictError(
            f"key {s.key!r} is at {shown}, not revision {expect_revision}; the write was refused",
            key=s.key,
            expected=expect_revision,
            found=found,
        )

    def drop(self, key: str, *, expect_revision: int | None = None) -> bool:
        expected = "" if expect_revision is None else str(expect_revision)
        with self._errors("drop"):
            reply = self._drop([self._record_key(key)], [self._base, key, expected])
        status: str = reply[0].decode()
        if status == "missing" and expect_revision is not None:
            raise ConflictError(f"key {key!r} does not exist", key=key)
        if status == "revision":
            raise ConflictError(
                f"key {key!r} is at revision {int(reply[1])}, not {expect_revision}", key=key
            )
        return status == "dropped"

    # -- listing -------------------------------------------------------------------------

    def scan(self, query: Query) -> list[Summary]:
        index = self._choose_index(query)
        low, high = _bounds(query)
        # Filters the index does not apply drop entries: each further batch is twice as large.
        batch = min(query.limit, MAX_BATCH)
        out: list[Summary] = []
        while True:
            with self._errors("scan"):
                last, removed, rows = self._read_batch(index, low, high, batch)
            for row in rows:
                summary = _summary(row[0].decode(), row[1:])
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
            # Same client; its own hash tag, so it never shows in this store's indexes.
            sibling = RedisBackend(self._client, prefix=f"{self.prefix}:{name}", ttl=None)
            sibling._checked = True
            self._siblings[name] = sibling
        return sibling

    def close(self) -> None:
        if self._owns and not self._closed:
            self._client.close()
        self._closed = True

    # -- internals -----------------------------------------------------------------------

    def _record_key(self, key: str) -> str:
        return self._base + "r:" + key

    def _errors(self, operation: str) -> AbstractContextManager[None]:
        self._check_durability()
        return translate_errors(self.name, operation, transient=TRANSIENT, fatal=(RedisError,))

    def _check_durability(self) -> None:
        if self._checked:
            return
        with self._check_lock:
            if self._checked:
                return
            try:
                appendonly = self._client.config_get("appendonly").get("appendonly")
                save = self._client.config_get("save").get("save")
            except ResponseError:
                self._checked = True  # CONFIG renamed or denied (managed Redis): cannot tell
                return
            except RedisError:
                return  # unreachable now: the operation itself will report it
            self._checked = True
            if appendonly == "no" and save == "":
                warnings.warn(
                    f"the Redis server behind store prefix {self.prefix!r} keeps no data on disk "
                    "(appendonly no, save ''): a restart loses every checkpoint; enable AOF "
                    "(appendonly yes)",
                    VolatileRedisWarning,
                    stacklevel=3,
                )

    def _choose_index(self, query: Query) -> str:
        """The most selective index for the query's filters (ZCARD decides between several)."""
        if query.oldest_first:
            return self._base + "old"
        candidates = []
        if query.owner is not None:
            candidates.append(self._base + "o:" + query.owner)
        if query.agent_id is not None:
            candidates.append(self._base + "a:" + query.agent_id)
        if query.phase is not None:
            candidates.append(self._base + "p:" + query.phase)
        elif query.failed:
            candidates.append(self._base + "f")
        if len(candidates) < 2:
            return candidates[0] if candidates else self._base + "new"
        with self._errors("scan"):
            pipe = self._client.pipeline(transaction=False)
            for name in candidates:
                pipe.zcard(name)
            sizes = pipe.execute()
        return min(zip(sizes, candidates, strict=True))[1]

    def _read_batch(
        self, index: str, low: bytes, high: bytes, count: int
    ) -> tuple[bytes | None, int, list[list[Any]]]:
        position = "so" if index == self._base + "old" else "sn"
        kind, _, value = index[len(self._base) :].partition(":")
        column, wanted = {"o": (4, "=" + value), "a": (5, "=" + value), "p": (6, "=" + value)}.get(
            kind, (6, "") if kind == "f" else (0, "")
        )
        reply = self._page([index], [self._base, low, high, count, position, column, wanted])
        return reply[0], int(reply[1]), reply[2:]


def _newest(saved_at: int) -> str:
    return f"{OFFSET - 1 - saved_at:0{WIDTH}d}"


def _oldest(saved_at: int) -> str:
    return f"{saved_at + OFFSET:0{WIDTH}d}"


def _clamp(value: int) -> int:
    # Stored values lie within ±SAVED_AT_LIMIT; clamping bounds just outside keeps every
    # comparison's outcome and the encodings 17 digits wide.
    return max(-SAVED_AT_LIMIT - 2, min(SAVED_AT_LIMIT + 2, value))


def _bounds(query: Query) -> tuple[bytes, bytes]:
    """ZRANGEBYLEX min and max for the query's time window and keyset position."""
    lows: list[tuple[str, bool]] = []  # (bound, exclusive)
    high = "+"
    before = None if query.saved_before is None else _clamp(query.saved_before)
    since = None if query.saved_since is None else _clamp(query.saved_since)
    if query.oldest_first:
        if since is not None:
            lows.append((_oldest(since), False))
        if before is not None:
            high = "(" + _oldest(before)
        if query.after is not None:
            lows.append((_oldest(_clamp(query.after[0])) + ":" + query.after[1], True))
    else:
        if before is not None:
            lows.append((_newest(before - 1), False))
        if since is not None:
            high = "(" + _newest(since - 1)
        if query.after is not None:
            lows.append((_newest(_clamp(query.after[0])) + ":" + query.after[1], True))
    if not lows:
        return b"-", high.encode()
    bound, exclusive = max(lows, key=lambda b: (b[0].encode(), b[1]))
    return ("(" if exclusive else "[").encode() + bound.encode(), high.encode()


def _opt(value: str | None) -> str:
    return "" if value is None else "=" + value


def _summary(key: str, row: list[Any]) -> Summary:
    run, at, own, agent, phase, iteration, msgs, size, rev = row

    def text(value: bytes | None) -> str | None:
        return None if value is None else value.decode()

    return Summary(
        key=key,
        run_id=run.decode(),
        saved_at=int(at),
        owner=text(own),
        agent_id=text(agent),
        failure_phase=text(phase),
        failure_iteration=None if iteration is None else int(iteration),
        message_count=int(msgs),
        size=int(size),
        revision=int(rev),
    )
