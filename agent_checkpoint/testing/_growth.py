"""The growing-history contract: checkpointing after every message stores exactly what a
full write would."""

from __future__ import annotations

import threading
from typing import Any

import orjson
import pytest

from .._model import Message, RunCheckpoint
from .._segment_format import Split, assemble, chain
from .._segments import Segmented
from .._store import Store
from ..backends._base import Record, Summary
from ..errors import ConflictError, OwnershipConflictError
from ._capabilities import skip_without_namespaces
from ._samples import checkpoint


def _plain_bytes(ckpt: RunCheckpoint, saved_at: int) -> bytes:
    return orjson.dumps({"format": "conversation-v1", "data": ckpt.to_json(), "savedAt": saved_at})


def _grow(n: int, *, start: tuple[Message, ...] = ()) -> list[tuple[Message, ...]]:
    histories, history = [], start
    for i in range(n):
        role = ("user", "assistant", "tool")[i % 3]
        extra = {"tool_call_id": f"c{i}", "tool_name": "t"} if role == "tool" else {}
        history = (*history, Message(role, f"message {i} " + "ü" * (i % 7), **extra))  # type: ignore[arg-type]
        histories.append(history)
    return histories


def read_while_growing(writer: Store, reader: Store, *, key: str = "g", n: int = 60) -> int:
    """Grow a history under ``key`` through ``writer`` while two threads read it through
    ``reader``; every read must be one of the histories written, whole (never torn by a merge
    deleting segments under it). After each put the writer waits (briefly) for a read to
    finish, so that reads interleave with the writes even where a put is much faster than a
    read. Returns how many different lengths the readers saw."""
    base = checkpoint(key)
    histories = _grow(n)
    writer.put(base.evolve(history=histories[0]), key=key)
    stop = threading.Event()
    seen: set[int] = set()
    errors: list[BaseException] = []
    reads = [0]
    progress = threading.Condition()

    def read() -> None:
        while not stop.is_set():
            try:
                got = reader.get(key)
                assert got is not None and got.history == histories[len(got.history) - 1]
                seen.add(len(got.history))
            except BaseException as exc:
                errors.append(exc)
                return
            finally:
                with progress:
                    reads[0] += 1
                    progress.notify_all()

    def a_read_after(count: int) -> None:
        with progress:
            progress.wait_for(lambda: reads[0] > count or bool(errors), timeout=1.0)

    threads = [threading.Thread(target=read) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for history in histories[1:]:
            writer.put(base.evolve(history=history), key=key)
            a_read_after(reads[0])
    finally:
        stop.set()
        for t in threads:
            t.join()
    if errors:
        raise errors[0]
    return len(seen)


def _summary(key: str, size: int, *, owner: str | None = None) -> Summary:
    return Summary(key, "run", 1000, owner, "agent", None, None, 1, size, 0)


def _split_of(head: bytes, *segments: bytes) -> tuple[Split, int]:
    """The split whose last segment is ``segments[-1]``, and the assembled size after it."""
    digest = ""
    for segment in segments:
        digest = chain(digest, segment)
    return Split(head, segments[-1], digest), len(assemble(head, list(segments)))


class GrowingHistoryConformance:
    """Checkpointing after every message: whatever the backend stores (whole records or
    segments), every read gives the bytes a single full write would have stored."""

    def test_a_history_grown_message_by_message_reads_back_exactly(self, store: Store) -> None:
        base = checkpoint("grow", principal="p", agent="a")
        revisions = []
        for history in _grow(80):
            ckpt = base.evolve(history=history, last_completed_iteration=len(history))
            summary = store.put(ckpt, key="g")
            revisions.append(summary.revision)
            record = store.get_record("g")
            assert record is not None and record.body == _plain_bytes(ckpt, summary.saved_at)
            assert (
                summary.size == len(record.body)
                and summary.message_count == record.summary.message_count
            )
        assert store.head("g") == summary and revisions == sorted(set(revisions))
        got = store.get("g")
        assert got is not None and got.history == history

    def test_edits_truncations_and_other_writers_fall_back_to_full_writes(
        self, store: Store
    ) -> None:
        other = Store(store.backend)  # another writer: its own appender state
        base = checkpoint("g")
        histories = _grow(12)
        cases = [
            histories[3],
            histories[5],
            (Message("user", "edited"), *histories[5][1:]),  # an edited past message
            histories[2],  # truncated
            histories[8],
        ]
        writers = [store, store, store, store, other, store]
        for writer, history in zip(writers, [*cases, histories[11]], strict=False):
            ckpt = base.evolve(history=history)
            summary = writer.put(ckpt, key="g")
            record = store.get_record("g")
            assert record is not None and record.body == _plain_bytes(ckpt, summary.saved_at)
        store.delete("g")
        ckpt = base.evolve(history=histories[11])
        before, summary = summary, store.put(ckpt, key="g")
        assert summary.revision > before.revision
        assert store.get_record("g").body == _plain_bytes(ckpt, summary.saved_at)  # type: ignore[union-attr]

    def test_unknown_fields_and_key_order_survive_growth(self, store: Store) -> None:
        doc = checkpoint("g").to_json()
        doc = {"runId": doc["runId"], "futureField": [1, {"b": 2, "a": 1}], **doc}
        ckpt = RunCheckpoint.from_json(doc)
        for history in _grow(5):
            grown = ckpt.evolve(history=history)
            summary = store.put(grown, key="g")
            assert store.get_record("g").body == _plain_bytes(grown, summary.saved_at)  # type: ignore[union-attr]
        got = store.get_json("g")
        assert got is not None and list(got["data"])[:2] == ["runId", "futureField"]

    def test_growth_keeps_conditions_and_ownership(self, store: Store) -> None:
        base = checkpoint("g", principal="alice")
        histories = _grow(6)
        first = store.put(base.evolve(history=histories[0]), key="g")
        second = store.put(base.evolve(history=histories[1]), key="g", if_revision=first.revision)
        with pytest.raises(ConflictError):
            store.put(base.evolve(history=histories[2]), key="g", if_revision=first.revision)
        with pytest.raises(OwnershipConflictError):
            store.put(checkpoint("g", principal="mallory").evolve(history=histories[2]), key="g")
        with pytest.raises(ConflictError):
            store.put(base.evolve(history=histories[2]), key="g", create_only=True)
        got = store.get("g")
        assert got is not None and got.history == histories[1]
        assert store.head("g").revision == second.revision  # type: ignore[union-attr]
        third = store.put(base.evolve(history=histories[2]), key="g", if_revision=second.revision)
        assert third.revision > second.revision

    def test_growth_past_the_segment_limit_stays_exact(self, store: Store) -> None:
        base = checkpoint("g")
        limit = getattr(store.backend, "max_segments", 4)
        for history in _grow(limit * 2 + 3):
            ckpt = base.evolve(history=history)
            summary = store.put(ckpt, key="g")
        assert store.get_record("g").body == _plain_bytes(ckpt, summary.saved_at)  # type: ignore[union-attr]
        assert [s.key for s in store.list()] == ["g"]
        assert store.forget_older_than(summary.saved_at + 1).forgotten == 1
        assert store.get("g") is None


def _appending(store: Store) -> Any:
    """What stores the store's growing histories: the store's segment layer over its backend
    (a backend without namespaces has none: skipped); a ``Segmented`` passed as the backend
    is used as it is."""
    backend = store.backend
    if isinstance(backend, Segmented):
        return backend
    skip_without_namespaces(store)
    return Segmented(backend)


class AppendingConformance:
    """The segment layer's ``append`` over the backend (``_segments.py``): an
    append applies to exactly the record it extends, or changes nothing."""

    def test_an_append_applies_only_to_the_record_it_extends(self, store: Store) -> None:
        backend = _appending(store)
        first, size = _split_of(b"[\x00]", b"1")
        second, grown_size = _split_of(b"[\x00]", b"1", b"2")
        grown = _summary("k", grown_size)
        assert backend.append(grown, second, base_revision=1, base_digest=first.digest) is None
        whole = backend.save(Record(_summary("k", 3), b"[1]")).revision  # whole, not split
        assert backend.append(grown, second, base_revision=whole, base_digest=first.digest) is None
        split = backend.save_split(Record(_summary("k", size, owner="al"), b"[1]"), first)
        rev = split.revision
        for revision, digest in (
            (whole, first.digest),
            (rev, chain("", b"other")),
            (rev + 1, first.digest),
        ):
            assert backend.append(grown, second, base_revision=revision, base_digest=digest) is None
        before = backend.load("k")
        assert before is not None and before.body == b"[1]" and before.summary == split
        with pytest.raises(OwnershipConflictError):
            backend.append(
                _summary("k", grown_size, owner="mallory"),
                second,
                base_revision=rev,
                base_digest=first.digest,
            )
        assert backend.load("k") == before
        landed = backend.append(grown, second, base_revision=rev, base_digest=first.digest)
        assert landed is not None and landed.owner == "al" and landed.revision > rev
        loaded = backend.load("k")
        assert loaded is not None and loaded.body == b"[1,2]" and loaded.summary == landed
