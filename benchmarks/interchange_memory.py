"""Peak memory of ``agent-checkpoint save`` on large files of the formats read since issue 47.

For each format, writes a synthetic file of about ``--size-mb`` (default 200 MB) and runs the
real CLI on it (``save FILE -o OUT``) in a child process, reporting that child's peak resident
set size. The formats:

- ``aider``: an Aider chat history; a short first session, then one long session (the one read)
  of messages, replies with fenced edits and output blocks.
- ``gemini-cli`` (JSON): one session object whose ``messages`` hold replies with thoughts and
  tool calls carrying their results.
- ``gemini-cli`` (JSON Lines): the same messages, each reply written twice (first with its tool
  call running, then complete), with ``$set`` lines between.
- ``claude-code`` web export: the Claude Code log of ``claude_code_memory.py`` wrapped as
  ``{"loglines": [...]}``.

    python benchmarks/interchange_memory.py                 # every format, 200 MB each
    python benchmarks/interchange_memory.py --size-mb 20 --only aider
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO

from claude_code_memory import session as claude_code_session

LIMIT_MIB = 64
WORDS = ["the", "parser", "token", "index", "guard", "empty", "list", "test", "value", "file"]
MEASURE = (
    "import resource, subprocess, sys\n"
    "done = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
    "sys.stderr.write(done.stderr)\n"
    "print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
)
"""Run in a child of its own, so each save's peak is measured apart from the others'."""


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def dumps(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def write_aider(f: TextIO, rng: random.Random, target: int) -> None:
    f.write("\n# aider chat started at 2025-06-01 09:00:00\n\n> Aider v0.86.1  \n\n")
    f.write("#### hello  \n\nHello.\n\n")
    f.write("# aider chat started at 2025-06-02 09:00:00\n\n> Aider v0.86.1  \n")
    f.write("> Main model: gpt-4o with diff edit format  \n\n")
    exchange = 0
    while f.tell() < target:
        exchange += 1
        f.write("".join(f"#### {words(rng, 12)}  \n" for _ in range(rng.randint(1, 4))) + "\n")
        f.write(f"{words(rng, 80)}\n\nparser.py\n```python\n<<<<<<< SEARCH\n")
        f.write(f"{words(rng, 200)}\n=======\n{words(rng, 200)}\n>>>>>>> REPLACE\n```\n\n")
        f.write("".join(f"> {words(rng, 10)}  \n" for _ in range(rng.randint(2, 40))) + "\n")


def gemini_messages(rng: random.Random, target: int) -> Iterator[tuple[dict[str, object], bool]]:
    """Messages of one long session, and whether each is a reply with a tool call."""
    written, exchange = 0, 0
    while written < target:
        exchange += 1
        ts = "2026-01-05T10:00:00.000Z"
        user = {"id": f"u{exchange}", "timestamp": ts, "type": "user", "content": words(rng, 40)}
        call_id = f"run_shell_command-{exchange}"
        output = words(rng, rng.randint(100, 2500))
        reply = {
            "id": f"g{exchange}",
            "timestamp": ts,
            "type": "gemini",
            "content": words(rng, 60),
            "thoughts": [{"subject": "Plan", "description": words(rng, 80), "timestamp": ts}],
            "toolCalls": [
                {
                    "id": call_id,
                    "name": "run_shell_command",
                    "args": {"command": "pytest -q"},
                    "status": "success",
                    "timestamp": ts,
                    "result": [
                        {
                            "functionResponse": {
                                "id": call_id,
                                "name": "run_shell_command",
                                "response": {"output": output},
                            }
                        }
                    ],
                }
            ],
            "model": "gemini-2.5-pro",
            "tokens": {"input": 9000, "output": 300, "cached": 0, "thoughts": 80, "total": 9380},
        }
        last = {"id": f"h{exchange}", "timestamp": ts, "type": "gemini", "content": words(rng, 30)}
        for message, calls in ((user, False), (reply, True), (last, False)):
            written += len(dumps(message)) + 1
            yield message, calls


HEADER = {
    "sessionId": "5d1f0e2a-7c3b-4a9d-8e6f-1b2c3d4e5f60",
    "projectHash": "ab" * 32,
    "startTime": "2026-01-05T10:00:00.000Z",
    "lastUpdated": "2026-01-05T10:00:00.000Z",
}


def write_gemini_json(f: TextIO, rng: random.Random, target: int) -> None:
    f.write(dumps(HEADER)[:-1] + ',"messages":[\n')
    for k, (message, _) in enumerate(gemini_messages(rng, target)):
        f.write(("" if k == 0 else ",\n") + dumps(message))
    f.write("\n]}\n")


def write_gemini_jsonl(f: TextIO, rng: random.Random, target: int) -> None:
    f.write(dumps(HEADER | {"kind": "main"}) + "\n")
    for message, calls in gemini_messages(rng, int(target / 1.15)):
        if calls:  # first written with its call still running, then again when done
            running = [{**c, "status": "executing", "result": None} for c in message["toolCalls"]]  # type: ignore[attr-defined]
            f.write(dumps(message | {"toolCalls": running}) + "\n")
        f.write(dumps(message) + "\n")
        f.write(dumps({"$set": {"lastUpdated": message["timestamp"]}}) + "\n")


def write_loglines(f: TextIO, rng: random.Random, target: int) -> None:
    f.write('{"loglines":[\n')
    for k, record in enumerate(claude_code_session(rng, target, 3500)):
        f.write(("" if k == 0 else ",\n") + dumps(record))
    f.write("\n]}\n")


WRITERS: dict[str, tuple[str, Callable[[TextIO, random.Random, int], None]]] = {
    "aider": (".aider.chat.history.md", write_aider),
    "gemini-json": ("session.json", write_gemini_json),
    "gemini-jsonl": ("session.jsonl", write_gemini_jsonl),
    "loglines": ("export.json", write_loglines),
}


def measure(name: str, size_mb: float, tmp: Path) -> tuple[float, float, float, int]:
    """Size (MiB), seconds, peak RSS (MiB) of one save, and its turns."""
    suffix, write = WRITERS[name]
    source, out = tmp / f"{name}-{suffix}", tmp / f"{name}-turns.jsonl"
    with source.open("w", encoding="utf-8") as f:
        write(f, random.Random(7), int(size_mb * 1024 * 1024))
    command = (sys.executable, "-m", "agent_checkpoint", "save", str(source), "-o", str(out))
    start = time.perf_counter()
    ran = subprocess.run(
        [sys.executable, "-c", MEASURE, *command], capture_output=True, text=True, check=True
    )
    elapsed = time.perf_counter() - start
    code, peak_kib = (int(x) for x in ran.stdout.split())
    if code:
        raise SystemExit(f"{name}: save exited {code}: {ran.stderr}")
    turns = sum(1 for _ in out.open("rb"))
    size = source.stat().st_size / 2**20
    source.unlink()
    out.unlink()
    return size, elapsed, peak_kib / 1024, turns


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mb", type=float, default=200)
    parser.add_argument("--only", choices=sorted(WRITERS), action="append")
    args = parser.parse_args()
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only or list(WRITERS):
            size, elapsed, peak, turns = measure(name, args.size_mb, Path(tmp))
            worst = max(worst, peak)
            print(
                f"{name:13} {size:7.1f} MiB  {turns:8,} turns  save {elapsed:6.1f} s  "
                f"peak RSS {peak:6.1f} MiB",
                flush=True,
            )
    print(f"limit {LIMIT_MIB} MiB")
    return 0 if worst < LIMIT_MIB else 1


if __name__ == "__main__":
    sys.exit(main())
