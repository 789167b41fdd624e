"""The Redis backend against the real server: the conformance suite, its key layout and indexes,
growing histories over the store's segment layer, records stored in segments by version 0.4,
native expiry, and the warning about a server that keeps nothing on disk."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import orjson
import pytest
import redis
from redis.crc import key_slot
from support.closed_port import refused_port
from support.redis_legacy import write_old_split_record
from support.redis_server import RedisServer, need_redis_server
from support.services import REDIS_URL, service_missing

from agent_checkpoint import Store, migrate_records, open_async_store, open_store
from agent_checkpoint._model import Message, RunCheckpoint
from agent_checkpoint._segment_format import Layout
from agent_checkpoint._segments import PIECES, Segmented
from agent_checkpoint.backends import Query, Record, Summary
from agent_checkpoint.backends import _redis as redis_backend
from agent_checkpoint.backends._memory import MemoryBackend
from agent_checkpoint.backends._redis import RedisBackend, VolatileRedisWarning
from agent_checkpoint.errors import (
    BackendUnavailableError,
    ConflictError,
    InvalidCheckpointError,
    InvalidKeyError,
    OwnershipConflictError,
    UnreadableEnvelopeError,
    UnsupportedOperationError,
)
from agent_checkpoint.testing import (
    AppendingConformance,
    ClaimsConformance,
    EncryptionConformance,
    StoreConformance,
    checkpoint,
    stamped,
)

pytestmark = pytest.mark.filterwarnings("ignore::agent_checkpoint.backends.VolatileRedisWarning")


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


class TestRedisStore(OnItsOwnClient, StoreConformance, ClaimsConformance, EncryptionConformance):
    pass


class TestRedisStoreWithExpiry(OnItsOwnClient, StoreConformance):
    options: ClassVar[dict[str, Any]] = {"ttl": 3600}


class TestRedisStoreInPieces(OnItsOwnClient, StoreConformance, AppendingConformance):
    """The segment layer's thresholds at their lowest: every put past the first moves history
    into pieces (records of the store's ``segments`` namespace), and merges them."""

    @pytest.fixture
    def store(self, prefix: str) -> Iterator[Store]:
        self.client = redis.Redis.from_url(REDIS_URL)
        with self.client, in_pieces(RedisBackend(self.client, prefix=prefix)) as s:
            yield s


def in_pieces(backend: RedisBackend, max_segments: int = 4) -> Store:
    return Store(Segmented(backend, inline_bytes=0, max_segments=max_segments))


def pieces(client: redis.Redis, prefix: str) -> list[bytes]:
    """The keys of the records of the store's ``segments`` namespace (the layer's pieces)."""
    return sorted(client.scan_iter(match=f"{{{prefix}}}#{PIECES}:r:*", count=1000))


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
        # the record (a short history has no pieces) and every index it is in, which expire
        # with the last record written into them; only the revision counter never expires
        names = ["a:billing", "f", "ix", "new", "o:al", "old", "p:llm", "r:k"]
        assert volatile == [f"{{{prefix}}}:{name}".encode() for name in names]
        assert client.ttl(f"{{{prefix}}}:rev") == -1


def test_with_a_ttl_no_key_outlives_the_records_but_the_revision_counter(
    client: redis.Redis, prefix: str
) -> None:
    with open_store(REDIS_URL, prefix=prefix, ttl=1) as store:
        for i in range(3):
            store.put(checkpoint(principal=f"p{i}", agent=f"a{i}", text="x"), key=f"k{i}")
        deadline = time.monotonic() + 10
        while len(store_keys(client, prefix)) > 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert store_keys(client, prefix) == [f"{{{prefix}}}:rev".encode()]
        store.put(checkpoint(text="again"), key="k0")  # a revision past every one issued
        head = store.head("k0")
        assert head is not None and head.revision > 3


def test_an_index_holding_records_without_a_ttl_never_expires(
    client: redis.Redis, prefix: str
) -> None:
    with open_store(REDIS_URL, prefix=prefix) as kept:
        kept.put(checkpoint(principal="al", agent="billing", text="kept"), key="kept")
    with open_store(REDIS_URL, prefix=prefix, ttl=1) as brief:
        brief.put(checkpoint(principal="al", agent="billing", text="brief"), key="brief")
        assert client.ttl(f"{{{prefix}}}:a:billing") == -1
        deadline = time.monotonic() + 10
        while brief.head("brief") is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        for filters in ({}, {"owner": "al"}, {"agent_id": "billing"}):
            assert [s.key for s in brief.list(**filters)] == ["kept"]


def test_a_history_in_pieces_outlives_the_first_deadline_and_expiry_leaves_only_orphans(
    client: redis.Redis, prefix: str
) -> None:
    """Pieces keep twice the ttl, refreshed by each write of the record that refers to them
    (so a record written again never refers to an expired piece); the ones a record that
    expired leaves expire a ttl later, or ``collect_orphans`` removes them before that."""
    store = in_pieces(RedisBackend.from_url(REDIS_URL, prefix=prefix, ttl=3))
    with store:
        started = time.monotonic()
        history = grow(store, 4, principal="al")
        assert pieces(client, prefix)
        time.sleep(1.5)
        history = grow(store, 5, principal="al", start=4)
        assert client.pttl(f"{{{prefix}}}:r:k") > 2500
        assert all(3000 < client.pttl(p) <= 6000 for p in pieces(client, prefix))
        time.sleep(max(0.0, started + 3.5 - time.monotonic()))  # past the first deadline
        got = store.get("k")
        assert got is not None and got.history == history
        assert [s.key for s in store.list(owner="al")] == ["k"]
        deadline = time.monotonic() + 10
        while store.head("k") is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert store.get("k") is None and pieces(client, prefix)
        segmented = store._records
        assert isinstance(segmented, Segmented)
        assert segmented.collect_orphans(delete=True, grace=0) > 0
        assert pieces(client, prefix) == []


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


def test_the_warning_names_the_callers_line_sync_and_async() -> None:
    """The warning points at the line of the program that made the call (a ``module=``
    filter and a reader of the warning can find it), not at a frame inside the library:
    it named contextlib.py, whichever the path."""
    need_redis_server()
    with RedisServer(appendonly=False) as server:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with open_store(server.url) as store:
                line = sys._getframe().f_lineno + 1
                store.put(checkpoint(), key="k")
        [warning] = [w for w in caught if issubclass(w.category, VolatileRedisWarning)]
        assert (warning.filename, warning.lineno) == (__file__, line)

        async def through_the_async_store() -> int:
            async with open_async_store(server.url) as store:
                line = sys._getframe().f_lineno + 1
                await store.get("k")
                return line

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            line = asyncio.run(through_the_async_store())
        [warning] = [w for w in caught if issubclass(w.category, VolatileRedisWarning)]
        assert (warning.filename, warning.lineno) == (__file__, line)

        # so a filter on the caller's module silences it, and only there
        with warnings.catch_warnings():
            warnings.filterwarnings("error", category=VolatileRedisWarning)
            warnings.filterwarnings("ignore", category=VolatileRedisWarning, module=__name__)
            with open_store(server.url) as store:
                store.get("k")


def test_the_warning_reaches_a_module_run_with_python_m(tmp_path: Path) -> None:
    """A program run as ``python -m pkg.mod`` gets the warning with its own line, not an
    ImportError from the module's loader, which cannot look up source for ``__main__``
    (a first version of the caller's attribution asked it, and the store call failed)."""
    need_redis_server()
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    with RedisServer(appendonly=False) as server:
        (tmp_path / "pkg" / "mod.py").write_text(
            "import warnings\n"
            "from agent_checkpoint import open_store\n"
            "from agent_checkpoint.testing import checkpoint\n"
            "warnings.simplefilter('always')\n"
            f"with open_store({server.url!r}) as store:\n"
            "    store.put(checkpoint(), key='k')  # line 6\n"
            "    print(store.get('k') is None)\n"
        )
        ran = subprocess.run(
            [sys.executable, "-m", "pkg.mod"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "False\n"
    assert f"{tmp_path / 'pkg' / 'mod.py'}:6: VolatileRedisWarning" in ran.stderr
    assert "store.put(checkpoint(), key='k')  # line 6" in ran.stderr  # its source line


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


# -- growing histories, over the store's segment layer -----------------------------------


def grow(
    store: Store, count: int, principal: str | None = None, *, start: int = 0
) -> tuple[Message, ...]:
    """Checkpoint under key "k" after every message from message ``start`` to ``count``; the
    last history."""
    base = checkpoint("r", principal=principal)
    history = tuple(Message("user", f"message {i} " + "x" * 200) for i in range(start))
    for i in range(start, count):
        history = (*history, Message("user", f"message {i} " + "x" * 200))
        store.put(base.evolve(history=history), key="k")
    return history


def whole_bytes(ckpt: RunCheckpoint, saved_at: int) -> bytes:
    """What a single full write of ``ckpt`` stores."""
    return orjson.dumps({"format": "conversation-v1", "data": ckpt.to_json(), "savedAt": saved_at})


def test_a_redis_store_puts_growing_histories_through_the_segment_layer(
    store: Store, client: redis.Redis, prefix: str
) -> None:
    assert not hasattr(store.backend, "append")
    assert isinstance(store._records, Segmented)
    history = grow(store, 10)
    got = store.get("k")
    assert got is not None and got.history == history
    assert store.delete("k")
    assert store_keys(client, prefix) == [sequence(prefix)]  # record and every index entry


@pytest.mark.parametrize("ttl", [None, 3600.0])
def test_growth_past_the_segment_limit_stays_exact_and_leaves_no_piece_behind(
    client: redis.Redis, prefix: str, ttl: float | None
) -> None:
    store = in_pieces(RedisBackend(client, prefix=prefix, ttl=ttl), max_segments=6)
    base = checkpoint("r", principal="al", agent="billing")
    history: tuple[Message, ...] = ()
    counts = []
    for i in range(40):
        history = (*history, Message("user", f"message {i} " + "ü" * (i % 5)))
        ckpt = base.evolve(history=history, last_completed_iteration=i)
        summary = store.put(ckpt, key="k")
        stored = store.get_record("k")
        assert stored is not None and stored.body == whole_bytes(ckpt, summary.saved_at)
        assert summary.size == len(stored.body) == stored.summary.size
        assert stored.summary == summary
        layout = Layout.unpack(client.hget(f"{{{prefix}}}:r:k", "body") or b"")
        assert layout is not None
        # exactly the pieces the record refers to: the ones merges replaced are gone
        assert pieces(client, prefix) == sorted(
            f"{{{prefix}}}#{PIECES}:r:k#{p}".encode() for p, _ in layout.pieces
        )
        counts.append(len(layout.pieces))
        assert (client.pttl(f"{{{prefix}}}:r:k") > 3_000_000) == (ttl is not None)
    assert max(counts) == 6 and counts[-1] < 6  # reached the limit, then merged
    assert store.head("k").revision == 40  # type: ignore[union-attr]
    assert [s.key for s in store.list(owner="al", agent_id="billing")] == ["k"]
    got = store.get("k")
    assert got is not None and got.history == history
    assert store.delete("k")
    assert pieces(client, prefix) == []
    assert [k for k in store_keys(client, prefix) if b":r:" in k] == []


def test_retention_removes_the_pieces_of_a_record(client: redis.Redis, prefix: str) -> None:
    store = in_pieces(RedisBackend(client, prefix=prefix))
    grow(store, 5, principal="al")
    assert pieces(client, prefix)
    assert store.forget_older_than(time.time() * 1000 + 60_000).forgotten == 1
    assert pieces(client, prefix) == []
    assert [k for k in store_keys(client, prefix) if b":r:" in k] == []


def test_a_whole_write_over_a_record_in_pieces_removes_its_pieces(
    client: redis.Redis, prefix: str
) -> None:
    store = in_pieces(RedisBackend(client, prefix=prefix))
    grow(store, 6)
    stored = store.get_record("k")
    assert stored is not None and pieces(client, prefix)
    store.put_record(stored)  # as copy and migrate write: whole bytes
    assert pieces(client, prefix) == []
    assert client.hget(f"{{{prefix}}}:r:k", "body") == stored.body
    again = store.get_record("k")
    assert again is not None and again.body == stored.body and again.summary.revision == 7


def test_a_refused_write_changes_nothing_and_leaves_no_piece(
    client: redis.Redis, prefix: str
) -> None:
    """Create-only, a stale revision and another principal, on a record in pieces with a
    write that spills a new piece first: all refused, and every key as it was (but for the
    revision counters, which only ever move on)."""
    store = in_pieces(RedisBackend(client, prefix=prefix))
    owned = checkpoint("r", principal="alice")
    history = grow(store, 6, principal="alice")
    grown = owned.evolve(history=(*history, Message("user", "one more")))

    def snapshot() -> dict[bytes, Any]:
        return {k: v for k, v in contents(client, prefix).items() if not k.endswith(b":rev")}

    before = snapshot()
    with pytest.raises(ConflictError):
        store.put(grown, key="k", create_only=True)
    with pytest.raises(ConflictError):
        store.put(grown, key="k", if_revision=2)
    with pytest.raises(OwnershipConflictError):
        store.put(checkpoint("r", principal="mallory").evolve(history=grown.history), key="k")
    assert snapshot() == before
    got = store.get("k")
    assert got is not None and got.history == history


class LosesOneReply(RedisBackend):
    """The first conditional save of a record lands, then its reply is lost (a reset after
    the server applied it): the segment layer commits an append with a conditional save."""

    lost = False

    def save(self, record: Record, **options: Any) -> Summary:
        landed = super().save(record, **options)
        if options.get("expect_revision") is not None and not self.lost and "#" not in record.key:
            self.lost = True
            raise BackendUnavailableError("reply lost", backend="redis", operation="save")
        return landed


@pytest.mark.parametrize("inline_bytes", [0, None])
def test_an_append_whose_reply_was_lost_is_not_applied_twice(
    client: redis.Redis, prefix: str, inline_bytes: int | None
) -> None:
    backend = LosesOneReply(client, prefix=prefix)
    store = Store(Segmented(backend, inline_bytes=inline_bytes))
    history = grow(store, 3)
    assert backend.lost  # the hook fired: a conditional save's reply was lost
    head = store.head("k")
    assert head is not None and head.revision == 3  # retried and recognised, not rewritten
    got = store.get("k")
    assert got is not None and got.history == history


def test_a_record_missing_a_piece_reads_unreadable_not_shorter(
    client: redis.Redis, prefix: str
) -> None:
    store = in_pieces(RedisBackend(client, prefix=prefix))
    grow(store, 3)
    client.delete(pieces(client, prefix)[0])
    reader = in_pieces(RedisBackend(client, prefix=prefix))  # the writer remembers its pieces
    with pytest.raises(UnreadableEnvelopeError, match="segments"):
        reader.get("k")


class Sent:
    """Counts what redis-py sends: a command, or a whole pipeline, is one send (one round
    trip); ``commands`` counts the commands in them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sends = self.commands = 0
        conn = redis.connection.AbstractConnection
        send, send_one, pack_many = conn.send_packed_command, conn.send_command, conn.pack_commands
        counter = self

        def counted(self: Any, command: Any, check_health: bool = True) -> None:
            counter.sends += 1
            send(self, command, check_health)

        def one(self: Any, *args: Any, **kwargs: Any) -> None:
            counter.commands += 1
            send_one(self, *args, **kwargs)

        def packed_many(self: Any, commands: Any) -> Any:
            counter.commands += len(commands)
            return pack_many(self, commands)

        monkeypatch.setattr(conn, "send_packed_command", counted)
        monkeypatch.setattr(conn, "send_command", one)
        monkeypatch.setattr(conn, "pack_commands", packed_many)

    def clear(self) -> None:
        self.sends = self.commands = 0


def test_a_put_and_a_get_are_each_one_round_trip(
    client: redis.Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One command each: an EVALSHA of the write script, an HMGET."""
    store = Store(RedisBackend(client, prefix=prefix))
    base = checkpoint("r", principal="al")
    history = (Message("user", "message 0"),)
    store.put(base.evolve(history=history), key="k")  # checks durability, loads the script
    sent = Sent(monkeypatch)
    for i in range(1, 6):
        history = (*history, Message("user", f"message {i}"))
        sent.clear()
        store.put(base.evolve(history=history), key="k")
        assert (sent.sends, sent.commands) == (1, 1)
        sent.clear()
        got = store.get("k")
        assert (sent.sends, sent.commands) == (1, 1)
        assert got is not None and got.history == history
    sent.clear()
    assert store.get("missing") is None and (sent.sends, sent.commands) == (1, 1)


def test_the_pieces_of_a_record_are_read_in_one_round_trip(
    client: redis.Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = in_pieces(RedisBackend(client, prefix=prefix), max_segments=8)
    history = grow(store, 6)
    layout = Layout.unpack(client.hget(f"{{{prefix}}}:r:k", "body") or b"")
    assert layout is not None and len(layout.pieces) == 6
    reader = in_pieces(RedisBackend(client, prefix=prefix), max_segments=8)
    reader.head("k")  # a new backend's first call checks the server once
    sent = Sent(monkeypatch)
    got = reader.get("k")
    assert got is not None and got.history == history
    # the record's HMGET, then one pipeline of an HMGET per piece
    assert (sent.sends, sent.commands) == (2, 1 + 6)
    # the writer remembers the (immutable) pieces it wrote: the record's HMGET alone
    sent.sends = sent.commands = 0
    got = store.get("k")
    assert got is not None and got.history == history
    assert (sent.sends, sent.commands) == (1, 1)


# -- records stored in segments by version 0.4 -------------------------------------------


def test_a_record_version_0_4_stored_in_segments_reads_grows_and_drops_whole(
    client: redis.Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    history = tuple(Message("user", f"message {i} ü") for i in range(6))
    ckpt = RunCheckpoint.new("m", history, run_id="r")
    whole = write_old_split_record(client, prefix, "old", ckpt, principal="al")
    write_old_split_record(client, prefix, "gone", ckpt, principal="al")
    segments = f"{{{prefix}}}:s:"
    with open_store(REDIS_URL, prefix=prefix) as store:
        record = store.get_record("old")
        assert record is not None and record.body == whole
        assert (record.summary.revision, record.summary.owner) == (5, "al")
        assert record.summary.size == len(whole)
        assert store.backend.load_many(["gone", "missing", "old"]) == [  # type: ignore[attr-defined]
            store.backend.load("gone"),
            None,
            record,
        ]
        got = store.get("old")
        assert got is not None and got.history == history
        assert [s.key for s in store.list(owner="al")] == ["gone", "old"]
        sent = Sent(monkeypatch)
        store.get("old")
        assert sent.sends == 2  # the hash, then hash and list in one snapshot

        grown = ckpt.evolve(history=(*history, Message("assistant", "seven")))
        assert store.put(grown, key="old", if_revision=5).revision == 6
        assert not client.exists(segments + "old")
        assert store.get("old") == grown
        with pytest.raises(OwnershipConflictError):
            store.put(checkpoint("x", principal="mallory"), key="gone")
        assert client.exists(segments + "gone")

        assert store.delete("gone")
        assert not client.exists(segments + "gone")
        assert [s.key for s in store.list()] == ["old"]


def test_a_record_version_0_4_stored_with_a_lost_segment_reads_unreadable(
    client: redis.Redis, prefix: str
) -> None:
    history = tuple(Message("user", f"message {i}") for i in range(4))
    write_old_split_record(client, prefix, "k", RunCheckpoint.new("m", history), principal="al")
    client.rpop(f"{{{prefix}}}:s:k")
    with open_store(REDIS_URL, prefix=prefix) as store, pytest.raises(UnreadableEnvelopeError):
        store.get("k")


def test_migrate_rewrites_the_records_version_04_stored_in_segments_whole(
    client: redis.Redis, prefix: str
) -> None:
    history = tuple(Message("user", f"message {i}") for i in range(6))
    ckpt = RunCheckpoint.new("m", history, run_id="r")
    whole = write_old_split_record(client, prefix, "old", ckpt, principal="al")
    write_old_split_record(client, prefix, "lost", ckpt, principal="al")
    client.rpop(f"{{{prefix}}}:s:lost")
    base = f"{{{prefix}}}:"
    with open_store(REDIS_URL, prefix=prefix) as store:
        store.put(checkpoint("new"), key="new")
        assert migrate_records(store, dry_run=True).upgraded == 1
        assert client.hexists(base + "r:old", "head")  # a dry run writes nothing
        report = migrate_records(store)
        assert (report.upgraded, report.current) == (1, 1)
        assert [key for key, _ in report.failed] == ["lost"]
        assert not client.hexists(base + "r:old", "head") and not client.exists(base + "s:old")
        record = store.get_record("old")
        assert record is not None and record.body == whole
        assert (record.summary.revision, record.summary.owner) == (6, "al")
        assert store.get("old") == ckpt
        assert client.hexists(base + "r:lost", "head")  # unreadable: left as it was


def _big_history(n: int = 120) -> tuple[Message, ...]:
    return tuple(Message("user", f"{i}: " + "word " * 200) for i in range(n))  # ~120 KB


@pytest.mark.parametrize("ttl", [None, 3600])
def test_a_large_history_reads_back_exactly_and_grows(
    client: redis.Redis, prefix: str, ttl: int | None
) -> None:
    with open_store(REDIS_URL, prefix=prefix, ttl=ttl) as store:
        ckpt = RunCheckpoint.new("m", _big_history(), run_id="r")
        summary = store.put(ckpt, key="k")
        whole = Store(MemoryBackend())
        whole.put(ckpt, key="k")
        got, expected = store.get_json("k"), whole.get_json("k")
        assert got is not None and expected is not None and got["data"] == expected["data"]
        assert store.head("k") == summary
        assert (client.pttl(f"{{{prefix}}}:r:k") > 0) == (ttl is not None)
        grown = ckpt.evolve(history=(*ckpt.history, Message("assistant", "ok")))
        store.put(grown, key="k")
        assert store.get("k") == grown


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


# -- bodies stored apart (STAGE_BYTES and more) ------------------------------------------------


def big_record(key: str, n: int, fill: bytes = b"x") -> Record:
    body = b'{"n":%d,"fill":"%s"}' % (n, fill * 100_000)
    return Record(Summary(key, f"run-{n}", 1_000 + n, None, None, None, None, 0, 0, 0), body)


def test_a_big_body_is_stored_apart_and_goes_with_its_record(
    client: redis.Redis, prefix: str
) -> None:
    backend = RedisBackend(client, prefix=prefix)
    first = backend.save(big_record("k", 1))
    hashed = client.hgetall(f"{{{prefix}}}:r:k".encode())
    assert b"body" not in hashed  # the 100 KB went to a key of its own, not through Lua
    apart = f"{{{prefix}}}:b:{first.revision}:k".encode()
    assert client.pttl(apart) == -1  # no ttl: kept as long as the record
    assert backend.load("k") == Record(first, big_record("k", 1).body)
    small = Record(Summary("k", "run-2", 2_000, None, None, None, None, 0, 0, 0), b'{"n":2}')
    second = backend.save(small)
    assert not client.exists(apart) and backend.load("k") == Record(second, small.body)
    third = backend.save(big_record("k", 3))
    assert backend.drop("k", expect_revision=third.revision) is True
    assert store_keys(client, prefix) == [sequence(prefix)]  # no body or staging key left


def test_a_refused_big_write_changes_nothing_and_leaves_no_staging_key(
    client: redis.Redis, prefix: str
) -> None:
    backend = RedisBackend(client, prefix=prefix)
    backend.save(big_record("k", 1))
    before = contents(client, prefix)
    with pytest.raises(ConflictError):
        backend.save(big_record("k", 2, b"y"), create_only=True)
    with pytest.raises(ConflictError):
        backend.save(big_record("k", 3, b"z"), expect_revision=99)
    assert contents(client, prefix) == before


def test_a_big_body_expires_with_its_record(client: redis.Redis, prefix: str) -> None:
    backend = RedisBackend(client, prefix=prefix, ttl=60)
    saved = backend.save(big_record("k", 1))
    apart = f"{{{prefix}}}:b:{saved.revision}:k".encode()
    assert 0 < client.pttl(apart) <= 60_000
    assert abs(client.pttl(apart) - client.pttl(f"{{{prefix}}}:r:k".encode())) < 1000


def test_the_atomic_read_returns_what_the_optimistic_one_does(
    client: redis.Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After ``READS`` optimistic tries a reader reads hash and body in one script: forced
    here from the first try, it returns the same records, big bodies and small, and None for
    a key not stored."""
    backend = RedisBackend(client, prefix=prefix)
    big, small = (
        big_record("big", 1),
        Record(Summary("small", "run-2", 1_002, None, None, None, None, 0, 0, 0), b'{"n":2}'),
    )
    for record in (big, small):
        backend.save(record)
    optimistic = backend.load_many(["big", "small", "none"])
    monkeypatch.setattr(redis_backend, "READS", 0)
    atomic = backend.load_many(["big", "small", "none"])
    assert [r.body if r else None for r in atomic] == [big.body, small.body, None]
    assert atomic == optimistic
    assert backend.load("big") == optimistic[0]


def test_reads_racing_writers_of_big_bodies_see_whole_records(
    client: redis.Redis, prefix: str
) -> None:
    writer, reader = RedisBackend(client, prefix=prefix), RedisBackend(client, prefix=prefix)
    writer.save(Record(Summary("k", "run-0", 1_000, None, None, None, None, 0, 0, 0), b'{"n":0}'))
    stop = threading.Event()

    def write() -> None:
        n = 1
        while not stop.is_set():
            fill = b"ab"[n % 2 : n % 2 + 1]
            writer.save(
                big_record("k", n, fill)
                if n % 3
                else Record(
                    Summary("k", f"run-{n}", 1_000 + n, None, None, None, None, 0, 0, 0),
                    b'{"n":%d}' % n,
                )
            )
            n += 1

    thread = threading.Thread(target=write)
    thread.start()
    try:
        for _ in range(300):
            got = reader.load("k")
            assert got is not None
            n = int(got.summary.run_id.removeprefix("run-"))
            expected = (
                big_record("k", n, b"ab"[n % 2 : n % 2 + 1]).body if n % 3 else b'{"n":%d}' % n
            )
            assert got.body == expected, n  # the body of the revision whose summary came with it
    finally:
        stop.set()
        thread.join()


# -- expiry of long histories ------------------------------------------------------------------


def test_with_a_ttl_a_long_history_lives_while_written_and_expires_whole(
    client: redis.Redis, prefix: str
) -> None:
    history = [Message("user", f"message {i} " * 40) for i in range(120)]  # ~60 KB: pieces
    with open_store(REDIS_URL, prefix=prefix, ttl=1) as store:
        for n in range(40, 121, 8):  # appends over 2.5 s, well past twice the ttl
            store.put(RunCheckpoint.new("task", history[:n], run_id="r"), key="k")
            time.sleep(0.25)
        pieces = [k for k in store_keys(client, prefix) if b"#segments:r:" in k]
        assert pieces, "the history was not in pieces"
        for piece in pieces:  # refreshed by the last write: past the record's own expiry
            assert 1000 < client.pttl(piece) <= 2000
        got = store.get("k")
        assert got is not None and got.history == tuple(history)
    time.sleep(2.2)
    left = [k for k in store_keys(client, prefix) if b":r:" in k or b":b:" in k]
    assert left == []  # the record and every piece (and body stored apart) expired
