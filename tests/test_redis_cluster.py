"""The Redis backend on a real Redis Cluster: three cluster-mode ``redis-server`` primaries
started for this module, reached with ``?cluster=true`` (redis-py's ``RedisCluster``). Every
key of a store shares its ``{prefix}`` hash tag, so the whole contract runs on one node per
store, and stores with different prefixes spread over the nodes."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import ClusterDownError, SlotNotCoveredError
from support.redis_legacy import write_old_split_record
from support.redis_server import RedisClusterServers, cluster_with_replicas, need_redis_server

from agent_checkpoint import Message, RunCheckpoint, Store, open_async_store, open_store
from agent_checkpoint._segments import PIECES, Segmented
from agent_checkpoint._store import RetryPolicy
from agent_checkpoint._store_types import NO_RETRY
from agent_checkpoint.backends import Query
from agent_checkpoint.backends._redis import RedisBackend, VolatileRedisWarning
from agent_checkpoint.errors import BackendUnavailableError, InvalidKeyError
from agent_checkpoint.testing import (
    AppendingConformance,
    ClaimsConformance,
    EncryptionConformance,
    StoreConformance,
    checkpoint,
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisClusterServers]:
    need_redis_server()
    servers = RedisClusterServers(3)
    servers.start()
    yield servers
    servers.cleanup()


@pytest.fixture
def url(cluster: RedisClusterServers) -> str:
    return f"{cluster.url}?cluster=true&prefix=c-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    with open_store(url) as opened:
        yield opened


class TestRedisClusterStore(StoreConformance, ClaimsConformance, EncryptionConformance):
    pass


class TestRedisClusterStoreInPieces(StoreConformance, AppendingConformance):
    """The segment layer's thresholds at their lowest: every put moves history into pieces."""

    @pytest.fixture
    def store(self, url: str) -> Iterator[Store]:
        backend = RedisBackend.from_url(url)
        with Store(Segmented(backend, inline_bytes=0, max_segments=4)) as opened:
            yield opened


def test_the_pieces_of_a_record_are_read_in_one_pipeline_on_the_stores_node(url: str) -> None:
    """``load_many`` pipelines one HMGET per piece: all keys of a store share its hash tag, so
    the cluster client sends them to one node, in one round trip."""
    backend = RedisBackend.from_url(url)
    with Store(Segmented(backend, inline_bytes=0, max_segments=8)) as store:
        history: tuple[Message, ...] = ()
        for i in range(6):
            history = (*history, Message("user", f"message {i}"))
            store.put(RunCheckpoint.new("go", history, run_id="r"), key="k")
        pieces = backend.namespace(PIECES)
        keys = [s.key for s in pieces.scan(Query(limit=100))]
        assert len(keys) == 6
        loaded = pieces.load_many([*keys, "k#missing"])
        assert loaded == [*(pieces.load(k) for k in keys), None]
        got = store.get("k")
        assert got is not None and got.history == history


def test_a_record_version_0_4_stored_in_segments_reads_and_drops_whole(url: str) -> None:
    """Its hash and list are read in one MULTI, on the store's node."""
    history = tuple(Message("user", f"message {i}") for i in range(5))
    ckpt = RunCheckpoint.new("go", history, run_id="r")
    with open_store(url) as store:
        backend = store.backend
        assert isinstance(backend, RedisBackend)
        whole = write_old_split_record(backend._client, backend.prefix, "k", ckpt, principal="al")
        record = store.get_record("k")
        assert record is not None and record.body == whole and record.summary.owner == "al"
        assert store.delete("k")
        assert not backend._client.exists(f"{{{backend.prefix}}}:s:k")


def test_a_cluster_url_opens_a_cluster_client(store: Store) -> None:
    backend = store.backend
    assert isinstance(backend, RedisBackend)
    assert isinstance(backend._client, RedisCluster)


def test_stores_with_different_prefixes_spread_over_the_nodes(cluster: RedisClusterServers) -> None:
    """One store is one slot; sharding is several prefixes: a store on each of the three
    nodes works, and all of its keys live in its prefix's slot on that node."""
    client = RedisCluster.from_url(cluster.url)
    by_node: dict[str, str] = {}  # a prefix for each node, found by hashing, not by chance
    while len(by_node) < 3:
        prefix = f"shard-{uuid.uuid4().hex[:6]}"
        by_node.setdefault(client.get_node_from_key("{" + prefix + "}").name, prefix)
    try:
        for node, prefix in by_node.items():
            with open_store(f"{cluster.url}?cluster=true&prefix={prefix}") as store:
                store.put(checkpoint("r", agent="billing", failed="tool"), key="k")
                assert store.get("k") is not None
                assert [s.key for s in store.list(agent_id="billing")] == ["k"]
            keys = [k.decode() for k in client.scan_iter(match="{" + prefix + "}*", count=1000)]
            assert len(keys) > 2 and len({key_slot(k.encode()) for k in keys}) == 1
            assert client.get_node_from_key(keys[0]).name == node
    finally:
        client.close()


def test_the_durability_check_asks_the_node_that_holds_the_store(
    cluster: RedisClusterServers,
) -> None:
    """The nodes run with AOF; one turned volatile warns the stores on its slots only (a
    pipelined CONFIG GET, as on one server, is refused by the cluster client)."""
    client = RedisCluster.from_url(cluster.url)
    prefixes = [f"d{i}-{uuid.uuid4().hex[:6]}" for i in range(12)]
    node_of = {p: client.get_node_from_key("{" + p + "}") for p in prefixes}
    volatile = node_of[prefixes[0]]
    elsewhere = next(p for p in prefixes if node_of[p].name != volatile.name)

    def warned(prefix: str) -> bool:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with open_store(f"{cluster.url}?cluster=true&prefix={prefix}") as store:
                store.put(checkpoint(), key="k")
        return [w.category for w in caught] == [VolatileRedisWarning]

    try:
        assert not warned(prefixes[0])
        client.config_set("appendonly", "no", target_nodes=volatile)
        client.config_set("save", "", target_nodes=volatile)
        assert warned(prefixes[0])
        assert not warned(elsewhere)
    finally:
        client.config_set("appendonly", "yes", target_nodes=volatile)
        client.close()


def test_a_dead_node_makes_its_stores_unavailable_then_the_cluster_refuses_all() -> None:
    """A node killed: the stores on its slots fail at once as transient (retried, then
    ``BackendUnavailableError``) while the others keep working; once the cluster marks the
    node failed (no replica to promote) every store gets CLUSTERDOWN, also transient. No
    driver exception escapes."""
    need_redis_server()
    servers = RedisClusterServers(3)
    servers.start()
    try:
        client = RedisCluster.from_url(servers.url)
        prefixes = [f"n{i}-{uuid.uuid4().hex[:6]}" for i in range(12)]
        port_of = {p: client.get_node_from_key("{" + p + "}").port for p in prefixes}
        client.close()
        doomed = prefixes[0]
        spared = next(p for p in prefixes if port_of[p] != port_of[doomed])
        brief = RetryPolicy(attempts=2, deadline=2)
        stores = {
            p: open_store(f"{servers.url}?cluster=true&prefix={p}", retry=brief)
            for p in (doomed, spared)
        }
        for store in stores.values():
            store.put(checkpoint(), key="k")
        next(s for s in servers.servers if s.port == port_of[doomed]).stop(signal.SIGKILL)

        assert stores[spared].get("k") is not None  # before the cluster notices (~1 s)
        with pytest.raises(BackendUnavailableError):
            stores[doomed].get("k")

        deadline = time.monotonic() + 20
        while True:
            try:
                stores[spared].get("k")
            except BackendUnavailableError as exc:
                assert isinstance(exc.__cause__, (ClusterDownError, SlotNotCoveredError))
                break
            assert time.monotonic() < deadline, "the cluster never marked the node failed"
            time.sleep(0.2)
        for store in stores.values():
            store.close()
    finally:
        servers.cleanup()


def test_after_a_failover_the_store_follows_the_promoted_replica() -> None:
    """A primary killed, its replica promoted (~2-5 s at the tests' 1 s node timeout): the
    Store's retries carry a get and a put across the failover, and the record written (and
    replicated) before the kill is there. redis-py re-reads the slot map after a failed single
    command only, not after a failed pipeline (every load is one); without the backend asking
    again, the store kept calling the dead primary until its retries ran out."""
    patient = RetryPolicy(attempts=100, initial=0.05, maximum=0.5, deadline=30)
    with (
        cluster_with_replicas("fo") as (servers, admin, prefix, primary),
        open_store(f"{servers.url}?cluster=true&prefix={prefix}", retry=patient) as store,
    ):
        store.put(checkpoint("r1", text="before"), key="k")
        servers.replicated(admin, primary)
        servers.kill(primary)

        got = store.get("k")
        assert got is not None and got.history[0].content == "before 0"
        store.put(checkpoint("r1", text="after"), key="k")
        assert store.head("k").revision == 2  # type: ignore[union-attr]


def move_slot(cluster: RedisClusterServers, slot: int, source: Any, target: Any) -> None:
    """Reshard: move ``slot`` and its keys from node ``source`` to node ``target`` (the steps
    ``redis-cli --cluster reshard`` takes), and tell every node."""
    nodes = {s.port: redis.Redis(port=s.port) for s in cluster.servers}
    src, dst = nodes[source.port], nodes[target.port]
    try:
        src_id, dst_id = (n.execute_command("CLUSTER MYID").decode() for n in (src, dst))
        dst.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", src_id)
        src.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", dst_id)
        while keys := src.execute_command("CLUSTER GETKEYSINSLOT", slot, 100):
            src.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
        for node in nodes.values():
            node.execute_command("CLUSTER SETSLOT", slot, "NODE", dst_id)
    finally:
        for node in nodes.values():
            node.close()


def test_a_store_follows_its_slot_when_the_cluster_is_resharded(
    cluster: RedisClusterServers,
) -> None:
    """The store's slot moves to another primary while the store is open: its client still
    maps the slot to the old node, which answers MOVED. A large write (its history spills into
    a piece) lands on the new owner. The slot moves back: a load and an append follow it too,
    and a fresh store reads everything written."""
    admin = RedisCluster.from_url(cluster.url)
    prefix = f"rs-{uuid.uuid4().hex[:6]}"
    slot = key_slot(("{" + prefix + "}").encode())
    source = admin.get_node_from_key("{" + prefix + "}")
    target = next(n for n in admin.get_primaries() if n.name != source.name)
    history = [Message("user", f"message {i}") for i in range(3)]
    try:
        with open_store(f"{cluster.url}?cluster=true&prefix={prefix}") as store:
            first = store.put(RunCheckpoint.new("go", history, run_id="r"), key="k")
            move_slot(cluster, slot, source, target)
            with redis.Redis(port=target.port) as moved:
                assert moved.exists(f"{{{prefix}}}:r:k") == 1

            big = [Message("user", "x" * 100_000)]  # a piece, then the record
            assert store.put(RunCheckpoint.new("go", big, run_id="r"), key="big").revision >= 1
            move_slot(cluster, slot, target, source)  # and back, for the cluster client's MOVED
            got = store.get("k")
            assert got is not None and got.history == tuple(history)
            history.append(Message("assistant", "after the move"))
            grown = store.put(RunCheckpoint.new("go", history, run_id="r"), key="k")
            assert grown.revision == first.revision + 1
            assert [s.key for s in store.list()] == ["k", "big"]  # newest first
        with open_store(f"{cluster.url}?cluster=true&prefix={prefix}") as fresh:
            got = fresh.get("k")
            assert got is not None and got.history == tuple(history)
            assert fresh.get("big") is not None
    finally:
        admin.close()


def test_cluster_must_be_true_or_false(cluster: RedisClusterServers) -> None:
    with pytest.raises(InvalidKeyError, match="redis option cluster must be true or false"):
        open_store(f"{cluster.url}?cluster=maybe")


class TestRedisClusterAsyncStore(StoreConformance, ClaimsConformance):
    """``AsyncStore`` on the cluster: ``redis.asyncio``'s cluster client, the same contract."""

    @pytest.fixture
    def store(self, url: str) -> Iterator[Any]:
        from agent_checkpoint._async_store import open_async_store
        from agent_checkpoint.testing import BlockingStore

        with BlockingStore(open_async_store(url)) as opened:
            yield opened


def test_concurrent_first_puts_of_an_async_store_all_land_without_a_retry(
    cluster: RedisClusterServers,
) -> None:
    """Tasks that start using a new ``AsyncStore`` on a cluster at once: redis-py routed the
    commands sent before it knew the slot map to any node, whose MOVED replies made it close
    every connection, under the other tasks' commands (15-30 of 32 such puts failed). The
    store loads the map before its first command, so with no retry at all every put lands."""

    async def first_puts() -> list[BaseException | None]:
        url = f"{cluster.url}?cluster=true&prefix=c-{uuid.uuid4().hex[:12]}"
        store = open_async_store(url, retry=NO_RETRY)
        try:
            results = await asyncio.gather(
                *(store.put(checkpoint(f"r{i}"), key=f"k{i}") for i in range(32)),
                return_exceptions=True,
            )
            assert len(await store.list(limit=100)) == 32
        finally:
            await store.close()
        return [r if isinstance(r, BaseException) else None for r in results]

    for _ in range(3):  # each a new store, so a new client
        assert asyncio.run(first_puts()) == [None] * 32
