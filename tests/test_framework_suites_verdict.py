"""The verdict of scripts/test-framework-suites (support/framework_suites.py): which failures
of ours fail CI, judged against LangGraph's InMemorySaver over a run and its reruns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.framework_suites import compare, rerun_list


def row(test: str, subject: str, outcome: str, cause: str = "boom") -> dict[str, Any]:
    nodeid = f"{test}[{subject}]"
    return {"test": test, "subject": subject, "outcome": outcome, "cause": cause, "nodeid": nodeid}


def test_a_failure_of_ours_in_every_run_where_the_baseline_passes_fails(capsys: Any) -> None:
    first = [row("t.py::a", "memory", "passed"), row("t.py::a", "ours_redis", "failed")]
    again = [row("t.py::a", "memory", "passed"), row("t.py::a", "ours_redis", "failed")]
    assert rerun_list([first], baseline="memory") == ["t.py::a[memory]", "t.py::a[ours_redis]"]
    assert compare([first, again, again], baseline="memory") == 1
    assert "1 failure(s) of ours_redis that memory lacks" in capsys.readouterr().out


def test_a_failure_the_baseline_shares_or_that_passed_on_a_rerun_does_not_fail(
    capsys: Any,
) -> None:
    shared = [row("t.py::a", "memory", "failed"), row("t.py::a", "ours_s3", "failed")]
    assert rerun_list([shared], baseline="memory") == []
    assert compare([shared], baseline="memory") == 0
    flaky = [row("t.py::b", "memory", "passed"), row("t.py::b", "ours_s3", "failed")]
    passed = [row("t.py::b", "memory", "passed"), row("t.py::b", "ours_s3", "passed")]
    assert compare([flaky, passed, flaky], baseline="memory") == 0
    assert "passed on a rerun" in capsys.readouterr().out


def test_without_a_baseline_any_steady_failure_of_ours_fails() -> None:
    run = [row("t.py::c", "ours_disk", "failed"), row("t.py::d", "ours_disk", "passed")]
    assert rerun_list([run], baseline=None) == ["t.py::c[ours_disk]"]
    assert compare([run, run, run], baseline=None) == 1
    assert compare([[row("t.py::d", "ours_disk", "skipped")]], baseline=None) == 0


def test_no_failure_to_run_again_prints_no_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An empty line would make the script run pytest on "" (every test of the folder)."""
    from support import framework_suites

    results = tmp_path / "r.json"
    results.write_text("[]")
    assert framework_suites.main(["rerun-list", "all-pass", str(results)]) == 0
    assert capsys.readouterr().out == ""
