"""examples/sqlite_backend.py, a backend written as a third party would write one, passes the
shipped suites, and ``register()`` makes ``sqlite://PATH`` open it."""

from __future__ import annotations

import importlib.util
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pytest

from agent_checkpoint import Message, RunCheckpoint, Store
from agent_checkpoint._segments import Segmented
from agent_checkpoint.testing import (
    AppendingConformance,
    ClaimsConformance,
    EncryptionConformance,
    StoreConformance,
    checkpoint,
)

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "sqlite_backend.py"
GUIDE = ROOT / "docs" / "backends.md"


def load_example() -> Any:
    spec = importlib.util.spec_from_file_location("sqlite_backend", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SqliteBackend = load_example().SqliteBackend


class TestSqliteStore(StoreConformance, ClaimsConformance, EncryptionConformance):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[Store]:
        self.path = tmp_path / "checkpoints.db"
        with Store(SqliteBackend(str(self.path), timeout=0.05)) as store:
            yield store

    @contextmanager
    def break_connection(self, store: Store) -> Iterator[None]:
        """Another process holds the database's exclusive lock: every statement finds the
        database locked."""
        other = sqlite3.connect(self.path, isolation_level=None)
        other.execute("BEGIN EXCLUSIVE")
        try:
            yield
        finally:
            other.execute("ROLLBACK")
            other.close()


class TestSqliteStoreInPieces(StoreConformance, AppendingConformance):
    """The same backend with the segment layer's thresholds at their lowest: every put past
    the first moves history into pieces in the ``segments`` namespace, and merges them."""

    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[Store]:
        backend = SqliteBackend(str(tmp_path / "checkpoints.db"), timeout=0.05)
        with Store(Segmented(backend, inline_bytes=0, max_segments=4)) as store:
            yield store


def test_revisions_continue_past_a_delete_after_reopening(tmp_path: Path) -> None:
    path = str(tmp_path / "checkpoints.db")
    with Store(SqliteBackend(path)) as store:
        first = store.put(checkpoint(), key="k")
        store.delete("k")
    with Store(SqliteBackend(path)) as store:
        assert store.put(checkpoint(), key="k").revision > first.revision


def test_a_growing_history_is_kept_in_pieces_through_its_namespace(tmp_path: Path) -> None:
    """The example has no Appending of its own; the Store's segment layer keeps the older
    messages in the backend's segments namespace, and the head row holds only the newest."""
    path = tmp_path / "checkpoints.db"
    history: tuple[Message, ...] = ()
    with Store(SqliteBackend(str(path))) as store:
        for i in range(300):
            history = (*history, Message("user", f"message {i} " + "x" * 200))
            store.put(RunCheckpoint.new("m", history, run_id="r"), key="k")
        got = store.get("k")
        assert got is not None and got.history == history
    with closing(sqlite3.connect(path)) as db:
        pieces, in_pieces = db.execute(
            "SELECT count(*), sum(length(body)) FROM checkpoints__segments"
        ).fetchone()
        (in_head,) = db.execute("SELECT length(body) FROM checkpoints").fetchone()
    assert pieces >= 1 and in_head < in_pieces


def test_register_makes_the_scheme_open_the_backend(tmp_path: Path) -> None:
    program = f"""
import sys
sys.path.insert(0, {str(EXAMPLE.parent)!r})
from agent_checkpoint import open_store
from agent_checkpoint.testing import checkpoint
from sqlite_backend import SqliteBackend, register

register()
with open_store("sqlite://checkpoints.db") as store:
    assert isinstance(store.backend, SqliteBackend)
    store.put(checkpoint("r"), key="k")
with open_store("sqlite://checkpoints.db") as store:
    print(store.get("k").run_id)
"""
    ran = subprocess.run(
        [sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "r" and (tmp_path / "checkpoints.db").is_file()


def test_the_test_module_in_the_guide_runs_the_suites(pytester: pytest.Pytester) -> None:
    """docs/backends.md shows the example's test module; run it (a test of each suite, and
    the driver-fault test through its break_connection)."""
    text = GUIDE.read_text(encoding="utf-8")
    marked = text.index("<!-- checked by tests/test_example_sqlite_backend.py -->")
    start = text.index("```python\n", marked) + len("```python\n")
    pytester.makepyfile(test_guide=text[start : text.index("```\n", start)])
    (pytester.path / "examples").mkdir()
    (pytester.path / "examples" / EXAMPLE.name).write_bytes(EXAMPLE.read_bytes())
    chosen = [
        "test_drop_of_a_lost_revision_raises_conflict_and_keeps_the_record",
        "test_driver_faults_reach_the_caller_as_library_errors",
        "test_a_claimed_run_cannot_be_claimed_again",
        "test_encrypted_records_round_trip_and_hide_their_content",
    ]
    ran = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-k", " or ".join(chosen))
    ran.assert_outcomes(passed=len(chosen))
