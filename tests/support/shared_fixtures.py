"""Where the tests find the third-party transcripts they read but the repository does not hold.

Real transcripts written by other projects are read where they live, never copied in (issue 41):
the folder ``shared/fixtures`` beside the project root (``../shared/fixtures`` from a clone; CI
puts a read-only copy there), or the folder ``TEST_SHARED_FIXTURES`` names. Where it is absent,
as in a user's clone, a test that reads it skips with the reason; with ``CI=true`` its absence is
a failure, as a missing service is (``support.services``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from support.services import IN_CI

ROOT = Path(__file__).resolve().parents[2]
"""The project root (the folder holding ``tests/``)."""
FOLDER_VARIABLE = "TEST_SHARED_FIXTURES"
PREFIX = "shared/"
"""A fixture name starting with this is a path in the shared folder, not in tests/fixtures."""


def shared_fixtures_folder() -> Path:
    """The shared fixtures folder, whether it exists or not."""
    named = os.environ.get(FOLDER_VARIABLE)
    return Path(named) if named else ROOT.parent / "shared" / "fixtures"


def require_shared_fixtures() -> Path:
    """The shared fixtures folder; skips the calling test where it is absent (fails in CI)."""
    folder = shared_fixtures_folder()
    if not folder.is_dir():
        reason = (
            f"the shared fixtures folder {folder} is absent: third-party transcripts are read"
            f" there, not copied into the repository (set {FOLDER_VARIABLE} to use another folder)"
        )
        if IN_CI:
            pytest.fail(f"{reason} (CI=true: its absence is a failure)")
        pytest.skip(reason)
    return folder


def shared_fixture(name: str) -> Path:
    """``shared_fixture("claude-code/edge_cases.jsonl")``: a file of the shared folder. A file
    missing from a folder that is present fails everywhere (the folder is not the one we read)."""
    path = require_shared_fixtures() / name
    if not path.is_file():
        pytest.fail(f"{name} is not in the shared fixtures folder {path.parent}")
    return path


def shared_names(folder: str, suffixes: tuple[str, ...]) -> list[str]:
    """Names (``shared/...``) of the files under ``folder`` of the shared folder with one of
    ``suffixes``, to parametrize a test over. Where the shared folder is absent, one placeholder
    name, so the test still runs once and says why it skips (or fails in CI) instead of
    vanishing from the run as an empty parameter set."""
    base = shared_fixtures_folder()
    if not (base / folder).is_dir():
        return [f"{PREFIX}{folder} (absent)"]
    return sorted(
        PREFIX + p.relative_to(base).as_posix()
        for p in (base / folder).rglob("*")
        if p.suffix in suffixes
    )
