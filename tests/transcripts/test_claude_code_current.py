"""Claude Code 2.1 logs: parallel tool calls, meta lines the model acted on, sub-agents."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent_checkpoint.transcripts import (
    EmptyTranscriptError,
    Turn,
    UnrecognizedFormatError,
    open_transcript,
    turns_to_checkpoint,
)
from agent_checkpoint.transcripts._claude_code import META_REASON

Ran = Any  # the conftest's Ran(code, out, err)

Saved = Callable[..., list[Turn]]
Fixture = Callable[[str], Path]


def shape(turns: list[Turn]) -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
    return [(t.role, t.call_ids, t.result_ids) for t in turns]


def texts(turns: list[Turn]) -> list[str]:
    out = []
    for t in turns:
        if isinstance(t.content, str):
            out.append(t.content)
        else:
            out.append(
                "|".join(
                    b["text"] for b in t.content if isinstance(b, dict) and b.get("type") == "text"
                )
            )
    return out


def test_parallel_calls_are_one_message_with_every_result(
    saved: Saved, fixture_path: Fixture
) -> None:
    path = fixture_path("claude-code/parallel_calls.jsonl")
    turns = saved(path)
    assert shape(turns) == [
        ("user", (), ()),
        ("assistant", ("toolu_A", "toolu_B"), ()),
        ("tool", (), ("toolu_A",)),
        ("tool", (), ("toolu_B",)),
        ("assistant", (), ()),
        ("user", (), ()),
        ("assistant", (), ()),
    ]
    assert [t.content for t in turns[2:4]] == ["a.txt", "main.py"]
    assert texts(turns)[-3:] == ["Found a.txt and main.py.", "thanks", "You're welcome."]
    transcript = open_transcript(path)
    list(transcript)
    assert transcript.notes == []  # nothing left out, nothing cut


def test_parallel_calls_synthesize_nothing_when_every_result_is_there(
    saved: Saved, fixture_path: Fixture
) -> None:
    turns = saved(fixture_path("claude-code/parallel_calls.jsonl"), policy="synthesize")
    assert all(r.get("is_error") is not True for t in turns for r in t.tool_results or ())
    assert len(turns) == 7


def test_a_chain_through_the_other_sibling_keeps_both_calls_and_leaves_the_rewind_out(
    saved: Saved, fixture_path: Fixture
) -> None:
    path = fixture_path("claude-code/parallel_calls_rewound.jsonl")
    turns = saved(path)
    assert shape(turns) == [
        ("user", (), ()),
        ("assistant", ("toolu_A", "toolu_B"), ()),
        ("tool", (), ("toolu_B",)),  # the result lines in the order they were written
        ("tool", (), ("toolu_A",)),
        ("assistant", (), ()),
        ("user", (), ()),
        ("assistant", (), ()),
    ]
    assert [b["type"] for b in turns[1].content] == ["thinking", "tool_use", "tool_use"]
    assert texts(turns)[-2:] == [
        "Actually, how big are they?",
        "a.txt is 3 bytes, main.py 120 bytes.",
    ]
    assert "thanks" not in json.dumps([t.to_json() for t in turns])
    transcript = open_transcript(path)
    list(transcript)
    assert transcript.notes == ["left out 2 message line(s) off the active branch"]


def test_a_block_written_under_an_earlier_blocks_result_stays_in_its_message(
    saved: Saved, fixture_path: Fixture
) -> None:
    turns = saved(fixture_path("claude-code/parallel_calls_streamed.jsonl"))
    assert shape(turns) == [
        ("user", (), ()),
        ("assistant", ("toolu_A", "toolu_B", "toolu_C"), ()),
        ("tool", (), ("toolu_A",)),
        ("tool", (), ("toolu_B",)),
        ("tool", (), ("toolu_C",)),
        ("assistant", (), ()),
    ]
    assert texts(turns)[-1] == "The config is covered by 3 tests."


def test_meta_lines_the_model_acted_on_are_kept_and_marked(
    saved: Saved, fixture_path: Fixture
) -> None:
    path = fixture_path("claude-code/meta_lines.jsonl")
    turns = saved(path)
    assert [t.role for t in turns] == [
        "user", "user", "assistant", "tool", "user", "assistant", "user", "assistant",
    ]  # fmt: skip
    command, skill = turns[1], turns[4]
    assert texts([command]) == [
        "Review parser.py for off-by-one errors and list each with its line."
    ]
    assert command.extra["_meta"]["injectedBy"] == {
        "injectionId": "m1",
        "flavor": "instructions",
        "reason": META_REASON,
        "iteration": 1,
    }
    assert skill.extra["_meta"]["injectedBy"]["flavor"] == "skill"
    assert skill.extra["_meta"]["injectedBy"]["iteration"] == 2
    assert "_meta" not in turns[0].extra and "_meta" not in turns[6].extra
    everything = json.dumps([t.to_json() for t in turns])
    assert "local-command-caveat" not in everything and "Total cost" not in everything
    transcript = open_transcript(path)
    list(transcript)
    assert transcript.notes == [
        "left out 2 meta line(s) of local-command caveats or output",
        "kept 2 meta line(s) (expanded commands, skill bodies, hook context) as user turns "
        "marked _meta.injectedBy",
    ]


def test_the_meta_marker_becomes_injected_by_in_the_checkpoint_and_comes_back(
    saved: Saved, fixture_path: Fixture
) -> None:
    turns = saved(fixture_path("claude-code/meta_lines.jsonl"))
    checkpoint, _ = turns_to_checkpoint(turns)
    injected = [m for m in checkpoint.history if m.injected_by is not None]
    assert [(m.role, m.injected_by.flavor) for m in injected] == [  # type: ignore[union-attr]
        ("user", "instructions"),
        ("user", "skill"),
    ]
    assert injected[1].content.startswith("Base directory for this skill")
    stored = checkpoint.to_json()["history"]
    assert stored[1]["injectedBy"] == {
        "injectionId": "m1",
        "flavor": "instructions",
        "reason": META_REASON,
        "iteration": 1,
    }


def test_a_sub_agents_own_log_saves_as_its_conversation(
    saved: Saved, fixture_path: Fixture
) -> None:
    path = fixture_path("claude-code/subagent_only.jsonl")
    turns = saved(path)
    assert shape(turns) == [
        ("user", (), ()),
        ("assistant", ("toolu_G",), ()),
        ("tool", (), ("toolu_G",)),
        ("assistant", (), ()),
    ]
    transcript = open_transcript(path)
    list(transcript)
    assert transcript.notes == [
        "every message line is a sidechain: read it as the conversation of sub-agent a1b2c3d"
    ]


def test_a_main_log_names_its_sub_agents_and_subagent_picks_one(
    saved: Saved, fixture_path: Fixture
) -> None:
    path = fixture_path("claude-code/main_with_subagents.jsonl")
    transcript = open_transcript(path)
    assert texts(list(transcript))[-1] == "Tests in tests/, docs in docs/."
    assert transcript.notes == [
        "left out 4 sidechain (sub-agent) line(s) of 2 sub-agent(s): aaa1111, bbb2222 "
        "(--subagent ID saves one)"
    ]
    docs = open_transcript(path, subagent="bbb2222")
    assert texts(list(docs)) == ["Find the docs", "Docs live in docs/."]
    with pytest.raises(EmptyTranscriptError, match=r"no sub-agent 'ccc' .*aaa1111, bbb2222"):
        list(open_transcript(path, subagent="ccc"))


def test_subagent_is_refused_for_formats_without_sub_agents(fixture_path: Fixture) -> None:
    with pytest.raises(UnrecognizedFormatError, match="has no sub-agents"):
        open_transcript(fixture_path("transcripts/openai_chat_tools.json"), subagent="x")


def test_save_subagent_writes_that_sub_agents_turns(
    run: Callable[..., Ran], fixture_path: Fixture, tmp_path: Path
) -> None:
    out = tmp_path / "docs.jsonl"
    path = str(fixture_path("claude-code/main_with_subagents.jsonl"))
    ran = run("save", path, "-o", str(out), "--subagent", "bbb2222")
    assert (ran.code, ran.out) == (0, f"Saved 2 turns to {out}\n")
    assert "read the conversation of sub-agent bbb2222" in ran.err
    missing = run("save", path, "-o", str(out), "--subagent", "zzz")
    assert missing.code == 5
    assert missing.err.startswith("agent-checkpoint: error: ")
    assert "no sub-agent 'zzz'" in missing.err


def test_a_sub_agents_own_log_saved_into_a_store_keeps_the_main_conversation(
    run: Callable[..., Ran], fixture_path: Fixture, tmp_path: Path
) -> None:
    """A sub-agent's own log carries its parent's ``sessionId``: saved without ``--key`` it
    goes under ``<session>/<sub-agent>``, beside the main conversation, never over it."""
    store = str(tmp_path / "store")
    main = run(
        "save",
        str(fixture_path("shared/corpus/claude-code/spotter-8463c716-first-854-lines.jsonl")),
        "--store",
        store,
        "--json",
    )
    sub = run(
        "save",
        str(fixture_path("shared/corpus/claude-code/spotter-8463c716-agent-a7be2f0.jsonl")),
        "--store",
        store,
        "--json",
    )
    assert (main.code, sub.code) == (0, 0), (main.err, sub.err)
    session = "8463c716-a2ea-4c14-9efa-87158ebd9f20"
    assert json.loads(main.out)["key"] == session
    assert json.loads(sub.out)["key"] == f"{session}/a7be2f0"
    assert json.loads(main.out)["revision"] == json.loads(sub.out)["revision"] == 1
    shown = run("--store", store, "show", session, "--json")
    history = json.loads(shown.out)["envelope"]["data"]["history"]
    assert len(history) == json.loads(main.out)["messages"]
