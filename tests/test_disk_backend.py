import multiprocessing
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_checkpoint import Store, UnreadableEnvelopeError, open_store
from agent_checkpoint.backends import Query, Summary
from agent_checkpoint.backends._disk import DiskBackend, file_name
from agent_checkpoint.errors import BackendError, ConflictError, InvalidKeyError
from agent_checkpoint.testing import (
    AppendingConformance,
    ClaimsConformance,
    EncryptionConformance,
    StoreConformance,
    checkpoint,
    stamped,
)


class TestDiskStore(
    StoreConformance, ClaimsConformance, EncryptionConformance, AppendingConformance
):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[Store]:
        with open_store(str(tmp_path / "store")) as store:
            yield store


def test_file_urls_and_bare_paths_open_the_same_folder(tmp_path: Path) -> None:
    with open_store(str(tmp_path)) as a:
        a.put(checkpoint("r1"), key="k")
    with open_store(f"file://{tmp_path}") as b:
        assert b.get("k") is not None


def test_no_key_escapes_the_records_folder(tmp_path: Path) -> None:
    for key in ["../../outside", "/abs/path", "..", ".", "a/../../b", "~", "x" * 1024]:
        name = file_name(key)
        assert "/" not in name and name not in (".", "..") and len(name.encode()) < 255
    with open_store(str(tmp_path / "s")) as store:
        store.put(checkpoint(), key="../../outside")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]


def test_corrupted_record_file_is_unreadable_not_absent(tmp_path: Path) -> None:
    with open_store(str(tmp_path)) as store:
        store.put(checkpoint(), key="k")
        path = tmp_path / "records" / file_name("k")
        path.write_bytes(path.read_bytes()[:40])
        with pytest.raises(UnreadableEnvelopeError):
            store.get("k")
        path.write_bytes(b"\x00\xff garbage without a header")
        with pytest.raises(UnreadableEnvelopeError):
            store.get("k")


def test_missing_index_is_rebuilt_from_the_records(tmp_path: Path) -> None:
    with open_store(str(tmp_path)) as store:
        for i in range(5):
            store.put(stamped(checkpoint(f"r{i}", principal="p"), 100 + i), key=f"k{i}")
    for name in ("index.sqlite3", "index.sqlite3-wal", "index.sqlite3-shm"):
        (tmp_path / name).unlink(missing_ok=True)
    with open_store(str(tmp_path)) as store:
        assert [s.key for s in store.list(owner="p")] == [f"k{i}" for i in range(4, -1, -1)]


def test_a_write_interrupted_before_indexing_is_reconciled(tmp_path: Path) -> None:
    backend = DiskBackend(tmp_path)
    store = Store(backend)
    store.put(stamped(checkpoint("r1"), 100), key="k")
    # What a writer killed between the rename and the index update leaves behind:
    backend._index.db().execute("INSERT INTO pending (key) VALUES ('k')")
    backend._index.db().execute("UPDATE summaries SET revision = 0, saved_at = 1 WHERE key = 'k'")
    [summary] = store.list().items
    assert (summary.revision, summary.saved_at) == (1, 100)
    store.close()


def test_an_index_update_interrupted_midway_leaves_the_index_as_it_was(tmp_path: Path) -> None:
    """Ctrl-C while the index settles marks (a listing's reconciliation) rolls the whole
    transaction back: no summary half-stored, every mark kept, and the thread's connection
    free for the next write (not left inside a transaction)."""
    backend = DiskBackend(tmp_path)
    store = Store(backend)
    store.put(stamped(checkpoint("r1"), 100), key="a")
    store.put(stamped(checkpoint("r2"), 200), key="b")
    index = backend._index
    before = {s.key: s for s in index.scan(Query(limit=10))}
    index.db().execute("INSERT INTO pending (key) VALUES ('a'), ('b')")

    def settled() -> Iterator[tuple[str, Summary | None]]:
        yield "a", None  # would remove a's summary
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        index.settle(settled())
    assert {s.key: s for s in index.scan(Query(limit=10))} == before
    assert sorted(index.pending()) == ["a", "b"]
    store.put(stamped(checkpoint("r3"), 300), key="c")  # the same thread's connection
    assert [s.key for s in store.list().items] == ["c", "b", "a"]
    store.close()


def test_marks_kept_for_rewritten_keys_stay_few_and_are_settled_on_close(
    tmp_path: Path,
) -> None:
    """A rewrite keeps its key's pending mark (the next rewrite of that key then syncs none);
    a listing reads the file of each mark it finds, so a store keeps only a few, and leaves
    none when it closes."""
    from agent_checkpoint.backends._disk import _KEPT_MARKS

    backend = DiskBackend(tmp_path)
    with Store(backend) as store:
        for round in range(3):
            for i in range(40):
                store.put(stamped(checkpoint(f"r{i}-{round}"), 100 + round), key=f"k{i}")
        assert 0 < len(backend._index.pending()) <= _KEPT_MARKS
        assert [s.run_id for s in store.list(limit=2)] == ["r0-2", "r1-2"]
        store.put(stamped(checkpoint("r0-3"), 200), key="k0")
    with open_store(str(tmp_path)) as store:
        assert store.backend._index.pending() == []  # type: ignore[attr-defined]
        assert [(s.key, s.run_id) for s in store.list(limit=1)] == [("k0", "r0-3")]


def test_a_growing_history_rewrites_only_its_newest_part(tmp_path: Path) -> None:
    """Past the inline threshold the older history moves into immutable pieces (the Store's
    segment layer, in the ``_segments`` folder): the record stays small however long the
    history grows (its file, of appended frames, is replaced before it passes ``LOG_BYTES``),
    the pieces are each written once (bar merges), and a rewrite or a delete removes the
    pieces it replaced."""
    from agent_checkpoint._model import Message, RunCheckpoint
    from agent_checkpoint._segments import Segmented
    from agent_checkpoint.backends._disk_files import LOG_BYTES

    backend = DiskBackend(tmp_path)
    store = Store(Segmented(backend, inline_bytes=2048, max_segments=4))
    record_file = tmp_path / "records" / file_name("k")
    pieces = tmp_path / "_segments" / "records"
    history: tuple[Message, ...] = ()
    largest = largest_file = 0
    for i in range(300):
        history = (*history, Message("user", f"message {i:03d} " + "x" * 40))
        summary = store.put(RunCheckpoint.new("m", history, run_id="r"), key="k")
        assert summary.revision == i + 1
        stored = backend.load("k")
        assert stored is not None
        largest = max(largest, len(stored.body))
        largest_file = max(largest_file, record_file.stat().st_size)
    whole = store.get_record("k")
    assert whole is not None and len(whole.body) > 8 * largest  # the history is elsewhere
    assert largest < 2048 + 1024  # inline content plus the head
    assert largest_file <= LOG_BYTES
    assert 1 <= len(_live(pieces)) <= 4
    got = store.get("k")
    assert got is not None and got.history == history
    # A rewrite (an edited history) replaces the pieces; a delete removes them.
    edited = (Message("user", "edited"), *history[1:])
    store.put(RunCheckpoint.new("m", edited, run_id="r"), key="k")
    got = store.get("k")
    assert got is not None and got.history == edited
    store.delete("k")
    assert list(pieces.iterdir()) == []  # replaced pieces go whole: no tombstone is left
    store.close()


def _live(folder: Path) -> list[Path]:
    """The record files in ``folder`` (a deleted key leaves none)."""
    return list(folder.iterdir())


def _as_version_04(
    root: Path, key: str, body: bytes, *, one_file_per_segment: bool = False
) -> None:
    """Rewrite the record file of ``key`` (stored whole) as version 0.4 stored a growing
    history: the head in the record file, the history in a data file under ``segments/``
    (or, older still, one file per segment ``<gen>-<i>``)."""
    import orjson

    from agent_checkpoint._codec import encode_parts, join_parts

    record_file = root / "records" / file_name(key)
    header = record_file.read_bytes().partition(b"\n")[0]
    doc = orjson.loads(body)
    head, view = encode_parts(doc, doc["data"]["history"])  # a conversation-v1 envelope
    contents = bytes(view)
    assert join_parts(head, contents) == body
    fields = orjson.loads(header)
    fields.pop("frame", None)  # version 0.4 wrote no frames
    fields.pop("sum", None)
    folder = root / "segments" / file_name(key)
    folder.mkdir(parents=True)
    gen = fields["revision"]
    if one_file_per_segment:
        first, second = contents.split(b",{", 1)
        (folder / f"{gen}-0").write_bytes(first)
        (folder / f"{gen}-1").write_bytes(b"{" + second)
        split = {"gen": gen, "segs": 2, "digest": "d", "size": len(body)}
    else:
        (folder / str(gen)).write_bytes(contents + b',{"role":"user","content":"torn')
        split = {"gen": gen, "segs": 1, "digest": "d", "size": len(body), "len": len(contents)}
    record_file.write_bytes(orjson.dumps({**fields, "split": split}) + b"\n" + head)


@pytest.mark.parametrize("one_file_per_segment", [False, True])
def test_records_stored_split_by_version_04_still_read_and_are_rewritten_whole(
    tmp_path: Path, one_file_per_segment: bool
) -> None:
    from agent_checkpoint._model import Message, RunCheckpoint

    history = (Message("user", "one"), Message("assistant", "two"))
    with open_store(str(tmp_path)) as store:
        store.put(RunCheckpoint.new("m", history, run_id="r"), key="k")
        store.put(RunCheckpoint.new("m", history, run_id="r"), key="gone")
        expected = store.get_record("k")
    assert expected is not None
    for key in ("k", "gone"):
        _as_version_04(tmp_path, key, expected.body, one_file_per_segment=one_file_per_segment)
    with open_store(str(tmp_path)) as store:
        again = store.get_record("k")
        assert again is not None and again.body == expected.body  # a torn tail is not read
        assert again.summary == expected.summary
        grown = RunCheckpoint.new("m", (*history, Message("user", "three")), run_id="r")
        store.put(grown, key="k")
        got = store.get("k")
        assert got is not None and got.history == grown.history
        assert not (tmp_path / "segments" / file_name("k")).exists()
        store.delete("gone")
        assert not (tmp_path / "segments" / file_name("gone")).exists()


def test_migrate_rewrites_records_stored_split_by_version_04_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agent_checkpoint._cli import EXIT, main
    from agent_checkpoint._model import Message, RunCheckpoint

    history = (Message("user", "one"), Message("assistant", "two"))
    with open_store(str(tmp_path)) as store:
        for key in ("split", "lost", "whole"):
            store.put(RunCheckpoint.new("m", history, run_id="r"), key=key)
        expected = store.get_record("split")
    assert expected is not None
    for key in ("split", "lost"):
        _as_version_04(tmp_path, key, expected.body)
    (tmp_path / "segments" / file_name("lost") / str(expected.summary.revision)).unlink()
    assert main(["migrate", "--dry-run", "--store", str(tmp_path)]) == EXIT["invalid"]
    assert (tmp_path / "segments" / file_name("split")).exists()  # a dry run writes nothing
    capsys.readouterr()
    # the record that lost its history fails, and is left as it was
    assert main(["migrate", "--store", str(tmp_path)]) == EXIT["invalid"]
    out = capsys.readouterr().out
    assert "upgraded 1 record(s); 1 already at version 1; 1 failed" in out
    assert not (tmp_path / "segments" / file_name("split")).exists()
    with open_store(str(tmp_path)) as store:
        again = store.get_record("split")
        assert again is not None and again.body == expected.body
        assert again.summary.revision == expected.summary.revision + 1
        assert not store.in_old_layout("split")
        assert store.in_old_layout("lost")


def test_the_index_logs_stay_small_while_a_store_is_open(tmp_path: Path) -> None:
    """Every put rewrites a few pages of the SQLite index (and a long history's pieces, those of
    the pieces' index); each write-ahead log is cut back after each checkpoint instead of
    staying at its largest (4 MiB at SQLite's defaults, three times the records of a
    1,000-message conversation)."""
    from agent_checkpoint._model import Message, RunCheckpoint
    from agent_checkpoint.backends._disk_index import PAGE_SIZE, WAL_PAGES

    wals = [tmp_path / "index.sqlite3-wal", tmp_path / "_segments" / "index.sqlite3-wal"]
    largest = [0, 0]
    with open_store(str(tmp_path)) as store:
        history: tuple[Message, ...] = ()
        for i in range(600):
            history = (*history, Message("user", f"message {i} " + "x" * 500))
            store.put(RunCheckpoint.new("m", history, run_id="r"), key=f"k{i % 7}")
            for n, wal in enumerate(wals):
                if wal.exists():
                    largest[n] = max(largest[n], wal.stat().st_size)
        assert len(store.list(limit=10)) == 7
    limit = WAL_PAGES * PAGE_SIZE  # 128 KiB
    for size in largest:  # checkpoints ran, each cut the log back
        assert limit < size <= limit + 16 * 1024


def test_readers_racing_rewrites_and_appends_always_see_a_whole_record(tmp_path: Path) -> None:
    import threading

    from agent_checkpoint._model import Message, RunCheckpoint

    writer, reader = open_store(str(tmp_path)), open_store(str(tmp_path))
    writer.put(RunCheckpoint.new("m", (Message("user", "start"),), run_id="r"), key="k")
    done = threading.Event()
    errors: list[BaseException] = []
    seen: set[int] = set()

    def read() -> None:
        while not done.is_set():
            try:
                got = reader.get("k")
                assert got is not None and got.history[0].content in ("start", "edited")
                seen.add(len(got.history))
            except BaseException as exc:
                errors.append(exc)
                return

    thread = threading.Thread(target=read)
    thread.start()
    history: tuple[Message, ...] = (Message("user", "start"),)
    try:
        for i in range(150):
            if i % 10 == 9:  # an edited history: a full write to a new data file
                history = (Message("user", "edited" if i % 20 == 9 else "start"), *history[1:])
            history = (*history, Message("assistant", f"m{i}"))
            writer.put(RunCheckpoint.new("m", history, run_id="r"), key="k")
    finally:
        done.set()
        thread.join()
    assert not errors, errors[0]
    assert len(seen) > 1


def _open_together(roots: list[str], start: Any, errors: Any) -> None:
    """One of several processes: open each fresh store with the others and claim a run in
    it, so that all of them create the store's index and its leases index at once."""
    for root in roots:
        start.wait()
        try:
            with open_store(root) as store:
                store.claims()
        except Exception as exc:  # judged by the test
            errors.put(f"{type(exc).__module__}.{type(exc).__name__}: {exc}")


def test_processes_opening_a_fresh_store_together_all_succeed(tmp_path: Path) -> None:
    """Workers started together on a new store folder: switching a new index to WAL skips
    SQLite's busy handler, and raised a raw "database is locked" in 11 of 60 rounds of 6
    processes before it was retried."""
    context = multiprocessing.get_context("spawn")
    roots = [str(tmp_path / f"store-{n}") for n in range(25)]
    start, errors = context.Barrier(6), context.Queue()
    workers = [
        context.Process(target=_open_together, args=(roots, start, errors)) for _ in range(6)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=600)
    assert [worker.exitcode for worker in workers] == [0] * 6
    found = []
    while not errors.empty():
        found.append(errors.get())
    assert found == []


def test_an_unreadable_index_is_a_backend_error_saying_how_to_rebuild_it(tmp_path: Path) -> None:
    with open_store(str(tmp_path)) as store:
        store.put(checkpoint("kept"), key="k")
    for name in ("index.sqlite3-wal", "index.sqlite3-shm"):
        (tmp_path / name).unlink(missing_ok=True)
    (tmp_path / "index.sqlite3").write_bytes(b"not a database at all" * 100)
    with pytest.raises(BackendError, match=r"is not a database.*index\.sqlite3.*move it aside"):
        open_store(str(tmp_path))
    (tmp_path / "index.sqlite3").rename(tmp_path / "index.sqlite3.bad")
    with open_store(str(tmp_path)) as store:  # rebuilt from the record files
        assert [s.key for s in store.list()] == ["k"]


def test_an_unreadable_record_file_in_verify_is_a_backend_error_naming_it(tmp_path: Path) -> None:
    """``verify`` walks the record files; one the file system refuses to read (here a folder
    where a file should be) is the library's error, not a bare ``OSError``."""
    from agent_checkpoint._maintenance import verify_store

    with open_store(str(tmp_path)) as store:
        store.put(checkpoint("r1"), key="k")
        (tmp_path / "records" / file_name("not-a-file")).mkdir()
        with pytest.raises(BackendError, match=r"disk iter_records failed: IsADirectoryError"):
            verify_store(store)
        assert store.get("k") is not None


def test_keys_beginning_with_a_dot_survive_an_index_rebuild(tmp_path: Path) -> None:
    """Their record files begin with a dot too; a rebuild must not take them for temp files."""
    from agent_checkpoint._maintenance import verify_store

    keys = [".hidden", "..", ".x.1.2.tmp", "plain"]
    with open_store(str(tmp_path)) as store:
        for key in keys:
            store.put(checkpoint(key), key=key)
        (tmp_path / "index.sqlite3").unlink()
    with open_store(str(tmp_path)) as store:  # rebuilt from the record files
        assert sorted(s.key for s in store.list()) == sorted(keys)
        report = verify_store(store, repair=True)
        assert report.ok and report.unlisted == [] and report.checked == len(keys)
        assert store.forget_older_than(2**62).forgotten == len(keys)


def test_a_deleted_key_leaves_no_file_and_no_listing_or_read_shows_it(tmp_path: Path) -> None:
    from agent_checkpoint._maintenance import verify_store

    with open_store(str(tmp_path)) as store:
        first = store.put(checkpoint("r"), key="k")
        store.delete("k")
        assert store.get("k") is None and store.head("k") is None and store.list().items == []
        assert verify_store(store).ok
        assert list((tmp_path / "records").iterdir()) == []
        (tmp_path / "index.sqlite3").unlink()
    with open_store(str(tmp_path)) as store:
        assert store.list().items == []
        again = store.put(checkpoint("r2"), key="k")
        assert again.revision > first.revision


def test_rm_and_prune_shrink_the_store_and_a_recreated_key_never_repeats_a_revision(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Deleting keys removes their files (the store shrinks: issue 48 found 2,000 files for
    1,679 runs after deleting 321), and a key written again still continues past every
    revision it had: the store keeps the highest revision of its deleted keys, not a
    tombstone per key. Across processes and with the index rebuilt."""
    from agent_checkpoint._cli import main

    url = str(tmp_path / "store")
    last: dict[str, int] = {}
    with open_store(url) as store:
        for i in range(30):
            for text in ("a", "b", "c")[: 1 + i % 3]:
                key = f"k{i}"
                last[key] = store.put(
                    stamped(checkpoint(key, text=text), 1000 + i), key=key
                ).revision
    assert main(["rm", "k0", "k1", "k2", "--store", url]) == 0
    assert main(["prune", "--older-than", "1d", "--store", url]) == 0  # saved in 1970
    capsys.readouterr()
    assert list((tmp_path / "store" / "records").iterdir()) == []
    (tmp_path / "store" / "index.sqlite3").unlink()
    with open_store(url) as store:
        assert store.list().items == []
        for key, revision in last.items():
            again = store.put(checkpoint(key), key=key)
            assert again.revision > revision, key
            with pytest.raises(ConflictError):
                store.put(checkpoint(key), key=key, if_revision=revision)


def test_verify_repair_folds_the_tombstones_earlier_versions_left(tmp_path: Path) -> None:
    """A store written by an earlier version holds a tombstone file per deleted key: each
    still keeps its key's revisions from repeating, and ``verify --repair`` removes them,
    raising the store's floor past their revisions first."""
    from agent_checkpoint._maintenance import verify_store
    from agent_checkpoint.backends._disk_files import tombstone_line

    with open_store(str(tmp_path)) as store:
        store.put(checkpoint("live"), key="live")
    records = tmp_path / "records"
    for key, revision in (("old-a", 41), ("old-b", 7)):
        (records / file_name(key)).write_bytes(tombstone_line(key, revision))
    with open_store(str(tmp_path)) as store:
        assert store.get("old-a") is None and [s.key for s in store.list()] == ["live"]
        assert store.put(checkpoint("b"), key="old-b").revision == 8  # past its tombstone
        assert verify_store(store).ok and (records / file_name("old-a")).exists()
        assert verify_store(store, repair=True).ok
        assert sorted(p.name for p in records.iterdir()) == sorted(
            file_name(k) for k in ("live", "old-b")
        )
        assert store.put(checkpoint("a"), key="old-a").revision > 41
        assert store.get("live") is not None and store.head("old-b").revision == 8  # type: ignore[union-attr]


def test_a_damaged_revision_floor_is_refused_by_name_not_guessed(tmp_path: Path) -> None:
    with open_store(str(tmp_path)) as store:
        store.put(checkpoint("r"), key="k")
        store.delete("k")
        (tmp_path / "revision-floor").write_text("garbage")
        for key in ("k", "never-written"):  # either may be a deleted key's successor
            with pytest.raises(BackendError, match="revision-floor holds b'garbage', not a rev"):
                store.put(checkpoint("r"), key=key)
        (tmp_path / "revision-floor").write_text("1\n")
        assert store.put(checkpoint("r"), key="k").revision == 2


def test_verify_repair_removes_what_killed_writers_left(tmp_path: Path) -> None:
    """Temp files of a writer killed before its rename and data files of generations no
    record refers to are counted by verify and removed by repair, once old enough."""
    import os
    import time

    from agent_checkpoint._maintenance import verify_store

    with open_store(str(tmp_path)) as store:
        history = checkpoint("r", messages=4)
        store.put(history, key="k")
        name = file_name("k")
        tmp = tmp_path / "records" / f".{name}.123.456.tmp"
        tmp.write_bytes(b"half a record")
        stale = tmp_path / "segments" / name / "999"  # version 0.4's history data files
        stale.parent.mkdir(parents=True)
        stale.write_bytes(b"orphan")
        gone = tmp_path / "segments" / file_name("deleted-long-ago")
        gone.mkdir()
        (gone / "7").write_bytes(b"orphan")
        young = tmp_path / "records" / f".{name}.1.2.tmp"
        young.write_bytes(b"a write in flight")
        floor = tmp_path / ".revision-floor.123.456.tmp"  # a delete killed before its rename
        floor.write_bytes(b"7\n")
        old = time.time() - 3600
        for path in (tmp, stale, gone / "7", floor):
            os.utime(path, (old, old))
        report = verify_store(store)
        assert report.orphans == 4 and tmp.exists()
        report = verify_store(store, repair=True)
        assert report.orphans == 4
        assert not tmp.exists() and not stale.exists() and not gone.exists()
        assert not floor.exists()
        assert young.exists()
        assert verify_store(store).orphans == 0
        got = store.get("k")
        assert got is not None and got.history == history.history


def test_a_store_inside_another_stores_folder_is_refused(tmp_path: Path) -> None:
    """Claims live in the store's ``_leases`` folder: a store opened there would share them."""
    from agent_checkpoint.errors import InvalidKeyError

    with open_store(str(tmp_path)) as store:
        store.put(checkpoint("r"), key="r")
        store.claim("r", "w", ttl=30).release()
        for inside in ("_leases", "records", "elsewhere"):
            with pytest.raises(InvalidKeyError, match="inside the disk store"):
                open_store(str(tmp_path / inside))
        assert store.get("r") is not None


def test_listing_claims_of_a_store_that_never_had_one_leaves_the_folder_as_it_was(
    tmp_path: Path,
) -> None:
    root = tmp_path / "s"
    with open_store(str(root)) as store:
        store.put(checkpoint("r", failed="llm"), key="r")
        before = sorted(p.name for p in root.iterdir())
        assert store.claims() == []
        assert sorted(p.name for p in root.iterdir()) == before
        store.claim("r", "w1", ttl=30)
        assert [c.worker for c in store.claims()] == ["w1"]
    with open_store(str(root)) as again:  # a new store object finds the claim
        assert [c.worker for c in again.claims()] == ["w1"]


_AS_ANOTHER_USER = """
import os, sys
from agent_checkpoint import open_store
from agent_checkpoint.backends import _disk  # imported while the Python install is readable
from agent_checkpoint.errors import InvalidKeyError
if os.geteuid() == 0:
    os.setgid(65534)
    os.setuid(65534)  # nobody: root reads and writes every folder
try:
    open_store(sys.argv[1], create=False).list()
except InvalidKeyError as exc:
    print(exc)
    sys.exit(9)
"""


@pytest.mark.parametrize("mode", [0o755, 0o700], ids=["read-only to the user", "unreachable"])
def test_a_store_the_user_may_not_write_is_refused_naming_the_store(mode: int) -> None:
    # was "disk open failed: OperationalError: attempt to write a readonly database" (a
    # server failure's exit code in the CLI), and for an unreachable folder a PermissionError
    # naming the parent's index.sqlite3
    import shutil
    import subprocess
    import sys
    import tempfile

    if os.geteuid() != 0 and mode == 0o700:
        pytest.skip("the folder must belong to another user: the test runs as root in CI")
    top = Path(tempfile.mkdtemp())
    try:
        top.chmod(0o755)
        store = top / "store"
        with open_store(str(store)) as opened:
            opened.put({"runId": "r", "history": [], "lastCompletedIteration": 0,
                        "originalInput": {"message": "hi"}, "version": 1}, key="k")  # fmt: skip
        before = sorted((p.name, p.stat().st_size) for p in (store / "records").rglob("*"))
        for path in [store, *store.rglob("*")]:
            path.chmod(0o555 if path.is_dir() else 0o444)
        top.chmod(mode)
        target = str(store if mode == 0o755 else store / "inner")
        ran = subprocess.run([sys.executable, "-c", _AS_ANOTHER_USER, target],
                             capture_output=True, text=True, timeout=60)  # fmt: skip
        assert ran.returncode == 9, ran.stdout + ran.stderr
        assert f"disk store {target!r} cannot be opened by this user: " in ran.stdout
        assert "Permission denied" in ran.stdout or "readonly" in ran.stdout
        top.chmod(0o755)
        assert sorted((p.name, p.stat().st_size) for p in (store / "records").rglob("*")) == before
    finally:
        for path in [top, *top.rglob("*")]:
            path.chmod(0o755)
        shutil.rmtree(top)


def test_a_folder_holding_other_files_is_not_made_a_store(tmp_path: Path) -> None:
    # `put --store .` in a project folder made the project a store: index.sqlite3, locks/ and
    # records/ beside the user's files, and every subfolder then "inside a store"
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "notes.txt").write_text("mine")
    with pytest.raises(InvalidKeyError, match=r"the folder holds other files \(notes\.txt, src\)"):
        open_store(str(project))
    assert sorted(p.name for p in project.iterdir()) == ["notes.txt", "src"]
    with open_store(str(project / "checkpoints")) as store:  # a new folder, or an empty one
        store.put({"runId": "r", "history": [], "lastCompletedIteration": 0,
                   "originalInput": {"message": "hi"}, "version": 1}, key="k")  # fmt: skip
    (project / "empty").mkdir()
    open_store(str(project / "empty")).close()
    with open_store(str(project / "checkpoints")) as store:  # a store with its namespaces
        assert store.get_record("k") is not None


def test_puts_racing_a_close_from_another_thread_end_with_store_closed_error(
    tmp_path: Path,
) -> None:
    # they raised BackendError("disk save failed: ProgrammingError: Cannot operate on a
    # closed database."), which reads as a broken store
    import threading

    from agent_checkpoint import RunCheckpoint, StoreClosedError
    from agent_checkpoint.errors import CheckpointError

    store = open_store(str(tmp_path / "s"))
    raised: list[BaseException] = []
    started = threading.Event()

    def writer(n: int) -> None:
        i = 0
        while True:
            try:
                store.put(RunCheckpoint.new(f"task {i}", run_id=f"r{n}"), key=f"k{n}")
            except CheckpointError as exc:
                raised.append(exc)
                return
            i += 1
            started.set()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    started.wait(10)
    store.close()
    for thread in threads:
        thread.join(10)
    assert len(raised) == 4
    assert all(isinstance(exc, StoreClosedError) for exc in raised), raised
    with open_store(str(tmp_path / "s"), create=False) as again:
        assert again.verify().ok
