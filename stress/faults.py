"""Fault campaign: network faults and server restarts under concurrent load, on Redis,
PostgreSQL and S3.

Per backend the campaign starts a throwaway server where it can (``redis-server`` with AOF
``appendfsync always``; a PostgreSQL cluster; SeaweedFS), puts the TCP fault proxy of
``tests/support/faultproxy.py`` in front of it, and runs writer threads through the proxy with a
small ``RetryPolicy`` and short client timeouts, while the fault schedule cycles through:

- ``latency``: 30 ms added to every chunk, both ways;
- ``blackhole``: connections accepted, nothing forwarded (client read timeouts fire: Redis's
  ``socket_timeout``, boto3's and PostgreSQL's ``read_timeout``);
- ``refuse``: live connections reset, new ones refused, shorter than the retry budget;
- ``reset``: every live connection reset (RST), five times;
- ``cut``: live connections reset, and each new one cut after a random 1-4000 bytes;
- ``outage``: connections refused for longer than the retry budget, so errors surface;
- ``restart``: the server killed and restarted (Redis SIGKILL, only the fsynced AOF survives;
  PostgreSQL alternately fast and immediate; SeaweedFS stopped and started on the same data).

Each writer thread mixes: unconditional puts of growing histories to keys of its own;
create-only puts to keys every thread tries once (exactly one may win); compare-and-swap
appends (read, add a message, ``if_revision``) to a few shared keys; and reads. Afterwards,
through a direct connection:

- lost: an acknowledged put whose version (or message) is not in the store;
- duplicated: two acknowledged create-only writes of one key, two acknowledged writes at one
  revision, a message applied twice, revisions not strictly increasing;
- torn: a record that does not decode or holds content nobody wrote;
- wrongly accepted: a write reported as refused (``ConflictError``: "nothing changed") that is
  in the store;
- foreign: an exception that is not the library's, a ``BackendError`` that does not name the
  backend and an operation of the call that raised it (attributes and message), or an
  unconditional put refused. ``WriteOutcomeUnknownError`` (a retried write that may have
  landed) is an allowed outcome: its write is judged like any put that failed ambiguously;
- index: the listing disagrees with the records;
- stalled: no progress within 30 s after a fault healed.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support.faultproxy import FaultProxy

from agent_checkpoint import Message, RunCheckpoint, Store, open_store
from agent_checkpoint._store import RetryPolicy
from agent_checkpoint.errors import BackendError, CheckpointError, ConflictError

from .common import (
    BUCKET,
    IN_CI,
    POSTGRES_URL,
    REDIS_URL,
    ServiceUnavailable,
    Tally,
    drop_schema,
    ensure_bucket,
    main_for,
    purge_redis,
    s3_access,
)
from .crash import expected_history

BACKENDS = ("redis", "postgres", "s3")
EPISODES = ("latency", "blackhole", "refuse", "reset", "cut", "outage", "restart")
THREADS = 4
CAS_KEYS = 2
CAS_LIMIT = 150
"""A shared compare-and-swap key moves to a new generation at this many messages (bounded reads)."""
PUT_OPERATIONS = frozenset({"put", "save", "append", "load", "head", "open", "connect"})
READ_OPERATIONS = frozenset({"load", "head", "scan", "open", "connect"})


@dataclass(frozen=True)
class Budget:
    """The writers' retry policy and client timeouts for one backend."""

    policy: RetryPolicy
    timeout: float

    @property
    def outage(self) -> float:
        return self.policy.deadline + self.timeout + 1.0


BUDGETS = {
    "redis": Budget(RetryPolicy(attempts=6, initial=0.05, maximum=0.4, deadline=3.0), 0.8),
    "postgres": Budget(RetryPolicy(attempts=6, initial=0.05, maximum=0.4, deadline=3.0), 1.5),
    # SeaweedFS makes a losing conditional writer wait 1-3 s for its 412: a longer read timeout
    "s3": Budget(RetryPolicy(attempts=5, initial=0.05, maximum=0.5, deadline=8.0), 4.0),
}


# -- the servers behind the proxy -------------------------------------------------------------


@dataclass
class Rig:
    backend: str
    proxy: FaultProxy
    open_writer: Callable[[], Store]
    open_direct: Callable[[], Store]
    restart: Callable[[int], str] | None
    note: str = ""


@contextmanager
def rig(backend: str, workdir: Path) -> Iterator[Rig]:
    if backend == "redis":
        with _redis_rig() as made:
            yield made
    elif backend == "postgres":
        with _postgres_rig() as made:
            yield made
    elif backend == "s3":
        with _s3_rig(workdir) as made:
            yield made
    else:
        raise ValueError(f"the fault campaign runs on {', '.join(BACKENDS)}, not {backend!r}")


@contextmanager
def _redis_rig() -> Iterator[Rig]:
    import redis
    from support.postgres_server import with_query
    from support.redis_server import RedisServer

    from agent_checkpoint.backends._redis import VolatileRedisWarning

    warnings.filterwarnings("ignore", category=VolatileRedisWarning)
    budget = BUDGETS["redis"]
    server = None
    note = ""
    with contextlib.ExitStack() as stack:
        if RedisServer.available():
            server = RedisServer(appendonly=True)
            stack.callback(server.cleanup)
            server.start()
            base = server.url
        else:
            base, note = REDIS_URL, "no redis-server binary: proxy faults only, no restarts"
        client = redis.Redis.from_url(base, socket_connect_timeout=3)
        stack.callback(client.close)
        try:
            client.ping()
        except redis.RedisError as exc:
            raise ServiceUnavailable("redis", f"{base}: {exc}") from exc
        prefix = f"stress-faults-{uuid.uuid4().hex[:10]}"
        stack.callback(lambda: purge_redis(client, prefix))
        options = client.connection_pool.connection_kwargs
        proxy = FaultProxy(options["host"], int(options["port"]))
        stack.callback(proxy.close)
        host, port = proxy.address

        def open_writer() -> Store:
            return open_store(
                f"redis://{host}:{port}/{options.get('db', 0)}?prefix={prefix}",
                retry=budget.policy,
                socket_timeout=budget.timeout,
                socket_connect_timeout=budget.timeout,
            )

        def restart(n: int) -> str:
            assert server is not None
            server.restart(down_for=0.3, sig=signal.SIGKILL)
            return "redis-server SIGKILL + restart (AOF appendfsync always)"

        yield Rig(
            "redis",
            proxy,
            open_writer,
            lambda: open_store(with_query(base, prefix=prefix)),
            restart if server is not None else None,
            note,
        )


@contextmanager
def _postgres_rig() -> Iterator[Rig]:
    import psycopg
    from support.postgres_server import PostgresServer, unique_schema, with_address, with_query

    budget = BUDGETS["postgres"]
    note = ""
    with contextlib.ExitStack() as stack:
        server: PostgresServer | None = None
        try:
            server = PostgresServer()
            stack.callback(server.close)
            server.start()
            base = server.url
        except (FileNotFoundError, KeyError, OSError, subprocess.SubprocessError) as exc:
            if IN_CI:
                raise ServiceUnavailable("postgres", f"no throwaway server: {exc}") from exc
            server, base = None, POSTGRES_URL
            note = f"no throwaway server ({exc}): proxy faults only, no restarts"
        try:
            psycopg.connect(base, connect_timeout=3).close()
        except psycopg.Error as exc:
            raise ServiceUnavailable("postgres", f"{base}: {exc}") from exc
        schema = unique_schema("stress_faults")
        if server is None:
            stack.callback(lambda: drop_schema(base, schema))
        direct = with_query(base, schema=schema)
        with open_store(direct) as store:
            store.setup()
        address = base.split("@")[-1].split("/")[0]
        host, _, port = address.partition(":")
        proxy = FaultProxy(host or "127.0.0.1", int(port or 5432))
        stack.callback(proxy.close)
        proxied = with_query(
            with_address(base, *proxy.address),
            schema=schema,
            connect_timeout=max(1, round(budget.timeout)),
        )

        def open_writer() -> Store:
            return open_store(
                proxied,
                retry=budget.policy,
                max_size=THREADS + 2,
                pool_timeout=budget.timeout,
                read_timeout=budget.timeout,
            )

        def restart(n: int) -> str:
            assert server is not None
            if n % 2:
                server.restart()
                return "pg_ctl restart -m fast"
            server._pg_ctl("restart", "-m", "immediate", "-l", str(server.log))
            return "pg_ctl restart -m immediate (crash recovery)"

        yield Rig(
            "postgres",
            proxy,
            open_writer,
            lambda: open_store(direct),
            restart if server is not None else None,
            note,
        )


@contextmanager
def _s3_rig(workdir: Path) -> Iterator[Rig]:
    from support.seaweed import S3Unavailable, purge, start_s3_server, start_seaweedfs

    from agent_checkpoint.backends._s3 import S3Backend

    budget = BUDGETS["s3"]
    folder = workdir / f"faults-s3-{uuid.uuid4().hex[:8]}"
    with contextlib.ExitStack() as stack:
        stack.callback(lambda: shutil.rmtree(folder, ignore_errors=True))
        try:  # started here, not by start_s3_server, to know its data folder for restarts
            server = _start_seaweed(folder, start_seaweedfs)
        except S3Unavailable as exc:
            try:
                server = start_s3_server(folder / "fallback", in_ci=IN_CI)
            except S3Unavailable:
                raise ServiceUnavailable("s3", str(exc)) from exc
        current = [server]
        stack.callback(lambda: current[0].stop())
        proxy = FaultProxy("127.0.0.1", server.port)
        stack.callback(proxy.close)
        host, port = proxy.address
        prefix = f"stress-faults-{uuid.uuid4().hex[:10]}"
        access = s3_access(server)
        ensure_bucket(access.client())
        stack.callback(lambda: purge(s3_access(current[0]).client(), BUCKET, prefix + "/"))

        def open_writer() -> Store:
            client = access.client(
                endpoint_url=f"http://{host}:{port}",
                connect_timeout=budget.timeout,
                read_timeout=budget.timeout,
            )
            return Store(
                S3Backend.from_url(f"s3://{BUCKET}/{prefix}", client=client), retry=budget.policy
            )

        def open_direct() -> Store:
            client = s3_access(current[0]).client()
            return Store(S3Backend.from_url(f"s3://{BUCKET}/{prefix}", client=client))

        def restart(n: int) -> str:
            current[0].stop()
            current[0] = _start_seaweed(folder, start_seaweedfs)
            proxy.target = ("127.0.0.1", current[0].port)
            return "weed SIGTERM + start on the same data"

        seaweed = server.kind == "seaweedfs"
        yield Rig(
            "s3",
            proxy,
            open_writer,
            open_direct,
            restart if seaweed else None,
            "" if seaweed else "moto fallback: proxy faults only, no restarts",
        )


def _start_seaweed(folder: Path, start: Callable[[Path], Any]) -> Any:
    """SeaweedFS on ``folder``'s data, retried once if a free port was taken meanwhile."""
    from support.seaweed import S3Unavailable

    try:
        return start(folder)
    except S3Unavailable as exc:
        if "exited" not in str(exc):
            raise
        return start(folder)


# -- the load ------------------------------------------------------------------------------


@dataclass
class Outcomes:
    """What one writer thread saw."""

    own_acked: dict[str, tuple[int, int]] = field(default_factory=dict)  # key -> version, rev
    own_failed: dict[str, int] = field(default_factory=dict)  # key -> version (ambiguous)
    create_acked: dict[str, int] = field(default_factory=dict)  # key -> revision
    create_refused: set[str] = field(default_factory=set)
    create_failed: set[str] = field(default_factory=set)
    cas_acked: list[tuple[str, str, int]] = field(default_factory=list)  # key, message, rev
    cas_refused: list[tuple[str, str]] = field(default_factory=list)
    cas_failed: list[tuple[str, str]] = field(default_factory=list)
    acks: int = 0


class Load:
    """Writer threads through the proxy; every outcome recorded for the final judgement."""

    def __init__(self, store: Store, tally: Tally, seed: int, threads: int = THREADS) -> None:
        self.store = store
        self.tally = tally
        self.seed = seed
        self.outcomes = [Outcomes() for _ in range(threads)]
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._cas_generation = 0
        self._threads = [
            threading.Thread(target=self._run, args=(t,), name=f"writer-{t}", daemon=True)
            for t in range(threads)
        ]

    @property
    def acks(self) -> int:
        return sum(o.acks for o in self.outcomes)

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(120)
            if thread.is_alive():
                self._error_note(f"{thread.name} did not stop within 120 s")

    def _error_note(self, text: str) -> None:
        with self._lock:
            self.tally.violation("stalled", text)

    def _error(self, exc: BaseException, what: str, operations: frozenset[str]) -> None:
        with self._lock:
            ours = self.tally.error(exc, what)
            if ours and isinstance(exc, BackendError) and exc.operation not in operations:
                self.tally.violation(
                    "foreign", f"{what}: {type(exc).__name__} names operation {exc.operation!r}"
                )
            if ours and not isinstance(exc, BackendError):
                self.tally.violation("foreign", f"{what}: unexpected {type(exc).__name__}: {exc}")

    def _run(self, t: int) -> None:
        rng = random.Random(self.seed * 100 + t)
        out = self.outcomes[t]
        slots = {slot: 0 for slot in range(3)}  # slot -> generation (a new key after a failure)
        versions: dict[str, int] = {}
        create_cursor = 0
        seq = 0
        while not self.stop.is_set():
            op = rng.choices(("own", "create", "cas", "read"), (35, 25, 30, 10))[0]
            seq += 1
            try:
                if op == "own":
                    slot = rng.randrange(3)
                    key = f"g{t}-{slot}.{slots[slot]}"
                    version = versions.get(key, 0) + 1
                    versions[key] = version
                    self._own(out, key, version, slots, slot)
                elif op == "create":
                    key = f"n{create_cursor}"
                    create_cursor += 1
                    self._create(out, t, key)
                elif op == "cas":
                    self._cas(out, t, seq, rng.randrange(CAS_KEYS))
                else:
                    self._read(out, rng)
            except BaseException as exc:  # a bug in the campaign itself must not go unseen
                self._error(exc, f"thread {t} {op}", frozenset())

    def _own(self, out: Outcomes, key: str, version: int, slots: dict[int, int], slot: int) -> None:
        ckpt = _checkpoint(key, expected_history(key, version), f"{key}-v{version}")
        try:
            summary = self.store.put(ckpt, key=key)
        except ConflictError as exc:  # an unconditional put has nothing to lose to
            out.own_failed[key] = version
            slots[slot] += 1
            with self._lock:
                self.tally.violation(
                    "foreign", f"unconditional put {key} v{version} refused: {exc}"
                )
            return
        except Exception as exc:
            out.own_failed[key] = version  # it may still land: the key is retired
            slots[slot] += 1
            self._error(exc, f"put {key}", PUT_OPERATIONS)
            return
        before = out.own_acked.get(key)
        if before is not None and summary.revision <= before[1]:
            with self._lock:
                self.tally.violation(
                    "duplicated", f"{key}: revision {summary.revision} after {before[1]}"
                )
        out.own_acked[key] = (version, summary.revision)
        out.acks += 1

    def _create(self, out: Outcomes, t: int, key: str) -> None:
        ckpt = _checkpoint(key, [("user", f"{key} by t{t}")], f"{key}-t{t}")
        try:
            summary = self.store.put(ckpt, key=key, create_only=True)
        except ConflictError:
            out.create_refused.add(key)
            with self._lock:
                self.tally.extra["conflicts"] += 1
            return
        except Exception as exc:
            out.create_failed.add(key)
            self._error(exc, f"create {key}", PUT_OPERATIONS)
            return
        out.create_acked[key] = summary.revision
        out.acks += 1

    def _cas(self, out: Outcomes, t: int, seq: int, j: int) -> None:
        key = f"c{j}.{self._cas_generation}"
        message = f"t{t}-s{seq}"
        try:
            record = self.store.get_record(key)
            current = None if record is None else self.store.decode(record)
        except Exception as exc:
            self._error(exc, f"read {key}", READ_OPERATIONS)
            return
        history: list[tuple[str, str]] = []
        if current is not None:
            conversation = current.conversation
            assert conversation is not None
            history = [(m.role, m.content) for m in conversation.history]
        if len(history) >= CAS_LIMIT:
            with self._lock:
                if key == f"c{j}.{self._cas_generation}":
                    self._cas_generation += 1
            return
        revision = record.summary.revision if record is not None else 0
        ckpt = _checkpoint(key, [*history, ("user", message)], f"{key}-r{revision + 1}")
        try:
            summary = self.store.put(
                ckpt,
                key=key,
                if_revision=revision if record is not None else None,
                create_only=record is None,
            )
        except ConflictError:
            out.cas_refused.append((key, message))
            with self._lock:
                self.tally.extra["conflicts"] += 1
            return
        except Exception as exc:
            out.cas_failed.append((key, message))
            self._error(exc, f"cas {key}", PUT_OPERATIONS)
            return
        # a live key moves by exactly one per write; a new key starts at any positive revision
        if summary.revision != revision + 1 if record is not None else summary.revision < 1:
            with self._lock:
                self.tally.violation(
                    "duplicated",
                    f"{key}: a write over revision {revision} acknowledged as {summary.revision}",
                )
        out.cas_acked.append((key, message, summary.revision))
        out.acks += 1

    def _read(self, out: Outcomes, rng: random.Random) -> None:
        try:
            if rng.random() < 0.5 and out.own_acked:
                key = rng.choice(sorted(out.own_acked))
                version = out.own_acked[key][0]
                got = self.store.get(key)
                seen = -1 if got is None else int(got.run_id.rpartition("-v")[2])
                if seen < version and key not in out.own_failed:
                    with self._lock:
                        self.tally.violation(
                            "lost", f"read {key}: version {seen}, {version} was acknowledged"
                        )
            else:
                self.store.list(limit=20)
        except Exception as exc:
            self._error(exc, "read", READ_OPERATIONS)


def _checkpoint(key: str, history: list[tuple[str, str]], run_id: str) -> RunCheckpoint:
    messages = [Message(role, text) for role, text in history]
    return RunCheckpoint.new(key, messages, run_id=run_id, last_completed_iteration=1)


# -- the judgement --------------------------------------------------------------------------


def judge(store: Store, load: Load, tally: Tally) -> None:
    """Everything acknowledged is there, once, intact; the listing agrees with the records."""
    stored: dict[str, Any] = {}

    def read(key: str) -> tuple[Any, list[tuple[str, str]] | None]:
        record = store.get_record(key)
        if record is None:
            return None, None
        stored[key] = record.summary
        try:
            ckpt = store.get(key)
        except CheckpointError as exc:
            tally.violation("torn", f"{key} does not decode: {type(exc).__name__}: {exc}"[:300])
            return record, None
        assert ckpt is not None
        return record, [(m.role, m.content) for m in ckpt.history]

    # own keys: the last acknowledged version, or a later one whose put failed ambiguously
    for out in load.outcomes:
        keys = set(out.own_acked) | set(out.own_failed)
        for key in sorted(keys):
            acked = out.own_acked.get(key)
            failed = out.own_failed.get(key)
            record, history = read(key)
            if record is None:
                if acked is not None:
                    tally.violation("lost", f"{key}: v{acked[0]} acknowledged, key missing")
                continue
            if history is None:
                continue
            version = int(record.summary.run_id.rpartition("-v")[2])
            if history != expected_history(key, version):
                tally.violation("torn", f"{key}: version {version} holds another history")
            low = acked[0] if acked else 1
            high = failed if failed is not None else low
            if version < low:
                tally.violation("lost", f"{key}: holds v{version}, v{low} was acknowledged")
            elif version > high:
                tally.violation("torn", f"{key}: holds v{version}, never written")
            if acked is not None and version == acked[0] and record.summary.revision < acked[1]:
                tally.violation("duplicated", f"{key}: revision went back")

    # create-only keys: at most one winner, and the stored record is the winner's
    winners: dict[str, list[tuple[int, int]]] = defaultdict(list)
    refused: dict[str, set[int]] = defaultdict(set)
    attempted: dict[str, set[int]] = defaultdict(set)
    for t, out in enumerate(load.outcomes):
        for key, revision in out.create_acked.items():
            winners[key].append((t, revision))
        for key in out.create_refused:
            refused[key].add(t)
        for key in out.create_failed | set(out.create_acked) | out.create_refused:
            attempted[key].add(t)
    for key in sorted(attempted):
        record, history = read(key)
        won = winners.get(key, [])
        if len(won) > 1:
            tally.violation("duplicated", f"{key}: create-only acknowledged to threads {won}")
        if record is None:
            if won:
                tally.violation("lost", f"{key}: created by t{won[0][0]}, key missing")
            continue
        if history is None:
            continue
        writer = int(record.summary.run_id.rpartition("-t")[2])
        if won and record.summary.revision != won[0][1]:  # written again after its create
            tally.violation(
                "duplicated",
                f"{key}: a create-only key at revision {record.summary.revision}, "
                f"created at {won[0][1]}",
            )
        if won and writer != won[0][0]:
            tally.violation(
                "lost", f"{key}: holds t{writer}'s create, t{won[0][0]} was acknowledged"
            )
        if writer in refused[key]:
            tally.violation("wrongly_accepted", f"{key}: t{writer}'s create was refused yet stored")
        if history != [("user", f"{key} by t{writer}")]:
            tally.violation("torn", f"{key}: holds another history")

    # compare-and-swap keys: one message per revision, every acknowledged one in its place
    acked_at: dict[str, dict[int, str]] = defaultdict(dict)
    refused_msgs: dict[str, set[str]] = defaultdict(set)
    tried: dict[str, set[str]] = defaultdict(set)
    for out in load.outcomes:
        for key, message, revision in out.cas_acked:
            tried[key].add(message)
            if revision in acked_at[key]:
                tally.violation("duplicated", f"{key}: revision {revision} acknowledged twice")
            acked_at[key][revision] = message
        for key, message in out.cas_refused:
            tried[key].add(message)
            refused_msgs[key].add(message)
        for key, message in out.cas_failed:
            tried[key].add(message)
    for key in sorted(tried):
        record, history = read(key)
        if record is None:
            if acked_at[key]:
                tally.violation("lost", f"{key}: acknowledged writes but the key is missing")
            continue
        if history is None:
            continue
        messages = [text for _, text in history]
        # the key's first revision: where its first message was acknowledged, else what its
        # message count implies (a new key starts at any positive revision, then +1 per write)
        first = next(
            (rev for rev, message in acked_at[key].items() if message == messages[0]),
            record.summary.revision - len(messages) + 1,
        )
        if len(messages) != record.summary.revision - first + 1 or first < 1:
            tally.violation(
                "duplicated",
                f"{key}: {len(messages)} messages at revision {record.summary.revision}, "
                f"the first at {first}",
            )
        counts = Counter(messages)
        for message, count in counts.items():
            if count > 1:
                tally.violation("duplicated", f"{key}: {message} applied {count} times")
            if message not in tried[key]:
                tally.violation("torn", f"{key}: holds {message}, never written")
            if message in refused_msgs[key]:
                tally.violation(
                    "wrongly_accepted", f"{key}: {message} was refused (ConflictError) yet stored"
                )
        for revision, message in acked_at[key].items():
            at = revision - first
            if not 0 <= at < len(messages) or messages[at] != message:
                tally.violation("lost", f"{key}: {message} acknowledged at revision {revision}")

    # the listing from the index agrees with every record read above
    listed = {s.key: s for s in store.iter_summaries(page_size=1000)}
    for key, summary in stored.items():
        entry = listed.pop(key, None)
        if entry is None:
            tally.violation("index", f"{key} is stored but not listed")
        elif (entry.revision, entry.saved_at, entry.run_id) != (
            summary.revision,
            summary.saved_at,
            summary.run_id,
        ):
            tally.violation(
                "index", f"{key} listed as rev {entry.revision}, stored {summary.revision}"
            )
    for key in listed:
        tally.violation("index", f"{key} is listed but was never written")
    tally.extra["keys checked"] += len(stored)


@contextmanager
def quiet_logs() -> Iterator[None]:
    """The pool's reconnect warnings and the proxy's dropped tasks are the faults themselves."""
    loggers = [logging.getLogger(name) for name in ("psycopg", "psycopg.pool", "asyncio")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        gc.collect()  # the stopped proxies' pending tasks die here, quietly
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


# -- the schedule ----------------------------------------------------------------------------


def wait_progress(load: Load, tally: Tally, more: int, what: str, timeout: float = 30.0) -> bool:
    target = load.acks + more
    deadline = time.monotonic() + timeout
    while load.acks < target:
        if time.monotonic() > deadline:
            tally.violation("stalled", f"no progress within {timeout:.0f} s {what}")
            return False
        time.sleep(0.01)
    return True


def episode(name: str, made: Rig, tally: Tally, rng: random.Random, n: int, scale: float) -> str:
    proxy = made.proxy
    budget = BUDGETS[made.backend]
    if name == "latency":
        proxy.latency = 0.03
        time.sleep(2.0 * scale)
        proxy.latency = 0.0
        return "30 ms latency"
    if name == "blackhole":
        proxy.blackhole = True
        time.sleep(max(budget.timeout + 0.5, 2.0 * scale))
        proxy.blackhole = False
        return "blackhole"
    if name == "refuse":
        with proxy.refusing():
            time.sleep(1.0 * scale)
        return "refused"
    if name == "reset":
        for _ in range(5):
            proxy.reset_all()
            time.sleep(0.2 * scale)
        return "reset x5"
    if name == "cut":
        proxy.cut_after = rng.randint(1, 4000)
        proxy.reset_all()
        time.sleep(1.5 * scale)
        cut = proxy.cut_after
        proxy.cut_after = None
        return f"cut after {cut} bytes"
    if name == "outage":
        with proxy.refusing():
            time.sleep(budget.outage)
        return f"refused {budget.outage:.1f} s (budget {budget.policy.deadline:.0f} s)"
    if name == "restart":
        if made.restart is None:
            tally.extra["restarts skipped"] += 1
            return "restart skipped"
        tally.extra["restarts"] += 1
        return made.restart(n)
    raise ValueError(name)


def run_backend(
    backend: str,
    cycles: int,
    workdir: Path,
    s3: Any = None,
    *,
    seed: int | None = None,
    scale: float = 1.0,
    episodes: tuple[str, ...] = EPISODES,
    log: Callable[[str], None] | None = None,
) -> Tally:
    """``cycles`` rounds of the fault ``episodes`` (all by default) under load on ``backend``."""
    tally = Tally(backend)
    rng = random.Random(seed if seed is not None else random.randrange(2**32))
    started = time.monotonic()
    with quiet_logs(), rig(backend, workdir) as made:
        if made.note:
            tally.notes.append(made.note)
        writer = made.open_writer()
        try:
            with Load(writer, tally, rng.randrange(2**32)) as load:
                wait_progress(load, tally, 20, "before the first fault")
                for cycle in range(cycles):
                    for n, name in enumerate(episodes):
                        what = episode(name, made, tally, rng, cycle * len(episodes) + n, scale)
                        tally.trials += 1
                        tally.extra[f"episode {name}"] += 1
                        if log is not None:
                            log(f"{backend} cycle {cycle + 1}: {what}; {load.acks} acks")
                        made.proxy.heal()
                        wait_progress(load, tally, 10, f"after {what}")
            tally.acknowledged = load.acks
        finally:
            writer.close()
        with made.open_direct() as direct:
            judge(direct, load, tally)
    tally.seconds = time.monotonic() - started
    return tally


EXTRAS = (("conflicts", "conflicts ok"), ("restarts", "restarts"))


def _run_cli(
    backend: str, cycles: int, workdir: Path, s3: Any, episodes: str | None = None
) -> Tally:
    chosen = tuple(e.strip() for e in episodes.split(",")) if episodes else EPISODES
    unknown = set(chosen) - set(EPISODES)
    if unknown:
        raise SystemExit(f"unknown episodes {sorted(unknown)}; choose from {', '.join(EPISODES)}")
    return run_backend(
        backend, cycles, workdir, s3, episodes=chosen, log=lambda line: print(line, flush=True)
    )


def main(argv: list[str] | None = None) -> int:
    return main_for(
        "Fault campaign: network faults and server restarts under concurrent load",
        _run_cli,
        size_flag="cycles",
        full=3,
        small=1,
        backends=BACKENDS,
        title="Fault campaign: proxy faults and restarts under load (4 writer threads)",
        trial_word="episodes",
        extras=EXTRAS,
        options=[("episodes", f"comma-separated, from {','.join(EPISODES)} (default: all)")],
        argv=argv,
    )


if __name__ == "__main__":
    sys.exit(main())
