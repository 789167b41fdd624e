"""`agent-checkpoint copy` of thousands of records from disk to each network backend and back
is lossless: byte-identical records and the same listing, paged. Redis and PostgreSQL copy
2,500: three listing pages of 1,000, the last one partial, and five of the copy's pages of
500 (they took 10,000, then 4,000, until the suite had to fit 10 minutes on 2 cores: each
copy of 10,000 there and back, with the listings and reads compared, took ~220 s of it). S3
copies 600, two of the copy's pages: each record costs ~10 requests there and back, and
SeaweedFS here serves ~80-250 a second (1,000 records took 46 s alone, 125 s in the suite).
Listing at 10,000 runs and more is covered on each backend's own tests
(``test_newest_100_of_10000...``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from test_resume_race import BACKENDS

from agent_checkpoint import open_store
from agent_checkpoint._cli import main
from agent_checkpoint._store import summary_for
from agent_checkpoint.backends import Record, Summary
from agent_checkpoint.testing import checkpoint, stamped

pytestmark = pytest.mark.filterwarnings("ignore::agent_checkpoint.backends.VolatileRedisWarning")
N = 2_500
N_S3 = 600


@pytest.fixture(params=sorted(set(BACKENDS) - {"disk"}))
def network_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from BACKENDS[request.param](request, tmp_path)


def seed_disk(path: str, n: int) -> None:
    with open_store(path, fsync=False) as store:  # seeding speed only; copy itself is durable
        for i in range(n):
            key = f"run-{i:05d}" if i % 10 else f"odd/key {i} ü*%"
            ckpt = checkpoint(
                key,
                principal=f"user-{i % 7}",
                agent=("billing", "support", None)[i % 3],
                failed=("llm", None, "tool", None)[i % 4],
                messages=1 + i % 4,
            )
            body, digest = store._codec.encode(stamped(ckpt, 1_700_000_000_000 + i // 3), key)
            store.put_record(Record(summary_for(key, digest, len(body)), body))


def listing(url: str) -> list[tuple[object, ...]]:
    with open_store(url) as store:
        return [
            (
                s.key,
                s.run_id,
                s.saved_at,
                s.owner,
                s.agent_id,
                s.failure_phase,
                s.message_count,
                s.size,
            )
            for s in store.iter_summaries(page_size=1000)
        ]


def bodies(url: str, keys: list[str]) -> dict[str, bytes]:
    with open_store(url) as store:
        out = {}
        for key in keys:
            record = store.get_record(key)
            assert record is not None, key
            out[key] = record.body
        return out


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_copy_to_a_network_backend_and_back_is_lossless(
    network_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, back = str(tmp_path / "source"), str(tmp_path / "back")
    n = N_S3 if network_url.startswith("s3://") else N
    seed_disk(source, n)
    assert main(["copy", "--store", source, "--to", network_url]) == 0
    assert main(["copy", "--store", network_url, "--to", back]) == 0
    out = capsys.readouterr().out
    assert out.count(f"Copied {n} record(s)") == 2
    original = listing(source)
    assert len(original) == n
    assert listing(network_url) == original
    assert listing(back) == original
    keys = [str(row[0]) for row in original]
    assert bodies(back, keys) == bodies(source, keys) == bodies(network_url, keys)
    # copying again is a no-op: resumable, nothing rewritten
    assert main(["copy", "--store", source, "--to", network_url]) == 0
    assert "Copied 0 record(s)" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        ({"runId": "run-\u0000"}, "data.runId holds NUL"),
        ({"agent": {"id": "billing\u0000"}}, "data.agent.id holds NUL"),
        (
            {"failurePoint": {"iteration": 2, "phase": "tool", "stage": "https://u:p@host/x"}},
            "failurePoint.stage must be 'call-llm' or a declared tool name",
        ),
    ],
)
def test_copy_refuses_a_record_no_put_may_store_alike_on_every_backend(
    network_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    change: dict[str, object],
    refusal: str,
) -> None:
    """A record written before the writer's checks (here, straight through the backend) is
    refused by the target's own checks, the same way whatever the target, before any backend
    sees it: never half-copied by one backend and stored by another."""
    source = str(tmp_path / "source")
    with open_store(source) as store:
        store.put(stamped(checkpoint("good"), 1000), key="good")
        doc = {**checkpoint("bad").to_json(), **change}
        body = orjson.dumps({"format": "conversation-v1", "data": doc, "savedAt": 2000})
        summary = Summary("bad", "bad", 2000, None, None, None, None, 2, len(body), 0)
        store.backend.save(Record(summary, body))
    capsys.readouterr()
    assert main(["-q", "copy", "--store", source, "--to", network_url]) == 5
    err = capsys.readouterr().err
    assert refusal in err and err.count("\n") == 1 and "Traceback" not in err
    with open_store(network_url) as target:
        assert target.head("bad") is None
