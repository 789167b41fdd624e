"""A pytest plugin that runs the frameworks' own test suites with our objects in place of
theirs (``-p support.framework_suites``, with our ``tests/`` folder on ``PYTHONPATH``; the
suites come from their source distributions, see scripts/test-framework-suites).

- LangGraph: the ``sync_checkpointer`` and ``async_checkpointer`` fixtures of every test
  module become ours, parametrised by ``--ac-savers``: ``memory`` is LangGraph's own
  ``InMemorySaver`` (the baseline; the id LangGraph's snapshots are recorded under) and
  ``ours_<backend>`` is ``AgentCheckpointSaver`` on that backend's real server.
- Agents SDK: in every test module that uses ``SQLiteSession``, the name is bound to a factory
  that builds ``AgentCheckpointSession`` on the backend named by the test's parameter
  (``--ac-sessions``): the same ``db_path`` in one test is one store, each ``:memory:`` a new
  one. Tests that inspect SQLite itself are skipped with the reason (``SDK_EXCLUDED``).

Each test's outcome is written to ``--ac-results`` (JSON); ``python -m
support.framework_suites compare FILE`` prints the failures per backend and fails when one of
ours fails a test LangGraph's ``InMemorySaver`` passes (LangGraph) or any test fails (SDK).

The fixtures are injected into each test module (``pytest_collectstart``): a module's fixtures
come before its conftest's, so theirs stay untouched and no pytest internals are used.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from support.shared_s3 import pytest_configure_node, pytest_unconfigure, s3_server
from support.store_urls import url_for_processes

__all__ = ["pytest_configure_node", "pytest_unconfigure", "s3_server"]

BACKENDS = ("memory", "disk", "redis", "postgres", "s3")
BASELINE = "memory"  # LangGraph's InMemorySaver, under the id its snapshots are recorded with
OURS = "ours_"
SAVER_FIXTURES = ("sync_checkpointer", "async_checkpointer")
SESSION_FIXTURE = "agent_checkpoint_session_backend"

# The Agents SDK's session tests that inspect SQLite itself (its connections, locks, files,
# tables or rows) rather than what a Session does: test name -> why it cannot apply to
# another session. Every other test in tests/memory/test_session*.py must pass on ours.
# LangGraph's tests that time streamed chunks to a tenth of a second against a wall clock, on
# the backends whose durable write takes longer than that here: test name -> (backends, why).
# Each still runs on every other backend, ours included; the note of the session that added an
# entry gives its figures.
LANGGRAPH_TIMED = {
    "test_stream_buffering_single_node": (
        ("s3",),
        "expects the first chunk within 0.1 s of the start; a durable write to the S3 server "
        "(two sequential PUTs on SeaweedFS, on the same 2 cores) takes 0.2-0.5 s here; on "
        "2026-12-07 (load 12-21) a step took 113-135 ms (p90 370), a bare PUT 17-25 ms (two "
        "in a row 48), and it failed 10 of 10 runs (first chunk at 0.8 s)",
    ),
    "test_stream_subgraphs_during_execution": (
        ("s3",),
        "times subgraph chunks to 0.1 s with sleeps between steps; each step's S3 write takes "
        "0.2-0.5 s here (InMemorySaver itself failed it once under load); failed 10 of 10 "
        "runs on 2026-12-07 (load 12-21)",
    ),
}

SDK_EXCLUDED = {
    "test_sqlite_session_close_closes_worker_thread_connections": (
        "reads SQLiteSession._connections (one sqlite3 connection per worker thread)"
    ),
    "test_sqlite_session_reaps_connections_from_exited_worker_threads": (
        "reads SQLiteSession._connections"
    ),
    "test_sqlite_session_closes_retired_connections_before_the_next_allocation": (
        "patches SQLiteSession's connection allocation and reads _connections"
    ),
    "test_sqlite_session_keeps_connections_of_live_worker_threads": (
        "reads SQLiteSession._connections"
    ),
    "test_sqlite_session_closed_rejects_empty_add_items": (
        "SQLiteSession's synchronous close() and its 'SQLiteSession is closed' error: close()"
        " is not part of the SDK's Session protocol (ours is async and closes only the store)"
    ),
    "test_sqlite_session_pop_item_skips_corrupt_most_recent": (
        "writes undecodable rows into SQLite through _locked_connection()"
    ),
    "test_sqlite_session_pop_item_returns_none_after_dropping_only_corrupt_rows": (
        "writes undecodable rows into SQLite through _locked_connection()"
    ),
    "test_sqlite_session_get_items_limit_skips_corrupt_newest_rows": (
        "writes undecodable rows into SQLite through _locked_connection()"
    ),
    "test_sqlite_session_get_items_session_settings_limit_skips_corrupt_rows": (
        "writes undecodable rows into SQLite through _locked_connection()"
    ),
    "test_sqlite_session_file_lock_is_shared_across_instances": (
        "reads SQLiteSession._lock and its per-file lock counts"
    ),
    "test_sqlite_session_failed_add_items_releases_write_lock": (
        "probes SQLite's write lock with a second sqlite3 connection"
    ),
    "test_sqlite_session_failed_clear_session_rolls_back": (
        "drops a SQLite table and expects sqlite3.OperationalError"
    ),
    "test_sqlite_session_failed_pop_item_releases_write_lock": (
        "drops a SQLite table and expects sqlite3.OperationalError"
    ),
    "test_sqlite_session_rollback_failure_evicts_connection": (
        "replaces SQLiteSession._get_connection with a failing sqlite3 connection"
    ),
    "test_sqlite_session_close_retries_quarantined_connection": (
        "replaces SQLiteSession._get_connection with a failing sqlite3 connection"
    ),
    "test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome": (
        "replaces SQLiteSession._get_connection with a pausing sqlite3 connection"
    ),
}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("agent-checkpoint framework suites")
    group.addoption(
        "--ac-savers",
        default=",".join([BASELINE, *(OURS + b for b in BACKENDS)]),
        help="checkpointers for LangGraph's fixtures: memory (its InMemorySaver), ours_<backend>",
    )
    group.addoption(
        "--ac-sessions",
        default=",".join(BACKENDS),
        help="backends AgentCheckpointSession replaces the SDK's SQLiteSession on",
    )
    group.addoption("--ac-results", default=None, help="write each test's outcome here (JSON)")
    group.addoption("--ac-shard", default=None, help="i/n: run only the i-th of n shards (1-based)")


def _names(config: pytest.Config, option: str, allowed: set[str]) -> list[str]:
    names = [n for n in str(config.getoption(option)).split(",") if n]
    wrong = [n for n in names if n not in allowed]
    if wrong or not names:
        raise pytest.UsageError(f"{option}: {wrong or names} not among {sorted(allowed)}")
    return names


# -- LangGraph: our saver in their checkpointer fixtures ------------------------------------------


def _make_saver_fixtures(savers: list[str]) -> dict[str, Any]:
    from langgraph.checkpoint.memory import InMemorySaver

    from agent_checkpoint.integrations.langgraph import AgentCheckpointSaver

    @pytest.fixture(params=savers, name="sync_checkpointer")
    def sync_checkpointer(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
        if request.param == BASELINE:
            yield InMemorySaver()
            return
        with url_for_processes(request.param[len(OURS) :], request, tmp_path) as url:
            saver = AgentCheckpointSaver(url)
            try:
                yield saver
            finally:
                saver.close()

    @pytest.fixture(params=savers, name="async_checkpointer")
    async def async_checkpointer(
        request: pytest.FixtureRequest, tmp_path: Path
    ) -> AsyncIterator[Any]:
        if request.param == BASELINE:
            yield InMemorySaver()
            return
        with url_for_processes(request.param[len(OURS) :], request, tmp_path) as url:
            saver = AgentCheckpointSaver(url)
            try:
                yield saver
            finally:
                await saver.aclose()

    return {"sync_checkpointer": sync_checkpointer, "async_checkpointer": async_checkpointer}


# -- the Agents SDK: our session in place of SQLiteSession ----------------------------------------


class _Sessions:
    """The stores of one test on one backend: one per ``db_path``, each ``:memory:`` its own."""

    current: _Sessions | None = None

    def __init__(self, backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
        self.backend, self.request, self.tmp_path = backend, request, tmp_path
        self.stack = ExitStack()
        self.stores: dict[str, Any] = {}
        self.sessions: list[Any] = []
        self.count = itertools.count()

    def store(self, db_path: object) -> Any:
        n = next(self.count)
        key = f":memory:{n}" if str(db_path) == ":memory:" else str(Path(str(db_path)).resolve())
        if key not in self.stores:
            if self.backend == "memory":  # each memory:// opened is new: share one store
                from agent_checkpoint import open_store

                self.stores[key] = self.stack.enter_context(open_store("memory://"))
            else:
                self.stores[key] = self.stack.enter_context(
                    url_for_processes(self.backend, self.request, self.tmp_path / f"store-{n}")
                )
        return self.stores[key]

    def close(self) -> None:
        from agent_checkpoint.integrations.openai_agents import AgentCheckpointSession

        async def close_all() -> None:
            for session in self.sessions:
                await AgentCheckpointSession.close(session)

        try:
            asyncio.run(close_all())
        finally:
            self.stack.close()


def _session_class() -> type:
    from agent_checkpoint.integrations.openai_agents import AgentCheckpointSession

    class SuiteSession(AgentCheckpointSession):
        """``AgentCheckpointSession`` built the way the tests build ``SQLiteSession``."""

        def __init__(
            self,
            session_id: str,
            db_path: object = ":memory:",
            *,
            session_settings: Any = None,
            **sqlite_tables: Any,  # SQLiteSession's table names: nothing to name here
        ) -> None:
            sessions = _Sessions.current
            if sessions is None:
                raise RuntimeError("SQLiteSession is replaced only while a test runs")
            super().__init__(session_id, sessions.store(db_path), session_settings=session_settings)
            sessions.sessions.append(self)

        def close(self) -> None:  # type: ignore[override]
            """SQLiteSession's synchronous ``close()`` (not part of the Session protocol):
            nothing here; the test's stores are closed when it ends."""

    return SuiteSession


def _make_session_fixture(backends: list[str]) -> Any:
    @pytest.fixture(params=backends, autouse=True, name=SESSION_FIXTURE)
    def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
        _Sessions.current = sessions = _Sessions(request.param, request, tmp_path)
        try:
            yield request.param
        finally:
            _Sessions.current = None
            sessions.close()

    return backend


# -- wiring ---------------------------------------------------------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    savers = _names(config, "--ac-savers", {BASELINE, *(OURS + b for b in BACKENDS)})
    sessions = _names(config, "--ac-sessions", set(BACKENDS))
    _shard(config)  # refused before anything runs
    config._ac_inject = {"savers": savers, "sessions": sessions}  # type: ignore[attr-defined]


def pytest_collectstart(collector: pytest.Collector) -> None:
    if not isinstance(collector, pytest.Module):
        return
    try:
        module = collector.obj
    except Exception:  # collect() reports the import error
        return
    wanted = collector.config._ac_inject  # type: ignore[attr-defined]
    if "SQLiteSession" in vars(module):
        module.SQLiteSession = _session_class()
        setattr(module, SESSION_FIXTURE, _make_session_fixture(wanted["sessions"]))
    source = Path(str(collector.path)).read_text(encoding="utf-8", errors="replace")
    if any(name in source for name in SAVER_FIXTURES):
        for name, fixture in _make_saver_fixtures(wanted["savers"]).items():
            setattr(module, name, fixture)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        name = getattr(item, "originalname", item.name)
        if SESSION_FIXTURE in getattr(item, "fixturenames", ()) and name in SDK_EXCLUDED:
            item.add_marker(pytest.mark.skip(reason=f"inspects SQLite: {SDK_EXCLUDED[name]}"))
        backends, why = LANGGRAPH_TIMED.get(name, ((), ""))
        if any(re.search(rf"[\[-]{OURS}{b}[\]-]", item.name) for b in backends):
            item.add_marker(pytest.mark.skip(reason=f"timed to 0.1 s: {why}"))
    shard = _shard(config)
    if shard:
        index, count = shard
        config.hook.pytest_deselected(
            items=[it for k, it in enumerate(items) if k % count != index - 1]
        )
        items[:] = [it for k, it in enumerate(items) if k % count == index - 1]


def _shard(config: pytest.Config) -> tuple[int, int] | None:
    shard = config.getoption("--ac-shard")
    if not shard:
        return None
    match = re.fullmatch(r"(\d+)/(\d+)", str(shard))
    if not match or not 1 <= int(match[1]) <= int(match[2]):
        raise pytest.UsageError(f"--ac-shard: {shard!r} is not i/n with 1 <= i <= n")
    return int(match[1]), int(match[2])


def _subject(item: pytest.Item) -> tuple[str, str]:
    """(what the test ran on, the test's id without it)."""
    params = dict(getattr(getattr(item, "callspec", None), "params", {}))
    subject = ""
    for name in (*SAVER_FIXTURES, SESSION_FIXTURE):
        if name in params:
            subject = str(params.pop(name))
            if name == SESSION_FIXTURE:
                subject = OURS + subject
    if not subject:
        return subject, item.nodeid
    rest = ",".join(f"{k}={params[k]}" for k in sorted(params))
    bare = item.nodeid.partition("[")[0]
    return subject, f"{bare}[{rest}]" if rest else bare


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    subject, test = _subject(item)
    report.user_properties.append(("ac_subject", subject))
    report.user_properties.append(("ac_test", test))
    return report


_results: dict[tuple[str, str], str] = {}  # (test, subject) -> outcome, in the controller
_causes: dict[tuple[str, str], str] = {}
_nodeids: dict[tuple[str, str], str] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    props = dict(report.user_properties)
    if "ac_test" not in props:
        return
    key = (props["ac_test"], props["ac_subject"])
    _nodeids[key] = report.nodeid
    if report.failed:
        _results[key] = "failed"
        _causes.setdefault(key, _cause(str(report.longreprtext)))
    elif key not in _results and (report.skipped or report.when == "call"):
        _results[key] = "skipped" if report.skipped else "passed"


def _cause(text: str) -> str:
    """The first error line of a failure (``E   ...``), to group failures by cause."""
    lines = text.strip().splitlines()
    errors = [line[1:].strip() for line in lines if line.startswith("E ")]
    return (errors[0] if errors else lines[-1] if lines else "")[:300]


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = session.config.getoption("--ac-results")
    if not path or hasattr(session.config, "workerinput"):
        return
    rows = [
        {
            "test": test,
            "subject": subject,
            "outcome": outcome,
            "cause": _causes.get((test, subject)),
            "nodeid": _nodeids[test, subject],
        }
        for (test, subject), outcome in sorted(_results.items())
    ]
    Path(path).write_text(json.dumps(rows, indent=1))


# -- the comparison -------------------------------------------------------------------------------


def _outcomes(runs: list[list[dict[str, Any]]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Each (test, subject)'s rows, first run first (a rerun holds only some tests)."""
    rows: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for run in runs:
        for row in run:
            rows.setdefault((row["test"], row["subject"]), []).append(row)
    return rows


def _failures(
    runs: list[list[dict[str, Any]]], baseline: str | None
) -> tuple[dict[str, dict[str, str]], dict[str, dict[str, str]], set[str]]:
    """(consistent failures, intermittent ones: subject -> test -> cause; the tests the
    baseline failed in any run)."""
    always: dict[str, dict[str, str]] = {}
    sometimes: dict[str, dict[str, str]] = {}
    for (test, subject), rows in _outcomes(runs).items():
        failed = [row for row in rows if row["outcome"] == "failed"]
        if failed:
            bucket = always if len(failed) == len(rows) else sometimes
            bucket.setdefault(subject, {})[test] = failed[0]["cause"] or ""
    base = set(always.get(baseline, {})) | set(sometimes.get(baseline, {})) if baseline else set()
    return always, sometimes, base


def rerun_list(runs: list[list[dict[str, Any]]], *, baseline: str | None) -> list[str]:
    """The node ids to run again: each failure of ours the baseline lacks, and the baseline's
    run of the same test."""
    always, _, base = _failures(runs, baseline)
    tests = {t for s, f in always.items() if s.startswith(OURS) for t in f if t not in base}
    return sorted(
        rows[0]["nodeid"]
        for (test, subject), rows in _outcomes(runs).items()
        if test in tests and (subject == baseline or test in always.get(subject, {}))
    )


def compare(runs: list[list[dict[str, Any]]], *, baseline: str | None) -> int:
    """Print the failures per subject over a run and its reruns; 1 if one of ours failed in
    every run a test that ``baseline`` passed in every run (without a baseline: any test).
    A failure that passed on a rerun is listed as intermittent and does not fail."""
    always, sometimes, base = _failures(runs, baseline)
    ran: dict[str, set[str]] = {}
    for test, subject in _outcomes(runs):
        ran.setdefault(subject, set()).add(test)
    status = 0
    for subject in sorted(s for s in ran if s):
        fails, flaky = always.get(subject, {}), sometimes.get(subject, {})
        print(f"== {subject}: {len(ran[subject])} tests, {len(fails)} failed", end="")
        print(f", {len(flaky)} failed only in some runs" if flaky else "")
        for test in sorted({*fails, *flaky}):
            notes = (
                [] if not baseline or subject == baseline or test in base else ["not on baseline"]
            )
            if test in flaky:
                notes.append("passed on a rerun")
            extra = f"   <- {'; '.join(notes)}" if notes else ""
            print(f"   {test}{extra}\n      {(fails.get(test) or flaky[test])[:200]}")
        new = sorted(set(fails) - base) if subject.startswith(OURS) else []
        if new:
            status = 1
            print(
                f"   {len(new)} failure(s) of {subject}"
                + (f" that {baseline} lacks" if baseline else "")
            )
    unattached = {**sometimes.get("", {}), **always.get("", {})}
    if unattached:
        print(f"== tests on no checkpointer or session: {len(unattached)} failed (not compared)")
        for test in sorted(unattached):
            print(f"   {test}\n      {unattached[test][:200]}")
    by_cause: dict[str, set[str]] = {}
    for bucket, how in ((always, ""), (sometimes, "intermittent: ")):
        for subject, fails in bucket.items():
            for test, cause in fails.items():
                if subject.startswith(OURS) and test not in base:
                    by_cause.setdefault(how + _shape(cause), set()).add(subject)
    if by_cause:
        print("== distinct causes of our failures")
        for cause, subjects in sorted(by_cause.items()):
            print(f"   [{','.join(sorted(subjects))}] {cause}")
    return status


def _shape(cause: str) -> str:
    """A cause without its particulars (quoted names, ids, addresses), to count causes."""
    cause = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", cause)
    return re.sub(r"0x[0-9a-f]+|\b[0-9a-f-]{8,}\b|\d+", "#", cause)[:160]


def main(argv: list[str]) -> int:
    usage = (
        "usage: python -m support.framework_suites compare|rerun-list baseline|all-pass"
        " RESULTS.json [RERUN.json...]"
    )
    if len(argv) < 3 or argv[0] not in ("compare", "rerun-list"):
        print(usage)
        return 2
    if argv[1] not in ("baseline", "all-pass"):
        print(usage)
        return 2
    baseline = BASELINE if argv[1] == "baseline" else None
    runs = [json.loads(Path(path).read_text()) for path in argv[2:] if Path(path).exists()]
    if argv[0] == "rerun-list":
        for nodeid in rerun_list(runs, baseline=baseline):  # none: no line at all, not ""
            print(nodeid)
        return 0
    return compare(runs, baseline=baseline)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
