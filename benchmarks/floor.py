"""The floor: the same bytes through orjson and the bare driver, with nothing in between.

- one checkpoint: ``orjson.dumps`` of the very envelope our store writes, then one write
  (memory: a dict slot; disk: temp file, fsync, rename, folder fsync; Redis: one SET;
  PostgreSQL: one ``INSERT ... ON CONFLICT DO UPDATE`` in autocommit; S3: one PUT; fsspec: one
  ``pipe_file`` on its memory filesystem), and back: one read (fsspec: ``cat_file``) and
  ``orjson.loads``.
- checkpointing after every message: the append-only limit, each step writes only the new
  message (memory: list append; disk: append + fsync; Redis: RPUSH; PostgreSQL: one INSERT of a
  row; S3: one PUT of an object per message; fsspec: one ``pipe_file`` of a file per message).

The floor of listing is the bare read of our own index on each backend (``ours.floor_list``).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import orjson
import servers
import workload
from ours import FIRST, Ours
from servers import Context
from targets import Unavailable
from workload import Turn


class Floor:
    family = "floor"
    name = "floor"
    version = f"orjson {orjson.__version__}"

    def __init__(self, backend: str, ctx: Context) -> None:
        Ours(backend, ctx)  # the same availability rules (server reachable, driver present)
        self.backend = backend
        self.ctx = ctx

    def convert(self, turns: tuple[Turn, ...]) -> list[dict[str, Any]]:
        return [workload.message_json(t) for t in turns]

    def open(self) -> FloorInstance:
        return FloorInstance(self.backend, self.ctx)


class FloorInstance:
    def __init__(self, backend: str, ctx: Context) -> None:
        self.backend = backend
        self.ctx = ctx
        self._closed = False
        self._seq: dict[str, int] = {}
        if backend == "memory":
            self.mem: dict[str, Any] = {}
        elif backend == "disk":
            self.root: Path = servers.temp_dir(ctx.cleanup, "floor")
            self._dir_fd = os.open(self.root, os.O_RDONLY)
        elif backend == "redis":
            self.prefix = servers.unique("bench-floor-") + ":"
            self.redis = servers.redis_client()
        elif backend == "postgres":
            self.schema = servers.unique("bench_floor_")
            self.conn = servers.pg_connect()
            self.conn.execute(f'CREATE SCHEMA "{self.schema}"')
            self.conn.execute(
                f'CREATE TABLE "{self.schema}".records (key text PRIMARY KEY, body bytea NOT NULL)'
            )
            self.conn.execute(
                f'CREATE TABLE "{self.schema}".messages (key text, seq integer, '
                "body bytea NOT NULL, PRIMARY KEY (key, seq))"
            )
            self._upsert = (
                f'INSERT INTO "{self.schema}".records (key, body) VALUES (%s, %s) '
                "ON CONFLICT (key) DO UPDATE SET body = excluded.body"
            )
            self._append = (
                f'INSERT INTO "{self.schema}".messages (key, seq, body) VALUES (%s, %s, %s)'
            )
            self._select = f'SELECT body FROM "{self.schema}".records WHERE key = %s'
        elif backend == "s3":
            server, self.bucket, self._drop_bucket = ctx.bucket("floor")
            self.s3 = server.client()
            self.prefix = "floor/"
        elif backend == "fsspec":
            self.fs = servers.memory_fs()
            self.fs_root = "/" + servers.unique("bench-floor-")
        else:
            raise ValueError(backend)
        ctx.cleanup.add(f"floor/{backend}: drop", self.close)

    def prepare(self, key: str, history: Any, n: int, *, step: bool) -> Any:
        if step:
            return ("append", history[n - 1])
        doc = {
            "format": "conversation-v1",
            "data": {
                "version": 1,
                "runId": f"run-{key}",
                "history": history[:n],
                "lastCompletedIteration": n // 4,
                "originalInput": {"message": FIRST},
                "checkpointedAt": 1_796_000_000_000,
            },
            "savedAt": 1_796_000_000_000,
        }
        return ("full", doc)

    def put(self, key: str, prepared: Any) -> None:
        mode, doc = prepared
        body = orjson.dumps(doc)
        if mode == "append":
            seq = self._seq[key] = self._seq.get(key, 0) + 1
            self._append_one(key, seq, body)
        else:
            self._write(key, body)

    def _write(self, key: str, body: bytes) -> None:
        if self.backend == "memory":
            self.mem[key] = body
        elif self.backend == "disk":
            path = self.root / key
            tmp = self.root / f".{key}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, body)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(tmp, path)
            os.fsync(self._dir_fd)
        elif self.backend == "redis":
            self.redis.set(self.prefix + key, body)
        elif self.backend == "postgres":
            self.conn.execute(self._upsert, (key, body))
        elif self.backend == "fsspec":
            self.fs.pipe_file(f"{self.fs_root}/{key}", body)
        else:
            self.s3.put_object(Bucket=self.bucket, Key=self.prefix + key, Body=body)

    def _append_one(self, key: str, seq: int, body: bytes) -> None:
        if self.backend == "memory":
            self.mem.setdefault(key, []).append(body)
        elif self.backend == "disk":
            fd = os.open(self.root / f"{key}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd, body + b"\n")
                os.fsync(fd)
            finally:
                os.close(fd)
        elif self.backend == "redis":
            self.redis.rpush(self.prefix + key, body)
        elif self.backend == "postgres":
            self.conn.execute(self._append, (key, seq, body))
        elif self.backend == "fsspec":
            self.fs.pipe_file(f"{self.fs_root}/{key}/{seq:08d}", body)
        else:
            self.s3.put_object(Bucket=self.bucket, Key=f"{self.prefix}{key}/{seq:08d}", Body=body)

    def get(self, key: str) -> int:
        if key in self._seq:
            return self._appended(key)
        if self.backend == "memory":
            body = self.mem[key]
        elif self.backend == "disk":
            body = (self.root / key).read_bytes()
        elif self.backend == "redis":
            body = self.redis.get(self.prefix + key)
        elif self.backend == "postgres":
            row = self.conn.execute(self._select, (key,)).fetchone()
            body = row[0]
        elif self.backend == "fsspec":
            body = self.fs.cat_file(f"{self.fs_root}/{key}")
        else:
            body = self.s3.get_object(Bucket=self.bucket, Key=self.prefix + key)["Body"].read()
        return len(orjson.loads(body)["data"]["history"])

    def _appended(self, key: str) -> int:
        """How many messages the append-only log of ``key`` holds (a check, untimed)."""
        if self.backend == "memory":
            return len(self.mem[key])
        if self.backend == "disk":
            return (self.root / f"{key}.log").read_bytes().count(b"\n")
        if self.backend == "redis":
            return int(self.redis.llen(self.prefix + key))
        if self.backend == "postgres":
            query = f'SELECT count(*) FROM "{self.schema}".messages WHERE key = %s'
            row = self.conn.execute(query, (key,)).fetchone()
            return int(row[0]) if row else 0
        if self.backend == "fsspec":
            return len(self.fs.ls(f"{self.fs_root}/{key}", detail=False))
        return len(servers.s3_objects(self.s3, self.bucket, f"{self.prefix}{key}/"))

    def stored_bytes(self) -> int | None:
        if self.backend == "memory":
            return sum(
                sum(map(len, v)) if isinstance(v, list) else len(v) for v in self.mem.values()
            )
        if self.backend == "disk":
            return servers.folder_bytes(self.root)
        if self.backend == "redis":
            return servers.redis_bytes(self.redis, servers.redis_glob_escape(self.prefix) + "*")
        if self.backend == "postgres":
            return servers.pg_schema_bytes(self.schema)
        if self.backend == "fsspec":
            return servers.fsspec_bytes(self.fs, self.fs_root)
        return servers.s3_bytes(self.s3, self.bucket, self.prefix)

    def load_runs(self, count: int, progress: Any) -> list[str]:
        raise Unavailable("the floor of listing is the bare read of our own index")

    def list_newest(self, limit: int) -> list[str]:
        raise Unavailable("the floor of listing is the bare read of our own index")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.backend == "memory":
            self.mem.clear()
        elif self.backend == "disk":
            os.close(self._dir_fd)
            shutil.rmtree(self.root, ignore_errors=True)
        elif self.backend == "redis":
            servers.redis_delete(self.redis, servers.redis_glob_escape(self.prefix) + "*")
            self.redis.close()
        elif self.backend == "postgres":
            self.conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')
            self.conn.close()
        elif self.backend == "fsspec":
            servers.fsspec_drop(self.fs, self.fs_root)
        else:
            self._drop_bucket()
