"""The Redis backend against the real server: the conformance suite, its key layout and indexes,
histories stored in segments, native expiry, and the warning about a server that keeps nothing
on disk."""

from __future__ import annotations

import random
import threading
import time
import uuid
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, ClassVar

import orjson
import pytest
import redis
from redis.crc import key_slot
from support.closed_port import refused_port
from support.redis_server import RedisServer, need_redis_server
from support.services import REDIS_URL, service_missing

from agent_checkpoint import Store, open_store
from agent_checkpoint.backends.base import Query, Record, Summary
from agent_checkpoint.backends.memory import MemoryBackend
from agent_checkpoint.backends.redis import RedisBackend, VolatileRedisWarning
from agent_checkpoint.backends.segments import Appending, Split, assemble, chain
from agent_checkpoint.errors import (
    ConflictError,
    InvalidCheckpointError,
    InvalidKeyError,
    OwnershipConflictError,
    UnreadableEnvelopeError,
    UnsupportedOperationError,
)
from agent_checkpoint.model import Message, RunCheckpoint
from agent_checkpoint.testing import (
    AppendingConformance,
    ClaimsConformance,
    EncryptionConformance,
    StoreConformance,
    checkpoint,
    stamped,
)

pytestmark = pytest.mark.filterwarnings(
    "ignore::agent_checkpoint.backends.redis.VolatileRedisWarning"
)


@pytest.fixture(scope="module")
def client() -> Iterator[redis.Redis]:
    r = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
    try:
        r.ping()
    except redis.RedisError as exc:
        service_missing("redis", f"{REDIS_URL}: {exc}")
    yield r
    r.close()


def store_keys(client: redis.Redis, prefix: str) -> list[bytes]:
    # The prefixes tests use are hex with dashes: no glob characters to escape.
    # ``{P}*`` takes the namespaces too (``{P}#leases:...``).
    return list(client.scan_iter(match="{" + prefix + "}*", count=1000))


def sequence(prefix: str) -> bytes:
    """The one key a store keeps when it holds no record: its revision sequence, so that a
    key written again never repeats a revision."""
    return f"{{{prefix}}}:rev".encode()


def contents(client: redis.Redis, prefix: str) -> dict[bytes, Any]:
    """Every key of a store and what it holds, by type. Not DUMP: a hash's DUMP follows its
    table's iteration order, which a read can change (incremental rehashing)."""
    read = {
        b"hash": client.hgetall,
        b"list": lambda k: client.lrange(k, 0, -1),
        b"zset": lambda k: client.zrange(k, 0, -1, withscores=True),
        b"set": client.smembers,
        b"string": client.get,
    }
    return {k: read[client.type(k)](k) for k in store_keys(client, prefix)}


@pytest.fixture
def prefix(client: redis.Redis) -> Iterator[str]:
    name = f"test-{uuid.uuid4().hex}"
    yield name
    keys = store_keys(client, name)
    if keys:
        client.delete(*keys)


@pytest.fixture
def store(prefix: str) -> Iterator[Store]:
    with open_store(REDIS_URL, prefix=prefix) as s:
        yield s


class OnItsOwnClient:
    """A store on a client of its own, whose connection ``break_connection`` cuts: the
    server's port starts refusing, as new connections go to a closed port."""

    options: ClassVar[dict[str, Any]] = {}

    @pytest.fixture
    def store(self, prefix: str) -> Iterator[Store]:
        self.client = redis.Redis.from_url(REDIS_URL)
        with (
            self.client,
            open_store(REDIS_URL, prefix=prefix, client=self.client, **self.options) as s,
        ):
            yield s

    @contextmanager
    def break_connection(self, store: Store) -> Iterator[None]:
        pool = self.client.connection_pool
        port = pool.connection_kwargs["port"]
        with refused_port() as closed:
            pool.connection_kwargs["port"] = closed
            pool.disconnect()
            pool.reset()
            try:
                yield
            finally:
                pool.connection_kwargs["port"] = port
                pool.reset()


class TestRedisStore(
    OnItsOwnClient, StoreConformance, ClaimsConformance, EncryptionConformance, AppendingConformance
):
    pass


class TestRedisStoreWithExpiry(OnItsOwnClient, StoreConformance):
    options: ClassVar[dict[str, Any]] = {"ttl": 3600}


# -- layout ------------------------------------------------------------------------------


def test_every_key_of_a_store_lives_in_one_cluster_slot(
    store: Store, client: redis.Redis, prefix: str
) -> None:
    for i, key in enumerate(["plain", "{tag}", "}{", "a:b", "x" * 300]):
        store.put(checkpoint(f"r{i}", principal=f"{{p{i}}}", agent="a}{", failed="tool"), key=key)
    keys = store_keys(client, prefix)
    assert len(keys) > 5
    assert all(k.startswith(f"{{{prefix}}}:".encode()) for k in keys)
    assert {key_slot(k) for k in keys} == {key_slot(f"{{{prefix}}}".encode())}


def test_prefix_comes_from_the_url_query_or_a_keyword_and_isolates_stores(
    client: redis.Redis,
) -> None:
    a, b = f"test-{uuid.uuid4().hex}", f"test-{uuid.uuid4().hex}"
    try:
        with (
            open_store(f"redis://127.0.0.1:6379/0?prefix={a}") as first,
            open_store(REDIS_URL, prefix=b) as second,
        ):
            first.put(checkpoint(text="first"), key="same")
            second.put(checkpoint(text="second"), key="same")
            got = first.get("same")
            assert got is not None and got.history[0].content == "first 0"
            assert [s.key for s in second.list()] == ["same"]
            assert second.delete("same") and first.get("same") is not None
            assert store_keys(client, a)
            # only the revision sequence stays, so that the key's revisions never repeat
            assert store_keys(client, b) == [f"{{{b}}}:rev".encode()]
    finally:
        for p in (a, b):
            keys = store_keys(client, p)
            if keys:
                client.delete(*keys)


@pytest.mark.parametrize("bad", ["", "has{brace", "has}brace", "tab\there"])
def test_a_prefix_that_would_break_the_hash_tag_is_refused(client: redis.Redis, bad: str) -> None:
    with pytest.raises(InvalidKeyError):
        RedisBackend(client, prefix=bad)


def test_a_saved_at_outside_the_orderable_range_is_refused(store: Store) -> None:
    """The store refuses it before any backend (the conformance suite holds every backend to
    that); the backend still refuses a summary its layout cannot order."""
    with pytest.raises(InvalidCheckpointError, match="savedAt"):
        store.put(stamped(checkpoint(), 10**17), key="far-future")
    body = store._codec.encode(stamped(checkpoint(), 0), "far-future")[0]
    summary = Summary("far-future", "r", 10**17, None, None, None, None, 2, len(body), 0)
    with pytest.raises(UnsupportedOperationError, match="savedAt"):
        store.backend.save(Record(summary, body))
    assert store.head("far-future") is None


# -- indexes -----------------------------------------------------------------------------


def test_a_repeated_unconditional_write_leaves_one_index_entry(
    store: Store, client: redis.Redis, prefix: str
) -> None:
    envelope = stamped(checkpoint(principal="al", agent="billing", failed="llm"), 1000)
    for _ in range(3):  # as when a reply is lost and the write is retried
        store.put(envelope, key="k")
    for filters in ({}, {"owner": "al"}, {"agent_id": "billing"}, {"failed": True}):
        assert [s.key for s in store.list(**filters)] == ["k"]
    base = f"{{{prefix}}}:"
    for index in ("new", "old", "o:al", "a:billing", "f", "p:llm"):
        assert client.zcard(base + index) == 1


def test_a_rewrite_moves_the_record_between_indexes(store: Store) -> None:
    store.put(stamped(checkpoint(agent="billing", failed="llm"), 1000), key="k")
    store.put(stamped(checkpoint(agent="support"), 2000), key="k")
    assert store.list(agent_id="billing").items == []
    assert store.list(failed=True).items == []
    assert store.list(phase="llm").items == []
    assert [s.key for s in store.list(agent_id="support", failed=False)] == ["k"]
    assert store.list(before=2000).items == []
    assert [s.saved_at for s in store.list()] == [2000]


def test_scan_agrees_with_the_reference_backend_on_random_queries(
    client: redis.Redis, prefix: str
) -> None:
    rng = random.Random(7)
    reference, backend = MemoryBackend(), RedisBackend(client, prefix=prefix)
    choice = rng.choice
    for i in range(1500):
        summary = Summary(
            key=choice(["k", "K", "k:", "ü", "{k}", "k*"]) + str(rng.randrange(400)),
            run_id=f"r{i}",
            saved_at=rng.randrange(100) * 10,
            owner=choice([None, "al", "bo"]),
            agent_id=choice([None, "billing", "support"]),
            failure_phase=choice([None, None, "llm", "tool"]),
            failure_iteration=None,
            message_count=1,
            size=0,
            revision=0,
        )
        stored = reference.head(summary.key)
        if stored is not None and stored.owner is not None and summary.owner != stored.owner:
            continue  # owner write-once refusals are the conformance suite's business
        for b in (reference, backend):
            b.save(Record(summary, f"body {i}".encode()))
    for _ in range(400):
        anchor = choice(reference.scan(Query(limit=10_000)))
        query = Query(
            owner=choice([None, None, "al", "bo"]),
            agent_id=choice([None, None, "billing"]),
            failed=choice([None, None, True, False]),
            phase=choice([None, None, "llm"]),
            saved_before=choice([None, rng.randrange(-5, 1020)]),
            saved_since=choice([None, rng.randrange(-5, 1020)]),
            after=choice([None, (anchor.saved_at, anchor.key)]),
            limit=rng.randrange(1, 40),
            oldest_first=rng.random() < 0.3,
        )
        assert backend.scan(query) == reference.scan(query), query


# -- 10,000 records ----------------------------------------------------------------------


@pytest.mark.slow
def test_newest_100_of_10000_and_paging_through_all_while_writers_add(store: Store) -> None:
    body = store._codec.encode(stamped(checkpoint(), 0), "template")[0]
    rng = random.Random(3)
    keys = [f"run-{n:05d}" for n in range(10_000)]
    rng.shuffle(keys)
    originals = [
        Summary(key, key, 1_700_000_000_000 + i // 4, None, None, None, None, 2, 0, 0)
        for i, key in enumerate(keys)
    ]
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda s: store.backend.save(Record(s, body)), originals, chunksize=250))
    expected = [s.key for s in sorted(originals, key=lambda s: (-s.saved_at, s.key))]

    assert [s.key for s in store.list(limit=100)] == expected[:100]

    stop = threading.Event()

    def add_newer() -> None:
        n = 0
        while not stop.is_set():
            newer = Summary(f"new-{n}", "x", 1_800_000_000_000 + n, None, None, None, None, 2, 0, 0)
            store.backend.save(Record(newer, body))
            n += 1

    writer = threading.Thread(target=add_newer)
    writer.start()
    try:
        seen = [s.key for s in store.iter_summaries(page_size=250)]
    finally:
        stop.set()
        writer.join()
    assert [k for k in seen if not k.startswith("new-")] == expected


# -- hostile strings ---------------------------------------------------------------------

HOSTILE = [
    "*",
    "?",
    "[a-z]*",
    "\\*",
    "KEYS *",
    "FLUSHALL",
    "'; DROP TABLE checkpoints; --",
    "\") redis.call('FLUSHALL') --",
    "]] .. redis.call('DEL', KEYS[1]) .. [[",
    "r:neighbour",
    "}:r:neighbour",
    "{other}:r:x",
    "../../etc/passwd",
    "..%2F..%2F",
    "s3://bucket/../key",
    "/leading//double",
    "%00",
]


def test_injection_attempts_are_plain_keys_and_filters(
    store: Store, client: redis.Redis, prefix: str
) -> None:
    outside = f"canary-{uuid.uuid4().hex}"
    client.set(outside, b"alive")
    try:
        with open_store(REDIS_URL, prefix=prefix + "-neighbour") as neighbour:
            neighbour.put(checkpoint(text="theirs", principal="*"), key="neighbour")
            store.put(checkpoint(text="mine"), key="neighbour")
            for i, hostile in enumerate(HOSTILE):
                store.put(
                    checkpoint(f"h{i}", text=hostile, principal=hostile, agent=hostile),
                    key=hostile,
                )
            for hostile in HOSTILE:
                got = store.get(hostile)
                assert got is not None and got.history[0].content == f"{hostile} 0"
                assert [s.key for s in store.list(owner=hostile)] == [hostile]
                assert [s.key for s in store.list(agent_id=hostile)] == [hostile]
            assert sorted(s.key for s in store.iter_summaries()) == sorted([*HOSTILE, "neighbour"])
            for hostile in HOSTILE:
                assert store.delete(hostile) is True
            assert [s.key for s in store.list()] == ["neighbour"]
            theirs = neighbour.get("neighbour")
            assert theirs is not None and theirs.history[0].content == "theirs 0"
            assert [s.key for s in neighbour.list(owner="*")] == ["neighbour"]
            neighbour.delete("neighbour")
        assert client.get(outside) == b"alive"
    finally:
        client.delete(outside)


# -- native expiry -----------------------------------------------------------------------


def test_expiry_is_refreshed_on_every_key_of_a_record_by_each_write(
    client: redis.Redis, prefix: str
) -> None:
    with open_store(REDIS_URL, prefix=prefix, ttl=3) as store:
        started = time.monotonic()
        store.put(checkpoint(principal="al", agent="billing", failed="llm", text="v1"), key="k")
        time.sleep(1.5)
        store.put(checkpoint(principal="al", agent="billing", failed="llm", text="v2"), key="k")
        time.sleep(max(0.0, started + 3.5 - time.monotonic()))  # past the first deadline
        got = store.get("k")
        assert got is not None and got.history[0].content == "v2 0"
        assert store.head("k") is not None
        for filters in ({}, {"owner": "al"}, {"agent_id": "billing"}, {"phase": "llm"}):
            assert [s.key for s in store.list(**filters)] == ["k"]
        volatile = sorted(k for k in store_keys(client, prefix) if client.ttl(k) > 0)
        assert volatile == [f"{{{prefix}}}:{kind}:k".encode() for kind in ("r", "s")]


def test_expiry_of_a_record_in_segments_is_refreshed_on_all_its_keys_by_each_append(
    client: redis.Redis, prefix: str
) -> None:
    record, segments = f"{{{prefix}}}:r:k", f"{{{prefix}}}:s:k"
    with open_store(REDIS_URL, prefix=prefix, ttl=3) as store:
        started = time.monotonic()
        base = checkpoint("r", principal="al")
        history: tuple[Message, ...] = ()
        for i in range(4):  # a full write, then three appends of one message each
            history = (*history, Message("user", f"message {i}"))
            store.put(base.evolve(history=history), key="k")
        assert client.llen(segments) == 4
        time.sleep(1.5)
        history = (*history, Message("user", "message 4"))
        store.put(base.evolve(history=history), key="k")
        assert client.llen(segments) == 5  # appended, not rewritten: the old list lives on
        assert client.pttl(segments) > 2500 and client.pttl(record) > 2500
        time.sleep(max(0.0, started + 3.5 - time.monotonic()))  # past the first deadline
        got = store.get("k")
        assert got is not None and [m.content for m in got.history] == [
            f"message {i}" for i in range(5)
        ]
        assert [s.key for s in store.list(owner="al")] == ["k"]
    with open_store(REDIS_URL, prefix=prefix) as lasting:  # no ttl: an append makes it all last
        history = (*history, Message("user", "message 5"))
        lasting.put(base.evolve(history=history), key="k")  # a full write
        history = (*history, Message("user", "message 6"))
        lasting.put(base.evolve(history=history), key="k")  # an append
        assert client.llen(segments) == 2
        assert client.ttl(record) == -1 and client.ttl(segments) == -1


def test_expired_records_are_never_listed_and_repair_clears_their_index_entries(
    client: redis.Redis, prefix: str
) -> None:
    with open_store(REDIS_URL, prefix=prefix, ttl=0.5) as store:
        for i in range(5):
            store.put(checkpoint(f"r{i}", principal="al", agent="a", failed="tool"), key=f"k{i}")
    with open_store(REDIS_URL, prefix=prefix) as store:
        store.put(checkpoint("kept", principal="al"), key="kept")
        time.sleep(0.8)
        assert [s.key for s in store.list()] == ["kept"]
        assert [s.key for s in store.list(owner="al")] == ["kept"]
        assert store.list(agent_id="a").items == []
        assert store.list(failed=True).items == []
        assert store.list(phase="tool").items == []
        assert store.forget_older_than(time.time() * 1000 + 60_000).forgotten == 1
        backend = store.backend
        assert isinstance(backend, RedisBackend)
        backend.repair()
        assert store_keys(client, prefix) == [sequence(prefix)]


def test_ttl_from_the_url_query(client: redis.Redis, prefix: str) -> None:
    with open_store(f"redis://127.0.0.1:6379/0?prefix={prefix}&ttl=60") as store:
        store.put(checkpoint(), key="k")
        assert 0 < client.ttl(f"{{{prefix}}}:r:k") <= 60


# -- durability warning and lifecycle ----------------------------------------------------


def volatile_warnings(caught: list[warnings.WarningMessage]) -> int:
    return sum(issubclass(w.category, VolatileRedisWarning) for w in caught)


def test_a_server_that_keeps_nothing_on_disk_is_reported_once_per_store(
    client: redis.Redis, prefix: str
) -> None:
    if client.config_get("appendonly")["appendonly"] != "no" or client.config_get("save")["save"]:
        pytest.skip("the shared Redis persists data here")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with open_store(REDIS_URL, prefix=prefix) as store:
            store.put(checkpoint(), key="k")
            store.get("k")
            store.list()
        assert volatile_warnings(caught) == 1
        assert "restart loses every checkpoint" in str(caught[-1].message)
        with open_store(REDIS_URL, prefix=prefix) as store:
            store.get("k")
            store.delete("k")
        assert volatile_warnings(caught) == 2


def test_a_server_with_aof_is_not_reported() -> None:
    need_redis_server()
    with RedisServer(appendonly=True) as server, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with open_store(server.url) as store:
            store.put(checkpoint(), key="k")
            assert store.get("k") is not None
        assert volatile_warnings(caught) == 0


def test_close_releases_a_client_the_store_made_and_leaves_an_injected_one_open(
    client: redis.Redis, prefix: str
) -> None:
    name = f"ac-{uuid.uuid4().hex[:12]}"

    def connected() -> bool:
        return any(c.get("name") == name for c in client.client_list())

    def disconnected() -> bool:
        # the server drops a closed connection when it reads the close, a moment later
        deadline = time.monotonic() + 5
        while connected():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    store = open_store(REDIS_URL, prefix=prefix, client_name=name)
    store.put(checkpoint(), key="k")
    assert connected()
    store.close()
    store.close()
    assert disconnected()

    injected = redis.Redis.from_url(REDIS_URL, client_name=name)
    with Store(RedisBackend(injected, prefix=prefix)) as borrowed:
        assert borrowed.get("k") is not None
    assert injected.ping() and connected()
    injected.close()


# -- histories stored in segments --------------------------------------------------------


def grow(store: Store, count: int, principal: str | None = None) -> tuple[Message, ...]:
    """Checkpoint under key "k" after every message, ``count`` times; the last history."""
    base = checkpoint("r", principal=principal)
    history: tuple[Message, ...] = ()
    for i in range(count):
        history = (*history, Message("user", f"message {i} " + "x" * 200))
        store.put(base.evolve(history=history), key="k")
    return history


def test_a_growing_history_appends_one_segment_per_put(
    store: Store, client: redis.Redis, prefix: str
) -> None:
    assert isinstance(store.backend, Appending)
    record, segments = f"{{{prefix}}}:r:k", f"{{{prefix}}}:s:k"
    grow(store, 10)
    assert client.llen(segments) == 10  # one small segment per put, not a rewrite
    fields = client.hgetall(record)
    assert b"body" not in fields and int(fields[b"segs"]) == 10
    assert b"message 0" not in fields[b"head"] and b"\x00" in fields[b"head"]
    assert all(len(s) < 300 for s in client.lrange(segments, 0, -1))
    got = store.get_record("k")
    assert got is not None and got.summary.size == len(got.body) == int(fields[b"size"])
    assert store.delete("k")
    assert store_keys(client, prefix) == [
        sequence(prefix)
    ]  # record, segments and every index entry


class CountingRedisBackend(RedisBackend):
    """Counts the Store's full (split) writes and its appends."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.full_writes = 0
        self.appends: list[bool] = []  # whether each append landed

    def save_split(self, record: Record, split: Split, **kwargs: Any) -> Summary:
        self.full_writes += 1
        return super().save_split(record, split, **kwargs)

    def append(self, summary: Summary, split: Split, **kwargs: Any) -> Summary | None:
        landed = super().append(summary, split, **kwargs)
        self.appends.append(landed is not None)
        return landed


def whole_bytes(ckpt: RunCheckpoint, saved_at: int) -> bytes:
    """What a single full write of ``ckpt`` stores."""
    return orjson.dumps({"format": "conversation-v1", "data": ckpt.to_json(), "savedAt": saved_at})


@pytest.mark.parametrize("ttl", [None, 3600.0])
def test_growth_past_the_segment_limit_merges_on_the_server_and_stays_exact(
    client: redis.Redis, prefix: str, ttl: float | None
) -> None:
    backend = CountingRedisBackend(client, prefix=prefix, ttl=ttl)
    backend.max_segments = 6  # an instance's limit: the script takes it as an argument
    store = Store(backend)
    segments = f"{{{prefix}}}:s:k"
    base = checkpoint("r", principal="al", agent="billing")
    history: tuple[Message, ...] = ()
    lengths = []
    for i in range(40):
        history = (*history, Message("user", f"message {i} " + "ü" * (i % 5)))
        ckpt = base.evolve(history=history, last_completed_iteration=i)
        summary = store.put(ckpt, key="k")
        lengths.append(client.llen(segments))
        stored = store.get_record("k")
        assert stored is not None and stored.body == whole_bytes(ckpt, summary.saved_at)
        assert summary.size == len(stored.body) == stored.summary.size
        assert stored.summary == summary
        if ttl is not None:
            assert client.pttl(segments) > 3_000_000
        else:
            assert client.pttl(segments) == -1
    # One full write; every later put appended, the merges included: nothing was resent.
    assert backend.full_writes == 1 and backend.appends == [True] * 39
    assert max(lengths) == 6
    # The 7th put found 6 segments: merged into one, then its own appended; and so on.
    assert lengths[:14] == [1, 2, 3, 4, 5, 6, 2, 3, 4, 5, 6, 2, 3, 4]
    assert int(client.hget(f"{{{prefix}}}:r:k", "segs") or 0) == lengths[-1]
    assert store.head("k").revision == 40  # type: ignore[union-attr]
    assert [s.key for s in store.list(owner="al", agent_id="billing")] == ["k"]
    got = store.get("k")
    assert got is not None and got.history == history
    assert store.delete("k")
    assert store_keys(client, prefix) == [sequence(prefix)]


def test_an_append_at_the_limit_merges_exactly_as_assemble_joins(
    client: redis.Redis, prefix: str
) -> None:
    backend = RedisBackend(client, prefix=prefix)
    backend.max_segments = 4
    segments_key = f"{{{prefix}}}:s:k"
    head = b'{"h":[\x00],"n":0}'
    parts = [b"", b"1", b"", b"2,3", b"4", b"", b"5", b""]  # empty: puts with no new message
    first, size = split_of(head, parts[0])
    backend.save_split(Record(summary("k", size), assemble(head, parts[:1])), first)
    digest = first.digest
    lists = [client.lrange(segments_key, 0, -1)]
    for n in range(2, len(parts) + 1):
        split, size = split_of(head, *parts[:n])
        landed = backend.append(summary("k", size), split, base_revision=n - 1, base_digest=digest)
        assert landed is not None and (landed.revision, landed.size) == (n, size)
        digest = split.digest
        loaded = backend.load("k")
        assert loaded is not None and loaded.body == assemble(head, parts[:n])
        stored = client.lrange(segments_key, 0, -1)
        assert len(stored) <= 4 and assemble(head, stored) == loaded.body
        lists.append(stored)
    # At 4 segments ("", "1", "", "2,3") the append of "4" merged them into "1,2,3" (the empty
    # ones dropped, as assemble drops them); at ("1,2,3", "4", "", "5") the append of "" did.
    assert lists[4:] == [
        [b"1,2,3", b"4"],
        [b"1,2,3", b"4", b""],
        [b"1,2,3", b"4", b"", b"5"],
        [b"1,2,3,4,5", b""],
    ]
    split, size = split_of(head, *parts, b"6")
    assert backend.append(summary("k", size), split, base_revision=8, base_digest=digest)
    assert client.lrange(segments_key, 0, -1) == [b"1,2,3,4,5", b"", b"6"]
    loaded = backend.load("k")
    assert loaded is not None and loaded.body == b'{"h":[1,2,3,4,5,6],"n":0}'


def test_a_refused_append_at_the_limit_merges_nothing(client: redis.Redis, prefix: str) -> None:
    backend = RedisBackend(client, prefix=prefix)
    backend.max_segments = 3
    head = b"[\x00]"
    parts = [b"1", b"2", b"3"]
    first, size = split_of(head, b"1")
    backend.save_split(Record(summary("k", size, owner="al"), b"[1]"), first)
    digest = first.digest
    for n in (2, 3):
        split, size = split_of(head, *parts[:n])
        assert backend.append(summary("k", size), split, base_revision=n - 1, base_digest=digest)
        digest = split.digest
    split, size = split_of(head, *parts, b"4")
    grown = summary("k", size)
    snapshot = contents(client, prefix)
    for revision, base_digest in ((2, digest), (4, digest), (3, first.digest), (3, "")):
        assert backend.append(grown, split, base_revision=revision, base_digest=base_digest) is None
        assert contents(client, prefix) == snapshot
    with pytest.raises(OwnershipConflictError):
        backend.append(
            summary("k", size, owner="mallory"), split, base_revision=3, base_digest=digest
        )
    assert contents(client, prefix) == snapshot
    # A list that lost a segment is not merged (the loss would become silent): refused too.
    client.rpop(f"{{{prefix}}}:s:k")
    snapshot = contents(client, prefix)
    assert backend.append(grown, split, base_revision=3, base_digest=digest) is None
    assert contents(client, prefix) == snapshot
    client.rpush(f"{{{prefix}}}:s:k", b"3")
    landed = backend.append(grown, split, base_revision=3, base_digest=digest)
    assert landed is not None and landed.revision == 4 and landed.owner == "al"
    assert client.lrange(f"{{{prefix}}}:s:k", 0, -1) == [b"1,2,3", b"4"]
    loaded = backend.load("k")
    assert loaded is not None and loaded.body == b"[1,2,3,4]"


def test_a_store_with_a_lost_segment_at_the_limit_rewrites_the_record_whole(
    client: redis.Redis, prefix: str
) -> None:
    backend = CountingRedisBackend(client, prefix=prefix)
    backend.max_segments = 4
    store = Store(backend)
    base = checkpoint("r")
    history: tuple[Message, ...] = ()
    for i in range(5):
        if i == 4:
            client.rpop(f"{{{prefix}}}:s:k")
        history = (*history, Message("user", f"message {i}"))
        store.put(base.evolve(history=history), key="k")
    # The fifth put: a refused append (nothing merged), then a full write.
    assert backend.full_writes == 2 and backend.appends == [True, True, True, False]
    assert client.llen(f"{{{prefix}}}:s:k") == 1
    got = store.get("k")
    assert got is not None and got.history == history


def test_the_default_limit_of_1024_segments_is_reached_then_merged(
    client: redis.Redis, prefix: str
) -> None:
    assert RedisBackend.max_segments == 1024
    backend = RedisBackend(client, prefix=prefix)
    head = b"[\x00]"
    parts = [str(i).encode() for i in range(backend.max_segments + 1)]
    first, size = split_of(head, parts[0])
    backend.save_split(Record(summary("k", size), b"[0]"), first)
    digest = first.digest
    for n in range(2, len(parts) + 1):
        size += 1 + len(parts[n - 1])
        split = Split(head, parts[n - 1], chain(digest, parts[n - 1]))
        landed = backend.append(summary("k", size), split, base_revision=n - 1, base_digest=digest)
        assert landed is not None and landed.size == size
        digest = split.digest
        if n == backend.max_segments:
            assert client.llen(f"{{{prefix}}}:s:k") == backend.max_segments
    assert client.llen(f"{{{prefix}}}:s:k") == 2
    loaded = backend.load("k")
    assert loaded is not None and loaded.body == b"[" + b",".join(parts) + b"]"


def test_retention_removes_the_segments_of_a_record(
    store: Store, client: redis.Redis, prefix: str
) -> None:
    grow(store, 5, principal="al")
    assert client.exists(f"{{{prefix}}}:s:k")
    assert store.forget_older_than(time.time() * 1000 + 60_000).forgotten == 1
    assert store_keys(client, prefix) == [sequence(prefix)]


def test_a_whole_write_over_a_record_in_segments_removes_its_segments(
    store: Store, client: redis.Redis, prefix: str
) -> None:
    grow(store, 6)
    stored = store.get_record("k")
    assert stored is not None
    store.put_record(stored)  # as copy and migrate write: whole bytes
    assert not client.exists(f"{{{prefix}}}:s:k")
    fields = client.hgetall(f"{{{prefix}}}:r:k")
    assert fields[b"body"] == stored.body and not {b"head", b"dig", b"segs"} & set(fields)
    again = store.get_record("k")
    assert again is not None and again.body == stored.body and again.summary.revision == 7


def summary(key: str, size: int, *, saved_at: int = 1000, owner: str | None = None) -> Summary:
    return Summary(key, "run", saved_at, owner, "agent", None, None, 1, size, 0)


def split_of(head: bytes, *segments: bytes) -> tuple[Split, int]:
    """The split whose last segment is ``segments[-1]``, and the assembled size after it."""
    digest = ""
    for segment in segments:
        digest = chain(digest, segment)
    return Split(head, segments[-1], digest), len(assemble(head, list(segments)))


def test_an_append_whose_reply_was_lost_is_not_applied_twice(
    client: redis.Redis, prefix: str
) -> None:
    backend = RedisBackend(client, prefix=prefix)
    first, size = split_of(b'{"h":[\x00]}', b"1")
    body = assemble(first.head, [first.segment])
    assert backend.save_split(Record(summary("k", size), body), first).revision == 1
    second, size = split_of(b'{"h":[\x00],"n":2}', b"1", b"2")
    grown = summary("k", size, saved_at=2000)
    landed = backend.append(grown, second, base_revision=1, base_digest=first.digest)
    assert landed is not None and (landed.revision, landed.size) == (2, size)
    snapshot = contents(client, prefix)
    # The retry of the same append, as after a lost reply: refused, and nothing changes.
    assert backend.append(grown, second, base_revision=1, base_digest=first.digest) is None
    assert contents(client, prefix) == snapshot
    loaded = backend.load("k")
    assert loaded is not None and loaded.body == b'{"h":[1,2],"n":2}'
    assert loaded.summary == landed
    assert [s.key for s in backend.scan(Query(saved_since=2000))] == ["k"]
    assert backend.scan(Query(saved_before=2000)) == []  # the old index entry moved


def test_a_record_missing_a_segment_reads_unreadable_not_shorter(
    store: Store, client: redis.Redis, prefix: str
) -> None:
    grow(store, 3)
    client.rpop(f"{{{prefix}}}:s:k")
    record = store.get_record("k")
    assert record is not None and b"\x00" in record.body
    with pytest.raises(UnreadableEnvelopeError):
        store.get("k")


def test_a_put_and_a_get_are_each_one_round_trip(
    client: redis.Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = RedisBackend(client, prefix=prefix)
    backend.max_segments = 3
    store = Store(backend)
    sent: list[int] = []
    send = redis.connection.AbstractConnection.send_packed_command

    def counted(self: Any, command: Any, check_health: bool = True) -> None:
        sent.append(1)
        send(self, command, check_health)

    base = checkpoint("r", principal="al")
    history = (Message("user", "message 0"),)
    store.put(base.evolve(history=history), key="k")  # checks durability, loads the script
    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counted)
    for i in range(1, 6):  # appends, one of them merging at the limit
        history = (*history, Message("user", f"message {i}"))
        sent.clear()
        store.put(base.evolve(history=history), key="k")
        assert len(sent) == 1
        sent.clear()
        got = store.get("k")
        assert len(sent) == 1 and got is not None and got.history == history
    sent.clear()
    assert store.get("missing") is None and len(sent) == 1


# -- large first writes go through a staging list ----------------------------------------


def _big_history(n: int = 120) -> tuple[Message, ...]:
    return tuple(Message("user", f"{i}: " + "word " * 200) for i in range(n))  # ~120 KB


@pytest.mark.parametrize("ttl", [None, 3600])
def test_a_large_history_is_staged_then_renamed_into_place(
    client: redis.Redis, prefix: str, ttl: int | None
) -> None:
    from agent_checkpoint.backends import redis as redis_module

    with open_store(REDIS_URL, prefix=prefix, ttl=ttl) as store:
        ckpt = RunCheckpoint.new("m", _big_history(), run_id="r")
        size = len(ckpt.to_json()["history"][0]["content"]) * 120
        assert size > redis_module.STAGE_BYTES
        summary = store.put(ckpt, key="k")
        whole = Store(MemoryBackend())
        whole.put(ckpt, key="k")
        got, expected = store.get_json("k"), whole.get_json("k")
        assert got is not None and expected is not None and got["data"] == expected["data"]
        assert store.head("k") == summary
        segs = f"{{{prefix}}}:s:k"
        assert client.llen(segs) == 1
        assert (client.pttl(segs) > 0) == (ttl is not None)  # not the staging list's expiry
        assert not list(client.scan_iter(match=f"{{{prefix}}}:t:*"))
        # Growing it afterwards appends as usual.
        grown = ckpt.evolve(history=(*ckpt.history, Message("assistant", "ok")))
        store.put(grown, key="k")
        assert client.llen(segs) == 2
        assert store.get("k") == grown


def test_a_refused_staged_write_changes_nothing_and_leaves_no_staging_list(
    store: Store, client: redis.Redis, prefix: str
) -> None:
    first = RunCheckpoint.new("m", _big_history(), run_id="r")
    owned = checkpoint("r", principal="alice").evolve(history=_big_history())
    store.put(owned, key="k")
    before = contents(client, prefix)
    with pytest.raises(ConflictError):
        store.put(first, key="k", create_only=True)
    with pytest.raises(ConflictError):
        store.put(first, key="k", if_revision=7)
    with pytest.raises(OwnershipConflictError):
        store.put(checkpoint("r", principal="mallory").evolve(history=_big_history(130)), key="k")
    assert contents(client, prefix) == before
    assert not list(client.scan_iter(match=f"{{{prefix}}}:t:*"))


def test_a_key_that_expired_and_was_written_again_never_repeats_a_revision(
    prefix: str,
) -> None:
    """Native expiry deletes a record without a trace; the store's sequence still numbers
    the key's next record past every revision it had."""
    with open_store(REDIS_URL, prefix=prefix, ttl=0.5) as store:
        first = store.put(checkpoint(text="old"), key="k")
        deadline = time.monotonic() + 10
        while store.head("k") is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert store.head("k") is None
        again = store.put(checkpoint(text="new"), key="k")
        assert again.revision > first.revision
        with pytest.raises(ConflictError):
            store.put(checkpoint(text="stale"), key="k", if_revision=first.revision)
        got = store.get("k")
        assert got is not None and got.history[0].content == "new 0"


def test_claims_never_touch_a_store_whose_prefix_looks_like_their_namespace(
    client: redis.Redis, prefix: str
) -> None:
    """Claims of store ``P`` live in its own namespace, not in the store ``P:leases``."""
    with (
        open_store(REDIS_URL, prefix=prefix) as store,
        open_store(REDIS_URL, prefix=f"{prefix}:leases") as neighbour,
    ):
        store.put(checkpoint("r"), key="r")
        neighbour.put(checkpoint("bystander"), key="r")
        with store.claim("r", "w1", ttl=30):
            assert neighbour.claims() == []
            assert [s.key for s in neighbour.list()] == ["r"]
        got = neighbour.get("r")
        assert got is not None and got.run_id == "bystander"
        neighbour.claim("r", "w2", ttl=30).release()
        assert store.get("r") is not None and store.claims() == []
    keys = store_keys(client, f"{prefix}:leases")
    if keys:
        client.delete(*keys)
