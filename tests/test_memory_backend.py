from collections.abc import Iterator

import pytest

from agent_checkpoint import Store, open_store
from agent_checkpoint.testing import (
    AppendingConformance,
    ClaimsConformance,
    EncryptionConformance,
    StoreConformance,
)


class TestMemoryStore(
    StoreConformance, ClaimsConformance, EncryptionConformance, AppendingConformance
):
    @pytest.fixture
    def store(self) -> Iterator[Store]:
        with open_store("memory://") as store:
            yield store


def test_a_growing_history_is_stored_as_appended_segments() -> None:
    from agent_checkpoint.backends.memory import MemoryBackend
    from agent_checkpoint.model import Message, RunCheckpoint

    backend = MemoryBackend()
    store = Store(backend)
    history: tuple[Message, ...] = ()
    for i in range(10):
        history = (*history, Message("user", f"m{i}"))
        store.put(RunCheckpoint.new("m", history, run_id="r"), key="k")
    head, segments, _ = backend._splits["k"]
    assert [s.decode() for s in segments][:3] == [
        '{"role":"user","content":"m0"}',
        '{"role":"user","content":"m1"}',
        '{"role":"user","content":"m2"}',
    ]
    assert len(segments) == 10 and b"m9" not in head


def test_an_append_whose_reply_was_lost_is_recognised_as_landed() -> None:
    from agent_checkpoint.backends.memory import MemoryBackend
    from agent_checkpoint.errors import BackendUnavailableError
    from agent_checkpoint.model import Message, RunCheckpoint

    class LosesOneReply(MemoryBackend):
        lose = False

        def append(self, *args: object, **kwargs: object) -> object:
            done = super().append(*args, **kwargs)  # type: ignore[arg-type]
            if self.lose:
                self.lose = False
                raise BackendUnavailableError("reply lost", backend="memory", operation="append")
            return done

    backend = LosesOneReply()
    store = Store(backend)
    first = store.put(RunCheckpoint.new("m", [Message("user", "a")], run_id="r"), key="k")
    backend.lose = True
    grown = RunCheckpoint.new("m", [Message("user", "a"), Message("assistant", "b")], run_id="r")
    summary = store.put(grown, key="k", if_revision=first.revision)
    assert summary.revision == first.revision + 1  # landed once, no false conflict, no rewrite
    got = store.get("k")
    assert got is not None and [m.content for m in got.history] == ["a", "b"]


def test_a_retried_conditional_put_overtaken_by_another_writer_says_the_outcome_is_unknown() -> (
    None
):
    from agent_checkpoint.backends.base import Record
    from agent_checkpoint.backends.memory import MemoryBackend
    from agent_checkpoint.errors import (
        BackendUnavailableError,
        ConflictError,
        WriteOutcomeUnknownError,
    )
    from agent_checkpoint.model import Message, RunCheckpoint

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


def test_appends_past_the_segment_limit_merge_in_the_backend_instead_of_rewriting() -> None:
    from agent_checkpoint.backends.memory import MemoryBackend
    from agent_checkpoint.model import Message, RunCheckpoint

    backend = MemoryBackend()
    backend.max_segments = 4
    store = Store(backend)
    appended = 0
    original = backend.append

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal appended
        landed = original(*args, **kwargs)
        appended += landed is not None
        return landed

    backend.append = counting  # type: ignore[method-assign]
    history: tuple[Message, ...] = ()
    for i in range(11):
        history = (*history, Message("user", f"m{i}"))
        ckpt = RunCheckpoint.new("m", history, run_id="r")
        store.put(ckpt, key="k")
        assert len(backend._splits["k"][1]) <= 4
    assert appended == 10  # every put after the first appended; none fell back to a rewrite
    whole = Store(MemoryBackend())
    whole.put(ckpt, key="k")
    merged, written = store.get_json("k"), whole.get_json("k")
    assert merged is not None and written is not None and merged["data"] == written["data"]
    got = store.get("k")
    assert got is not None and got.history == history


def test_a_third_party_closed_method_does_not_read_as_a_closed_store() -> None:
    """Only a ``closed`` that is ``True`` closes a store: a backend of someone else's whose
    ``closed`` is a method (truthy, never called) keeps working."""
    from agent_checkpoint.backends.memory import MemoryBackend
    from agent_checkpoint.testing import checkpoint

    class Wrapped(MemoryBackend):
        def closed(self) -> bool:  # type: ignore[override]
            return False

    store = Store(Wrapped())
    store.put(checkpoint(), key="k")
    assert not store.closed and store.get("k") is not None
