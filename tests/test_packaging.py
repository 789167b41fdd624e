"""The core install works without any extra: drivers load only when their scheme is used; the
README's main job runs as written in a fresh copy of the repository."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

USE_CORE = r"""
import sys, agent_checkpoint
from agent_checkpoint import Message, RunCheckpoint, open_store
from agent_checkpoint.errors import MissingDependencyError

# asyncio and greenlet: only an AsyncStore needs them (~30 ms of import for every CLI start)
drivers = ("redis", "psycopg", "psycopg_pool", "boto3", "botocore", "fsspec", "asyncio", "greenlet")
assert not any(d in sys.modules for d in drivers), [d for d in drivers if d in sys.modules]
store = open_store(sys.argv[1])
store.put(RunCheckpoint.new("hi", [Message("user", "hi")], run_id="r1"))
assert store.get("r1").history[0].content == "hi"
for url, extra in [("redis://127.0.0.1:6379", "redis"), ("postgresql://x/y", "postgres"),
                   ("s3://bucket/p", "s3"), ("gs://bucket/p", "fsspec")]:
    try:
        open_store(url)
    except MissingDependencyError as exc:
        assert f"pip install 'localab-checkpoint[{extra}]'" in str(exc), str(exc)
    else:
        raise AssertionError(f"{url} opened without its driver")
assert not any(d in sys.modules for d in drivers)
print("core ok")
"""


@pytest.mark.slow
def test_core_install_without_extras_imports_and_stores(tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(ROOT)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    listed = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=freeze"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.lower()
    for driver in ("redis", "psycopg", "boto3", "fsspec"):
        assert f"\n{driver}==" not in "\n" + listed
    result = subprocess.run(
        [str(python), "-c", USE_CORE, str(tmp_path / "store")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "core ok"
    cli = subprocess.run(
        [str(env_dir / "bin" / "agent-checkpoint"), "ls", "--store", str(tmp_path / "store")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 0 and "r1" in cli.stdout, cli.stderr


def test_python_dash_m_runs_the_cli(tmp_path: Path) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "agent_checkpoint", *args, "--store", str(tmp_path / "s")],
            capture_output=True,
            text=True,
            timeout=60,
        )

    assert cli("setup").returncode == 0  # ls creates no store: a missing one is an error
    result = cli("ls")
    assert result.returncode == 0, result.stderr
    assert "no checkpoints" in result.stdout


@pytest.mark.slow
def test_the_readme_main_job_runs_as_written(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## The two commands", 1)[1]
    command = section.split("```bash\n", 1)[1].split("\n```", 1)[0]
    assert command.startswith("python3 -m venv .venv && .venv/bin/pip install -q . &&")
    copy = tmp_path / "repo"
    copy.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, copy)
    for name in ("agent_checkpoint", "examples"):
        shutil.copytree(ROOT / name, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AGENT_CHECKPOINT_", "VIRTUAL_ENV"))
    }
    ran = subprocess.run(
        ["bash", "-c", command], cwd=copy, env=env, capture_output=True, text=True, timeout=900
    )
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert lines[0] == "Stored conv-41200 (revision 1, 729 B)"
    assert lines[1].split()[:2] == ["KEY", "SAVED"] and lines[2].split()[0] == "conv-41200"
    assert "  failed     llm at iteration 2 (stage: call-llm)" in lines


def test_the_floors_the_suite_runs_on_are_the_lower_bounds_pyproject_declares() -> None:
    """``scripts/test-floors`` runs the suite on ``scripts/floors.txt``: each lower bound of
    the core and of the storage extras is pinned there, at exactly that version, so a bound
    raised or lowered in one place and not the other fails here."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    declared = list(project["dependencies"])
    for extra in ("redis", "postgres", "s3", "fsspec", "encryption", "async", "otel"):
        declared += extras[extra]
    pins = _pins("floors.txt")
    bounds = {}
    for requirement in declared:
        name, _, bound = requirement.partition(">=")
        if name.startswith("localab-checkpoint"):
            continue
        assert bound, f"{requirement!r} declares no lower bound"
        name = name.strip()
        if name.endswith("[binary]"):  # psycopg's C build, released with psycopg itself
            name = name.removesuffix("[binary]")
            bounds[name + "-binary"] = bound
        bounds[name] = bound
    assert {name: _padded(pins.get(name, "0")) for name in bounds} == {
        name: _padded(bound) for name, bound in bounds.items()
    }


def _padded(version: str) -> tuple[int, ...]:
    parts = tuple(int(p) for p in version.split("."))
    return parts + (0,) * (3 - len(parts))


def _pins(name: str) -> dict[str, str]:
    pins = {}
    for line in (ROOT / "scripts" / name).read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            package, _, version = line.partition("==")
            pins[package.strip()] = version.strip()
    return pins


def test_the_framework_floors_are_the_lower_bounds_the_framework_extras_declare() -> None:
    """``scripts/test-framework-floors`` runs the integrations' tests on
    ``scripts/framework-floors.txt``: each framework bound of the langgraph, openai-agents and
    adk extras is pinned there at exactly that version (google-adk 2.7 to 2.9 lacked a method
    the ADK service called; only such a run finds that)."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    bounds = {}
    for extra in ("langgraph", "openai-agents", "adk"):
        for requirement in extras[extra]:
            name, _, bound = requirement.partition(">=")
            if not name.startswith("localab-checkpoint"):
                bounds[name.strip()] = bound
    pins = _pins("framework-floors.txt")
    assert {name: _padded(pins.get(name, "0")) for name in bounds} == {
        name: _padded(bound) for name, bound in bounds.items()
    }
    # beside them, the tests' own packages at the test extra's lower bounds
    assert set(pins) - set(bounds) == {"langgraph", "langgraph-checkpoint-conformance"}
    test_bounds = dict(r.partition(">=")[::2] for r in extras["test"] if ">=" in r)
    for name in ("langgraph", "langgraph-checkpoint-conformance"):
        assert _padded(pins[name]) == _padded(test_bounds[name]), name


def test_scripts_test_help_and_quick_mode_do_not_install_or_run_the_gates(
    tmp_path: Path,
) -> None:
    """``./scripts/test --help`` prints its usage and ``--quick`` without tests refuses, both
    before anything is installed: a venv that cannot be made (PYTHON=false, VENV absent) would
    fail any install step."""
    env = {**os.environ, "PYTHON": "false", "VENV": str(tmp_path / "no-venv")}
    shown = subprocess.run(
        ["bash", str(ROOT / "scripts" / "test"), "--help"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("usage: ./scripts/test [--quick]")
    assert "--quick" in shown.stdout and not (tmp_path / "no-venv").exists()
    env["VENV"] = sys.prefix  # this venv: --quick needs no install
    bare = subprocess.run(
        ["bash", str(ROOT / "scripts" / "test"), "--quick"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bare.returncode == 2
    assert "name the tests to run" in bare.stderr
