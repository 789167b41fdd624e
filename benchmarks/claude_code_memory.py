"""Peak memory of ``agent-checkpoint save`` on a large Claude Code session log.

Writes a synthetic log of the shape Claude Code 2.1 writes (a parentUuid chain, streamed
assistant lines, thinking with signatures, parallel tool calls one line per block with each
result under its own call's line, tool results of 1-24 KB, skill-body meta lines, progress
and file-history-snapshot lines, a rewound branch, sub-agent sidechain lines and a
compaction boundary half way), then runs the real CLI on it in a child process and reports that child's
peak resident set size (``getrusage(RUSAGE_CHILDREN).ru_maxrss``).

    python benchmarks/claude_code_memory.py            # 100 MB log
    python benchmarks/claude_code_memory.py --size-mb 20 --keep /tmp/log.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

SESSION = "0b7c0e62-3f1e-4d8a-9c55-6a1f2d3e4b5c"
BASE = {
    "isSidechain": False,
    "userType": "external",
    "cwd": "/work/app",
    "sessionId": SESSION,
    "version": "2.1.39",
    "gitBranch": "main",
}


def _line(kind: str, parent: str | None, **fields: object) -> tuple[str, dict[str, object]]:
    uid = str(uuid.uuid4())
    record: dict[str, object] = {
        "parentUuid": parent,
        **BASE,
        "type": kind,
        **fields,
        "uuid": uid,
        "timestamp": "2025-11-02T09:00:00.000Z",
    }
    return uid, record


def _words(rng: random.Random, n: int) -> str:
    vocabulary = [
        "the",
        "parser",
        "token",
        "index",
        "guard",
        "empty",
        "list",
        "test",
        "case",
        "value",
        "error",
        "file",
        "line",
    ]
    return " ".join(rng.choice(vocabulary) for _ in range(n))


def session(rng: random.Random, target: int, result_words: int) -> Iterator[dict[str, object]]:
    """Records of one long session, about ``target`` bytes once encoded."""
    parent: str | None = None
    written, exchange = 0, 0
    compacted = False
    while written < target:
        exchange += 1
        batch: list[dict[str, object]] = []
        uid, rec = _line("user", parent, message={"role": "user", "content": _words(rng, 60)})
        batch.append(rec)
        if exchange % 25 == 0:  # a rewound branch: an answer the user then abandons
            _, dead = _line(
                "assistant",
                uid,
                message={
                    "id": f"msg_dead{exchange}",
                    "role": "assistant",
                    "content": [{"type": "text", "text": _words(rng, 80)}],
                },
            )
            batch.append(dead)
            uid, rec = _line("user", parent, message={"role": "user", "content": _words(rng, 40)})
            batch.append(rec)
        mid = f"msg_{exchange:07d}"
        model = {
            "model": "claude-sonnet-4-5-20250929",
            "stop_reason": None,
            "usage": {"input_tokens": 1200, "output_tokens": 300, "cache_read_input_tokens": 9000},
        }
        uid, rec = _line(
            "assistant",
            uid,
            requestId=f"req_{exchange}",
            message={
                "id": mid,
                "type": "message",
                "role": "assistant",
                "content": [
                    {
                        "type": "thinking",
                        "thinking": _words(rng, 150),
                        "signature": "Er" + "A" * 300,
                    }
                ],
                **model,
            },
        )
        batch.append(rec)
        uid, rec = _line(
            "assistant",
            uid,
            message={
                "id": mid,
                "type": "message",
                "role": "assistant",
                "content": [{"type": "text", "text": _words(rng, 80)}],
                **model,
            },
        )
        batch.append(rec)
        calls = [f"toolu_{exchange:07d}_{k}" for k in range(rng.choice((1, 1, 2, 3)))]
        call_lines: list[str] = []
        for call in calls:  # one line per tool_use block, as Claude Code 2.1 writes them
            uid, rec = _line(
                "assistant",
                uid,
                message={
                    "id": mid,
                    "type": "message",
                    "role": "assistant",
                    "content": [
                        {
                            "type": "tool_use",
                            "id": call,
                            "name": "Bash",
                            "input": {"command": "pytest -q", "description": _words(rng, 8)},
                        }
                    ],
                    **model,
                },
            )
            call_lines.append(uid)
            batch.append(rec)
        uid, rec = _line(
            "progress", uid, data={"type": "hook_progress", "hookEvent": "PostToolUse"}
        )
        batch.append(rec)
        for call, call_line in zip(calls, call_lines, strict=True):
            body = _words(rng, rng.randint(min(150, result_words), result_words))
            # Each result hangs off its own call's line, so only the last is on the chain.
            uid, rec = _line(
                "user",
                call_line,
                message={
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": call,
                            "content": body,
                            "is_error": False,
                        }
                    ],
                },
                toolUseResult={"stdout": body[:200], "stderr": "", "interrupted": False},
                sourceToolAssistantUUID=call_line,
            )
            batch.append(rec)
        if exchange % 7 == 0:  # a skill's body, a meta line the model acts on
            uid, rec = _line(
                "user",
                uid,
                isMeta=True,
                message={
                    "role": "user",
                    "content": [{"type": "text", "text": "Base directory for this skill: "
                                 + _words(rng, 120)}],
                },
            )  # fmt: skip
            batch.append(rec)
        if exchange % 10 == 0:
            _, side = _line(
                "assistant",
                None,
                isSidechain=True,
                message={
                    "id": f"side{exchange}",
                    "role": "assistant",
                    "content": [{"type": "text", "text": _words(rng, 100)}],
                },
            )
            batch.append(side | {"isSidechain": True})
            batch.append(
                {
                    "type": "file-history-snapshot",
                    "messageId": uid,
                    "snapshot": {"trackedFileBackups": {}, "timestamp": "2025-11-02T09:00:00.000Z"},
                    "isSnapshotUpdate": False,
                }
            )
        uid, rec = _line(
            "assistant",
            uid,
            message={
                "id": mid + "b",
                "type": "message",
                "role": "assistant",
                "content": [{"type": "text", "text": _words(rng, 60)}],
                **model,
            },
        )
        batch.append(rec)
        parent = uid
        if not compacted and written > target // 2:
            compacted = True
            boundary, rec = _line(
                "system",
                None,
                subtype="compact_boundary",
                content="Conversation compacted",
                logicalParentUuid=parent,
                compactMetadata={"trigger": "auto", "preTokens": 155000},
            )
            batch.append(rec)
            parent, rec = _line(
                "user",
                boundary,
                isCompactSummary=True,
                message={
                    "role": "user",
                    "content": "This session is being continued. Summary: " + _words(rng, 300),
                },
            )
            batch.append(rec)
        for record in batch:
            written += len(json.dumps(record, separators=(",", ":"))) + 1
            yield record


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mb", type=float, default=100)
    parser.add_argument("--keep", type=Path, help="write the log here and keep it")
    parser.add_argument(
        "--result-words", type=int, default=3500, help="longest tool result; smaller = more lines"
    )
    parser.add_argument(
        "--into-store",
        action="store_true",
        help="save into a disk store (--store) instead of a file (-o): the checkpoint is held "
        "in memory to be encoded as one record, so the peak grows with its size",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log = args.keep or Path(tmp) / "session.jsonl"
        out = Path(tmp) / "checkpoint.jsonl"
        rng = random.Random(7)
        lines = 0
        with log.open("w", encoding="utf-8") as f:
            for record in session(rng, int(args.size_mb * 1024 * 1024), args.result_words):
                f.write(json.dumps(record, separators=(",", ":")) + "\n")
                lines += 1
        size = log.stat().st_size
        start = time.perf_counter()
        done = subprocess.run(
            [
                *(sys.executable, "-m", "agent_checkpoint", "save", str(log)),
                *(("--store", str(Path(tmp) / "store")) if args.into_store else ("-o", str(out))),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        elapsed = time.perf_counter() - start
        peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        print(done.stdout.strip())
        if done.returncode:
            print(done.stderr, file=sys.stderr)
            return done.returncode
        if args.into_store:
            stored = sum(f.stat().st_size for f in (Path(tmp) / "store").rglob("*") if f.is_file())
            print(f"log: {size / 2**20:.1f} MiB, {lines} lines; store: {stored / 2**20:.1f} MiB")
            print(f"save --store: {elapsed:.1f} s, peak RSS {peak_kib / 1024:.1f} MiB")
            return 0  # no limit: the whole checkpoint is in memory (README, "Reading transcripts")
        print(
            f"log: {size / 2**20:.1f} MiB, {lines} lines; checkpoint: {out.stat().st_size / 2**20:.1f} MiB"
        )
        print(f"save: {elapsed:.1f} s, peak RSS {peak_kib / 1024:.1f} MiB (limit 64 MiB)")
        return 0 if peak_kib < 64 * 1024 else 1


if __name__ == "__main__":
    sys.exit(main())
