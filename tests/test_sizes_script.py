"""scripts/sizes prints the sizes issue 42 judges the backends and integrations on: every
module's lines, the longest functions (over 60 flagged) and the lines of each backend class and
of the two integration classes, read from the source."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_sizes_prints_the_tables_and_exits_0() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "sizes"), "--top", "5"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for title in ("lines of each module", "longest functions", "each backend class"):
        assert title in out, out
    memory = ROOT / "agent_checkpoint" / "backends" / "_memory.py"
    lines = len(memory.read_text().splitlines())
    assert f"{lines:>5}  agent_checkpoint/backends/_memory.py" in out, out
    for cls in ("MemoryBackend", "RedisBackend", "PostgresBackend", "AgentCheckpointSaver"):
        assert f"  {cls} " in out, cls
    assert "AgentCheckpointSessionService" in out
    functions = out.split("longest functions")[1].split("lines of each backend")[0]
    assert len(functions.strip().splitlines()) >= 1 + 5  # the title's rest and at least 5 rows
    assert "flagged:" in out.splitlines()[-1]
