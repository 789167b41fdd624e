"""Claude Code session logs: the active branch, streamed messages, compaction, damage."""

from __future__ import annotations

import json
import tracemalloc
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from agent_checkpoint.transcripts import Turn, open_transcript, write_turns
from agent_checkpoint.transcripts._turns import call_arguments

Saved = Callable[..., list[Turn]]
Fixture = Callable[[str], Path]


def text(turn: Turn) -> str:
    """The turn's text blocks joined, or its string content."""
    if isinstance(turn.content, str):
        return turn.content
    return "|".join(
        b.get("text", "") if isinstance(b, dict) else str(b)
        for b in turn.content
        if not isinstance(b, dict) or b.get("type") == "text"
    )


def shape(turns: list[Turn]) -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
    return [(t.role, t.call_ids, t.result_ids) for t in turns]


def test_representative_session_reads_every_turn_in_order(
    saved: Saved, fixture_path: Fixture
) -> None:
    turns = saved(fixture_path("shared/claude-code/representative_messages.jsonl"))
    assert shape(turns) == [
        ("user", (), ()),
        ("assistant", (), ()),
        ("user", (), ()),
        ("assistant", ("tool_001",), ()),
        ("tool", (), ("tool_001",)),
        ("assistant", (), ()),
        ("user", (), ()),
        ("assistant", ("tool_002",), ()),
        ("tool", (), ("tool_002",)),
        ("assistant", (), ()),
        ("user", (), ()),
    ]
    assert text(turns[0]).startswith("Hello Claude! Can you help me understand how Python")
    assert turns[4].content == "File created successfully at: /tmp/decorator_example.py"
    assert turns[4].tool_results == (
        {
            "tool_call_id": "tool_001",
            "name": "Edit",
            "content": "File created successfully at: /tmp/decorator_example.py",
        },
    )
    call = turns[7].tool_calls[0]  # type: ignore[index]
    assert json.loads(call_arguments(call)) == {
        "command": "python /tmp/decorator_example.py",
        "description": "Run the decorator example to show output",
    }
    assert turns[1].model == "claude-3-sonnet-20240229" and turns[1].provider == "anthropic"
    assert turns[0].ts == "2025-06-14T10:00:00Z"
    assert text(turns[-1]).startswith("This is really helpful! Let me try to implement")


def test_a_linked_log_follows_parent_uuids(saved: Saved, fixture_path: Fixture) -> None:
    turns = saved(fixture_path("shared/claude-code/todowrite_examples.jsonl"))
    assert shape(turns) == [
        ("user", (), ()),
        ("assistant", (), ()),
        ("assistant", ("toolu_todowrite_001",), ()),
        ("tool", (), ("toolu_todowrite_001",)),
        ("assistant", (), ()),
        ("assistant", ("toolu_todowrite_002",), ()),
        ("tool", (), ("toolu_todowrite_002",)),
        ("user", (), ()),
        ("assistant", (), ()),
        ("assistant", ("toolu_todowrite_003",), ()),
        ("tool", (), ("toolu_todowrite_003",)),
    ]
    assert (
        turns[0].content == "Can you help me implement a new feature with proper task management?"
    )
    assert turns[7].content == "Can you add a task for security review as well?"


def test_session_b_has_its_three_turns(saved: Saved, fixture_path: Fixture) -> None:
    turns = saved(fixture_path("shared/claude-code/session_b.jsonl"))
    assert [t.role for t in turns] == ["user", "assistant", "user"]
    assert text(turns[0]).startswith("This is from a different session file")


def test_edge_cases_keep_the_conversation_and_drop_only_the_unanswered_calls(
    saved: Saved, fixture_path: Fixture
) -> None:
    path = fixture_path("shared/claude-code/edge_cases.jsonl")
    turns = saved(path)
    assert shape(turns) == [
        ("user", (), ()),
        ("assistant", (), ()),
        ("user", (), ()),
        ("assistant", ("tool_edge_001",), ()),
        ("tool", (), ("tool_edge_001",)),
        ("user", (), ()),
        ("user", (), ()),
        ("user", (), ()),
        ("assistant", (), ()),  # the unanswered MultiEdit's turn went with it
        ("user", (), ()),
        ("user", (), ()),  # as did the unanswered TodoWrite's, before this
    ]
    assert turns[4].content == "Error: Tool execution failed with error: Command not found"
    assert turns[4].tool_results[0]["is_error"] is True  # type: ignore[index]
    assert text(turns[7]).startswith("<local-command-stdout>Command output here:")
    kept = saved(path, policy="synthesize")
    assert shape(kept)[8:] == [
        ("assistant", ("tool_edge_002",), ()),
        ("tool", (), ("tool_edge_002",)),
        ("user", (), ()),
        ("assistant", ("toolu_todowrite_002",), ()),
        ("tool", (), ("toolu_todowrite_002",)),
        ("user", (), ()),
    ]
    assert "café, naïve, résumé, 中文" in text(kept[10])
    assert kept[13].content == ["wow error"]


def test_the_active_branch_leaves_out_rewinds_sidechains_and_meta_lines(
    saved: Saved, fixture_path: Fixture
) -> None:
    transcript = open_transcript(fixture_path("transcripts/claude_code_branches.jsonl"))
    turns = list(transcript)
    assert shape(turns) == [
        ("user", (), ()),
        ("assistant", ("toolu_01Read", "toolu_02Bash"), ()),
        ("tool", (), ("toolu_01Read",)),
        ("tool", (), ("toolu_02Bash",)),
        ("assistant", (), ()),
        ("user", (), ()),
        ("assistant", ("toolu_03Edit",), ()),
        ("tool", (), ("toolu_03Edit",)),
        ("assistant", (), ()),
    ]
    assert turns[0].content == "Please fix the failing test in parser.py"
    assert turns[5].content == "Actually, use approach Y: guard the index."
    assert text(turns[8]) == "Done with approach Y: the index is guarded."
    all_text = json.dumps([t.to_json() for t in turns])
    assert "Approach X" not in all_text and "Sub-agent" not in all_text
    assert "Caveat" not in all_text
    assert set(transcript.notes) >= {
        "left out 2 sidechain (sub-agent) line(s) of 1 sub-agent(s): "
        "8ddf8780-39b7-4767-a4a5-bcf4f0c4f65e (--subagent ID saves one)",
        "left out 1 meta line(s) of local-command caveats or output",
        "left out 2 message line(s) off the active branch",
    }


def test_streamed_lines_of_one_message_become_one_turn_with_signature_intact(
    saved: Saved, fixture_path: Fixture
) -> None:
    turns = saved(fixture_path("transcripts/claude_code_branches.jsonl"))
    blocks = turns[1].content
    assert [b["type"] for b in blocks] == ["thinking", "text", "tool_use", "tool_use"]
    assert blocks[0]["signature"] == "ErUBCkYIBxgCIkCk3wSq0H9bUb2m4c1vJp6x2gk0e6Gm7vUu5dZ8Q=="
    assert blocks[1]["text"] == "Let me look at the test\u2028and run it."
    assert turns[1].ts == "2025-11-02T09:00:03.003Z"
    assert turns[3].tool_results == (
        {
            "tool_call_id": "toolu_02Bash",
            "name": "Bash",
            "content": "FAILED tests/test_parser.py::test_empty - IndexError",
            "is_error": True,
        },
    )


def test_a_compaction_keeps_its_summary_and_drops_what_came_before(
    saved: Saved, fixture_path: Fixture
) -> None:
    transcript = open_transcript(fixture_path("transcripts/claude_code_compacted.jsonl"))
    turns = saved(fixture_path("transcripts/claude_code_compacted.jsonl"))
    assert shape(turns) == [
        ("user", (), ()),
        ("user", (), ()),
        ("assistant", ("toolu_04Bash", "toolu_06Bash"), ()),
        ("tool", (), ("toolu_04Bash",)),
        ("tool", (), ("toolu_06Bash",)),
        ("assistant", (), ()),
        ("user", (), ()),
    ]  # the commit call has no result (its line is torn): cut there
    assert str(turns[0].content).startswith("This session is being continued from a previous")
    assert turns[1].content == "Now run the full test suite"
    assert text(turns[5]) == "All 42 tests pass\u2029and lint is clean."
    assert "parser.py" not in json.dumps([t.to_json() for t in turns[1:]])
    list(transcript)
    assert "ignored a torn final line 32 (incomplete JSON)" in transcript.notes
    assert "started at the compaction boundary on line 21; kept its summary" in transcript.notes


def _log_line(kind: str, uid: str, parent: str | None, content: object, **extra: object) -> str:
    message: dict[str, object] = {"role": kind, "content": content}
    if kind == "assistant":
        message["id"] = "msg_" + uid[:8]
    record = {"type": kind, "uuid": uid, "parentUuid": parent, "sessionId": "s", "message": message}
    return json.dumps(record | extra) + "\n"


def test_a_rewind_at_the_first_prompt_keeps_only_the_new_branch(tmp_path: Path) -> None:
    a, b, c, d = (str(uuid.uuid4()) for _ in range(4))
    path = tmp_path / "s.jsonl"
    path.write_text(
        _log_line("user", a, None, "first try")
        + _log_line("assistant", b, a, "answer to first")
        + _log_line("user", c, None, "second try")
        + _log_line("assistant", d, c, "answer to second"),
        encoding="utf-8",
    )
    assert [t.content for t in open_transcript(path)] == ["second try", "answer to second"]


def test_api_error_stand_ins_are_left_out_but_the_chain_goes_through_them(tmp_path: Path) -> None:
    a, b, c, d = (str(uuid.uuid4()) for _ in range(4))
    path = tmp_path / "s.jsonl"
    path.write_text(
        _log_line("user", a, None, "hi")
        + _log_line("assistant", b, a, "API Error: 529 overloaded", isApiErrorMessage=True)
        + _log_line("user", c, b, "retry please")
        + _log_line("assistant", d, c, "hello"),
        encoding="utf-8",
    )
    assert [t.content for t in open_transcript(path)] == ["hi", "retry please", "hello"]


def test_a_line_that_is_not_json_mid_log_loses_nothing_above_it(
    saved: Saved, fixture_path: Fixture, tmp_path: Path
) -> None:
    original = fixture_path("shared/corpus/claude-code/spotter-tool_heavy.jsonl")
    lines = original.read_text(encoding="utf-8").splitlines(keepends=True)
    assert json.loads(lines[23])["type"] == "system"  # line 24: the parent of line 26
    lines[23] = "{ BROKEN" + lines[23][1:]
    broken = tmp_path / "broken.jsonl"
    broken.write_text("".join(lines), encoding="utf-8")
    whole = saved(original)
    turns = saved(broken)
    assert len(whole) == 16
    assert [t.to_json() for t in turns] == [t.to_json() for t in whole]
    transcript = open_transcript(broken)
    list(transcript)
    assert "skipped 1 line(s) that are not valid JSON" in transcript.notes
    assert (
        "line 26's parent 2ef15da6-63ae-4a98-b781-676d95ac2692 is not in the log (a line lost "
        "or not JSON); joined it to line 22, the message line before it" in transcript.notes
    )
    assert not any("off the active branch" in note for note in transcript.notes)


def test_a_deleted_line_mid_log_joins_the_rest_to_the_line_before_it(tmp_path: Path) -> None:
    u1, a1, u2, a2, u3, a3 = (str(uuid.uuid4()) for _ in range(6))
    path = tmp_path / "s.jsonl"
    path.write_text(
        _log_line("user", u1, None, "first")
        + _log_line("assistant", a1, u1, "answer 1")
        # the line of u2 is gone
        + _log_line("assistant", a2, u2, "answer 2")
        + _log_line("user", u3, a2, "third")
        + _log_line("assistant", a3, u3, "answer 3"),
        encoding="utf-8",
    )
    transcript = open_transcript(path)
    assert [t.content for t in transcript] == ["first", "answer 1", "answer 2", "third", "answer 3"]
    assert transcript.notes == [
        f"line 3's parent {u2} is not in the log (a line lost or not JSON); joined it to line 2, "
        "the message line before it"
    ]


@pytest.mark.parametrize(
    ("parents", "note"),
    [
        (
            ("u2", "u1", "a1"),  # the first line names the last as its parent
            "line 1's parent is line 3, closing a loop of parentUuid links; the conversation "
            "starts at line 1",
        ),
        (
            (None, "u1", "u2"),  # the last line is its own parent
            "line 3's parent is line 3, closing a loop of parentUuid links; joined it to line "
            "2, the message line before it",
        ),
    ],
    ids=["loop", "own parent"],
)
def test_a_parent_loop_keeps_each_line_once_and_says_where(
    parents: tuple[str | None, ...], note: str, tmp_path: Path
) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(
        _log_line("user", "u1", parents[0], "hi")
        + _log_line("assistant", "a1", parents[1], "hello")
        + _log_line("user", "u2", parents[2], "bye"),
        encoding="utf-8",
    )
    transcript = open_transcript(path)
    assert [t.content for t in transcript] == ["hi", "hello", "bye"]
    assert transcript.notes == [note]


def test_reading_a_large_log_keeps_memory_small(tmp_path: Path) -> None:
    path, out = tmp_path / "big.jsonl", tmp_path / "out.jsonl"
    parent = None
    with path.open("w", encoding="utf-8") as f:
        for i in range(1500):
            uid = str(uuid.uuid4())
            role = "user" if i % 2 == 0 else "assistant"
            f.write(_log_line(role, uid, parent, f"turn {i} " + "lorem ipsum " * 500))
            parent = uid
    size = path.stat().st_size  # about 9 MB
    tracemalloc.start()
    try:
        transcript = open_transcript(path)
        count = write_turns(out, transcript)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 1500
    assert peak < size / 10, f"peak {peak} bytes for a {size}-byte log"
