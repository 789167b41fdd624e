"""The repository holds only what this project wrote (issue 41).

Behaviours and facts learned from other projects carry over; their code, prose and licence
headers do not, and their real transcripts are read where they live (the shared fixtures
folder, ``support.shared_fixtures``), never copied into ``tests/fixtures`` or anywhere else.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.services import IN_CI
from support.shared_fixtures import FOLDER_VARIABLE, ROOT, require_shared_fixtures

OURS = "The agent-checkpoint authors"
"""The copyright holder our LICENSE names; a copyright line naming anyone else is foreign."""
OWN_LICENSE = "LICENSE"
"""The one tracked file allowed to carry licence text."""
OWN_SPDX = "MIT"

# Each pattern is written so that this file's own source does not match it.
YEARS = r"\d{4}(?:[ \t]*[-,][ \t]*\d{4})*"
COPYRIGHT = re.compile(
    rf"(?im)\bcopyright\b[ \t]*(?:(?:\(c\)|©)[ \t]*(?:{YEARS})?|{YEARS})[ \t,]+(.+)$"
)
FOREIGN = {
    "a licence grant": re.compile(r"(?i)\blicen[cs]ed\s+under\s+the\b"),
    "a licence text": re.compile(
        r"(?i)permission\s+is\s+hereby\s+granted"
        r"|apache\s+license,?\s+version\s+2"
        r"|gnu\s+(?:lesser\s+|affero\s+)?general\s+public\s+license"
        r"|redistribution\s+and\s+use\s+in\s+source\s+and\s+binary\s+forms"
        r"|all\s+rights\s+reserved"
    ),
    "a statement of origin": re.compile(
        r"(?i)\bported\s+from\b"
        r"|\b(?:adapted|copied|taken|derived)\s+from\s+(?:https?://|[A-Za-z0-9][\w.-]*/[\w.-])"
    ),
}
SPDX = re.compile(r"(?im)\bSPDX-(License-Identifier|FileCopyrightText)\s*:\s*(.+)$")
SHARED_LINE = 80
"""A line at least this long (bytes, stripped) found in a shared fixture marks a derived copy."""


def git_files() -> list[Path] | str:
    """The files git tracks in this checkout, or why they cannot be listed."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        return f"the tracked files cannot be listed (not a git checkout?): {exc}"
    return [ROOT / name for name in listed.decode().split("\0") if name]


def tracked_files() -> list[Path]:
    found = git_files()
    if isinstance(found, str):
        if IN_CI:
            pytest.fail(found)
        pytest.skip(found)
    return found


def foreign_marks(text: str) -> list[str]:
    """What in ``text`` looks like another project's copyright, licence or origin note."""
    found = []
    for match in COPYRIGHT.finditer(text):
        if OURS.lower() not in match.group(1).lower():
            found.append(f"a copyright line: {match.group(0).strip()!r}")
    for kind, pattern in FOREIGN.items():
        found += [f"{kind}: {m.group(0)!r}" for m in pattern.finditer(text)]
    for match in SPDX.finditer(text):
        field, value = match.group(1), match.group(2).strip()
        if (field == "License-Identifier" and value != OWN_SPDX) or (
            field == "FileCopyrightText" and OURS.lower() not in value.lower()
        ):
            found.append(f"an SPDX line: {match.group(0).strip()!r}")
    return found


def test_no_tracked_file_carries_another_projects_copyright_or_licence() -> None:
    flagged = {}
    for path in tracked_files():
        if path.relative_to(ROOT).as_posix() == OWN_LICENSE or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data:
            continue  # binary
        marks = foreign_marks(data.decode("utf-8", errors="replace"))
        if marks:
            flagged[path.relative_to(ROOT).as_posix()] = marks
    assert not flagged, "\n".join(f"{name}: {'; '.join(m)}" for name, m in flagged.items())


# The examples are split into words, so that this file does not carry what it looks for.
@pytest.mark.parametrize(
    "words",
    [
        ("# Copyright", "2025 Example LLC"),
        ("Copyright", "(c) 2019-2024, Someone Else"),
        ("# Copyright", "(c) Someone Else"),
        ("// Copyright", "© The Other Authors"),
        ("# Licensed", "under the Apache" + " License, Version 2.0 (the 'License');"),
        ("# SPDX" + "-License-Identifier:", "BSD-3-Clause"),
        ("# SPDX" + "-FileCopyrightText:", "2024 Another Project"),
        ('"""Ported', 'from example/project, tests/test_x.py."""'),
        ("# adapted", "from https://example.org/code.py"),
        ("# copied", "from owner/repo at 1234abcd"),
        ("# derived", "from src/pkg/module.py of a library"),
        ("Permission", "is hereby granted, free of charge, to any person"),
    ],
)
def test_the_check_sees_each_kind_of_foreign_header(words: tuple[str, ...]) -> None:
    assert foreign_marks(" ".join(words) + "\n")


@pytest.mark.parametrize(
    "words",
    [
        ("Copyright", "(c) 2026", OURS),
        ("# SPDX" + "-License-Identifier:", OWN_SPDX),
        ("the key is taken", "from ``waiting`` in call order"),
        ("vectors copied", "from ../shared/vectors, unchanged"),
        ("a value copied", "from here"),
        ("the copyright", "notice of the licence"),
    ],
)
def test_the_check_passes_our_own_text(words: tuple[str, ...]) -> None:
    assert foreign_marks(" ".join(words) + "\n") == []


def our_files() -> list[Path]:
    """Every file under tests/fixtures (tracked or not yet) and every tracked file."""
    found = {p for p in (ROOT / "tests" / "fixtures").rglob("*") if p.is_file()}
    tracked = git_files()
    if not isinstance(tracked, str):
        found.update(p for p in tracked if p.is_file())
    return sorted(found)


def test_no_file_of_ours_is_a_copy_of_a_shared_fixture() -> None:
    shared = require_shared_fixtures()
    digests = {
        hashlib.sha256(p.read_bytes()).hexdigest(): p for p in shared.rglob("*") if p.is_file()
    }
    copies = [
        f"{p.relative_to(ROOT)} = {digests[d]}"
        for p in our_files()
        if (d := hashlib.sha256(p.read_bytes()).hexdigest()) in digests
    ]
    assert not copies, "read these from the shared fixtures folder instead:\n" + "\n".join(copies)


def test_no_file_of_ours_holds_a_line_of_a_shared_fixture() -> None:
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
        for p in our_files()
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
    "tests/test_provenance.py::test_no_file_of_ours_is_a_copy_of_a_shared_fixture",
]
DETECTED = "tests/transcripts/test_detect.py::test_each_fixture_is_detected_by_its_content"
NEED_SHARED = {
    "tests/transcripts/test_corpus.py::test_a_real_transcript_saves_and_resumes_whole"
    "[shared/corpus (absent)]",
    *(
        f"{DETECTED}[shared/claude-code/{name}.jsonl-claude-code-jsonl]"
        for name in ("representative_messages", "edge_cases", "session_b", "todowrite_examples")
    ),
    "tests/test_provenance.py::test_no_file_of_ours_is_a_copy_of_a_shared_fixture",
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
