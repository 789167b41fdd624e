from collections.abc import Iterator

import pytest

from agent_checkpoint import Store, open_store
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
    from agent_checkpoint.backends._base import Record
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
