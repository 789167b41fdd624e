"""Leases are stored as they always were, so the leases of stores written before still hold."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from agent_checkpoint import ClaimedError, RunCheckpoint, open_store
from agent_checkpoint._claims import leases_of
from agent_checkpoint._model import now_ms
from agent_checkpoint._store import Store
from agent_checkpoint.backends import Record, Summary


@pytest.fixture(params=["memory", "disk"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    url = "memory://" if request.param == "memory" else str(tmp_path / "store")
    with open_store(url) as s:
        s.put(RunCheckpoint.new("go", run_id="r"), key="r")
        yield s


def _as_written_before(key: str, worker: str, token: str, expires_at: int) -> Record:
    """A lease record as agent-checkpoint wrote it before leases had a type of their own."""
    body = orjson.dumps({"worker": worker, "token": token, "expiresAt": expires_at})
    return Record(Summary(key, token, expires_at, None, worker, None, None, 0, len(body), 0), body)


def test_a_lease_written_by_the_previous_version_is_listed_and_honoured(store: Store) -> None:
    expires_at = now_ms() + 60_000
    leases_of(store.backend).save(
        _as_written_before("r", "old-worker", "t0", expires_at), create_only=True
    )
    assert [(c.key, c.worker, c.expires_at) for c in store.claims()] == [
        ("r", "old-worker", expires_at)
    ]
    with pytest.raises(ClaimedError, match="claimed by worker 'old-worker'"):
        store.claim("r", "new-worker", ttl=30)


def test_an_expired_lease_written_by_the_previous_version_can_be_taken_over(
    store: Store,
) -> None:
    leases_of(store.backend).save(
        _as_written_before("r", "old-worker", "t0", now_ms() - 1), create_only=True
    )
    assert store.claims() == []
    with store.claim("r", "new-worker", ttl=30) as claim:
        assert [c.worker for c in store.claims()] == ["new-worker"]
        assert claim.token != "t0"


def test_a_lease_is_stored_as_the_previous_version_stored_it(store: Store) -> None:
    with store.claim("r", "w1", ttl=30) as claim:
        stored = leases_of(store.backend).load("r")
        assert stored is not None
        expected = _as_written_before("r", "w1", claim.token, claim.expires_at)
        assert stored.body == expected.body
        assert stored.summary.row()[:-1] == expected.summary.row()[:-1]  # all but the revision
        claim.renew(60)
        renewed = leases_of(store.backend).load("r")
        assert renewed is not None and renewed.summary.saved_at == claim.expires_at
