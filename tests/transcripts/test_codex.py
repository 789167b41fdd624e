"""Codex CLI rollouts: response items, turn context, event lines, compaction."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent_checkpoint.transcripts import MalformedTranscriptError, Turn, open_transcript

Saved = Callable[..., list[Turn]]


def test_a_rollout_reads_its_response_items_and_cuts_the_unfinished_call(
    saved: Saved, fixture_path: Callable[[str], Path]
) -> None:
    turns = saved(fixture_path("transcripts/codex_rollout.jsonl"))
    assert [(t.role, t.call_ids, t.result_ids) for t in turns] == [
        ("user", (), ()),
        ("user", (), ()),
        ("assistant", ("call_ls",), ()),
        ("tool", (), ("call_ls",)),
        ("assistant", (), ()),
        ("user", (), ()),
        ("assistant", ("call_patch",), ()),
        ("tool", (), ("call_patch",)),
        ("user", (), ()),
    ]
    assert turns[1].content == [{"type": "input_text", "text": "list the files"}]
    assert turns[2].model == "gpt-5-codex" and turns[2].ts == "2025-10-29T01:00:03Z"
    assert json.loads(turns[2].tool_calls[0]["function"]["arguments"]) == {  # type: ignore[index]
        "command": ["bash", "-lc", "ls"],
        "workdir": "/work/app",
    }
    patch = json.loads(turns[6].tool_calls[0]["function"]["arguments"])  # type: ignore[index]
    assert patch == {"input": "*** Begin Patch\n*** Add File: hello.txt\n+hi\n*** End Patch\n"}
    assert turns[7].content == "Success. Updated the following files:\nA hello.txt\n"
    assert turns[8].content == [{"type": "input_text", "text": "now run the tests"}]
    assert "There are two entries" in json.dumps(turns[4].content)
    assert sum("agent_message" in json.dumps(t.content) for t in turns) == 0  # events ignored


def test_a_compacted_rollout_starts_from_its_summary(
    saved: Saved, fixture_path: Callable[[str], Path]
) -> None:
    turns = saved(fixture_path("transcripts/codex_compacted.jsonl"))
    assert [t.role for t in turns] == ["user", "user", "assistant"]
    assert turns[0].content == "Summary: the user asked an old question and got an old answer."
    assert "old answer" not in json.dumps(turns[2].content)


def test_a_replacement_history_replaces_everything_before_it(tmp_path: Path) -> None:
    path = tmp_path / "rollout.jsonl"
    lines = [
        {"type": "session_meta", "payload": {"id": "x"}},
        {"type": "response_item", "payload": {"type": "message", "role": "user", "content": "old"}},
        {"type": "compacted", "payload": {"message": "", "replacement_history": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "kept"}]},
            {"type": "message", "role": "user", "content": "summary"},
        ]}},
        {"type": "response_item", "payload": {"type": "message", "role": "assistant", "content": "new"}},
    ]  # fmt: skip
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    turns = list(open_transcript(path))
    assert [(t.role, t.content) for t in turns] == [
        ("user", [{"type": "input_text", "text": "kept"}]),
        ("user", "summary"),
        ("assistant", [{"type": "message", "role": "assistant", "content": "new"}]),
    ]


def test_an_item_that_cannot_be_read_is_refused_naming_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "rollout.jsonl"
    lines = [
        {"type": "session_meta", "payload": {"id": "x"}},
        {"type": "response_item", "payload": {"type": "message", "role": "user", "content": "hi"}},
        {"type": "response_item", "payload": {"type": "message", "content": "no role"}},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    with pytest.raises(
        MalformedTranscriptError, match=re.escape(f"{path}: line 3 is not a Responses message")
    ):
        list(open_transcript(path))


def test_an_old_rollout_of_bare_items_reads_too(tmp_path: Path) -> None:
    path = tmp_path / "rollout-old.jsonl"
    lines = [
        {"id": "0197", "timestamp": "2025-05-01T10:00:00Z", "instructions": None},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {"record_type": "state"},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "yo"}],
        },
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    transcript = open_transcript(path, format="codex")
    assert [t.role for t in transcript] == ["user", "assistant"]


def test_an_interrupted_call_keeps_the_developer_and_user_messages_after_it(
    run: Callable[..., Any], fixture_path: Callable[[str], Path], tmp_path: Path
) -> None:
    out = tmp_path / "ckpt.jsonl"
    ran = run("save", str(fixture_path("transcripts/codex_dangling_middle.jsonl")), "-o", str(out))
    assert ran.code == 0
    assert ran.err == (
        "agent-checkpoint: note: dropped tool call call_pytest (shell) at turn 2: it has no "
        "result and the conversation goes on after it (--on-dangling synthesize keeps it with "
        "an error result)\n"
    )
    turns = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [(t["role"], t["tool_calls"] and [c["id"] for c in t["tool_calls"]]) for t in turns] == [
        ("user", None),
        ("assistant", None),  # its reasoning stays; the unanswered call went
        ("developer", None),
        ("user", None),
        ("assistant", ["call_diff"]),
        ("tool", None),
        ("assistant", None),
    ]
    assert [item["type"] for item in turns[1]["content"]] == ["reasoning"]
    assert turns[3]["content"][0]["text"] == "skip the tests, just show the diff"


def test_developer_messages_reach_the_store_and_resume_as_from_the_file(
    run: Callable[..., Any], fixture_path: Callable[[str], Path], tmp_path: Path
) -> None:
    # a developer message at the start (permissions) and one mid-session (sandbox changed)
    rollout = str(fixture_path("transcripts/codex_developer_messages.jsonl"))
    store = str(tmp_path / "store")
    saved = run("save", rollout, "--store", store, "--key", "shop")
    assert saved.code == 0, saved.err
    assert saved.out == f"Saved 9 turns (9 messages) to {store} as shop (revision 1)\n"
    assert "system prompt" not in saved.err
    adapter = [sys.executable, "-m", "agent_checkpoint.adapters.openai_minimal", "next?"]
    from_file = run("resume", rollout, "--", *adapter, "--print-request")
    from_store = run("resume", "--store", store, "shop", "--", *adapter, "--print-request")
    assert from_file.code == from_store.code == 0
    sent = json.loads(from_store.out)["messages"]
    assert sent == json.loads(from_file.out)["messages"]
    assert [m["role"] for m in sent] == [
        "developer",
        "user",
        "user",
        "assistant",
        "tool",
        "assistant",
        "developer",
        "user",
        "assistant",
        "user",
    ]
    assert sent[6]["content"] == "The sandbox now allows writing in /work/shop."
