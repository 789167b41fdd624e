"""Our store on each backend, through its public API (``open_store``, ``put``, ``get``, ``list``,
``put_record`` for bulk loads), plus the floor of the index read each backend lists from.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import servers
import workload
from servers import Context
from targets import LIST_LIMIT, Unavailable
from workload import Turn

BACKENDS = ("memory", "disk", "redis", "postgres", "s3", "fsspec")
_SCHEMES = {"memory": "memory", "disk": "file", "redis": "redis", "postgres": "postgresql",
            "s3": "s3", "fsspec": "fsspec+memory"}  # fmt: skip
FIRST = "Reconcile the refunds of last quarter and report the totals."
# memory and fsspec load on one thread: both stay in this process, and the fsspec backend
# holds its writes under one lock per root, so more threads would only contend for it
_LOAD_THREADS = {"disk": 4, "redis": 8, "postgres": 8, "s3": 16}


def _version() -> str:
    import agent_checkpoint

    return str(agent_checkpoint.__version__)


class Ours:
    family = "ours"
    name = "ours"

    def __init__(self, backend: str, ctx: Context) -> None:
        self.backend = backend
        self.ctx = ctx
        self.version = _version()
        from agent_checkpoint.backends import backend_class

        try:
            backend_class(_SCHEMES[backend])
        except Exception as exc:  # an unfinished backend module, or a missing driver
            raise Unavailable(f"agent_checkpoint {backend} backend: {exc}") from exc
        problem = {"redis": servers.redis_check, "postgres": servers.pg_check}.get(backend)
        if problem is not None and (reason := problem()):
            raise Unavailable(reason)
        if backend == "s3":
            try:
                ctx.s3()
            except RuntimeError as exc:
                raise Unavailable(str(exc)) from exc
        if backend == "fsspec":
            # the backend module imports fsspec only when a store opens: check it here
            try:
                servers.memory_fs()
            except RuntimeError as exc:
                raise Unavailable(str(exc)) from exc

    def convert(self, turns: tuple[Turn, ...]) -> list[Any]:
        return workload.ours(turns)

    def open(self) -> OursInstance:
        return OursInstance(self.backend, self.ctx)


class OursInstance:
    def __init__(self, backend: str, ctx: Context) -> None:
        from agent_checkpoint import open_store

        self.backend = backend
        self.ctx = ctx
        self._closed = False
        self._drop: Callable[[], None] = lambda: None
        options: dict[str, Any] = {}
        if backend == "memory":
            url = "memory://"
        elif backend == "disk":
            self.root: Path = servers.temp_dir(ctx.cleanup, "disk")
            url = str(self.root)
            root = self.root
            self._drop = lambda: shutil.rmtree(root, ignore_errors=True)
        elif backend == "redis":
            self.prefix = servers.unique("bench-")
            url = f"{servers.REDIS_URL}?prefix={self.prefix}"
            self.redis = servers.redis_client()
            pattern = "{" + servers.redis_glob_escape(self.prefix) + "*"
            self._pattern = pattern
            client = self.redis

            def drop_keys() -> None:
                servers.redis_delete(client, pattern)

            self._drop = drop_keys
        elif backend == "postgres":
            self.schema = servers.unique("bench_")
            url = f"{servers.PG_URL}?schema={self.schema}"
            schema = self.schema

            def drop() -> None:
                with servers.pg_connect() as conn:
                    conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

            self._drop = drop
        elif backend == "s3":
            server, self.bucket, self._drop = ctx.bucket("ours")
            os.environ["AWS_ACCESS_KEY_ID"] = servers.S3_ACCESS_KEY
            os.environ["AWS_SECRET_ACCESS_KEY"] = servers.S3_SECRET_KEY
            self.s3 = server.client()
            self.prefix = "checkpoints"
            url = (
                f"s3://{self.bucket}/{self.prefix}?endpoint_url={server.endpoint_url}"
                f"&region={servers.S3_REGION}"
            )
        elif backend == "fsspec":
            # fsspec's memory filesystem, one store per process: a folder of our own in it
            name = servers.unique("bench-")
            self.fs = servers.memory_fs()
            self.fs_root = f"/{name}"  # where fsspec puts memory://<name>
            url = f"fsspec+memory://{name}"
            fs, fs_root = self.fs, self.fs_root
            self._drop = lambda: servers.fsspec_drop(fs, fs_root)
        else:
            raise ValueError(backend)
        self.url = url
        self.store = open_store(url, **options)
        ctx.cleanup.add(f"ours/{backend}: close and drop", self.close)
        if backend == "postgres":
            self.store.setup()
        # Gets go through a store of their own, as a resume in another process would: the
        # writing store's S3 backend still holds the segments it wrote and would read back
        # only the record (memory:// is one store per open_store, so it reads its own).
        self.reader = self.store if backend == "memory" else open_store(url, **options)

    # -- (a) and (b) -------------------------------------------------------------------------

    def prepare(self, key: str, history: Any, n: int, *, step: bool) -> Any:
        from agent_checkpoint import RunCheckpoint

        return RunCheckpoint.new(
            FIRST, history[:n], run_id=f"run-{key}", last_completed_iteration=n // 4
        )

    def put(self, key: str, prepared: Any) -> None:
        self.store.put(prepared, key=key)

    def get(self, key: str) -> int:
        checkpoint = self.reader.get(key)
        assert checkpoint is not None, key
        return len(checkpoint.history)

    def stored_bytes(self) -> int | None:
        if self.backend == "memory":
            return _deep_bytes(self.store.backend)
        if self.backend == "disk":
            return servers.folder_bytes(self.root)
        if self.backend == "redis":
            return servers.redis_bytes(self.redis, self._pattern)
        if self.backend == "postgres":
            return servers.pg_schema_bytes(self.schema)
        if self.backend == "fsspec":
            return servers.fsspec_bytes(self.fs, self.fs_root)
        return servers.s3_bytes(self.s3, self.bucket, self.prefix + "/")

    # -- (c) ---------------------------------------------------------------------------------

    def bulk_store(self) -> Any:
        """The store a bulk load writes through: this one, or on disk and PostgreSQL a second
        store on the same namespace that skips fsync (disk) or waits for no WAL flush at
        commit (PostgreSQL). Listing always runs on ``self.store``, with normal settings; the
        caller closes a store that is not ``self.store``."""
        from agent_checkpoint import open_store

        if self.backend == "disk":
            return open_store(str(self.root), fsync=False)
        if self.backend == "postgres":
            return open_store(f"{self.url}&options=-c%20synchronous_commit%3Doff")
        return self.store

    def load_threads(self) -> int:
        """Writer threads for a bulk load on this backend."""
        return _LOAD_THREADS.get(self.backend, 1)

    def load_runs(self, count: int, progress: Callable[[int], None]) -> list[str]:
        store = self.bulk_store()
        create_only = self.backend == "s3"  # fresh keys: no read before the conditional PUT
        threads = self.load_threads()
        done = 0
        batch: list[Any] = []

        def flush() -> None:
            nonlocal done
            if threads == 1:
                for record in batch:
                    store.put_record(record, create_only=create_only)
            else:
                with ThreadPoolExecutor(threads) as pool:
                    list(pool.map(lambda r: store.put_record(r, create_only=create_only), batch))
            done += len(batch)
            batch.clear()
            progress(done)

        try:
            for record in _run_records(count):
                batch.append(record)
                if len(batch) >= 2000:
                    flush()
            flush()
        finally:
            if store is not self.store:
                store.close()
        return [_run_key(i) for i in range(count - 1, count - 1 - LIST_LIMIT, -1)]

    def list_newest(self, limit: int) -> list[str]:
        return [summary.key for summary in self.store.list(limit=limit)]

    def floor_list(self, limit: int) -> Callable[[], Any] | None:
        """The bare driver's read of this backend's newest-first index, with no library in
        between, as a callable to time; ``None`` where there is none. PostgreSQL and disk read
        the same summary columns; Redis and S3 read only the index page (keys and positions);
        fsspec lists the whole index folder (names only), as it has no page to ask for."""
        if self.backend == "redis":
            # one round trip for the index page; the summaries would take one more
            new = "{" + self.prefix + "}:new"
            return lambda: self.redis.zrange(new, "-", "+", bylex=True, offset=0, num=limit)
        if self.backend == "postgres":
            conn = servers.pg_connect()
            self.ctx.cleanup.add("close floor connection", conn.close)
            query = (
                f"SELECT key, run_id, saved_at, owner, agent_id, failure_phase, failure_iteration, "
                f'message_count, size, revision FROM "{self.schema}".agent_checkpoints '
                f"ORDER BY saved_at DESC, key LIMIT {int(limit)}"
            )
            return lambda: conn.execute(query).fetchall()
        if self.backend == "disk":
            db = sqlite3.connect(self.root / "index.sqlite3", check_same_thread=False)
            self.ctx.cleanup.add("close floor sqlite", db.close)
            query = (
                "SELECT key, run_id, saved_at, owner, agent_id, failure_phase, failure_iteration,"
                " message_count, size, revision FROM summaries ORDER BY saved_at DESC, key "
                f"LIMIT {int(limit)}"
            )
            return lambda: db.execute(query).fetchall()
        if self.backend == "s3":
            index = self.prefix + "/index/"
            return lambda: self.s3.list_objects_v2(Bucket=self.bucket, Prefix=index, MaxKeys=limit)
        if self.backend == "fsspec":
            folder = f"{self.fs_root}/index"
            return lambda: self.fs.ls(folder, detail=False)
        return None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.reader.close()
        self.store.close()
        self._drop()
        if self.backend == "redis":
            self.redis.close()


def _run_key(i: int) -> str:
    return f"run-{i:07d}"


_RECORDS: dict[int, list[Any]] = {}


def _run_records(count: int) -> list[Any]:
    """``count`` small, valid records (a user request and the answer), saved 1 ms apart,
    encoded by the default codec as ``put`` would; built once per count for every backend."""
    if count in _RECORDS:
        return _RECORDS[count]
    _RECORDS.clear()
    from agent_checkpoint import Codec, Message, RunCheckpoint
    from agent_checkpoint._store import summary_for
    from agent_checkpoint.backends import Record
    from agent_checkpoint.envelope import to_envelope

    codec = Codec()
    base = 1_790_000_000_000
    template = RunCheckpoint.new(
        "Refund order 41200 and tell me when it lands.",
        [
            Message("user", "Refund order 41200 and tell me when it lands."),
            Message("assistant", "Refunded 129.50 to the original card; it lands in 3-5 days."),
        ],
        run_id="run-template",
        last_completed_iteration=1,
    )
    doc = to_envelope(template, saved_at=base).to_json()
    data = doc["data"]
    assert isinstance(data, dict)
    records = []
    for i in range(count):
        key = _run_key(i)
        data["runId"] = key
        doc["savedAt"] = base + i
        body, digest = codec.encode(doc, key)
        records.append(Record(summary_for(key, digest, len(body)), body))
    _RECORDS[count] = records
    return records


def _deep_bytes(obj: Any, seen: set[int] | None = None) -> int:
    """Lengths of every ``bytes`` reachable from ``obj`` (an in-process store's payload)."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return len(obj)
    if isinstance(obj, (str, int, float, bool, type(None))):
        return 0
    if isinstance(obj, dict):
        return sum(_deep_bytes(k, seen) + _deep_bytes(v, seen) for k, v in obj.items())
    if isinstance(obj, (list, tuple, set, frozenset)):
        return sum(_deep_bytes(v, seen) for v in obj)
    if dataclasses.is_dataclass(obj):
        return sum(_deep_bytes(getattr(obj, f.name), seen) for f in dataclasses.fields(obj))
    attrs = getattr(obj, "__dict__", None)
    return _deep_bytes(attrs, seen) if isinstance(attrs, dict) else 0
