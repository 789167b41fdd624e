"""Start-up: a command imports what it uses, counted in modules (benchmarks/startup.py times it).

`agent-checkpoint --version` and `ls` of an empty store, each in a fresh process, against the
modules of `import orjson, rich.console` (what every command needs): within a bound, and none of
what they do not use (the async store, claims' workers, transcripts, resume, maintenance, the
integrations, asyncio, rich's progress bars, subprocesses, OpenTelemetry)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent_checkpoint import open_store

NOT_FOR_THESE_COMMANDS = (
    "agent_checkpoint._async_store",
    "agent_checkpoint._maintenance",
    "agent_checkpoint.resume",
    "agent_checkpoint.transcripts",
    "agent_checkpoint.integrations.langgraph",
    "asyncio",
    "rich.progress",
    "subprocess",
    "opentelemetry",
    "decimal",
    "difflib",
)
BOUND = {"--version": 72, "ls": 80}
"""Modules each command imports beyond ``import orjson, rich.console, uuid`` (and tenacity,
which the disk backend's index retries with, for ``ls``) and what those import themselves: 67
and 74 when set on Python 3.11 with today's versions, 60 and 68 on 3.10 with the lowest allowed
(148 and more before the CLI and the package imported lazily)."""


def modules_after(program: str, cwd: Path) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=cwd, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    found: set[str] = set(json.loads(done.stdout.splitlines()[-1]))
    return found


CLI = """
import json, sys
from agent_checkpoint._cli import main
try:
    main({argv!r})
except SystemExit:
    pass
print()
print(json.dumps(sorted(sys.modules)))
"""


@pytest.mark.parametrize("command", ["--version", "ls"])
def test_version_and_ls_of_an_empty_store_import_only_what_they_use(
    command: str, tmp_path: Path
) -> None:
    with open_store(str(tmp_path / "store")) as store:
        store.setup()
    argv = ["--version"] if command == "--version" else ["ls", "--store", "store"]
    imported = modules_after(CLI.format(argv=argv), tmp_path)
    assert "agent_checkpoint._cli" in imported  # the command ran in this process
    # what the libraries a command does use import themselves on this interpreter and these
    # versions (Python 3.10's uuid imports subprocess through platform; tenacity before 8.3
    # imports asyncio): not the command's doing
    theirs = modules_after(
        f"import json, sys, orjson, rich.console, uuid{', tenacity' if command == 'ls' else ''}; "
        "print(json.dumps(sorted(sys.modules)))",
        tmp_path,
    )
    unused = sorted(
        m
        for m in imported - theirs
        if m.split(".")[0] in {"asyncio", "subprocess", "opentelemetry"}
        or any(m == n or m.startswith(n + ".") for n in NOT_FOR_THESE_COMMANDS)
    )
    assert unused == []
    extra = imported - theirs
    assert len(extra) <= BOUND[command], sorted(extra)
