from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_checkpoint import Store, UnreadableEnvelopeError, open_store
from agent_checkpoint.backends.disk import DiskBackend, file_name
from agent_checkpoint.testing import (
    ClaimsConformance,
    EncryptionConformance,
    StoreConformance,
    checkpoint,
    stamped,
)


class TestDiskStore(StoreConformance, ClaimsConformance, EncryptionConformance):
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
    backend._db().execute("INSERT INTO pending (key) VALUES ('k')")
    backend._db().execute("UPDATE summaries SET revision = 0, saved_at = 1 WHERE key = 'k'")
    [summary] = store.list().items
    assert (summary.revision, summary.saved_at) == (1, 100)
    store.close()


def test_a_growing_history_appends_segment_files_and_compacts(tmp_path: Path) -> None:
    from agent_checkpoint.model import Message, RunCheckpoint

    store = open_store(str(tmp_path))
    history: tuple[Message, ...] = ()
    for i in range(DiskBackend.max_segments + 5):
        history = (*history, Message("user", f"message {i}"))
        store.put(RunCheckpoint.new("m", history, run_id="r"), key="k")
        if i == 9:
            folder = tmp_path / "segments" / file_name("k")
            assert len(list(folder.iterdir())) == 10  # one small file per put, not a rewrite
    folder = tmp_path / "segments" / file_name("k")
    assert len(list(folder.iterdir())) == 5  # the 33rd put rewrote it whole, then 4 appends
    got = store.get("k")
    assert got is not None and [m.content for m in got.history] == [
        f"message {i}" for i in range(37)
    ]
    store.delete("k")
    assert not folder.exists()
