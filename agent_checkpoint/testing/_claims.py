"""The claims contract: exclusive, fenced, expiring leases on runs."""

from __future__ import annotations

import threading
import time

import pytest

from .._claims import ClaimedError
from .._store import Store
from ..errors import LeaseError, NotFoundError
from ._capabilities import declared_by, skip_without_namespaces
from ._samples import checkpoint, stamped


class ClaimsConformance:
    """Exclusive claims (``Store.claim``) on a backend that supports namespaces; its tests
    skip, saying why, on a backend that does not (``Namespaced``)."""

    @pytest.fixture(autouse=True)
    def _claims_need_namespaces(self, request: pytest.FixtureRequest) -> None:
        if declared_by(request, ClaimsConformance):
            skip_without_namespaces(request.getfixturevalue("store"))

    def test_a_claimed_run_cannot_be_claimed_again(self, store: Store) -> None:
        stored = store.put(checkpoint("r", failed="llm"), key="r")
        with store.claim("r", "w1", ttl=30) as claim:
            with pytest.raises(ClaimedError, match="claimed by worker 'w1'"):
                store.claim("r", "w2", ttl=30)
            assert [(c.key, c.worker) for c in store.claims()] == [("r", "w1")]
            assert claim.fence > stored.revision
            assert store.head("r").revision == claim.fence  # type: ignore[union-attr]
        assert store.claims() == []
        store.claim("r", "w2", ttl=30).release()

    def test_claiming_changes_neither_content_nor_listing(self, store: Store) -> None:
        stored = store.put(stamped(checkpoint("r", failed="llm"), 1234), key="r")
        before = store.get_json("r")
        with store.claim("r", "w1", ttl=30) as claim:
            assert store.get_json("r") == before
            [summary] = store.list().items
            assert (summary.key, summary.saved_at) == ("r", 1234)
            assert summary.revision == claim.fence > stored.revision

    def test_a_missing_run_cannot_be_claimed(self, store: Store) -> None:
        with pytest.raises(NotFoundError):
            store.claim("ghost", "w1", ttl=30)
        assert store.claims() == []
        store.put(checkpoint("ghost"), key="ghost")
        store.claim("ghost", "w1", ttl=30).release()

    def test_a_put_under_a_claim_is_fenced(self, store: Store) -> None:
        store.put(checkpoint("r", failed="llm"), key="r")
        with store.claim("r", "w1", ttl=30) as claim:
            first = claim.put(checkpoint("r-resumed"))
            second = claim.put(checkpoint("r-resumed-2"))
            assert second.revision > first.revision and second.revision == claim.fence
            store.put(checkpoint("intruder"), key="r")  # an unfenced write sneaks in
            with pytest.raises(LeaseError):
                claim.put(checkpoint("r-resumed-3"))
        got = store.get("r")
        assert got is not None and got.run_id == "intruder"

    def test_an_expired_claim_can_be_taken_over_and_the_stale_write_is_refused(
        self, store: Store
    ) -> None:
        store.put(checkpoint("r", failed="llm"), key="r")
        stale = store.claim("r", "dead-worker", ttl=0.2)
        time.sleep(0.3)
        with store.claim("r", "w2", ttl=30) as fresh:
            with pytest.raises(LeaseError):
                stale.put(checkpoint("stale-result"))
            with pytest.raises(LeaseError):
                stale.renew(30)
            fresh.put(checkpoint("fresh-result"))
            stale.release()  # harmless: it no longer holds the lease
            assert [c.worker for c in store.claims()] == ["w2"]
        got = store.get("r")
        assert got is not None and got.run_id == "fresh-result"

    def test_a_late_release_never_drops_a_lease_granted_after_it(self, store: Store) -> None:
        """A's lease expires; B claims and releases; C claims. A's late release, renew and
        write must not touch C's lease: D cannot claim while C's lease is live."""
        store.put(checkpoint("r", failed="llm"), key="r")
        a = store.claim("r", "A", ttl=0.2)
        time.sleep(0.3)
        store.claim("r", "B", ttl=30).release()
        c = store.claim("r", "C", ttl=30)
        with pytest.raises(LeaseError):
            a.renew(30)
        with pytest.raises(LeaseError):
            a.put(checkpoint("from-A"))
        a.release()
        with pytest.raises(ClaimedError, match="'C'"):
            store.claim("r", "D", ttl=30)
        assert [claim.worker for claim in store.claims()] == ["C"]
        c.put(checkpoint("from-C"))
        c.release()
        got = store.get("r")
        assert got is not None and got.run_id == "from-C"

    def test_an_expired_claim_is_not_listed_and_cannot_write(self, store: Store) -> None:
        store.put(checkpoint("r"), key="r")
        claim = store.claim("r", "w1", ttl=0.2)
        time.sleep(0.3)
        assert store.claims() == []
        with pytest.raises(LeaseError, match="expired"):
            claim.put(checkpoint("late"))

    def test_renew_keeps_the_claim_alive(self, store: Store) -> None:
        store.put(checkpoint("r"), key="r")
        # the renew must land within the first ttl: 2 s leaves room for a loaded machine
        claim = store.claim("r", "w1", ttl=2)
        claim.renew(30)
        time.sleep(2.1)
        with pytest.raises(ClaimedError):
            store.claim("r", "w2", ttl=30)
        claim.put(checkpoint("done"))
        claim.release()

    def test_racing_claims_have_one_winner(self, store: Store) -> None:
        store.put(checkpoint("r", failed="tool"), key="r")
        winners: list[str] = []
        barrier = threading.Barrier(8)

        def contender(i: int) -> None:
            barrier.wait()
            try:
                store.claim("r", f"w{i}", ttl=30)
                winners.append(f"w{i}")
            except ClaimedError:
                pass

        threads = [threading.Thread(target=contender, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(winners) == 1
        assert [c.worker for c in store.claims()] == winners

    def test_leases_never_appear_among_the_runs(self, store: Store) -> None:
        store.put(checkpoint("r"), key="r")
        with store.claim("r", "w1", ttl=30):
            assert [s.key for s in store.list()] == ["r"]
            assert store.forget_older_than(2**62).forgotten == 1
            assert store.claims()[0].key == "r"
