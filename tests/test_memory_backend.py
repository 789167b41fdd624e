from collections.abc import Iterator

import pytest

from agent_checkpoint import RetryPolicy, Store, open_store
from agent_checkpoint.backends import Summary
from agent_checkpoint.backends._memory import MemoryBackend
from agent_checkpoint.errors import BackendUnavailableError
from agent_checkpoint.testing import (
    ClaimsConformance,
    EncryptionConformance,
    StoreConformance,
)


class TestMemoryStore(StoreConformance, ClaimsConformance, EncryptionConformance):
    @pytest.fixture
    def store(self) -> Iterator[Store]:
        with open_store("memory://") as store:
            yield store


def test_a_retried_conditional_put_overtaken_by_another_writer_says_the_outcome_is_unknown() -> (
    None
):
    from agent_checkpoint._model import Message, RunCheckpoint
    from agent_checkpoint.backends import Record
    from agent_checkpoint.backends._memory import MemoryBackend
    from agent_checkpoint.errors import (
        BackendUnavailableError,
        ConflictError,
        WriteOutcomeUnknownError,
    )

    class OvertakenAfterLanding(MemoryBackend):
        armed = False

        def save(self, record, **kwargs):  # type: ignore[no-untyped-def]
            done = super().save(record, **kwargs)
            if self.armed:  # ours landed; another writer writes; our reply is lost
                self.armed = False
                theirs = Record(record.summary, record.body.replace(b"mine", b"them"))
                super().save(theirs, expect_revision=None)
                raise BackendUnavailableError("reply lost", backend="memory", operation="save")
            return done

    backend = OvertakenAfterLanding()
    store = Store(backend)
    first = store.put(
        {
            "format": "conversation-v1",
            "data": RunCheckpoint.new("m", [Message("user", "a")], run_id="r").to_json(),
            "savedAt": 1,
        },
        key="k",
    )
    backend.armed = True
    doc = RunCheckpoint.new("m", [Message("user", "mine")], run_id="r").to_json()
    with pytest.raises(WriteOutcomeUnknownError) as caught:
        store.put(
            {"format": "conversation-v1", "data": doc, "savedAt": 2},
            key="k",
            if_revision=first.revision,
        )
    assert not isinstance(caught.value, ConflictError)  # "refused, nothing changed" would be false
    assert "may have landed" in str(caught.value)


def test_a_third_party_closed_method_does_not_read_as_a_closed_store() -> None:
    """Only a ``closed`` that is ``True`` closes a store: a backend of someone else's whose
    ``closed`` is a method (truthy, never called) keeps working."""
    from agent_checkpoint.backends._memory import MemoryBackend
    from agent_checkpoint.testing import checkpoint

    class Wrapped(MemoryBackend):
        def closed(self) -> bool:  # type: ignore[override]
            return False

    store = Store(Wrapped())
    store.put(checkpoint(), key="k")
    assert not store.closed and store.get("k") is not None


class _Faulty(MemoryBackend):
    """A memory backend whose ``head`` fails with a transient fault ``faults`` times."""

    def __init__(self, faults: int) -> None:
        super().__init__()
        self.faults, self.calls = faults, 0

    def head(self, key: str) -> Summary | None:
        self.calls += 1
        if self.calls <= self.faults:
            raise BackendUnavailableError("reset", backend="memory", operation="head")
        return super().head(key)


@pytest.mark.parametrize(("faults", "attempts"), [(0, 1), (1, 2), (3, 4)])
def test_a_call_is_tried_once_and_retried_only_after_a_transient_fault(
    faults: int, attempts: int
) -> None:
    backend = _Faulty(faults)
    store = Store(backend, retry=RetryPolicy(attempts=4, initial=0.001, maximum=0.002))
    assert store.head("k") is None
    assert backend.calls == attempts


def test_the_policy_s_attempts_bound_every_try_the_first_included() -> None:
    backend = _Faulty(10)
    store = Store(backend, retry=RetryPolicy(attempts=3, initial=0.001, maximum=0.002))
    with pytest.raises(BackendUnavailableError):
        store.head("k")
    assert backend.calls == 3
    once = _Faulty(10)
    with pytest.raises(BackendUnavailableError):
        Store(once, retry=RetryPolicy(attempts=1)).head("k")
    assert once.calls == 1
