"""A throwaway PostgreSQL cluster on a free port, for tests that restart or stop the server.

``initdb`` refuses to run as root, so as root the cluster is created and run as the ``postgres``
user (``runuser``) in a folder under /tmp that user owns. ``fsync=off`` is fine: a clean
``pg_ctl restart -m fast`` still writes every committed transaction before stopping.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit


def postgres_bin_dir() -> Path | None:
    """The newest installed server's bin folder (Debian keeps them in /usr/lib/postgresql/N)."""
    root = Path("/usr/lib/postgresql")
    if root.is_dir():
        versions = sorted(
            (p for p in root.iterdir() if (p / "bin" / "initdb").exists()),
            key=lambda p: [int(x) for x in p.name.split(".") if x.isdigit()],
        )
        if versions:
            return versions[-1] / "bin"
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class PostgresServer:
    """``start()`` creates and starts the cluster; ``restart()``, ``stop()``; ``close()`` removes it."""

    def __init__(self) -> None:
        bin_dir = postgres_bin_dir()
        if bin_dir is None:
            raise FileNotFoundError("no PostgreSQL server binaries (initdb, pg_ctl) found")
        self.bin = bin_dir
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="agent-ckpt-pg-", dir="/tmp"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self._as: list[str] = []
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
        self._initialised = False
        self._started_once = False

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str, timeout: float = 60) -> None:
        subprocess.run(
            [*self._as, *args], check=True, capture_output=True, timeout=timeout, cwd=self.root
        )

    def start(self) -> None:
        if not self._initialised:
            self._run(
                str(self.bin / "initdb"),
                "--auth=trust",
                "--username=postgres",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
                "-D",
                str(self.data),
            )
            self._initialised = True
        for attempt in range(3):
            options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
            try:
                self._pg_ctl("start", "-o", options, "-l", str(self.log))
            except subprocess.CalledProcessError:
                if attempt == 2 or self._started_once:
                    raise
                self.port = free_port()  # another process took the free port first
            else:
                self._started_once = True  # from now on clients expect this port
                return

    def restart(self) -> None:
        """Fast shutdown (live sessions get AdminShutdown) and start again on the same port."""
        self._pg_ctl("restart", "-m", "fast", "-l", str(self.log))

    def stop(self) -> None:
        self._pg_ctl("stop", "-m", "fast")

    def _pg_ctl(self, *args: str) -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-w", "-t", "60", *args)

    def close(self) -> None:
        """Stop the server (by its PID if pg_ctl fails) and remove its files."""
        pid_file = self.data / "postmaster.pid"
        if pid_file.exists():
            try:
                self.stop()
            except (subprocess.SubprocessError, OSError):
                with contextlib.suppress(OSError, ValueError, IndexError):
                    os.kill(int(pid_file.read_text().split()[0]), signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def with_query(url: str, **params: object) -> str:
    """``url`` with ``params`` added to its query string."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    query += [(k, str(v)) for k, v in params.items()]
    return urlunsplit(parts._replace(query=urlencode(query)))


def with_address(url: str, host: str, port: int) -> str:
    """``url`` pointed at another server (a fault proxy, a throwaway cluster)."""
    parts = urlsplit(url)
    user = parts.netloc.rpartition("@")[0]
    return urlunsplit(parts._replace(netloc=f"{user}@{host}:{port}" if user else f"{host}:{port}"))


def unique_schema(prefix: str = "ac_test") -> str:
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


@contextmanager
def throwaway_server() -> Iterator[PostgresServer]:
    """A started ``PostgresServer``, removed afterwards; a machine that cannot run one skips
    (fails in CI)."""
    from support.services import service_missing

    try:
        server = PostgresServer()
    except (FileNotFoundError, KeyError) as exc:
        service_missing("postgres", f"cannot run a throwaway server: {exc}")
    try:
        server.start()
    except Exception as exc:
        server.close()
        service_missing("postgres", f"throwaway server did not start: {exc}")
    try:
        yield server
    finally:
        server.close()
