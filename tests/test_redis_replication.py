"""``wait_replicas``: a Redis store whose writes return only once that many replicas confirmed
them (``WAIT`` on the write's own connection), on a real primary with a real replica started
for this module, and on a Redis Cluster with one replica per primary. Without it, replication
is asynchronous: a failover can lose writes the old primary acknowledged."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from support.redis_server import RedisServer, cluster_with_replicas, need_redis_server

from agent_checkpoint import Message, NotReplicatedError, RunCheckpoint, Store, open_store
from agent_checkpoint._cli import main
from agent_checkpoint._segments import PIECES, Segmented
from agent_checkpoint._store import RetryPolicy
from agent_checkpoint.backends._redis import RedisBackend
from agent_checkpoint.errors import ConflictError, InvalidKeyError
from agent_checkpoint.testing import (
    AppendingConformance,
    ClaimsConformance,
    StoreConformance,
    checkpoint,
)


class Replicated:
    """A primary and one replica of it, both with AOF."""

    def __init__(self) -> None:
        self.primary = RedisServer()
        self.replica = RedisServer()

    def start(self) -> None:
        try:
            self.primary.start()
            self.replica.start()
            self.follow()
        except BaseException:
            self.cleanup()
            raise

    def follow(self, timeout: float = 30.0) -> None:
        """Make the replica follow the primary again and wait until its link is up."""
        client = redis.Redis(port=self.replica.port)
        client.replicaof("127.0.0.1", self.primary.port)
        deadline = time.monotonic() + timeout
        while client.info("replication").get("master_link_status") != "up":
            if time.monotonic() > deadline:
                raise RuntimeError("the replica did not connect to its primary")
            time.sleep(0.02)
        client.close()

    def cleanup(self) -> None:
        self.primary.cleanup()
        self.replica.cleanup()


@pytest.fixture(scope="module")
def servers() -> Iterator[Replicated]:
    need_redis_server()
    pair = Replicated()
    pair.start()
    yield pair
    pair.cleanup()


@pytest.fixture
def prefix() -> str:
    return f"w-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def store(servers: Replicated, prefix: str) -> Iterator[Store]:
    with open_store(f"{servers.primary.url}?prefix={prefix}&wait_replicas=1&wait_timeout=5") as s:
        yield s


class TestWaitingForAReplica(StoreConformance, ClaimsConformance):
    """The whole contract, every write waiting for the replica."""


class TestWaitingForAReplicaInPieces(StoreConformance, AppendingConformance):
    """The same with every put past the first moving history into pieces (each written, like
    any record, waiting for the replica)."""

    @pytest.fixture
    def store(self, servers: Replicated, prefix: str) -> Iterator[Store]:
        url = f"{servers.primary.url}?prefix={prefix}&wait_replicas=1&wait_timeout=5"
        with Store(Segmented(RedisBackend.from_url(url), inline_bytes=0, max_segments=4)) as s:
            yield s


def _history(n: int, size: int = 10) -> list[Message]:
    return [Message("user" if i % 2 else "assistant", f"{i} " + "x" * size) for i in range(n)]


def test_every_acknowledged_write_is_already_on_the_replica(
    servers: Replicated, store: Store, prefix: str
) -> None:
    """Read straight from the replica after each put, append, large first write (its history
    in a piece) and delete: the replica holds exactly what the primary acknowledged, and each
    write waited for it (on loopback an unwaited write usually arrives first too, so the
    primary's count of WAITs is what tells the two apart)."""
    primary = redis.Redis(port=servers.primary.port)

    def waits() -> int:
        return int(primary.info("commandstats").get("cmdstat_wait", {}).get("calls", 0))

    before = waits()
    with open_store(f"{servers.replica.url}?prefix={prefix}") as replica:
        for n, size in ((1, 10), (2, 10), (3, 10), (1, 200_000), (2, 10)):  # 200 KB: a piece
            ckpt = RunCheckpoint.new("go", _history(n, size), run_id="r")
            written = store.put(ckpt, key="k")
            assert replica.get_record("k") == store.get_record("k")
            assert replica.head("k") == written
        store.delete("k")
        assert replica.get_record("k") is None
    assert waits() - before >= 6  # five puts and a delete (a resend after NOSCRIPT adds one)
    primary.close()


def test_a_write_no_replica_confirms_raises_and_stays_on_the_primary(
    servers: Replicated, prefix: str
) -> None:
    servers.replica.stop()
    try:
        url = f"{servers.primary.url}?prefix={prefix}&wait_replicas=1&wait_timeout=0.2"
        with open_store(url) as store:
            with pytest.raises(NotReplicatedError) as caught:
                store.put(checkpoint("r1", text="alone"), key="k")
            err = caught.value
            assert err.code == "ERR_NOT_REPLICATED"
            assert (err.key, err.wanted, err.confirmed) == ("k", 1, 0)
            assert "only 0 of the 1 replicas" in str(err) and "0.2 s" in str(err)
            got = store.get("k")  # applied on the primary: the error says so
            assert got is not None and got.history[0].content == "alone 0"

            # a write the store refuses changes nothing: no replica needs to confirm it
            with pytest.raises(ConflictError):
                store.put(checkpoint("r1"), key="k", if_revision=7)
            with pytest.raises(NotReplicatedError, match="drop of key 'k'"):
                store.delete("k")
            assert store.get("k") is None
    finally:
        servers.replica.start()
        servers.follow()


def test_asking_for_more_replicas_than_there_are_names_both_counts(
    servers: Replicated, prefix: str
) -> None:
    url = f"{servers.primary.url}?prefix={prefix}&wait_replicas=2&wait_timeout=0.1"
    with open_store(url) as store, pytest.raises(NotReplicatedError, match="only 1 of the 2"):
        store.put(checkpoint("r1"), key="k")


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("wait_replicas=-1", "wait_replicas"),
        ("wait_replicas=one", "wait_replicas"),
        ("wait_replicas=1.5", "wait_replicas"),
        ("wait_timeout=0", "wait_timeout"),
        ("wait_timeout=soon", "wait_timeout"),
    ],
)
def test_bad_wait_options_are_refused_by_name(
    servers: Replicated, query: str, message: str
) -> None:
    with pytest.raises(InvalidKeyError, match=message):
        open_store(f"{servers.primary.url}?{query}")


def test_the_options_reach_the_backend_and_its_namespaces(servers: Replicated) -> None:
    with open_store(f"{servers.primary.url}?wait_replicas=1&wait_timeout=2.5") as store:
        backend = store.backend
        assert (backend.wait_replicas, backend.wait_timeout) == (1, 2.5)  # type: ignore[attr-defined]
        sibling = backend.namespace("claims")  # type: ignore[attr-defined]
        assert (sibling.wait_replicas, sibling.wait_timeout) == (1, 2.5)
    with open_store(servers.primary.url) as store:
        assert store.backend.wait_replicas == 0  # type: ignore[attr-defined]


def test_on_a_cluster_a_confirmed_write_survives_its_primarys_death() -> None:
    """One replica per primary; the store waits for it. The write acknowledged just before
    the kill is there after the failover, with nothing waiting for replication in between;
    with the replica gone too, the next write says it was not confirmed."""
    patient = RetryPolicy(attempts=100, initial=0.05, maximum=0.5, deadline=30)
    with cluster_with_replicas("cw") as (servers, admin, prefix, primary):
        url = f"{servers.url}?cluster=true&prefix={prefix}&wait_replicas=1&wait_timeout=5"
        with open_store(url, retry=patient) as store:
            for n in (1, 2, 3):  # a full write, then appends
                store.put(RunCheckpoint.new("go", _history(n), run_id="r"), key="k")
            servers.kill(primary)

            got = store.get("k")  # carried across the failover by the Store's retries
            assert got is not None
            assert [m.content for m in got.history] == [m.content for m in _history(3)]
            # the node a fresh slot map comes from may not have heard of the failover yet
            # (seen once with redis-py 5.0.1): ask again until one has, for up to 10 s
            deadline = time.monotonic() + 10
            while True:
                admin.nodes_manager.initialize()
                owner = admin.get_node_from_key("{" + prefix + "}")
                if owner.port != primary.port or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert owner.port != primary.port
            # the promoted primary has no replica left: a write is applied, not confirmed
            with pytest.raises(NotReplicatedError):
                store.put(checkpoint("r2", messages=1), key="k2")
            assert store.get("k2") is not None


@pytest.mark.parametrize("wait", [0, 1])
def test_writes_reload_their_scripts_after_the_server_forgot_them(
    servers: Replicated, prefix: str, wait: int
) -> None:
    """A server restarted without its script cache (or SCRIPT FLUSH) answers NOSCRIPT: every
    kind of write (a record, and a piece of a long history) loads its script again and applies
    once."""
    admin = redis.Redis(port=servers.primary.port)
    with open_store(f"{servers.primary.url}?prefix={prefix}&wait_replicas={wait}") as store:
        # a full write spilling a piece, an append spilling another, a full write
        for revision, (n, size) in enumerate(((1, 200_000), (2, 200_000), (1, 10)), 1):
            admin.script_flush()
            ckpt = RunCheckpoint.new("go", _history(n, size), run_id="r")
            assert store.put(ckpt, key="k").revision == revision
            assert store.get("k") == ckpt
        admin.script_flush()
        assert store.delete("k")
        assert store.get_record("k") is None
        assert admin.keys(f"{{{prefix}}}#{PIECES}:r:*") == []
    admin.close()


def test_a_wait_past_the_read_timeout_is_refused(servers: Replicated) -> None:
    """A WAIT longer than the socket's read timeout would end as a lost connection, and the
    Store would retry the write: refused when the store is opened."""
    url = f"{servers.primary.url}?wait_replicas=1"
    with pytest.raises(
        InvalidKeyError, match=r"wait_timeout \(10 s\) must be below socket_timeout \(10 s\)"
    ):
        open_store(f"{url}&wait_timeout=10")
    with pytest.raises(InvalidKeyError, match=r"\(3 s\) must be below socket_timeout \(2 s\)"):
        open_store(f"{url}&wait_timeout=3&socket_timeout=2")
    with open_store(f"{url}&wait_timeout=20&socket_timeout=30") as store:
        assert store.backend.wait_timeout == 20  # type: ignore[attr-defined]


def test_the_cli_reports_an_unconfirmed_write_in_one_line_with_exit_code_6(
    servers: Replicated, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    example = Path(__file__).resolve().parents[1] / "examples" / "crashed-run.json"
    url = f"{servers.primary.url}?prefix={prefix}&wait_replicas=2&wait_timeout=0.1"
    assert main(["put", str(example), "--store", url]) == 6
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("agent-checkpoint: error: redis save of key")
    assert "only 1 of the 2 replicas" in err
