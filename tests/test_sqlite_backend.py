"""The built-in SQLite backend (``sqlite://PATH``): the shipped suites, several processes
writing one file, the schema ledger, and its URL options."""

from __future__ import annotations

import multiprocessing
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

from agent_checkpoint import Message, RunCheckpoint, Store, open_store
from agent_checkpoint.backends._sqlite import SqliteBackend
from agent_checkpoint.backends._sqlite_schema import LEDGER, MIGRATIONS
from agent_checkpoint.errors import (
    ConflictError,
    InvalidArgumentError,
    InvalidKeyError,
    StoreConfigurationError,
    StoreNotFoundError,
)
from agent_checkpoint.testing import (
    AppendingConformance,
    ClaimsConformance,
    EncryptionConformance,
    GrowingHistoryConformance,
    StoreConformance,
    checkpoint,
)


class TestSqliteStore(StoreConformance, ClaimsConformance, EncryptionConformance):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[Store]:
        with open_store(f"sqlite://{tmp_path / 'checkpoints.db'}?timeout=0.05") as store:
            yield store

    @contextmanager
    def break_connection(self, store: Store) -> Iterator[None]:
        """The backend's connection is swapped for a closed one: every statement fails in
        the driver."""
        backend = store.backend
        assert isinstance(backend, SqliteBackend)
        shared = backend._shared
        kept, broken = shared.db, sqlite3.connect(":memory:")
        broken.close()
        shared.db = broken
        try:
            yield
        finally:
            shared.db = kept


class TestSqliteStoreInPieces(StoreConformance, GrowingHistoryConformance, AppendingConformance):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[Store]:
        with open_store(f"sqlite://{tmp_path / 'checkpoints.db'}") as store:
            yield store


def test_relative_and_absolute_urls_open_one_file_in_wal_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with open_store("sqlite://x.db") as store:
        store.put(checkpoint("r"), key="k")
    with open_store(f"sqlite://{tmp_path}/x.db") as store:
        got = store.get("k")
        assert got is not None and got.run_id == "r"
    with closing(sqlite3.connect(tmp_path / "x.db")) as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert db.execute("SELECT count(*) FROM records").fetchone() == (1,)


def test_revisions_continue_past_a_delete_after_reopening(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'c.db'}"
    with open_store(url) as store:
        first = store.put(checkpoint(), key="k")
        store.delete("k")
    with open_store(url) as store:
        assert store.put(checkpoint(), key="k").revision > first.revision


def test_create_false_refuses_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(StoreNotFoundError):
        open_store(f"sqlite://{tmp_path / 'none.db'}", create=False)
    assert not (tmp_path / "none.db").exists()


def test_a_file_made_by_a_newer_version_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    with open_store(f"sqlite://{path}") as store:
        store.put(checkpoint("r"), key="k")
    newest = MIGRATIONS[-1][0]
    with closing(sqlite3.connect(path)) as db, db:
        db.execute(f"INSERT INTO {LEDGER} (version, name) VALUES (?, ?)", (newest + 1, "future"))
    with pytest.raises(StoreConfigurationError, match=r"newer agent-checkpoint.*'future'"):
        open_store(f"sqlite://{path}")
    with closing(sqlite3.connect(path)) as db:  # nothing changed by the refusal
        assert db.execute("SELECT count(*) FROM records").fetchone() == (1,)


def test_setup_is_idempotent_and_records_each_step_once(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    with open_store(f"sqlite://{path}") as store:
        store.setup()
        store.setup()
    with closing(sqlite3.connect(path)) as db:
        rows = db.execute(f"SELECT version FROM {LEDGER} ORDER BY version").fetchall()
    assert [v for (v,) in rows] == [step[0] for step in MIGRATIONS]


@pytest.mark.parametrize(
    ("url", "keywords", "error", "named"),
    [
        ("sqlite://c.db?timout=1", {}, InvalidKeyError, "timout"),
        ("sqlite://c.db?timeout=soon", {}, InvalidKeyError, "timeout"),
        ("sqlite://c.db?timeout=-1", {}, InvalidKeyError, "timeout"),
        ("sqlite://c.db", {"prefix": "p"}, InvalidArgumentError, "prefix"),
        ("sqlite://c.db?create=maybe", {}, InvalidKeyError, "create"),
    ],
)
def test_bad_url_options_are_refused_by_name(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    url: str,
    keywords: dict[str, object],
    error: type[Exception],
    named: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(error, match=named):
        open_store(url, **keywords)
    assert not (tmp_path / "c.db").exists()


def _race(path: str, name: str, puts: int, wins: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    """Conditional puts on one key: each reads the head, puts on its revision; a lost race
    is a ConflictError, nothing else."""
    with open_store(f"sqlite://{path}") as store:
        won: list[int] = []
        for i in range(puts):
            while True:
                head = store.head("k")
                try:
                    done = store.put(
                        checkpoint(f"{name}-{i}"), key="k", if_revision=head.revision if head else 0
                    )
                except ConflictError:
                    continue
                won.append(done.revision)
                break
        wins.put(won)


def test_two_processes_racing_conditional_puts_lose_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "race.db")
    with open_store(f"sqlite://{path}") as store:
        first = store.put(checkpoint("start"), key="k")
    context = multiprocessing.get_context("spawn")
    wins = context.Queue()
    puts = 150
    workers = [context.Process(target=_race, args=(path, n, puts, wins)) for n in ("a", "b")]
    for worker in workers:
        worker.start()
    won = [wins.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    revisions = sorted(r for each in won for r in each)
    assert len(revisions) == 2 * puts
    assert revisions == list(range(first.revision + 1, first.revision + 1 + 2 * puts))
    with open_store(f"sqlite://{path}") as store:
        head = store.head("k")
        assert head is not None and head.revision == revisions[-1]


def test_the_cli_puts_lists_and_gets_on_a_sqlite_store(tmp_path: Path) -> None:
    def cli(*args: str, stdin: str | None = None) -> str:
        ran = subprocess.run(
            [sys.executable, "-m", "agent_checkpoint", "--store", "sqlite://x.db", *args],
            cwd=tmp_path,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert ran.returncode == 0, ran.stderr
        return ran.stdout

    import orjson

    doc = orjson.dumps(
        {"format": "conversation-v1", "data": checkpoint("cli-run").to_json(), "savedAt": 1}
    ).decode()
    cli("put", "-", "--key", "k", stdin=doc)
    assert "k" in cli("ls")
    assert "cli-run" in cli("get", "k")
    assert (tmp_path / "x.db").is_file()


def test_another_program_s_database_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "theirs.db"
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("CREATE TABLE revisions (tbl TEXT PRIMARY KEY, last INTEGER)")
    with pytest.raises(StoreConfigurationError, match="not an agent-checkpoint store"):
        open_store(f"sqlite://{path}")
    with closing(sqlite3.connect(path)) as db:
        tables = db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    assert tables == [("revisions",)]


def test_a_put_that_moves_history_into_a_piece_is_one_transaction(tmp_path: Path) -> None:
    """Checkpointing after every message of a long history: every put is one commit (one
    sync), the ones that write a piece and drop the pieces it replaces included."""
    path = tmp_path / "c.db"
    history: tuple[Message, ...] = ()
    commits: list[str] = []
    with open_store(f"sqlite://{path}") as store:
        backend = store.backend
        assert isinstance(backend, SqliteBackend)
        backend._shared.db.set_trace_callback(commits.append)
        for i in range(300):
            history = (*history, Message("user", f"message {i} " + "x" * 200))
            commits.clear()
            store.put(RunCheckpoint.new("m", history, run_id="r"), key="k")
            assert [s for s in commits if s.startswith(("BEGIN", "COMMIT"))] == [
                "BEGIN IMMEDIATE",
                "COMMIT",
            ], i
        backend._shared.db.set_trace_callback(None)
        got = store.get("k")
        assert got is not None and got.history == history
    with closing(sqlite3.connect(path)) as db:
        (pieces,) = db.execute("SELECT count(*) FROM records WHERE ns = 'segments'").fetchone()
    assert pieces >= 1


def _open_and_put(path: str, name: str) -> None:
    with open_store(f"sqlite://{path}") as store:
        store.put(checkpoint(name), key=name)


def test_processes_opening_a_new_file_together_all_land_their_puts(tmp_path: Path) -> None:
    """The first open makes the file, switches it to WAL and applies the schema: racing
    openers wait for each other instead of failing."""
    path = str(tmp_path / "fresh.db")
    context = multiprocessing.get_context("spawn")
    names = [f"p{n}" for n in range(4)]
    workers = [context.Process(target=_open_and_put, args=(path, name)) for name in names]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
        assert worker.exitcode == 0
    with open_store(f"sqlite://{path}") as store:
        assert sorted(s.key for s in store.list()) == names
    with closing(sqlite3.connect(path)) as db:
        assert db.execute(f"SELECT count(*) FROM {LEDGER}").fetchone() == (len(MIGRATIONS),)
