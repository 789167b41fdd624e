"""Worker processes racing to resume failed runs on real backends: exactly once, leases
expire after a worker dies, and a stale worker's late write is refused."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
import redis
from psycopg import sql
from support.postgres_server import with_query
from support.services import POSTGRES_URL, REDIS_URL, service_missing

from agent_checkpoint import open_store
from agent_checkpoint.testing import checkpoint, stamped

WORKER = str(Path(__file__).parent / "support" / "race_worker.py")
pytestmark = pytest.mark.filterwarnings("ignore::agent_checkpoint.backends.VolatileRedisWarning")


def _disk(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield str(tmp_path / "store")


def _redis(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.RedisError as exc:
        service_missing("redis", str(exc))
    prefix = f"race-{uuid.uuid4().hex[:10]}"
    yield f"{REDIS_URL}?prefix={prefix}"
    for pattern in ("{" + prefix + "}*",):  # namespaces too: ``{P}#leases:...``
        keys = list(client.scan_iter(match=pattern, count=1000))
        if keys:
            client.delete(*keys)
    client.close()


def _postgres(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    try:
        admin = psycopg.connect(POSTGRES_URL, autocommit=True)
    except psycopg.Error as exc:
        service_missing("postgres", str(exc))
    schema = f"race_{uuid.uuid4().hex[:10]}"
    url = with_query(POSTGRES_URL, schema=schema)
    with open_store(url) as store:
        store.setup()
    yield url
    admin.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    admin.close()


def _s3(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    from support.seaweed import ACCESS_KEY, REGION, SECRET_KEY

    server = request.getfixturevalue("s3_server")
    bucket = f"race-{uuid.uuid4().hex[:10]}"
    # Worker processes find the credentials where any AWS client looks: the environment.
    patch = pytest.MonkeyPatch()
    patch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    patch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    yield f"s3://{bucket}/runs?endpoint_url={server.endpoint_url}&region={REGION}&create_bucket=true"
    patch.undo()
    client = server.client()
    with contextlib.suppress(Exception):
        client.delete_bucket(Bucket=bucket)  # SeaweedFS drops a non-empty bucket whole
    client.close()


BACKENDS: dict[str, Callable[[pytest.FixtureRequest, Path], Iterator[str]]] = {
    "disk": _disk,
    "redis": _redis,
    "postgres": _postgres,
    "s3": _s3,
}


@pytest.fixture(params=sorted(BACKENDS))
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from BACKENDS[request.param](request, tmp_path)


def seed_failed_runs(url: str, n: int) -> list[str]:
    keys = [f"run-{i:04d}" for i in range(n)]
    with open_store(url) as store:
        for i, key in enumerate(keys):
            store.put(
                stamped(checkpoint(key, failed="llm", agent="billing"), 1_000_000 + i), key=key
            )
    return keys


def start_worker(url: str, name: str, logdir: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, WORKER, url, name, str(logdir), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )


def handled(logdir: Path) -> Counter[str]:
    counts: Counter[str] = Counter()
    for log in logdir.glob("*.log"):
        counts.update(line for line in log.read_text().splitlines() if line)
    return counts


RUNS = 500
RUNS_S3 = 200
"""S3 resumes fewer: each run costs ~14 requests (claim, fence, get, put, release and the
deletes they supersede), and SeaweedFS here serves ~80 a second on the 2 cores the whole
suite shares, so 500 took 430 s of a 14-minute suite; 200 runs over 8 workers still race
every claim."""


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_eight_workers_resume_every_failed_run_exactly_once(store_url: str, tmp_path: Path) -> None:
    n = RUNS_S3 if store_url.startswith("s3://") else RUNS
    keys = seed_failed_runs(store_url, n)
    logdir = tmp_path / "logs"
    logdir.mkdir()
    workers = [start_worker(store_url, f"w{i}", logdir) for i in range(8)]
    for proc in workers:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
        assert "FAILED" not in out, out
    counts = handled(logdir)
    assert set(counts) == set(keys)
    assert max(counts.values()) == 1  # no run was resumed twice
    with open_store(store_url) as store:
        assert store.list(failed=True).items == []
        assert store.claims() == []
        by_worker: Counter[str] = Counter()
        for key in keys:
            ckpt = store.get(key)
            assert ckpt is not None and ckpt.failure_point is None
            by_worker[ckpt.history[-1].content] += 1
        assert sum(by_worker.values()) == n


@pytest.mark.slow
def test_a_dead_workers_runs_are_taken_after_its_lease_expires(
    store_url: str, tmp_path: Path
) -> None:
    keys = seed_failed_runs(store_url, 12)
    logdir = tmp_path / "logs"
    logdir.mkdir()
    # The lease must outlive the "early" worker's whole pass, even on a busy machine.
    doomed = start_worker(store_url, "doomed", logdir, "--ttl", "40", "--hang-on-first")
    claimed = logdir / "doomed.claimed"
    deadline = time.monotonic() + 60
    while not claimed.exists():
        assert time.monotonic() < deadline and doomed.poll() is None, doomed.stderr
        time.sleep(0.02)
    stolen = claimed.read_text()
    assert stolen in keys  # the worker renames the file into place once it is written
    doomed.send_signal(signal.SIGKILL)
    doomed.wait()

    # While the dead worker's lease lives, its run is left alone...
    early = start_worker(store_url, "early", logdir, "--ttl", "60")
    out, _ = early.communicate(timeout=300)
    with open_store(store_url) as store:
        assert [c.worker for c in store.claims()] == ["doomed"], "lease expired too soon to test"
    assert stolen not in handled(logdir)
    assert set(handled(logdir)) == set(keys) - {stolen}
    with open_store(store_url) as store:
        [lease] = store.claims()
        time.sleep(max(0.0, (lease.expires_at - store._now()) / 1000) + 0.2)
    # ...and once it expires, another worker takes it over.
    late = start_worker(store_url, "late", logdir, "--ttl", "60")
    out, err = late.communicate(timeout=300)
    assert late.returncode == 0, err
    assert out.split()[0] == "1"
    counts = handled(logdir)
    assert counts[stolen] == 1 and set(counts) == set(keys)
    with open_store(store_url) as store:
        ckpt = store.get(stolen)
        assert ckpt is not None and ckpt.history[-1].content == "resumed by late"


@pytest.mark.slow
def test_a_stalled_workers_late_write_is_refused(store_url: str, tmp_path: Path) -> None:
    keys = seed_failed_runs(store_url, 3)
    logdir = tmp_path / "logs"
    logdir.mkdir()
    stalled = start_worker(store_url, "stalled", logdir, "--ttl", "2", "--hang-on-first")
    claimed = logdir / "stalled.claimed"
    deadline = time.monotonic() + 60
    while not claimed.exists():
        assert time.monotonic() < deadline and stalled.poll() is None, stalled.stderr
        time.sleep(0.02)
    stolen = claimed.read_text()
    assert stolen in keys  # the worker renames the file into place once it is written
    stalled.send_signal(signal.SIGSTOP)  # a worker frozen mid-run (GC pause, swapped out...)
    time.sleep(2.5)
    rescuer = start_worker(store_url, "rescuer", logdir)
    rescued, err = rescuer.communicate(timeout=300)
    assert rescuer.returncode == 0, err
    stalled.send_signal(signal.SIGCONT)
    (logdir / "stalled.go").write_text("")
    out, err = stalled.communicate(timeout=300)
    assert stalled.returncode == 0, err
    assert f"FAILED {stolen}" in out and "LeaseError" not in err  # reported, refused, no crash
    with open_store(store_url) as store:
        ckpt = store.get(stolen)
        assert ckpt is not None and ckpt.history[-1].content == "resumed by rescuer", (
            f"the rescuer reported (resumed, failed, skipped): {rescued!r}"
        )
        assert store.list(failed=True).items == []
