"""What every campaign shares: a store per backend in its own namespace (cleaned up afterwards),
the tally of one campaign on one backend, the figures table, and the command line.

Servers: Redis and PostgreSQL where the test suite finds them (``tests/support/services.py``:
``$TEST_REDIS_URL``, ``$TEST_POSTGRES_URL``), S3 on a SeaweedFS server started here
(``tests/support/seaweed.py``). A backend whose server is missing raises
``ServiceUnavailable``; the tests turn that into ``service_missing``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import tempfile
import time
import uuid
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support.postgres_server import unique_schema, with_query
from support.services import IN_CI, POSTGRES_URL, REDIS_URL

from agent_checkpoint import Store, open_store
from agent_checkpoint._store import RetryPolicy
from agent_checkpoint.errors import BackendError, CheckpointError

__all__ = [
    "BACKENDS",
    "IN_CI",
    "KNOWN_BUGS",
    "POSTGRES_URL",
    "REDIS_URL",
    "S3Access",
    "ServiceUnavailable",
    "Tally",
    "Target",
    "classify_error",
    "fork_context",
    "main_for",
    "message_names_its_origin",
    "open_target",
    "print_table",
    "s3_server",
]

REPO = Path(__file__).resolve().parents[1]
BACKENDS = ("disk", "redis", "postgres", "s3")
BUCKET = "agent-checkpoint-stress"


KNOWN_BUGS: dict[str, str] = {}
"""Open library bugs the campaigns found (none now; RELIABILITY.md lists the fixed ones, KB-1..KB-6).
A violation a known bug explains is still counted, and marked with its id."""


class ServiceUnavailable(RuntimeError):
    """The server a backend needs is not reachable here."""

    def __init__(self, backend: str, reason: str) -> None:
        super().__init__(f"{backend}: {reason}")
        self.backend = backend
        self.reason = reason


# -- S3 clients ---------------------------------------------------------------------------

_BOTOCORE: Any = None


def _botocore_session() -> Any:
    """One botocore session per process: its loaded service model makes the next client
    cost milliseconds instead of ~100 ms (the crash writers are short-lived processes)."""
    global _BOTOCORE
    if _BOTOCORE is None:
        import botocore.session

        _BOTOCORE = botocore.session.get_session()
    return _BOTOCORE


@dataclass(frozen=True)
class S3Access:
    endpoint_url: str
    access_key: str
    secret_key: str
    region: str

    def client(self, endpoint_url: str | None = None, **config: Any) -> Any:
        """A client configured as the library configures its own (no botocore retries: the
        Store's policy governs), pointed at ``endpoint_url`` (a fault proxy) if given."""
        from botocore.config import Config

        options: dict[str, Any] = {
            "retries": {"mode": "standard", "total_max_attempts": 1},
            "connect_timeout": 5,
            "read_timeout": 20,
            "max_pool_connections": 32,
            "s3": {"addressing_style": "path"},
        }
        options.update(config)
        return _botocore_session().create_client(
            "s3",
            endpoint_url=endpoint_url or self.endpoint_url,
            region_name=self.region,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            config=Config(**options),
        )


# -- worker processes ---------------------------------------------------------------------

PRELOAD = ["stress._preload", "stress.crash", "stress.races"]


def fork_context() -> Any:
    """A multiprocessing context whose workers fork from a server that has the library, the
    drivers and the campaigns imported already: a worker starts in ~20 ms, and forks from a
    process without threads or connections (the campaign's own are never inherited)."""
    import multiprocessing

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


# -- targets ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """A store URL in a namespace of its own; picklable, so worker processes can open it."""

    backend: str
    url: str
    s3: S3Access | None = None

    def open(self, *, retry: RetryPolicy | None = None, **options: Any) -> Store:
        if self.s3 is not None and "client" not in options:
            options["client"] = self.s3.client()
        return open_store(self.url, retry=retry, **options)


@contextmanager
def s3_server(workdir: Path) -> Iterator[Any]:
    """A SeaweedFS server for the campaign (moto only off CI, as the suite does)."""
    from support.seaweed import S3Unavailable, start_s3_server

    try:
        server = start_s3_server(workdir, in_ci=IN_CI)
    except S3Unavailable as exc:
        raise ServiceUnavailable("s3", str(exc)) from exc
    try:
        yield server
    finally:
        server.stop()


def s3_access(server: Any) -> S3Access:
    from support.seaweed import ACCESS_KEY, REGION, SECRET_KEY

    return S3Access(server.endpoint_url, ACCESS_KEY, SECRET_KEY, REGION)


def ensure_bucket(client: Any, bucket: str = BUCKET) -> None:
    try:
        client.head_bucket(Bucket=bucket)
    except Exception:
        client.create_bucket(Bucket=bucket)


def purge_redis(client: Any, prefix: str) -> int:
    """Delete the keys of one store prefix and of its namespaces (``{prefix}#leases:``...)."""
    removed = 0
    for pattern in ("{" + prefix + "}*",):  # namespaces too: ``{P}#leases:...``
        batch: list[bytes] = []
        for key in client.scan_iter(match=pattern, count=1000):
            batch.append(key)
            if len(batch) >= 500:
                removed += client.delete(*batch)
                batch = []
        if batch:
            removed += client.delete(*batch)
    return removed


def drop_schema(url: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True, connect_timeout=5) as admin:
        admin.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@contextmanager
def open_target(
    backend: str,
    workdir: Path,
    *,
    s3: Any = None,
    redis_url: str = REDIS_URL,
    postgres_url: str = POSTGRES_URL,
) -> Iterator[Target]:
    """An empty store on ``backend``, removed afterwards: a folder, a Redis prefix, a PostgreSQL
    schema, or an S3 prefix (on server ``s3``, else on a SeaweedFS server started here)."""
    tag = uuid.uuid4().hex[:10]
    if backend == "disk":
        root = workdir / f"disk-{tag}"
        try:
            yield Target("disk", str(root))
        finally:
            shutil.rmtree(root, ignore_errors=True)
    elif backend == "redis":
        import redis

        client = redis.Redis.from_url(redis_url, socket_connect_timeout=3)
        try:
            client.ping()
        except redis.RedisError as exc:
            client.close()
            raise ServiceUnavailable("redis", f"{redis_url}: {exc}") from exc
        prefix = f"stress-{tag}"
        try:
            yield Target("redis", with_query(redis_url, prefix=prefix))
        finally:
            purge_redis(client, prefix)
            client.close()
    elif backend == "postgres":
        import psycopg

        try:
            psycopg.connect(postgres_url, connect_timeout=3).close()
        except psycopg.Error as exc:
            raise ServiceUnavailable("postgres", f"{postgres_url}: {exc}") from exc
        schema = unique_schema("stress")
        url = with_query(postgres_url, schema=schema)
        try:
            with open_store(url) as store:
                store.setup()
            yield Target("postgres", url)
        finally:
            drop_schema(postgres_url, schema)
    elif backend == "s3":
        with contextlib.ExitStack() as stack:
            server = s3 if s3 is not None else stack.enter_context(s3_server(workdir / "s3"))
            access = s3_access(server)
            client = access.client()
            ensure_bucket(client)
            prefix = f"stress-{tag}"
            try:
                yield Target("s3", f"s3://{BUCKET}/{prefix}", access)
            finally:
                from support.seaweed import purge

                with contextlib.suppress(Exception):
                    purge(client, BUCKET, prefix + "/")
                client.close()
    else:
        raise ValueError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}")


# -- tallies and the figures table -------------------------------------------------------


def classify_error(exc: BaseException, backend: str) -> tuple[str, bool]:
    """``(class name, is the library's)``: a ``CheckpointError``, and for a backend failure one
    whose ``backend`` and ``operation`` attributes name where it failed."""
    name = type(exc).__name__
    if isinstance(exc, BackendError):
        return name, exc.backend == backend and bool(exc.operation)
    return name, isinstance(exc, CheckpointError)


def message_names_its_origin(exc: BackendError) -> bool:
    """The library's convention for backend failures: ``"<backend> <operation> failed: ..."``."""
    return str(exc).startswith(f"{exc.backend} {exc.operation} failed")


@dataclass
class Tally:
    """One campaign's figures on one backend. Violations: ``lost``, ``torn``, ``duplicated``,
    ``wrongly_accepted``, ``index`` (listing disagrees with records), ``foreign`` (an
    exception that is not the library's, or a backend error not naming backend and operation)
    ``stalled`` (no progress where progress was due, or a hang) and ``unbounded`` (memory out
    of proportion to the input)."""

    backend: str
    trials: int = 0
    acknowledged: int = 0
    lost: int = 0
    torn: int = 0
    duplicated: int = 0
    wrongly_accepted: int = 0
    index: int = 0
    foreign: int = 0
    stalled: int = 0
    unbounded: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    extra: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    known: Counter[str] = field(default_factory=Counter)
    """Violations explained by a known library bug (``KNOWN_BUGS``), still counted above."""
    seconds: float = 0.0
    skipped: str | None = None

    VIOLATIONS = (
        "lost",
        "torn",
        "duplicated",
        "wrongly_accepted",
        "index",
        "foreign",
        "stalled",
        "unbounded",
    )

    @property
    def violations(self) -> int:
        return sum(getattr(self, name) for name in self.VIOLATIONS)

    @property
    def ok(self) -> bool:
        return self.violations == 0

    @property
    def unexplained(self) -> int:
        """Violations no known bug explains."""
        return self.violations - sum(self.known.values())

    def violation(self, kind: str, detail: str, *, known: str | None = None) -> None:
        """Count one violation of ``kind`` and keep its description (the first 50); ``known``
        names the entry of ``KNOWN_BUGS`` that explains it."""
        setattr(self, kind, getattr(self, kind) + 1)
        if known is not None:
            self.known[known] += 1
            detail = f"{detail} [{known}]"
        if len(self.problems) < 50:
            self.problems.append(f"{kind}: {detail}")

    def error(self, exc: BaseException, context: str = "") -> bool:
        """Count an exception by class; a foreign one is a violation, and so is a backend
        failure whose message does not say where it failed. ``True`` if it is the library's."""
        name, ours = classify_error(exc, self.backend)
        self.errors[name] += 1
        if not ours:
            self.violation("foreign", f"{context} {name}: {str(exc)[:300]}".strip())
        elif isinstance(exc, BackendError) and not message_names_its_origin(exc):
            self.violation(
                "foreign", f"{context} {name} message names no backend: {str(exc)[:200]}"
            )
        return ours

    def merge(self, other: Tally) -> None:
        for name in ("trials", "acknowledged", *self.VIOLATIONS):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.errors.update(other.errors)
        self.extra.update(other.extra)
        self.known.update(other.known)
        self.problems.extend(other.problems[: max(0, 50 - len(self.problems))])

    def summary(self) -> str:
        if self.skipped:
            return f"{self.backend}: skipped ({self.skipped})"
        return (
            f"{self.backend}: {self.trials} trials, {self.acknowledged} acknowledged, "
            f"{self.violations} violations" + "".join(f"\n  {p}" for p in self.problems)
        )


def _errors_cell(errors: Counter[str]) -> str:
    return ", ".join(f"{name} {count}" for name, count in errors.most_common()) or "-"


def print_table(
    title: str,
    tallies: Sequence[Tally],
    *,
    trial_word: str = "trials",
    extras: Sequence[tuple[str, str]] = (),
    out: Callable[[str], None] = print,
) -> None:
    """The figures table: one row per backend, plus the problems found, if any."""
    head = [
        "backend",
        trial_word,
        "acked",
        "lost",
        "torn",
        "dup",
        "wrongly acc.",
        "index",
        "foreign",
        "stalled",
        *(label for _, label in extras),
        "errors by class",
        "seconds",
    ]
    rows: list[list[str]] = []
    for t in tallies:
        if t.skipped:
            rows.append([t.backend, f"skipped: {t.skipped}"[:60]] + [""] * (len(head) - 2))
            continue
        rows.append(
            [
                t.backend,
                str(t.trials),
                str(t.acknowledged),
                str(t.lost),
                str(t.torn),
                str(t.duplicated),
                str(t.wrongly_accepted),
                str(t.index),
                str(t.foreign),
                str(t.stalled),
                *(str(t.extra.get(name, 0)) for name, _ in extras),
                _errors_cell(t.errors),
                f"{t.seconds:.1f}",
            ]
        )
    out(f"\n{title}")
    out(markdown_table(head, rows))
    for t in tallies:
        for note in t.notes:
            out(f"  {t.backend}: note: {note}")
        for problem in t.problems:
            out(f"  {t.backend}: {problem}")


def markdown_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)
    ]
    lines = ["| " + " | ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)) + " |"]
    lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")
    return "\n".join(lines)


# -- the command line ---------------------------------------------------------------------


def backends_arg(value: str, allowed: Sequence[str] = BACKENDS) -> list[str]:
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in allowed]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown backend(s) {', '.join(unknown) or value!r}; choose from {', '.join(allowed)}"
        )
    return names


def main_for(
    description: str,
    run: Callable[..., Tally],
    *,
    size_flag: str,
    full: int,
    small: int,
    backends: Sequence[str] = BACKENDS,
    title: str,
    trial_word: str = "trials",
    extras: Sequence[tuple[str, str]] = (),
    options: Sequence[tuple[str, str]] = (),
    argv: Sequence[str] | None = None,
) -> int:
    """``python -m stress.<name>``: run ``run(backend, size, workdir, s3_server, **options)``
    for each backend, print the figures, exit 1 on any violation (2 if a server is missing in
    CI). ``options`` are extra string flags ``(name, help)`` passed on when given."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--backend",
        type=lambda v: backends_arg(v, backends),
        default=list(backends),
        help=f"comma-separated, from {','.join(backends)} (default: all)",
    )
    parser.add_argument(f"--{size_flag}", type=int, default=None, help=f"default {full}")
    parser.add_argument("--small", action="store_true", help=f"the CI size ({small})")
    for name, text in options:
        parser.add_argument(f"--{name}", default=None, help=text)
    args = parser.parse_args(argv)
    given = {
        name.replace("-", "_"): getattr(args, name.replace("-", "_"))
        for name, _ in options
        if getattr(args, name.replace("-", "_")) is not None
    }
    size = getattr(args, size_flag) or (small if args.small else full)
    warnings.filterwarnings("ignore", message=".*keeps no data on disk")  # VolatileRedisWarning
    tallies: list[Tally] = []
    missing = False
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ac-stress-") as tmp, contextlib.ExitStack() as stack:
        workdir = Path(tmp)
        server: Any = None
        for backend in args.backend:
            try:
                if backend == "s3" and server is None:
                    server = stack.enter_context(s3_server(workdir / "seaweedfs"))
                tally = run(backend, size, workdir, server, **given)
            except ServiceUnavailable as exc:
                missing = True
                tally = Tally(backend, skipped=exc.reason)
            tallies.append(tally)
            print(tally.summary(), flush=True)
    print_table(
        f"{title} ({time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, "
        f"{time.monotonic() - started:.0f} s)",
        tallies,
        trial_word=trial_word,
        extras=extras,
    )
    if any(not t.ok for t in tallies):
        return 1
    return 2 if missing and IN_CI else 0
