"""The fsspec backend on fsspec's memory filesystem (``fsspec+memory://``): the conformance
suite (growing histories through the store's segment layer), listing at scale, hostile keys,
index repair, driver errors translated, and stores an earlier version wrote in segments."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import fsspec
import orjson
import pytest
from support.pieces import live_pieces, referenced

from agent_checkpoint import Store, migrate_records, open_store
from agent_checkpoint._maintenance import verify_store
from agent_checkpoint._model import Message, now_ms
from agent_checkpoint._segments import PIECES, Segmented
from agent_checkpoint._store import RetryPolicy
from agent_checkpoint.backends import Record, Summary
from agent_checkpoint.backends._fsspec import FsspecBackend
from agent_checkpoint.backends._memory import MemoryBackend
from agent_checkpoint.backends._objects import fields_of, key_name
from agent_checkpoint.errors import (
    BackendError,
    BackendUnavailableError,
    InvalidKeyError,
    MissingDependencyError,
    UnreadableEnvelopeError,
)
from agent_checkpoint.testing import (
    AppendingConformance,
    ClaimsConformance,
    EncryptionConformance,
    GrowingHistoryConformance,
    StoreConformance,
    checkpoint,
    stamped,
)
from agent_checkpoint.testing._growth import read_while_growing

MEMORY = fsspec.filesystem("memory")  # one per process: every test takes its own root


@pytest.fixture
def root() -> Iterator[str]:
    path = f"/agent-checkpoint-tests/{uuid.uuid4().hex}"
    yield path
    remove(path)


def remove(root: str) -> None:
    # MemoryFileSystem.rm(recursive=True) is quadratic in the files it removes
    for path in [p for p in MEMORY.store if p.startswith(root + "/")]:
        del MEMORY.store[path]
    MEMORY.pseudo_dirs[:] = [d for d in MEMORY.pseudo_dirs if not d.startswith(root)]


@pytest.fixture
def store(root: str) -> Iterator[Store]:
    with open_store(f"fsspec+memory://{root}") as opened:
        yield opened


class TestFsspecMemoryStore(StoreConformance, ClaimsConformance, EncryptionConformance):
    pass


class TestFsspecStoreInPieces(GrowingHistoryConformance, AppendingConformance):
    """The segment layer with its thresholds at their lowest: every put past the first moves
    history into pieces in the ``segments`` namespace, and merges them."""

    @pytest.fixture
    def store(self, root: str) -> Iterator[Store]:
        with in_pieces(FsspecBackend(MEMORY, root)) as opened:
            yield opened


def in_pieces(backend: FsspecBackend, max_segments: int = 4) -> Store:
    return Store(Segmented(backend, inline_bytes=0, max_segments=max_segments))


def test_fsspec_prefix_reaches_fsspec_memory_and_plain_memory_stays_ours(root: str) -> None:
    with open_store(f"fsspec+memory://{root}") as store:
        assert isinstance(store.backend, FsspecBackend)
        store.put(checkpoint("r"), key="k")
    assert MEMORY.exists(f"{root}/records")
    with open_store("memory://") as ours:
        assert isinstance(ours.backend, MemoryBackend)


def test_an_unknown_scheme_or_a_missing_driver_is_a_clear_error() -> None:
    with pytest.raises(InvalidKeyError, match="unknown store URL scheme 'no-such-scheme://'"):
        open_store("no-such-scheme://bucket/prefix")
    with pytest.raises(InvalidKeyError, match="no store backend or fsspec filesystem"):
        open_store("fsspec+no-such-scheme://bucket/prefix")  # asked for fsspec by name
    with pytest.raises(MissingDependencyError, match="gs:// store needs a driver"):
        open_store("gs://bucket/prefix")  # gcsfs is not installed here


def test_compare_and_swap_holds_only_within_one_process(root: str) -> None:
    backend = FsspecBackend.from_url(f"fsspec+memory://{root}")
    assert backend.conditional_writes_across_processes is False
    # two stores on one root in one process share the lock: one CAS winner
    first, second = Store(backend), Store(FsspecBackend.from_url(f"fsspec+memory://{root}"))
    first.put(checkpoint(), key="race")
    barrier = threading.Barrier(8)
    wins: list[int] = []

    def contender(i: int) -> None:
        barrier.wait()
        try:
            (first if i % 2 else second).put(checkpoint(text=f"w{i}"), key="race", if_revision=1)
            wins.append(i)
        except Exception:
            pass

    threads = [threading.Thread(target=contender, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1
    assert first.head("race").revision == 2  # type: ignore[union-attr]


def test_newest_100_of_10000_and_paging_all_while_a_writer_adds_newer(store: Store) -> None:
    total = 10_000
    saved = {f"k{i:05d}": 1_000_000 + i // 3 for i in range(total)}  # ties broken by key
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda k: store.put(stamped(checkpoint(k), saved[k]), key=k), saved))
    expected = sorted(saved, key=lambda k: (-saved[k], k))
    assert [s.key for s in store.list(limit=100)] == expected[:100]

    stop = threading.Event()

    written: list[str] = []

    def writer() -> None:
        while not stop.wait(0.01):
            key = f"new{len(written)}"
            store.put(stamped(checkpoint(key), 2_000_000 + len(written)), key=key)
            written.append(key)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        seen = [s.key for s in store.iter_summaries(page_size=1000) if not s.key.startswith("new")]
    finally:
        stop.set()
        thread.join()
    assert seen == expected
    assert written, "the writer added nothing while the pages were read"


HOSTILE = [
    "../../outside",
    "/leading/slash",
    "a//double",
    "%2e%2e%2f",
    "index/00000000000000000_x!y.z",
    "*",
    "[a-z]?",
    "{hash}:tag*",
    "'; DROP TABLE checkpoints; --",
    "\\..\\windows",
    "ü" * 1024,
]


def test_hostile_keys_and_filters_are_plain_strings_that_stay_under_the_root(root: str) -> None:
    neighbour = root + "-neighbour"
    before = set(MEMORY.find("/"))
    with (
        open_store(f"fsspec+memory://{root}") as store,
        open_store(f"fsspec+memory://{neighbour}") as other,
    ):
        other.put(checkpoint("untouched", principal="*"), key="untouched")
        for key in HOSTILE:
            store.put(checkpoint("x", principal=key, agent=key, text=key), key=key)
        for key in HOSTILE:
            got = store.get(key)
            assert got is not None and got.history[0].content == f"{key} 0"
            assert [s.key for s in store.list(owner=key)] == [key]
            assert [s.key for s in store.list(agent_id=key)] == [key]
        assert sorted(s.key for s in store.list(limit=100)) == sorted(HOSTILE)
        assert store.list(owner="%").items == [] and store.list(agent_id=".*").items == []
        made = set(MEMORY.find("/")) - before
        ours = (f"{root}/records/", f"{root}/index/", f"{root}/_segments/", f"{neighbour}/")
        assert made and all(path.startswith(ours) for path in made)
        for key in HOSTILE:
            assert store.delete(key) is True
        assert [s.key for s in other.list()] == ["untouched"]
    remove(neighbour)


def test_entries_left_by_a_crash_are_skipped_and_repair_rebuilds_the_index(root: str) -> None:
    with open_store(f"fsspec+memory://{root}") as store:
        for i in range(20):
            store.put(stamped(checkpoint(f"r{i}", principal=f"p{i % 2}"), 1000 + i), key=f"k{i}")
        expected = [s.key for s in store.list(limit=100)]
        index = f"{root}/index"
        stale = sorted(MEMORY.ls(index, detail=False))[-1]  # the oldest record's entry
        store.put(stamped(checkpoint("moved"), 5000), key=expected[-1])  # its entry moves
        MEMORY.pipe_file(stale, b"")  # as if the writer had died before deleting the old one
        assert [s.key for s in store.list(limit=100)] == [expected[-1], *expected[:-1]]
        backend: FsspecBackend = store.backend  # type: ignore[assignment]
        assert backend.verify() == {"records": 20, "missing": 0, "stale": 1}
        MEMORY.rm(index, recursive=True)
        assert store.list().items == []
        report = verify_store(store, repair=True)  # what `verify --repair` runs
        assert len(report.unlisted) == 20 and report.repaired == 20
        assert backend.verify() == {"records": 20, "missing": 0, "stale": 0}
        assert [s.key for s in store.list(limit=100)] == [expected[-1], *expected[:-1]]
        assert [s.key for s in store.list(owner="p1")] == [k for k in expected if int(k[1:]) % 2]


def test_a_claim_rewrites_the_run_under_the_same_index_entry(root: str) -> None:
    """A claim's fence rewrites the run unchanged: the index entry stays as it is (the same
    object, not deleted and written again), and the run lists once at its new revision."""
    ticks = iter(range(now_ms(), now_ms() + 10**6))  # each put at a later millisecond: a
    # put in the same millisecond lists under the same entry, as the claim's fence does
    with Store(open_store(f"fsspec+memory://{root}").backend, clock=lambda: next(ticks)) as store:
        base = checkpoint("fence")
        store.put(base, key="k")
        index = f"{root}/index"
        [entry] = MEMORY.ls(index, detail=False)
        stored = MEMORY.store[entry]
        with store.claim("k", "w1", ttl=60) as claim:
            assert MEMORY.ls(index, detail=False) == [entry] and MEMORY.store[entry] is stored
            assert [(s.key, s.revision) for s in store.list()] == [("k", 2)] == [("k", claim.fence)]
            claim.put(base.evolve(last_completed_iteration=3))
        assert MEMORY.ls(index, detail=False) != [entry]  # a put of new state moves it
        backend: FsspecBackend = store.backend  # type: ignore[assignment]
        assert backend.verify() == {"records": 1, "missing": 0, "stale": 0}
        assert store.get("k") == base.evolve(last_completed_iteration=3)


class FlakyFilesystem:
    """fsspec's memory filesystem whose reads fail as a network filesystem's would."""

    def __init__(self, error: Exception) -> None:
        self.inner = MEMORY
        self.error = error

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def cat_ranges(self, *args: Any, **kwargs: Any) -> Any:
        raise self.error


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (ConnectionResetError("reset by peer"), BackendUnavailableError),
        (TimeoutError("timed out"), BackendUnavailableError),
        (PermissionError("forbidden"), BackendError),
    ],
)
def test_filesystem_errors_become_the_library_errors(
    root: str, error: Exception, kind: type[BackendError]
) -> None:
    flaky = FsspecBackend.from_url(f"fsspec+memory://{root}", fs=FlakyFilesystem(error))
    store = Store(flaky, retry=RetryPolicy(attempts=2, initial=0.01, maximum=0.01))
    with pytest.raises(kind) as caught:
        store.head("k")
    assert type(caught.value) is kind
    assert (caught.value.backend, caught.value.operation) == ("fsspec", "head")
    assert caught.value.__cause__ is error


# -- growing histories: the store's segment layer over this backend -------------------------


def grown(n: int) -> list[tuple[Message, ...]]:
    out, history = [], ()
    for i in range(n):
        history = (*history, Message(("user", "assistant")[i % 2], f"message {i} " + "x" * i))
        out.append(history)
    return out


def plain(ckpt: Any, saved_at: int) -> bytes:
    """What a whole write stores."""
    return orjson.dumps({"format": "conversation-v1", "data": ckpt.to_json(), "savedAt": saved_at})


def test_a_growing_history_writes_only_its_new_messages_and_reads_back_exactly(
    root: str,
) -> None:
    writes: list[tuple[str, int]] = []
    original = MEMORY.pipe_file  # every write of this filesystem ends here (pipe included)

    def pipe_file(path: str, value: bytes, **kwargs: Any) -> None:
        writes.append((path, len(value)))
        original(path, value, **kwargs)

    backend = FsspecBackend(MEMORY, root)
    store = in_pieces(backend)
    base = checkpoint("grow", principal="p")
    try:
        for i, history in enumerate(grown(80)):
            ckpt = base.evolve(history=history, last_completed_iteration=i)
            before = referenced(backend, "g")
            writes.clear()
            MEMORY.pipe_file = pipe_file  # type: ignore[method-assign]
            try:
                summary = store.put(ckpt, key="g")
            finally:
                MEMORY.pipe_file = original  # type: ignore[method-assign]
            got = store.get_record("g")
            assert got is not None and got.body == plain(ckpt, summary.saved_at)
            assert got.summary == summary and store.get("g") == ckpt
            if i > 0:  # an append: one new piece (the new message, perhaps merged), a small head
                [new] = referenced(backend, "g") - before
                path = f"{root}/_segments/records/{key_name(new)}"
                [piece] = [n for p, n in writes if p == path]
                assert piece > len(orjson.dumps(history[-1].to_json()))
                [head] = [n for p, n in writes if p.startswith(f"{root}/records/")]
                assert head < 1500
        assert 1 < len(referenced(backend, "g")) <= 4
        assert live_pieces(backend) == referenced(backend, "g")
        assert [s.key for s in store.list()] == ["g"]
    finally:
        store.close()


def test_merges_deletes_and_whole_writes_leave_no_piece_behind(root: str) -> None:
    backend = FsspecBackend(MEMORY, root)
    store = in_pieces(backend, max_segments=3)
    base = checkpoint("g")
    for key in ("a", "b"):
        for history in grown(12):
            store.put(base.evolve(history=history), key=key)
            assert len(referenced(backend, key)) <= 3
    assert live_pieces(backend) == referenced(backend, "a", "b")
    record = store.get_record("a")
    assert record is not None
    store.put_record(record)  # a whole write, as copy and migrate do
    assert store.get_record("a").body == record.body  # type: ignore[union-attr]
    assert live_pieces(backend) == referenced(backend, "b")
    assert store.delete("b") is True
    assert live_pieces(backend) == set()
    # a replaced piece goes whole (its key is never used again): no tombstone is left
    assert backend.fs.find(f"{root}/_{PIECES}") == []
    assert store.get("b") is None and store.get_record("a").body == record.body  # type: ignore[union-attr]


def test_readers_never_see_a_torn_history_while_a_writer_merges(root: str) -> None:
    writer, reader = (
        in_pieces(FsspecBackend(MEMORY, root), 2),
        open_store(f"fsspec+memory://{root}"),
    )
    assert read_while_growing(writer, reader) > 3


def test_verify_counts_orphaned_pieces_and_repair_removes_only_them(root: str) -> None:
    backend = FsspecBackend(MEMORY, root)
    store = in_pieces(backend)
    for history in grown(5):
        store.put(checkpoint("g").evolve(history=history), key="g")
    kept = referenced(backend, "g")
    # as if a writer had died a second ago between writing its piece and its record (older
    # than a grace of 0 even when verify runs within the same millisecond)
    orphans = {"g#00000000deadbeef", "gone#00000000feedface"}
    for key in orphans:
        summary = Summary(key, key, now_ms() - 1000, None, None, None, None, 0, 0, 0)
        backend.namespace(PIECES).save(Record(summary, b'{"role":"user","content":"x"}'))
    assert verify_store(store).orphans == 0  # within the grace period: maybe a write in flight
    report = verify_store(store, grace=0)
    assert report.orphans == 2 and report.ok  # garbage, not lost data
    assert verify_store(store, repair=True, grace=0).orphans == 2
    assert live_pieces(backend) == kept
    assert verify_store(store, grace=0).orphans == 0
    got = store.get("g")
    assert got is not None and got.history == grown(5)[-1]


def test_a_lost_piece_reads_as_unreadable_not_as_absent(root: str) -> None:
    backend = FsspecBackend(MEMORY, root)
    store = in_pieces(backend)
    for history in grown(3):
        store.put(checkpoint("g").evolve(history=history), key="g")
    backend.namespace(PIECES).drop(sorted(referenced(backend, "g"))[0])
    with pytest.raises(UnreadableEnvelopeError):
        open_store(f"fsspec+memory://{root}").get("g")
    assert [s.key for s in store.list()] == ["g"]  # still there, for an operator to look at


def test_a_get_reads_the_pieces_of_a_record_in_one_call(root: str) -> None:
    requested: list[list[str]] = []
    original = MEMORY.cat

    def cat(path: Any, *args: Any, **kwargs: Any) -> Any:
        requested.append(path if isinstance(path, list) else [path])
        return original(path, *args, **kwargs)

    backend = FsspecBackend(MEMORY, root)
    writer = in_pieces(backend)
    for history in grown(10):
        writer.put(checkpoint("g").evolve(history=history), key="g")
    pieces = referenced(backend, "g")
    assert len(pieces) > 1
    MEMORY.cat = cat  # type: ignore[method-assign]
    try:
        got = open_store(f"fsspec+memory://{root}").get("g")
    finally:
        MEMORY.cat = original  # type: ignore[method-assign]
    [call] = [paths for paths in requested if any("/_segments/" in p for p in paths)]
    assert len(call) == len(pieces)
    assert got is not None and got.history == grown(10)[-1]


# -- stores an earlier version wrote: histories in segment objects ------------------------


def test_a_record_an_earlier_version_kept_in_segments_reads_and_is_replaced_and_dropped(
    root: str,
) -> None:
    """Laid out by hand as the previous version wrote a grown history: a record object whose
    header lists ``segs`` and holds the head, and one object ``segments/<name>/<id>`` each."""
    ckpt = checkpoint("old", principal="p").evolve(history=grown(3)[-1])
    whole = plain(ckpt, 1000)
    head, gap, tail = whole.partition(b'"history":[')
    contents = tail[: tail.index(b"]")]
    messages = [orjson.dumps(m.to_json()) for m in ckpt.history]
    assert b",".join(messages) == contents
    name, token = key_name("k"), "0123456789abcdef"
    summary = Summary("k", ckpt.run_id, 1000, "p", None, None, None, 3, len(whole), 3)
    sids = ["00000000000000a1", "00000000000000a2"]
    parts = [b",".join(messages[:2]), messages[2]]
    for sid, part in zip(sids, parts, strict=True):
        MEMORY.pipe_file(f"{root}/segments/{name}/{sid}", part)
    fields = {"key": "k", **fields_of(summary, token), "dig": "x",
              "segs": [[sid, len(part)] for sid, part in zip(sids, parts, strict=True)]}  # fmt: skip
    body = head + gap + b"\x00" + tail[tail.index(b"]") :]
    MEMORY.pipe_file(f"{root}/records/{name}", orjson.dumps(fields) + b"\n" + body)
    backend = FsspecBackend(MEMORY, root)
    MEMORY.pipe_file(backend._layout.entry_path(summary, name, token), b"")

    store = Store(backend)
    got = store.get_record("k")
    assert got is not None and got.body == whole and got.summary == summary
    assert store.get("k") == ckpt and [s.key for s in store.list()] == ["k"]
    assert backend.load_many(["k", "none"]) == [got, None]
    assert store.put(ckpt.evolve(last_completed_iteration=9), key="k").revision == 4
    assert files_under(root, "segments") == {}  # the write over it took its segments along
    got = store.get("k")
    assert got is not None and got.last_completed_iteration == 9

    for sid, part in zip(sids, parts, strict=True):  # again, then dropped
        MEMORY.pipe_file(f"{root}/segments/{name}/{sid}", part)
    fields["rev"] = 5
    MEMORY.pipe_file(f"{root}/records/{name}", orjson.dumps(fields) + b"\n" + body)
    assert store.get_record("k").body == whole  # type: ignore[union-attr]
    assert store.delete("k") is True and store.get("k") is None
    assert files_under(root, "segments") == {}


def test_migrate_rewrites_the_records_an_earlier_version_kept_in_segments_whole(
    root: str,
) -> None:
    """A record written whole, then its object rewritten as an earlier version kept a grown
    history (its head, a ``segs`` header and one segment object), under the same token: its
    index entry still lists it."""
    from agent_checkpoint._codec import encode_parts

    store = Store(FsspecBackend(MEMORY, root))
    store.put(checkpoint("old", principal="p").evolve(history=grown(3)[-1]), key="k")
    store.put(checkpoint("new"), key="new")
    before = store.get_record("k")
    assert before is not None
    path = f"{root}/records/{key_name('k')}"
    fields = orjson.loads(MEMORY.cat_file(path).partition(b"\n")[0])
    doc = orjson.loads(before.body)
    head, contents = encode_parts(doc, doc["data"]["history"])
    MEMORY.pipe_file(f"{root}/segments/{key_name('k')}/00000000000000a1", bytes(contents))
    fields |= {"dig": "x", "segs": [["00000000000000a1", len(contents)]]}
    MEMORY.pipe_file(path, orjson.dumps(fields) + b"\n" + head)
    assert store.in_old_layout("k")
    assert store.get_record("k") == before

    report = migrate_records(store)
    assert (report.upgraded, report.current, report.failed) == (1, 1, [])
    assert files_under(root, "segments") == {}
    after = store.get_record("k")
    assert after is not None and after.body == before.body
    assert after.summary.revision == before.summary.revision + 1
    assert not store.in_old_layout("k")


def files_under(root: str, folder: str) -> dict[str, bytes]:
    prefix = f"{root}/{folder}/"
    return {p: bytes(f.getvalue()) for p, f in MEMORY.store.items() if p.startswith(prefix)}


def test_a_store_on_a_filesystem_with_folders_makes_them(tmp_path: Path) -> None:
    """The local filesystem (and any with real folders) needs a folder before a file."""
    url = f"fsspec+file://{tmp_path}/store"
    with open_store(url) as store:
        history = grown(6)
        for h in history:
            store.put(checkpoint("r").evolve(history=h), key="k")
        store.put(checkpoint("r2"), key="other")
        store.claim("k", "w1", ttl=30).release()
        got = store.get("k")
        assert got is not None and got.history == history[-1]
        assert sorted(s.key for s in store.list()) == ["k", "other"]
        assert store.delete("other") is True
    with open_store(url) as again:
        assert [s.key for s in again.list()] == ["k"]
        assert again.get("other") is None


def test_claims_never_touch_a_store_at_their_namespace(root: str) -> None:
    with open_store(f"fsspec+memory://{root}") as store:
        store.put(checkpoint("r"), key="r")
        store.claim("r", "w1", ttl=30).release()
        with pytest.raises(InvalidKeyError, match="namespaces"):
            open_store(f"fsspec+memory://{root}/_leases")
        assert store.get("r") is not None
