"""Real transcripts (``corpus/`` of the shared fixtures folder, see its SOURCES.md; read where
they live, see ``support.shared_fixtures``) save and resume without losing a message or a tool
call of the active conversation.

Aider chat histories (``corpus/aider``) and Gemini CLI sessions (``corpus/gemini-cli``) are
counted the same way. For each file, a simple reading of the file itself (written here, sharing no code with the
readers) counts what the active conversation holds: inputs (user, system and developer
messages), assistant replies, tool calls and tool results. The saved turns, the checkpoint
history and the request the reference adapter sends must hold the same counts.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.shared_fixtures import shared_names

from agent_checkpoint.transcripts import open_transcript, plan_integrity, turns_to_checkpoint

FILES = [
    name
    for name in shared_names("corpus", (".jsonl", ".json", ".md"))
    if not name.endswith("/SOURCES.md")
]
ADAPTER = (sys.executable, "-m", "agent_checkpoint.adapters.openai_minimal")
NOISE = ("<local-command-caveat>", "<local-command-stdout>", "<local-command-stderr>")
Counts = dict[str, int]


def blocks(content: Any, kind: str) -> list[dict[str, Any]]:
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == kind]


def records(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def claude_code_expected(path: Path) -> Counts:
    """The part of the log connected (by uuid and parentUuid) to its last message, after the
    last compaction; meta lines of local-command noise and API-error stand-ins do not count."""
    lines = list(records(path))
    talk = [r for r in lines if r.get("type") in ("user", "assistant")]
    sidechain = all(r.get("isSidechain") is True for r in talk)
    root: dict[str, str] = {}

    def find(x: str) -> str:
        while root.setdefault(x, x) != x:
            x = root[x]
        return x

    for r in lines:
        if r.get("uuid") and r.get("parentUuid"):
            root[find(r["uuid"])] = find(r["parentUuid"])
    mine = [r for r in talk if bool(r.get("isSidechain")) == sidechain]
    last = find(mine[-1]["uuid"])
    boundary = max(
        (i for i, r in enumerate(lines) if r.get("subtype") == "compact_boundary"), default=-1
    )
    kept = [
        r
        for r in lines[boundary + 1 :]
        if r in mine
        and find(r["uuid"]) == last
        and not r.get("isApiErrorMessage")
        and not (r.get("isMeta") and str(r["message"]["content"]).startswith(NOISE))
    ]
    counts: Counts = Counter()
    replies: set[str] = set()
    for r in kept:
        content = r["message"]["content"]
        if r["type"] == "assistant":
            replies.add(r["message"]["id"])
            counts["calls"] += len(blocks(content, "tool_use"))
        else:
            results = blocks(content, "tool_result")
            counts["results"] += len(results)
            counts["inputs"] += isinstance(content, str) or len(results) < len(content)
    counts["replies"] = len(replies)
    return dict(counts)


def items_expected(items: list[dict[str, Any]]) -> Counts:
    """Responses items: each run of model items is one reply."""
    counts: Counts = Counter()
    in_reply = False
    for item in items:
        kind = item.get("type", "message")
        if kind == "message" and item.get("role") != "assistant":
            counts["inputs"] += 1
            in_reply = False
        elif kind.endswith("_output"):
            counts["results"] += 1
            in_reply = False
        else:
            counts["replies"] += not in_reply
            counts["calls"] += kind == "function_call"
            in_reply = True
    return dict(counts)


def request_expected(path: Path) -> Counts:
    body = json.loads(path.read_text(encoding="utf-8"))
    if "input" in body:
        return items_expected(body["input"])
    counts: Counts = Counter()
    counts["inputs"] += bool(body.get("system"))
    for m in body["messages"]:
        content = m.get("content")
        if m["role"] == "assistant":
            counts["replies"] += 1
            counts["calls"] += len(m.get("tool_calls") or []) + len(blocks(content, "tool_use"))
        elif m["role"] == "tool":
            counts["results"] += 1
        else:
            results = blocks(content, "tool_result")
            counts["results"] += len(results)
            counts["inputs"] += not isinstance(content, list) or len(results) < len(content)
    return dict(counts)


def codex_expected(path: Path) -> Counts:
    return items_expected([r["payload"] for r in records(path) if r.get("type") == "response_item"])


def aider_expected(path: Path) -> Counts:
    """The last session holding a user line, each line a letter (U ``####``, O ``>``, B blank,
    T text) from its first user line on: a run of U is a message, O runs joined across blank
    lines are one output block (an input), T runs joined across blank lines are one reply."""
    sessions = re.split(r"(?m)^# aider chat started at .*$", path.read_text(encoding="utf-8"))
    talk = [s for s in sessions if re.search(r"(?m)^####( |$)", s)][-1]
    letters = "".join(
        "U"
        if re.match(r"####( |$)", line)
        else "O"
        if line.startswith(">")
        else "B"
        if not line.strip()
        else "T"
        for line in talk.splitlines()
    )
    letters = letters[letters.index("U") :]
    outputs = len(re.findall(r"O(?:B*O)*", letters))
    return {
        "inputs": len(re.findall(r"U+", letters)) + outputs,
        "replies": len(re.findall(r"T(?:B*T)*", letters)),
    }


def gemini_expected(path: Path) -> Counts:
    """Messages of type user and gemini (the CLI's info and error notices are not the model's
    conversation); each tool call, and each that carries a result."""
    messages = json.loads(path.read_text(encoding="utf-8"))["messages"]
    calls = [c for m in messages if m["type"] == "gemini" for c in m.get("toolCalls") or ()]
    return {
        "inputs": sum(m["type"] == "user" for m in messages),
        "replies": sum(m["type"] == "gemini" for m in messages),
        "calls": len(calls),
        "results": sum(bool(c.get("result")) for c in calls),
    }


def expected(path: Path) -> Counts:
    if path.parent.name == "claude-code":
        found = claude_code_expected(path)
    elif path.parent.name == "codex":
        found = codex_expected(path)
    elif path.parent.name == "aider":
        found = aider_expected(path)
    elif path.parent.name == "gemini-cli":
        found = gemini_expected(path)
    else:
        found = request_expected(path)
    return {k: found.get(k, 0) for k in ("inputs", "replies", "calls", "results")}


def counted(messages: list[dict[str, Any]]) -> Counts:
    """Counts of chat messages (turns and the adapter's request alike)."""
    roles = Counter(m["role"] for m in messages)
    return {
        "inputs": sum(n for role, n in roles.items() if role not in ("assistant", "tool")),
        "replies": roles["assistant"],
        "calls": sum(len(m.get("tool_calls") or ()) for m in messages),
        "results": roles["tool"],
    }


@pytest.mark.parametrize("name", FILES, ids=lambda n: n.removeprefix("shared/corpus/"))
def test_a_real_transcript_saves_and_resumes_whole(
    name: str, fixture_path: Callable[[str], Path], run: Callable[..., Any], tmp_path: Path
) -> None:
    path = fixture_path(name)
    want = expected(path)
    assert want["inputs"] and want["replies"], "the oracle found no conversation"
    transcript = open_transcript(path)
    plan = plan_integrity(transcript)
    assert not plan.report.changed, plan.report.lines()  # complete files: nothing to repair
    turns = list(plan.apply(transcript))
    saved = {
        "inputs": sum(1 for t in turns if t.role != "assistant" and not t.is_result),
        "replies": sum(1 for t in turns if t.role == "assistant"),
        "calls": sum(len(t.tool_calls or ()) for t in turns),
        "results": sum(len(t.tool_results or ()) for t in turns),
    }
    assert saved == want

    checkpoint, _ = turns_to_checkpoint(turns)
    history = [m.to_json() for m in checkpoint.history]
    assert sum(len(m.get("toolCalls") or ()) for m in history) == want["calls"]
    assert sum(1 for m in history if m["role"] == "tool") == want["results"]

    ckpt = tmp_path / "ckpt.jsonl"
    assert run("save", str(path), "-o", str(ckpt)).code == 0
    ran = run("resume", str(ckpt), "--", *ADAPTER, "go on", "--print-request")
    assert ran.code == 0, ran.err
    messages = json.loads(ran.out)["messages"][:-1]
    assert counted(messages) == want
    sent_calls = [c["id"] for m in messages for c in m.get("tool_calls") or ()]
    answered = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert sorted(sent_calls) == sorted(answered)  # every call sent with its result
