from collections.abc import Iterator

import pytest

from agent_checkpoint import Store, open_store
from agent_checkpoint.testing import ClaimsConformance, EncryptionConformance, StoreConformance


class TestMemoryStore(StoreConformance, ClaimsConformance, EncryptionConformance):
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
