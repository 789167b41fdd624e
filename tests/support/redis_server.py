"""A throwaway ``redis-server`` for restart tests: its own port and folder, stopped by PID.

Started with AOF (``appendfsync always``) by default, so an acknowledged write is on disk
before its reply and survives a kill; ``restart()`` keeps the port and the folder.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
REDIS_CLI = shutil.which("redis-cli") or "/usr/bin/redis-cli"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _PortTaken(RuntimeError):
    """redis-server could not bind a port: another process took it after ``free_port``."""


class RedisServer:
    def __init__(
        self, *, appendonly: bool = True, port: int | None = None, cluster: bool = False
    ) -> None:
        self.port = port or free_port()
        self._fixed_port = port is not None
        self.dir = Path(tempfile.mkdtemp(prefix="ac-redis-"))
        self.appendonly = appendonly
        self.cluster = cluster
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @staticmethod
    def available() -> bool:
        return os.path.exists(REDIS_SERVER)

    def start(self, timeout: float = 10.0) -> None:
        """Start the server; a port another process took between ``free_port`` and the
        server's bind (its own, unless the caller fixed it, or the cluster bus port) is
        picked again, twice at most."""
        for attempt in range(3):
            try:
                return self._start(timeout)
            except _PortTaken:
                if attempt == 2:
                    raise
                if not self._fixed_port:
                    self.port = free_port()

    def _start(self, timeout: float) -> None:
        args = [
            REDIS_SERVER,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.dir),
            "--save", "",
            "--daemonize", "no",
            "--protected-mode", "yes",
            "--logfile", str(self.dir / "redis.log"),
        ]  # fmt: skip
        if self.cluster:
            # the bus port defaults to port + 10000, past 65535 for many free ports: pick one
            args += ["--cluster-enabled", "yes", "--cluster-port", str(free_port())]
            args += ["--cluster-node-timeout", "1000"]  # a dead node is marked failed in ~1 s
            args += ["--cluster-config-file", str(self.dir / "nodes.conf")]
        if self.appendonly:
            args += ["--appendonly", "yes", "--appendfsync", "always"]
        else:
            args += ["--appendonly", "no"]
        self._proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                log = self.dir / "redis.log"
                said = log.read_text(errors="replace")[-600:] if log.exists() else ""
                if "Address already in use" in said:
                    raise _PortTaken(said)
                raise RuntimeError(f"redis-server exited with {self._proc.returncode}: {said}")
            if _answers_ping(self.port):
                return
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"redis-server on port {self.port} did not answer within {timeout}s")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop this server by its PID (``SIGKILL`` for a crash) and wait for it to exit."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, sig)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)

    def restart(self, *, down_for: float = 0.0, sig: int = signal.SIGKILL) -> None:
        self.stop(sig)
        time.sleep(down_for)
        self.start()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def need_redis_server() -> None:
    """Tests that start servers of their own need the binaries: locally a skip, in CI a failure."""
    from support.services import service_missing

    if not (RedisServer.available() and os.path.exists(REDIS_CLI)):
        service_missing("redis-server", "the redis-server and redis-cli binaries are not installed")


class RedisClusterServers:
    """``count`` cluster-mode ``redis-server`` primaries on free ports (each with ``replicas``
    replicas), their slots assigned by ``redis-cli --cluster create``; ``url`` names the first
    (a cluster client finds the others from it)."""

    def __init__(self, count: int = 3, *, replicas: int = 0) -> None:
        self.replicas = replicas
        self.servers = [RedisServer(cluster=True) for _ in range(count * (1 + replicas))]

    @property
    def url(self) -> str:
        return self.servers[0].url

    def start(self, timeout: float = 30.0) -> None:
        try:
            for server in self.servers:
                server.start()
            nodes = [f"127.0.0.1:{server.port}" for server in self.servers]
            create = [REDIS_CLI, "--cluster", "create", *nodes]
            create += ["--cluster-replicas", str(self.replicas)]
            subprocess.run(
                [*create, "--cluster-yes"], check=True, capture_output=True, timeout=timeout
            )
            deadline = time.monotonic() + timeout
            while not all(_cluster_ok(server.port) for server in self.servers):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the Redis cluster on {nodes} did not become ready")
                time.sleep(0.05)
        except BaseException:
            self.cleanup()
            raise

    def replicated(self, client: Any, node: Any, timeout: float = 30.0) -> None:
        """Wait until ``node``'s writes so far, by any client, reached its replicas: each
        replica's acknowledged offset is at the primary's. (``WAIT`` would count only the
        writes of the connection that sends it, not those of the store under test.)"""
        deadline = time.monotonic() + timeout
        while True:
            info = client.info("replication", target_nodes=node)
            target = int(info["master_repl_offset"])
            offsets = [
                int(value["offset"])
                for name, value in info.items()
                if name.startswith("slave") and isinstance(value, dict)
            ]
            if len(offsets) >= self.replicas and min(offsets) >= target:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the replicas of {node.name} did not catch up")
            time.sleep(0.05)

    def kill(self, node: Any) -> None:
        """SIGKILL the server behind a cluster client's ``node``."""
        next(s for s in self.servers if s.port == node.port).stop(signal.SIGKILL)

    def cleanup(self) -> None:
        for server in self.servers:
            server.cleanup()


@contextmanager
def cluster_with_replicas(stem: str) -> Iterator[tuple[RedisClusterServers, Any, str, Any]]:
    """Three primaries with a replica each, a cluster client on them, a fresh store prefix and
    the node holding it, its replica done with its first sync; all removed afterwards."""
    from redis.cluster import RedisCluster

    need_redis_server()
    servers = RedisClusterServers(3, replicas=1)
    servers.start()
    try:
        admin = RedisCluster.from_url(servers.url)
        try:
            prefix = f"{stem}-{uuid.uuid4().hex[:6]}"
            primary = admin.get_node_from_key("{" + prefix + "}")
            servers.replicated(admin, primary)
            yield servers, admin, prefix, primary
        finally:
            admin.close()
    finally:
        servers.cleanup()


def _cluster_ok(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
        sock.sendall(b"CLUSTER INFO\r\n")
        return b"cluster_state:ok" in sock.recv(4096)


def _answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False
