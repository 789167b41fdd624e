"""The repository holds only what this project wrote (issue 41).

Behaviours and facts learned from other projects carry over; their code, prose and licence
headers do not, and their real transcripts are read where they live (the shared fixtures
folder, ``support.shared_fixtures``), never copied into ``tests/fixtures``.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

from support.shared_fixtures import FOLDER_VARIABLE, ROOT, require_shared_fixtures

SHARED_LINE = 80
"""A line at least this long (bytes, stripped) found in a shared fixture marks a derived copy."""


def fixture_files() -> list[Path]:
    return sorted(p for p in (ROOT / "tests" / "fixtures").rglob("*") if p.is_file())


def test_tests_fixtures_hold_no_copy_of_a_shared_fixture() -> None:
    shared = require_shared_fixtures()
    digests = {
        hashlib.sha256(p.read_bytes()).hexdigest(): p for p in shared.rglob("*") if p.is_file()
    }
    copies = [
        f"{p.relative_to(ROOT)} = {digests[d]}"
        for p in fixture_files()
        if (d := hashlib.sha256(p.read_bytes()).hexdigest()) in digests
    ]
    assert not copies, "read these from the shared fixtures folder instead:\n" + "\n".join(copies)


def test_tests_fixtures_hold_no_line_of_a_shared_fixture() -> None:
    shared = require_shared_fixtures()
    lines = {
        line.strip(): p
        for p in shared.rglob("*")
        if p.is_file()
        for line in p.read_bytes().splitlines()
        if len(line.strip()) >= SHARED_LINE
    }
    found = [
        f"{p.relative_to(ROOT)} holds a line of {lines[line.strip()]}"
        for p in fixture_files()
        for line in p.read_bytes().splitlines()
        if line.strip() in lines
    ]
    assert not found, "\n".join(sorted(set(found)))


PYTEST = (sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-v", "-rs")


def outcomes(args: list[str], **env: str) -> tuple[dict[str, str], str]:
    """Each test's outcome (``PASSED``, ``SKIPPED``, ...) in a pytest run of its own."""
    environ = {k: v for k, v in os.environ.items() if k not in ("CI", FOLDER_VARIABLE)}
    ran = subprocess.run(
        [*PYTEST, *args],
        cwd=ROOT,
        env=environ | env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    found = re.findall(r"(?m)^(tests/.+?) (PASSED|FAILED|SKIPPED|ERROR)\b", ran.stdout)
    return dict(found), ran.stdout + ran.stderr


SHARED_READERS = [
    "tests/transcripts/test_corpus.py",
    "tests/transcripts/test_detect.py::test_each_fixture_is_detected_by_its_content",
    "tests/test_provenance.py::test_tests_fixtures_hold_no_copy_of_a_shared_fixture",
]
DETECTED = "tests/transcripts/test_detect.py::test_each_fixture_is_detected_by_its_content"
NEED_SHARED = {
    "tests/transcripts/test_corpus.py::test_a_real_transcript_saves_and_resumes_whole"
    "[shared/corpus (absent)]",
    *(
        f"{DETECTED}[shared/claude-code/{name}.jsonl-claude-code-jsonl]"
        for name in ("representative_messages", "edge_cases", "session_b", "todowrite_examples")
    ),
    "tests/test_provenance.py::test_tests_fixtures_hold_no_copy_of_a_shared_fixture",
}


def test_without_the_shared_folder_its_readers_skip_and_say_why(tmp_path: Path) -> None:
    absent = tmp_path / "absent"
    got, output = outcomes(SHARED_READERS, **{FOLDER_VARIABLE: str(absent)})
    assert {t for t, outcome in got.items() if outcome == "SKIPPED"} == NEED_SHARED, output
    assert set(got.values()) == {"PASSED", "SKIPPED"}, output  # ours in the same files still run
    assert f"the shared fixtures folder {absent} is absent" in output


def test_in_ci_a_missing_shared_folder_fails_its_readers(tmp_path: Path) -> None:
    got, output = outcomes(SHARED_READERS, CI="true", **{FOLDER_VARIABLE: str(tmp_path / "a")})
    assert {t for t, outcome in got.items() if outcome == "FAILED"} == NEED_SHARED, output
    assert set(got.values()) == {"PASSED", "FAILED"}, output
    assert "CI=true: its absence is a failure" in output
