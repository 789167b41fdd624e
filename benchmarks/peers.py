"""The peers, on the same servers, driven through their public APIs.

LangGraph savers (``langgraph-checkpoint-postgres``, ``-sqlite``, ``-plainredis``, ``-s3``): a
checkpoint is ``saver.put(config, checkpoint, metadata, new_versions)`` with the LangChain
messages in ``channel_values["messages"]`` and a new version of that channel, chained to the
previous checkpoint of the thread as a graph does (a graph also calls ``put_writes`` for each
task, which is left out: the peers' figures are a lower bound); get is ``saver.get_tuple``;
listing is ``saver.list(None, limit=100)``.

OpenAI Agents SDK sessions (``SQLiteSession``, ``RedisSession``) are append-only: put is
``add_items`` of the new items (all N into a fresh session for one checkpoint, one per step
when checkpointing after every message), get is ``get_items()``. They offer no listing of
sessions, and keep no run record besides the items.

Peers live only in ``benchmarks/.venv-peers`` (``setup-peers.sh``); a missing one is skipped.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import servers
import workload
from servers import Context
from targets import LIST_LIMIT, Unavailable
from workload import Turn

PEER_DISTRIBUTIONS = {
    "langgraph-postgres": "langgraph-checkpoint-postgres",
    "langgraph-sqlite": "langgraph-checkpoint-sqlite",
    "langgraph-plainredis": "langgraph-checkpoint-plainredis",
    "langgraph-s3": "langgraph-checkpoint-s3",
    "agents-sqlite": "openai-agents",
    "agents-redis": "openai-agents",
}
PEER_BACKENDS = {
    "langgraph-postgres": "postgres",
    "langgraph-sqlite": "sqlite",
    "langgraph-plainredis": "redis",
    "langgraph-s3": "s3",
    "agents-sqlite": "sqlite",
    "agents-redis": "redis",
}
_RUN_TEXT = ("Refund order 41200 and tell me when it lands.",
             "Refunded 129.50 to the original card; it lands in 3-5 days.")  # fmt: skip


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError as exc:
        raise Unavailable(f"{dist} is not installed (run benchmarks/setup-peers.sh)") from exc


def make_peer(name: str, ctx: Context) -> Any:
    """The peer target called ``name``; ``Unavailable`` when it cannot run here."""
    classes: dict[str, Callable[[Context], Any]] = {
        "langgraph-postgres": LangGraphPostgres,
        "langgraph-sqlite": LangGraphSqlite,
        "langgraph-plainredis": LangGraphPlainRedis,
        "langgraph-s3": LangGraphS3,
        "agents-sqlite": AgentsSqlite,
        "agents-redis": AgentsRedis,
    }
    return classes[name](ctx)


# -- LangGraph -----------------------------------------------------------------------------


class _LangGraph:
    family = "peer"
    name = ""
    backend = ""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.version = _version(PEER_DISTRIBUTIONS[self.name])
        try:
            import langchain_core.messages  # noqa: F401
            import langgraph.checkpoint.base  # noqa: F401
        except ImportError as exc:
            raise Unavailable(f"langgraph-checkpoint / langchain-core: {exc}") from exc

    def convert(self, turns: tuple[Turn, ...]) -> list[Any]:
        return workload.langchain(turns)


class _LangGraphInstance:
    """What every LangGraph saver shares: checkpoints chained per thread, as a graph writes."""

    saver: Any

    def __init__(self) -> None:
        self._threads: dict[str, dict[str, Any]] = {}

    def _checkpoint(self, saver: Any, key: str, messages: list[Any], step: int) -> Any:
        from langgraph.checkpoint.base import empty_checkpoint

        thread = self._threads.setdefault(
            key,
            {"config": {"configurable": {"thread_id": key, "checkpoint_ns": ""}}, "version": None},
        )
        version = saver.get_next_version(thread["version"], None)
        thread["version"] = version
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"messages": messages}
        checkpoint["channel_versions"] = {"messages": version}
        checkpoint["versions_seen"] = {"agent": {"messages": version}}
        metadata = {"source": "loop", "step": step, "parents": {}}
        return thread, checkpoint, metadata, {"messages": version}

    def prepare(self, key: str, history: Any, n: int, *, step: bool) -> Any:
        return self._checkpoint(self.saver, key, history[:n], n)

    def put(self, key: str, prepared: Any) -> None:
        thread, checkpoint, metadata, versions = prepared
        thread["config"] = self.saver.put(thread["config"], checkpoint, metadata, versions)

    def get(self, key: str) -> int:
        found = self.saver.get_tuple({"configurable": {"thread_id": key, "checkpoint_ns": ""}})
        assert found is not None, key
        return len(found.checkpoint["channel_values"]["messages"])

    def list_newest(self, limit: int) -> list[str]:
        return [t.config["configurable"]["thread_id"] for t in self.saver.list(None, limit=limit)]

    def _load(self, savers: list[Any], count: int, progress: Callable[[int], None]) -> list[str]:
        """``count`` one-turn threads, written in order (checkpoint ids grow with time) by
        ``len(savers)`` threads, each with its own saver."""
        from langchain_core.messages import AIMessage, HumanMessage

        messages = [HumanMessage(_RUN_TEXT[0], id="m0"), AIMessage(_RUN_TEXT[1], id="m1")]
        step = 2000

        def write(saver: Any, start: int, stop: int, *, spaced: bool = False) -> None:
            for i in range(start, stop):
                if spaced:
                    _next_millisecond()
                key = f"run-{i:07d}"
                thread, checkpoint, metadata, versions = self._checkpoint(saver, key, messages, 1)
                saver.put(thread["config"], checkpoint, metadata, versions)
                self._threads.pop(key, None)

        # in parallel up to the newest LIST_LIMIT, which are then written one by one, in
        # order, so that their checkpoint ids (time-ordered UUIDs) are the newest, in order;
        # each of those in a millisecond of its own (as our store's runs are saved 1 ms apart),
        # for a saver that lists at millisecond precision
        parallel = max(0, count - LIST_LIMIT)
        with ThreadPoolExecutor(len(savers)) as pool:
            for begin in range(0, parallel, step):
                end = min(parallel, begin + step)
                share = -(-(end - begin) // len(savers))
                jobs = [
                    pool.submit(write, saver, begin + j * share, min(end, begin + (j + 1) * share))
                    for j, saver in enumerate(savers)
                ]
                for job in jobs:
                    job.result()
                progress(end)
        write(savers[0], parallel, count, spaced=True)
        progress(count)
        return [f"run-{i:07d}" for i in range(count - 1, count - 1 - LIST_LIMIT, -1)]


def _next_millisecond() -> None:
    """Wait until the wall clock (``time.time_ns``, which LangGraph's ``uuid6`` ids read)
    moves to a millisecond after the one it is in."""
    now = time.time_ns() // 1_000_000
    while time.time_ns() // 1_000_000 == now:
        time.sleep(0.0001)


class LangGraphPostgres(_LangGraph):
    name = "langgraph-postgres"
    backend = "postgres"

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        if reason := servers.pg_check():
            raise Unavailable(reason)
        try:
            from langgraph.checkpoint.postgres import PostgresSaver  # noqa: F401
        except ImportError as exc:
            raise Unavailable(f"langgraph-checkpoint-postgres: {exc}") from exc

    def open(self) -> LangGraphPostgresInstance:
        return LangGraphPostgresInstance(self.ctx)


class LangGraphPostgresInstance(_LangGraphInstance):
    def __init__(self, ctx: Context) -> None:
        super().__init__()
        self.ctx = ctx
        self.schema = servers.pg_schema(ctx.cleanup, "bench_lg_")
        self._conns: list[Any] = []
        self.saver = self._saver()
        self.saver.setup()

    def _saver(self, *, bulk: bool = False) -> Any:
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg.rows import dict_row

        conn = servers.pg_connect(self.schema, prepare_threshold=0, row_factory=dict_row)
        if bulk:  # a bulk loader waits for no WAL flush at commit
            conn.execute("SET synchronous_commit = off")
        self._conns.append(conn)
        return PostgresSaver(conn)

    def stored_bytes(self) -> int | None:
        return servers.pg_schema_bytes(self.schema)

    def load_runs(self, count: int, progress: Callable[[int], None]) -> list[str]:
        # one saver serialises its puts (a lock): four savers, four connections, in parallel
        return self._load([self._saver(bulk=True) for _ in range(4)], count, progress)

    def close(self) -> None:
        for conn in self._conns:
            conn.close()
        self._conns.clear()
        with servers.pg_connect() as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')


class LangGraphSqlite(_LangGraph):
    name = "langgraph-sqlite"
    backend = "sqlite"

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        try:
            from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: F401
        except ImportError as exc:
            raise Unavailable(f"langgraph-checkpoint-sqlite: {exc}") from exc

    def open(self) -> LangGraphSqliteInstance:
        return LangGraphSqliteInstance(self.ctx)


class LangGraphSqliteInstance(_LangGraphInstance):
    def __init__(self, ctx: Context) -> None:
        from langgraph.checkpoint.sqlite import SqliteSaver

        super().__init__()
        self.folder = servers.temp_dir(ctx.cleanup, "lg-sqlite")
        self.path = self.folder / "checkpoints.sqlite"
        self.conn = sqlite3.connect(self.path, check_same_thread=False)
        self.saver = SqliteSaver(self.conn)
        self.saver.setup()

    def stored_bytes(self) -> int | None:
        return servers.folder_bytes(self.folder)

    def load_runs(self, count: int, progress: Callable[[int], None]) -> list[str]:
        # the bulk load skips fsync; listing runs with the saver's own settings
        before = self.conn.execute("PRAGMA synchronous").fetchone()[0]
        self.conn.execute("PRAGMA synchronous=OFF")
        try:
            return self._load([self.saver], count, progress)
        finally:
            self.conn.execute(f"PRAGMA synchronous={int(before)}")

    def close(self) -> None:
        self.conn.close()
        _rmtree(self.folder)


class LangGraphPlainRedis(_LangGraph):
    name = "langgraph-plainredis"
    backend = "redis"

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        if reason := servers.redis_check():
            raise Unavailable(reason)
        try:
            from langgraph_checkpoint_plainredis import RedisSaver  # noqa: F401
        except ImportError as exc:
            raise Unavailable(f"langgraph-checkpoint-plainredis: {exc}") from exc

    def open(self) -> LangGraphPlainRedisInstance:
        return LangGraphPlainRedisInstance(self.ctx)


class LangGraphPlainRedisInstance(_LangGraphInstance):
    def __init__(self, ctx: Context) -> None:
        from langgraph_checkpoint_plainredis import RedisSaver

        super().__init__()
        self.prefix = servers.unique("bench-lg-")
        self.redis = servers.redis_client()
        self.saver = RedisSaver(self.redis, prefix=self.prefix)
        self._pattern = servers.redis_glob_escape(self.prefix) + ":*"
        ctx.cleanup.add(f"delete {self.prefix}:*", self.close)
        self._closed = False

    def stored_bytes(self) -> int | None:
        return servers.redis_bytes(self.redis, self._pattern)

    def load_runs(self, count: int, progress: Callable[[int], None]) -> list[str]:
        return self._load([self.saver] * 4, count, progress)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            servers.redis_delete(self.redis, self._pattern)
            self.redis.close()


class LangGraphS3(_LangGraph):
    name = "langgraph-s3"
    backend = "s3"

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        try:
            from langgraph_checkpoint_s3 import S3CheckpointSaver  # noqa: F401
        except ImportError as exc:
            raise Unavailable(f"langgraph-checkpoint-s3: {exc}") from exc
        try:
            ctx.s3()
        except RuntimeError as exc:
            raise Unavailable(str(exc)) from exc

    def open(self) -> LangGraphS3Instance:
        return LangGraphS3Instance(self.ctx)


class LangGraphS3Instance(_LangGraphInstance):
    def __init__(self, ctx: Context) -> None:
        from langgraph_checkpoint_s3 import S3CheckpointSaver

        super().__init__()
        server, self.bucket, self._drop = ctx.bucket("langgraph")
        self.s3 = server.client()
        self.prefix = "checkpoints/"
        self.saver = S3CheckpointSaver(
            self.bucket, prefix=self.prefix, s3_client=self.s3, serde=_serde_with_dumps()
        )

    def stored_bytes(self) -> int | None:
        return servers.s3_bytes(self.s3, self.bucket, self.prefix)

    def load_runs(self, count: int, progress: Callable[[int], None]) -> list[str]:
        return self._load([self.saver] * 16, count, progress)

    def close(self) -> None:
        self._drop()


def _serde_with_dumps() -> Any:
    """langgraph-checkpoint-s3 0.1.3 calls ``serde.dumps``/``serde.loads`` for metadata, which
    langgraph-checkpoint 4 removed from ``JsonPlusSerializer``; this puts them back as the 2.x
    serializer had them (JSON). Checkpoints still go through ``dumps_typed``, unchanged."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    class Serializer(JsonPlusSerializer):
        def dumps(self, obj: Any) -> bytes:
            return json.dumps(obj, default=str).encode()

        def loads(self, data: bytes) -> Any:
            return json.loads(data)

    return Serializer()


# -- OpenAI Agents SDK sessions ------------------------------------------------------------


class _Agents:
    family = "peer"
    name = ""
    backend = ""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.version = _version("openai-agents")

    def convert(self, turns: tuple[Turn, ...]) -> list[dict[str, Any]]:
        return workload.agents_items(turns)


class _AgentsInstance:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.sessions: dict[str, Any] = {}

    def _session(self, key: str) -> Any:
        raise NotImplementedError

    def prepare(self, key: str, history: Any, n: int, *, step: bool) -> Any:
        session = self.sessions.get(key) or self._session(key)
        self.sessions[key] = session
        return session, (history[n - 1 : n] if step else history[:n])

    def put(self, key: str, prepared: Any) -> None:
        session, items = prepared
        self.loop.run_until_complete(session.add_items(items))

    def get(self, key: str) -> int:
        return len(self.loop.run_until_complete(self.sessions[key].get_items()))

    def load_runs(self, count: int, progress: Callable[[int], None]) -> list[str]:
        raise Unavailable("Agents SDK sessions offer no API that lists sessions")

    def list_newest(self, limit: int) -> list[str]:
        raise Unavailable("Agents SDK sessions offer no API that lists sessions")


class AgentsSqlite(_Agents):
    name = "agents-sqlite"
    backend = "sqlite"

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        try:
            from agents import SQLiteSession  # noqa: F401
        except ImportError as exc:
            raise Unavailable(f"openai-agents SQLiteSession: {exc}") from exc

    def open(self) -> AgentsSqliteInstance:
        return AgentsSqliteInstance(self.ctx)


class AgentsSqliteInstance(_AgentsInstance):
    def __init__(self, ctx: Context) -> None:
        super().__init__()
        self.folder = servers.temp_dir(ctx.cleanup, "agents-sqlite")
        self.path = self.folder / "sessions.sqlite"

    def _session(self, key: str) -> Any:
        from agents import SQLiteSession

        return SQLiteSession(key, db_path=self.path)

    def stored_bytes(self) -> int | None:
        return servers.folder_bytes(self.folder)

    def close(self) -> None:
        for session in self.sessions.values():
            session.close()
        self.sessions.clear()
        self.loop.close()
        _rmtree(self.folder)


class AgentsRedis(_Agents):
    name = "agents-redis"
    backend = "redis"

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        if reason := servers.redis_check():
            raise Unavailable(reason)
        try:
            from agents.extensions.memory.redis_session import RedisSession  # noqa: F401
        except ImportError as exc:
            raise Unavailable(f"openai-agents RedisSession: {exc}") from exc

    def open(self) -> AgentsRedisInstance:
        return AgentsRedisInstance(self.ctx)


class AgentsRedisInstance(_AgentsInstance):
    def __init__(self, ctx: Context) -> None:
        import redis.asyncio

        super().__init__()
        self.prefix = servers.unique("bench-agents-")
        self.client = redis.asyncio.Redis.from_url(servers.REDIS_URL)
        self.sync = servers.redis_client()
        self._pattern = servers.redis_glob_escape(self.prefix) + ":*"
        self._closed = False
        ctx.cleanup.add(f"delete {self.prefix}:*", self.close)

    def _session(self, key: str) -> Any:
        from agents.extensions.memory.redis_session import RedisSession

        return RedisSession(key, redis_client=self.client, key_prefix=self.prefix)

    def stored_bytes(self) -> int | None:
        return servers.redis_bytes(self.sync, self._pattern)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        servers.redis_delete(self.sync, self._pattern)
        self.sync.close()
        self.loop.run_until_complete(self.client.aclose())
        self.loop.close()


def _rmtree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)
