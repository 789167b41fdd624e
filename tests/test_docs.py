"""Every code block in README.md and docs/ runs here as written, or says why not.

A block is marked, on the line before its fence, ``<!-- not runnable: why -->`` or
``<!-- checked by tests/FILE.py -->`` (a test that reads the block from the document itself).
Every other block runs, README's first and then each doc's, in order, in ONE copy of the
repository's examples and fixtures, after README's main job (as a reader runs them), with this environment's ``agent-checkpoint`` and ``python``
first on the PATH (as after ``source .venv/bin/activate``):

- ``python``: as a program, in the same folder;
- ``bash``: as a script that must succeed;
- ``console``: each ``$ command`` (``\\`` continues it) runs in one shell session, and what it
  prints (stdout and stderr, in order) must be the lines shown, with dates and times, epoch
  milliseconds and the time of day read as placeholders.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNABLE = ("python", "bash", "console")
MARK = re.compile(r"^<!-- (not runnable[^:]*|checked by) ?:? ?(.*?) ?-->$")
FENCE = re.compile(r"^```(\w*)$")


@dataclass(frozen=True)
class Block:
    doc: Path
    line: int
    lang: str
    text: str
    mark: str | None
    why: str

    def __str__(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line} ({self.lang or 'no language'})"


def blocks(doc: Path) -> list[Block]:
    found: list[Block] = []
    lines = doc.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        opened = FENCE.match(lines[i])
        if not opened:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j] == "```")
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        mark = MARK.match(before.strip())
        found.append(
            Block(
                doc,
                i + 1,
                opened.group(1),
                "\n".join(lines[i + 1 : end]) + "\n",
                mark.group(1) if mark else None,
                mark.group(2) if mark else "",
            )
        )
        i = end + 1
    return found


ALL = [b for doc in DOCS for b in blocks(doc)]


@pytest.mark.parametrize("block", ALL, ids=str)
def test_every_block_runs_or_says_why_not(block: Block) -> None:
    if block.mark is None:
        assert block.lang in RUNNABLE, f"{block}: mark it, or give it a language that runs"
    elif block.mark == "checked by":
        checker = ROOT / block.why
        assert checker.is_file(), block.why
        assert block.doc.name in checker.read_text(encoding="utf-8"), block.why
    else:
        assert block.why, f"{block}: say why it does not run"


# -- running them ----------------------------------------------------------------------------

_MOMENT = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d(:\d\d)?|\b1\d{12}\b")


def normalized(text: str) -> list[str]:
    return [_MOMENT.sub("<time>", line.rstrip()) for line in text.splitlines()]


def console_steps(text: str) -> list[tuple[str, list[str]]]:
    steps: list[tuple[str, list[str]]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        assert lines[i].startswith("$ "), f"not a command: {lines[i]!r}"
        command = lines[i][2:]
        while command.endswith("\\"):
            i += 1
            command = command[:-1] + lines[i].strip()
        i += 1
        shown = []
        while i < len(lines) and not lines[i].startswith("$ "):
            shown.append(lines[i])
            i += 1
        steps.append((command, shown))
    return steps


def run_console(block: Block, cwd: Path, env: dict[str, str]) -> None:
    steps = console_steps(block.text)
    marker = "@@step-done@@"
    # each step keeps its exit status for the next one (`echo $?`)
    script = "".join(
        f"{command} 2>&1\nstatus=$?; echo {marker}; (exit $status)\n" for command, _ in steps
    )
    ran = subprocess.run(
        ["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    outputs = ran.stdout.split(f"{marker}\n")
    for (command, shown), got in zip(steps, outputs, strict=False):
        assert normalized(got) == normalized("\n".join(shown)), f"{block}: $ {command}"


def workspace(tmp_path: Path) -> Path:
    for name in ("examples", "tests/fixtures"):
        shutil.copytree(ROOT / name, tmp_path / name)
    shutil.copy(ROOT / "selfcheck.py", tmp_path)
    return tmp_path


MAIN_JOB = "agent-checkpoint put examples/crashed-run.json && agent-checkpoint ls"
"""What README's first command does in the folder a reader then works in (tests/test_packaging.py
runs that command itself, install included)."""


def test_the_blocks_of_every_document_run_in_one_folder_in_reading_order(tmp_path: Path) -> None:
    """A reader runs the main job, then README's blocks and each doc's, in one folder, in
    order: a block that clashes with what an earlier one stored fails here as it would there."""
    cwd = workspace(tmp_path)
    bin_dir = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_CHECKPOINT_")}
    env |= {"PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", "COLUMNS": ""}
    env.pop("COLUMNS")
    main_job = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", MAIN_JOB],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert main_job.returncode == 0, main_job.stderr
    for block in (b for doc in DOCS for b in blocks(doc) if b.mark is None):
        if block.lang == "console":
            run_console(block, cwd, env)
            continue
        if block.lang == "bash":
            argv = ["bash", "-euo", "pipefail", "-c", block.text]
        else:
            (cwd / "block.py").write_text(block.text, encoding="utf-8")
            argv = [sys.executable, "block.py"]
        ran = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
        assert ran.returncode == 0, f"{block}: {ran.stderr}"


def test_readme_shows_what_the_main_job_prints_in_a_new_folder(tmp_path: Path) -> None:
    (block,) = [
        b
        for b in blocks(ROOT / "README.md")
        if b.mark == "checked by" and b.lang == "console" and "put examples/crashed-run" in b.text
    ]
    bin_dir = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_CHECKPOINT_")}
    env |= {"PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"}
    env.pop("COLUMNS", None)
    run_console(block, workspace(tmp_path), env)


def test_the_readme_names_every_runtime_dependency_and_the_license() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for requirement in project["dependencies"]:
        name = re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0]
        assert f"`{name}`" in readme, name
    assert project["license"] == "MIT"
    assert (ROOT / "LICENSE").read_text(encoding="utf-8").startswith("MIT License")


FRAMEWORKS = {
    "langgraph": "langgraph",
    "langchain_core": "langchain-core",
    "agents": "openai-agents",
    "google": "google-adk",
}
"""Top-level modules of the frameworks the integration examples import, and their packages."""


def test_each_integration_example_says_what_to_install_for_it() -> None:
    """Above each example that imports a framework, a pip line of its document brings it: through
    the extra it names, or by naming the package ('.[langgraph]' alone brought no langgraph)."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"
    ]
    pip_line = re.compile(r"pip install '(?:localab-checkpoint|\.)\[([\w,-]+)\]'([^`\n]*)")
    checked = 0
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for block in (b for b in blocks(doc) if b.lang == "python"):
            imported = set(re.findall(r"^(?:from|import) (\w+)", block.text, re.M))
            needed = {FRAMEWORKS[m] for m in imported if m in FRAMEWORKS}
            if not needed:
                continue
            above = "\n".join(text.splitlines()[: block.line])
            brought: set[str] = set()
            for names, more in pip_line.findall(above):
                for extra in names.split(","):
                    brought |= {re.split(r"[<>=\[ ;]", d)[0] for d in extras.get(extra, [])}
                brought |= set(more.split())
            assert needed <= brought, f"{doc.name}:{block.line}: install {needed - brought}"
            checked += 1
    assert checked >= 3  # README's LangGraph example, docs/openai-agents.md's, docs/adk.md's
