"""The store-side segment layer (``_segments.py``): what a backend with only the five record
operations and ``namespace`` gets for growing histories. Run here over the memory backend,
with thresholds low enough that every put moves history into pieces and merges them."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from agent_checkpoint import Store
from agent_checkpoint import _segments as segments
from agent_checkpoint._container import Keyring
from agent_checkpoint._model import Message, RunCheckpoint
from agent_checkpoint._segment_format import MAGIC, Layout
from agent_checkpoint._segments import PIECES, Segmented
from agent_checkpoint.backends import Query, Record, Summary
from agent_checkpoint.backends._memory import MemoryBackend
from agent_checkpoint.errors import BackendUnavailableError, UnreadableEnvelopeError
from agent_checkpoint.testing import (
    AppendingConformance,
    ClaimsConformance,
    EncryptionConformance,
    StoreConformance,
)
from agent_checkpoint.testing._growth import read_while_growing


class Counting(MemoryBackend):
    """A memory backend that counts the bytes and records each save writes."""

    def __init__(self) -> None:
        super().__init__()
        self.saved: list[tuple[str, int]] = []
        self.fail_next_save_after_landing = False

    def save(self, record: Record, **kwargs: Any) -> Summary:
        summary = super().save(record, **kwargs)
        self.saved.append((record.key, len(record.body)))
        if self.fail_next_save_after_landing:
            self.fail_next_save_after_landing = False
            raise BackendUnavailableError("reply lost", backend="memory", operation="save")
        return summary

    def namespace(self, name: str) -> MemoryBackend:
        with self._lock:
            return self._namespaces.setdefault(name, Counting())


def _store(backend: MemoryBackend | None = None, **options: Any) -> Store:
    options = {"inline_bytes": 0, "max_segments": 4, **options}
    return Store(Segmented(backend or MemoryBackend(), **options))


def _grow(n: int) -> list[RunCheckpoint]:
    history: tuple[Message, ...] = ()
    out = []
    for i in range(n):
        history = (*history, Message("user" if i % 2 else "assistant", f"message {i} " * 5))
        out.append(RunCheckpoint.new("m", history, run_id="r"))
    return out


def _pieces(backend: MemoryBackend) -> list[str]:
    return [s.key for s in backend.namespace(PIECES).scan(Query(limit=10_000))]


class TestSegmentLayer(
    StoreConformance, ClaimsConformance, EncryptionConformance, AppendingConformance
):
    @pytest.fixture
    def store(self) -> Iterator[Store]:
        with _store() as store:
            yield store


def test_a_plain_memory_store_uses_the_segment_layer() -> None:
    backend = MemoryBackend()
    store = Store(backend)
    for ckpt in _grow(3):
        store.put(ckpt, key="k")
    raw = backend.load("k")
    assert raw is not None and raw.body.startswith(MAGIC)  # a layout record, history inline
    got = store.get("k")
    assert got is not None and got.history == _grow(3)[-1].history


def test_each_put_of_a_growing_history_writes_only_the_new_messages() -> None:
    backend = Counting()
    store = Store(Segmented(backend, inline_bytes=2_000, max_segments=8))
    checkpoints = _grow(400)
    for ckpt in checkpoints:
        store.put(ckpt, key="k")
    pieces = backend.namespace(PIECES)
    assert isinstance(pieces, Counting)
    written = sum(n for _, n in backend.saved) + sum(n for _, n in pieces.saved)
    whole = len(store.get_record("k").body)  # type: ignore[union-attr]
    # every put rewrites the head and at most inline_bytes of history, plus merges that
    # move each byte a few times: far from the 400 * whole / 2 a rewrite per put would cost
    assert written < 400 * 3_000 + 8 * whole
    assert written < 400 * whole / 10
    layout = Layout.unpack(backend.load("k").body)  # type: ignore[union-attr]
    assert layout is not None and 1 <= len(layout.pieces) <= 8
    assert store.get("k").history == checkpoints[-1].history  # type: ignore[union-attr]


def test_pieces_merge_under_the_limit_and_replaced_ones_are_dropped() -> None:
    backend = MemoryBackend()
    store = _store(backend, max_segments=3)
    appended = 0
    segmented = store.backend
    assert isinstance(segmented, Segmented)
    original = segmented.append

    def counting(*args: Any, **kwargs: Any) -> Summary | None:
        nonlocal appended
        landed = original(*args, **kwargs)
        appended += landed is not None
        return landed

    segmented.append = counting  # type: ignore[method-assign]
    for ckpt in _grow(20):
        store.put(ckpt, key="k")
        layout = Layout.unpack(backend.load("k").body)  # type: ignore[union-attr]
        assert layout is not None and len(layout.pieces) <= 3
        assert sorted(_pieces(backend)) == sorted(f"k#{p}" for p, _ in layout.pieces)
    assert appended == 19  # every put after the first appended; none fell back to a rewrite
    assert store.get("k").history == ckpt.history  # type: ignore[union-attr]


def test_an_append_whose_reply_was_lost_is_recognised_as_landed() -> None:
    backend = Counting()
    store = _store(backend)
    a, b = _grow(2)
    first = store.put(a, key="k")
    backend.fail_next_save_after_landing = True
    summary = store.put(b, key="k", if_revision=first.revision)
    assert summary.revision == first.revision + 1  # landed once, no false conflict, no rewrite
    assert store.get("k").history == b.history  # type: ignore[union-attr]


def test_delete_and_overwrite_leave_no_pieces() -> None:
    backend = MemoryBackend()
    store = _store(backend)
    for ckpt in _grow(6):
        store.put(ckpt, key="k")
    assert _pieces(backend)
    store.put({"format": "conversation-v1", "data": ckpt.to_json(), "savedAt": 5}, key="k")
    assert _pieces(backend) == []  # a whole write replaced the layout
    for ckpt in _grow(6):
        store.put(ckpt, key="k")
    assert store.delete("k") and _pieces(backend) == []
    for ckpt in _grow(6):
        last = store.put(ckpt, key="k")
    assert store.forget_older_than(last.saved_at + 1).forgotten == 1
    assert _pieces(backend) == []


def test_a_piece_left_by_a_crashed_writer_is_an_orphan_collected_after_the_grace() -> None:
    backend = MemoryBackend()
    store = _store(backend)
    a, b = _grow(2)
    store.put(a, key="k")
    segmented = store.backend
    assert isinstance(segmented, Segmented)

    def crash(*args: Any, **kwargs: Any) -> Summary:
        raise KeyboardInterrupt  # the process dies after the piece, before the commit

    inner_save = backend.save
    backend.save = crash  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        store.put(b, key="k")
    backend.save = inner_save  # type: ignore[method-assign]
    pieces = backend.namespace(PIECES)
    assert len(_pieces(backend)) == 2  # the live record's piece and the crashed write's
    assert segmented.collect_orphans(grace=300) == 0  # young: it may be a write in flight
    assert segmented.collect_orphans(grace=-1) == 1
    assert segmented.collect_orphans(delete=True, grace=-1) == 1
    assert len(_pieces(backend)) == 1 and segmented.collect_orphans(grace=-1) == 0
    assert store.get("k").history == a.history  # type: ignore[union-attr]
    assert pieces.scan(Query())[0].key.startswith("k#")


def test_a_missing_piece_is_reported_naming_the_record_and_the_piece() -> None:
    backend = MemoryBackend()
    store = _store(backend)
    for ckpt in _grow(3):
        store.put(ckpt, key="k")
    victim = _pieces(backend)[0]
    backend.namespace(PIECES).drop(victim)
    with pytest.raises(UnreadableEnvelopeError, match=victim.partition("#")[2]):
        _store(backend).get("k")  # another process: the writer remembers what it wrote


class LoadCounting(MemoryBackend):
    """A memory backend that counts its loads (its namespaces' too)."""

    def __init__(self) -> None:
        super().__init__()
        self.loads: list[str] = []

    def load(self, key: str) -> Record | None:
        self.loads.append(key)
        return super().load(key)

    def namespace(self, name: str) -> MemoryBackend:
        with self._lock:
            return self._namespaces.setdefault(name, LoadCounting())


def test_the_writer_reads_its_own_long_history_with_one_load_and_others_read_the_pieces() -> None:
    backend = LoadCounting()
    writer = _store(backend)
    for ckpt in _grow(12):
        writer.put(ckpt, key="k")
    pieces = backend.namespace(PIECES)
    assert isinstance(pieces, LoadCounting)
    assert len(_pieces(backend)) >= 2
    backend.loads.clear()
    pieces.loads.clear()
    got = writer.get("k")
    assert got is not None and got.history == _grow(12)[-1].history
    assert (backend.loads, pieces.loads) == (["k"], [])  # pieces are immutable: remembered
    reader = _store(backend)
    again = reader.get("k")
    assert again is not None and again.history == got.history
    assert sorted(pieces.loads) == sorted(_pieces(backend))


def test_the_newest_few_entries_are_read_from_the_newest_pieces_alone() -> None:
    backend = LoadCounting()
    writer = _store(backend, max_segments=64)
    grown = _grow(40)
    for ckpt in grown:
        writer.put(ckpt, key="k")
    pieces = backend.namespace(PIECES)
    assert isinstance(pieces, LoadCounting)
    stored = len(_pieces(backend))
    assert stored >= 10
    everything = [m.to_json() for m in grown[-1].history]
    for last, most in ((1, 1), (3, 3), (40, stored)):
        pieces.loads.clear()
        got = _store(backend).get_json("k", last=last)  # a reader that remembers nothing
        assert got is not None and got["data"]["history"] == everything[-last:]
        assert 1 <= len(pieces.loads) <= most, (last, pieces.loads)
    pieces.loads.clear()
    assert _store(backend).get_json("k", last=0) is not None
    assert pieces.loads == []


class BatchCounting(MemoryBackend):
    """A memory backend that reads several records in one call (``Batched``), and counts
    those calls and single loads as round trips (its namespaces' too)."""

    def __init__(self) -> None:
        super().__init__()
        self.trips: list[list[str]] = []

    def load(self, key: str) -> Record | None:
        self.trips.append([key])
        return super().load(key)

    def load_many(self, keys: Sequence[str]) -> list[Record | None]:
        self.trips.append(list(keys))
        return [super(BatchCounting, self).load(k) for k in keys]

    def namespace(self, name: str) -> MemoryBackend:
        with self._lock:
            return self._namespaces.setdefault(name, BatchCounting())


@pytest.mark.parametrize("inline_bytes", [0, 300])
def test_the_newest_entries_of_many_pieces_come_in_few_round_trips(inline_bytes: int) -> None:
    # A long conversation kept in many small pieces (a PostgreSQL run, say): the newest 10 or
    # 30 must not cost a round trip per piece.
    backend = BatchCounting()
    writer = _store(backend, inline_bytes=inline_bytes, max_segments=1024)
    grown = _grow(120)
    for ckpt in grown:
        writer.put(ckpt, key="k")
    pieces = backend.namespace(PIECES)
    assert isinstance(pieces, BatchCounting)
    assert len(_pieces(backend)) >= 30
    everything = [m.to_json() for m in grown[-1].history]
    for last in (10, 30):
        pieces.trips.clear()
        got = _store(backend).get_json("k", last=last)  # a reader that remembers nothing
        assert got is not None and got["data"]["history"] == everything[-last:]
        assert len(pieces.trips) == 1, (last, pieces.trips)
        assert sum(map(len, pieces.trips)) <= last + 2, (last, pieces.trips)


def test_a_put_that_states_no_revision_replaces_the_remembered_layout_without_a_read() -> None:
    backend = LoadCounting()
    store = _store(backend)
    for ckpt in _grow(8):
        store.put(ckpt, key="k")
    before = set(_pieces(backend))
    assert before
    backend.loads.clear()
    store.put(RunCheckpoint.new("m", (Message("user", "edited"),), run_id="r"), key="k")
    assert backend.loads == []  # the layout it replaced was remembered
    assert not before & set(_pieces(backend))  # and its pieces dropped
    store.delete("k")
    assert backend.loads == [] and _pieces(backend) == []


def test_a_first_put_creates_without_a_read_and_a_put_after_a_get_reads_nothing_more() -> None:
    backend = LoadCounting()
    store = _store(backend, inline_bytes=None)  # the default: a short history stays inline
    first = _grow(6)
    store.put(first[-1], key="new")
    assert backend.loads == []  # a key the store knows nothing of: created, not read first
    reader = _store(backend, inline_bytes=None)
    got = reader.get("new")
    assert got is not None and got.history == first[-1].history
    backend.loads.clear()
    reader.put(_grow(7)[-1], key="new")  # extends what it read: the layout is remembered
    assert backend.loads == []
    assert reader.get("new").history == _grow(7)[-1].history  # type: ignore[union-attr]


def test_a_put_over_a_key_the_store_never_saw_reads_it_once_and_drops_its_pieces() -> None:
    backend = LoadCounting()
    writer = _store(backend)
    for ckpt in _grow(10):
        writer.put(ckpt, key="k")
    old = set(_pieces(backend))
    assert old
    other = _store(backend, inline_bytes=None)  # its put stays inline: no piece to spill
    backend.loads.clear()
    replacement = RunCheckpoint.new("m", (Message("user", "from elsewhere"),), run_id="r")
    other.put(replacement, key="k")  # its create is refused: then it reads what it replaces
    assert backend.loads == ["k"]
    assert not old & set(_pieces(backend))  # nothing left behind
    assert other.get("k") == replacement and writer.get("k") == replacement


def test_a_backend_may_ask_the_layer_to_read_before_it_writes_a_key_it_does_not_know() -> None:
    class ReadFirst(LoadCounting):
        segment_create_first = False

    backend = ReadFirst()
    _store(backend, inline_bytes=None).put(_grow(3)[-1], key="k")
    assert backend.loads == ["k"]


def test_a_whole_write_keeps_a_short_history_inline_where_appends_keep_less() -> None:
    class Small(Counting):
        segment_inline_bytes = 64

    backend = Small()
    store = Store(backend)  # the layer takes the backend's own threshold
    history = _grow(8)
    store.put(history[-1], key="k")  # ~500 bytes of history: over 64, under the default
    assert _pieces(backend) == [] and [k for k, _ in backend.saved] == ["k"]
    store.put(_grow(9)[-1], key="k")  # the first append past 64 bytes spills
    assert len(_pieces(backend)) == 1
    assert store.get("k").history == _grow(9)[-1].history  # type: ignore[union-attr]


def test_a_read_that_ends_after_a_newer_write_does_not_bring_back_the_older_layout() -> None:
    class SlowLoad(MemoryBackend):
        def __init__(self) -> None:
            super().__init__()
            self.read, self.release = threading.Event(), threading.Event()
            self.slow = False

        def load(self, key: str) -> Record | None:
            record = super().load(key)
            if self.slow and key == "k":
                self.slow = False
                self.read.set()
                self.release.wait(10)
            return record

    backend = SlowLoad()
    store = _store(backend)
    history = _grow(9)
    store.put(history[3], key="k")
    backend.slow = True
    reader = threading.Thread(target=store.get, args=("k",))
    reader.start()
    assert backend.read.wait(10)
    store.put(history[8], key="k")  # a newer layout, remembered by the writer
    backend.release.set()
    reader.join(10)
    store.put(RunCheckpoint.new("m", (Message("user", "short"),), run_id="r"), key="k")
    # it replaced the newer layout and dropped its pieces: none is left behind
    assert set(_pieces(backend)) == {f"k#{p}" for p in _layout_pieces(backend, "k")}


def _layout_pieces(backend: MemoryBackend, key: str) -> list[str]:
    record = backend.load(key)
    layout = None if record is None else Layout.unpack(record.body)
    return [piece for piece, _ in layout.pieces] if layout else []


def test_the_layouts_a_store_remembers_hold_a_bounded_amount_of_history(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(segments, "KNOWN_BYTES", 64 * 1024)
    backend = LoadCounting()
    store = _store(backend, inline_bytes=None)  # whole writes keep their history inline
    medium = tuple(Message("user", f"message {i} " * 40) for i in range(10))  # ~4.5 KB each
    for i in range(20):  # ~90 KB in all: over the 64 KB budget
        store.put(RunCheckpoint.new("m", medium, run_id="r"), key=f"k{i}")
    edited = RunCheckpoint.new("m", (Message("user", "edited"),), run_id="r")
    backend.loads.clear()
    store.put(edited, key="k19")  # recently written: its layout remembered, nothing read
    assert backend.loads == []
    store.put(edited, key="k0")  # pushed out by the budget: read to learn what it replaces
    assert backend.loads == ["k0"]
    long = tuple(Message("user", f"message {i} " * 50) for i in range(40))  # ~25 KB > 64 KB / 8
    store.put(RunCheckpoint.new("m", long, run_id="r"), key="long")
    backend.loads.clear()
    longer = (*long, Message("assistant", "one more"))
    store.put(RunCheckpoint.new("m", longer, run_id="r"), key="long")
    assert backend.loads == ["long"]  # too long to remember: read again to append
    assert store.get("long").history == longer  # type: ignore[union-attr]


def test_reads_never_see_a_torn_history_while_pieces_merge() -> None:
    backend = MemoryBackend()
    writer = _store(backend, max_segments=2)
    reader = _store(backend, max_segments=2)
    assert read_while_growing(writer, reader, n=60) > 1


def test_an_encrypted_store_reads_and_writes_whole_records() -> None:
    pytest.importorskip("cryptography")
    backend = MemoryBackend()
    keyring = Keyring({"k1": bytes(range(32))}, "k1")
    store = Store(Segmented(backend, inline_bytes=0), keyring=keyring)
    for ckpt in _grow(5):
        store.put(ckpt, key="k")
    assert not backend.load("k").body.startswith(MAGIC)  # type: ignore[union-attr]
    assert store.get("k").history == ckpt.history  # type: ignore[union-attr]


def test_a_layout_record_saved_again_as_it_was_keeps_its_pieces() -> None:
    """A claim moves a run's revision past stale writers by saving its stored bytes again:
    saving a layout record must not drop the pieces it names."""
    backend = MemoryBackend()
    store = _store(backend)
    for ckpt in _grow(4):
        store.put(ckpt, key="k")
    raw = backend.load("k")
    assert raw is not None and raw.body.startswith(MAGIC)
    segmented = store.backend
    assert isinstance(segmented, Segmented)
    segmented.save(raw, expect_revision=raw.summary.revision)
    assert _pieces(backend) and store.get("k").history == ckpt.history  # type: ignore[union-attr]
    with Store(backend).claim("k", "w", ttl=30) as claim:  # the claim's own rewrite
        got = claim.get()
        assert got is not None and got.history == ckpt.history


def test_a_store_on_a_segmented_backend_sets_up_the_backend_under_it() -> None:
    class NeedsSetup(MemoryBackend):
        ready = False

        def setup(self) -> None:
            self.ready = True

    backend = NeedsSetup()
    _store(backend).setup()
    assert backend.ready


class InRuns(MemoryBackend):
    """A memory backend that declares how many pieces it reads at once, as PostgreSQL does:
    the layer writes its pieces as a run and merges them whole when the run fills."""

    segment_max_pieces = 4

    def namespace(self, name: str) -> MemoryBackend:
        with self._lock:
            return self._namespaces.setdefault(name, InRuns())


class TestSegmentLayerInRuns(TestSegmentLayer):
    @pytest.fixture
    def store(self) -> Iterator[Store]:
        with Store(Segmented(InRuns(), inline_bytes=0)) as store:
            yield store


def _manifest(backend: MemoryBackend, key: str) -> bytes:
    record = backend.load(key)
    assert record is not None and record.body.startswith(MAGIC)
    return record.body[len(MAGIC) : record.body.index(b"\n", len(MAGIC))]


def test_pieces_in_a_run_keep_the_manifest_a_few_bytes_however_long_the_history() -> None:
    backend = InRuns()
    store = Store(Segmented(backend, inline_bytes=0, max_segments=1_000))
    checkpoints = _grow(200)
    sizes = set()
    for ckpt in checkpoints:
        store.put(ckpt, key="k")
        sizes.add(len(_manifest(backend, "k")))
    assert max(sizes) < 120  # a listed manifest of 200 pieces would be ~6 KB
    layout = Layout.unpack(backend.load("k").body)  # type: ignore[union-attr]
    assert layout is not None and layout.run and len(layout.pieces) == 200
    assert [p for p, _ in layout.pieces] == [f"{layout.run}.{i}" for i in range(200)]
    assert sorted(_pieces(backend)) == sorted(f"k#{p}" for p, _ in layout.pieces)
    reader = Store(Segmented(backend, inline_bytes=0, max_segments=1_000))
    assert reader.get("k").history == checkpoints[-1].history  # type: ignore[union-attr]


def test_a_full_run_is_merged_whole_into_a_new_run_and_its_pieces_dropped() -> None:
    backend = InRuns()
    store = _store(backend, max_segments=3)
    runs = []
    for ckpt in _grow(12):
        store.put(ckpt, key="k")
        layout = Layout.unpack(backend.load("k").body)  # type: ignore[union-attr]
        assert layout is not None and 1 <= len(layout.pieces) <= 3
        assert sorted(_pieces(backend)) == sorted(f"k#{p}" for p, _ in layout.pieces)
        runs.append(layout.run)
    assert len(set(runs)) > 2  # each merge started a run of its own
    assert _store(backend).get("k").history == ckpt.history  # type: ignore[union-attr]


def test_pieces_an_older_layer_listed_become_a_run_at_the_next_piece() -> None:
    backend = InRuns()
    checkpoints = _grow(8)
    listed = Store(Segmented(backend, inline_bytes=0, max_segments=16))
    listed.backend.runs = False  # type: ignore[attr-defined]
    for ckpt in checkpoints[:5]:
        listed.put(ckpt, key="k")
    assert b'"s":' in _manifest(backend, "k")
    store = _store(backend, max_segments=16)
    assert store.get("k").history == checkpoints[4].history  # type: ignore[union-attr]
    for ckpt in checkpoints[5:]:
        store.put(ckpt, key="k")
    layout = Layout.unpack(backend.load("k").body)  # type: ignore[union-attr]
    assert layout is not None and layout.run and len(layout.pieces) == 3
    assert sorted(_pieces(backend)) == sorted(f"k#{p}" for p, _ in layout.pieces)
    assert _store(backend).get("k").history == checkpoints[-1].history  # type: ignore[union-attr]


def test_two_writers_extending_one_run_never_share_a_piece() -> None:
    backend = InRuns()
    a, b = _store(backend, max_segments=100), _store(backend, max_segments=100)
    base = _grow(6)
    a.put(base[4], key="k")
    assert b.get("k") is not None  # both now extend the same layout
    mine = RunCheckpoint.new("m", (*base[4].history, Message("user", "from a")), run_id="r")
    theirs = RunCheckpoint.new("m", (*base[4].history, Message("user", "from b")), run_id="r")
    a.put(mine, key="k")  # writes the run's next piece and commits it
    b.put(theirs, key="k")  # the same next piece exists: b writes whole, replacing a's
    for reader in (a, b, _store(backend)):
        assert reader.get("k") == theirs
    # b replaced the layout it remembered: a's piece is left for collect_orphans, as any
    # write that states no revision leaves the pieces of a layout it did not see
    segmented = b.backend
    assert isinstance(segmented, Segmented)
    assert segmented.collect_orphans(delete=True, grace=-1) == 1
    assert sorted(_pieces(backend)) == sorted(f"k#{p}" for p in _layout_pieces(backend, "k"))


def test_reads_never_see_a_torn_history_while_a_run_is_merged() -> None:
    backend = InRuns()
    writer = _store(backend, max_segments=2)
    reader = _store(backend, max_segments=2)
    assert read_while_growing(writer, reader, n=60) > 1
