"""The save / resume / diff / merge commands: outputs, exit codes, and refusals."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

Ran = Any  # the conftest's Ran(code, out, err)
Run = Callable[..., Ran]
Fixture = Callable[[str], Path]
PY = sys.executable
QUICK_START = [
    {"role": "user", "content": "What's the capital of France?"},
    {"role": "assistant", "content": "Paris."},
    {"role": "user", "content": "And Germany?"},
    {"role": "assistant", "content": "Berlin."},
]


def one_error_line(ran: Ran) -> str:
    """The single stderr line of a failed command (notes may precede it)."""
    err: str = ran.err
    lines = [line for line in err.splitlines() if not line.startswith("agent-checkpoint: note:")]
    assert len(lines) == 1, ran.err
    assert lines[0].startswith("agent-checkpoint: error: ") and "Traceback" not in err
    return lines[0]


def write_json(path: Path, value: object) -> Path:
    path.write_text(json.dumps(value), encoding="utf-8")
    return path


def test_save_writes_turns_and_reports_repairs_on_stderr(
    run: Run, tmp_path: Path, fixture_path: Fixture
) -> None:
    out = tmp_path / "ckpt.jsonl"
    ran = run("save", str(fixture_path("transcripts/openai_chat_tools.json")), "-o", str(out))
    assert (ran.code, ran.out) == (0, f"Saved 11 turns to {out}\n")
    assert ran.err == (
        "agent-checkpoint: note: cut the conversation after turn 11 of 12: tool call call_book "
        "(book_flight) at turn 12 has no result\n"
    )
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [line["role"] for line in lines][-2:] == ["assistant", "user"]
    assert all(line["ts"].endswith("Z") for line in lines)


def test_save_counts_one_turn_in_the_singular(run: Run, tmp_path: Path) -> None:
    source, out = write_json(tmp_path / "t.json", QUICK_START[:1]), tmp_path / "out.jsonl"
    assert run("save", str(source), "-o", str(out)).out == f"Saved 1 turn to {out}\n"
    ran = run("save", str(source), "--store", str(tmp_path / "s"), "--key", "k")
    assert ran.out.startswith("Saved 1 turn (1 message) to ")


def test_save_synthesize_keeps_the_unanswered_call(
    run: Run, tmp_path: Path, fixture_path: Fixture
) -> None:
    out = tmp_path / "ckpt.jsonl"
    source = fixture_path("transcripts/openai_chat_tools.json")
    ran = run("save", str(source), "-o", str(out), "--on-dangling", "synthesize")
    assert ran.code == 0 and ran.out == f"Saved 13 turns to {out}\n"
    last = json.loads(out.read_text(encoding="utf-8").splitlines()[-1])
    assert last["role"] == "tool" and last["tool_results"][0]["tool_call_id"] == "call_book"
    assert last["tool_results"][0]["is_error"] is True


def test_save_format_override(run: Run, tmp_path: Path) -> None:
    source = write_json(tmp_path / "t.json", QUICK_START)
    out = tmp_path / "ckpt.jsonl"
    assert run("save", str(source), "-o", str(out), "--format", "anthropic").code == 0
    assert {json.loads(line)["provider"] for line in out.read_text().splitlines()} == {"anthropic"}


def _huge(path: Path) -> None:
    with path.open("w", encoding="utf-8") as f:
        f.write('{"role": "user", "content": "hi"}\n{"role": "assistant", "content": "')
        f.write("x" * (33 * 1024 * 1024))
        f.write('"}\n')


def _late_latin1(path: Path) -> None:
    """A line that is not UTF-8 past what detection reads (the first 64 KiB)."""
    line = json.dumps({"role": "user", "content": "x" * 1000}) + "\n"
    path.write_bytes(
        line.encode() * 100 + '{"role": "user", "content": "d\xe9j\xe0"}\n'.encode("latin-1")
    )


@pytest.mark.parametrize(
    ("name", "make", "code", "message"),
    [
        ("empty", lambda p: p.write_bytes(b""), 5, "the file is empty"),
        ("binary", lambda p: p.write_bytes(bytes(range(256)) * 8), 5, "binary data"),
        ("latin1", lambda p: p.write_bytes("d\xe9j\xe0 vu".encode("latin-1")), 5, "not UTF-8"),
        ("text", lambda p: p.write_text("just some notes\n"), 5, "not JSON or JSON Lines"),
        ("wrong", lambda p: p.write_text('{"name": "pkg", "version": "1.0"}\n'), 5, "pass --format"),
        ("truncated", lambda p: p.write_text('[{"role": "user", "content": "hi"}, {"ro'), 5, "truncated"),
        ("torn-turns", lambda p: p.write_text('{"role": "user", "content": "a", "ts": null}\n{"role'), 5, "line 2"),
        ("huge", _huge, 5, "line 2 is longer than 33554432 bytes"),
        ("late-latin1", _late_latin1, 5, "line 101 is not valid JSON"),
        ("late-garbage", lambda p: write_json(p, [{"role": "user", "content": "a"}] * 70 + [7]), 5,
         "message 71 is not an OpenAI chat message"),
        ("only-dangling", lambda p: write_json(p, [{"role": "assistant", "content": None, "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]),
         5, "no complete turn to save"),
    ],
)  # fmt: skip
def test_save_refuses_malformed_input_with_one_line_and_writes_nothing(
    run: Run, tmp_path: Path, name: str, make: Callable[[Path], object], code: int, message: str
) -> None:
    source, out = tmp_path / f"{name}.input", tmp_path / "out.jsonl"
    make(source)
    ran = run("save", str(source), "-o", str(out))
    assert ran.code == code and ran.out == ""
    assert message in one_error_line(ran)
    assert one_error_line(ran).count(str(source)) == 1
    assert sorted(os.listdir(tmp_path)) == [source.name]


def test_save_of_a_missing_transcript_exits_3(run: Run, tmp_path: Path) -> None:
    ran = run("save", str(tmp_path / "nope.json"), "-o", str(tmp_path / "out.jsonl"))
    assert ran.code == 3 and "no such file" in one_error_line(ran)


def test_save_needs_exactly_one_destination(run: Run, tmp_path: Path) -> None:
    source = write_json(tmp_path / "t.json", QUICK_START)
    assert run("save", str(source)).code == 2
    assert run("save", str(source), "-o", "x.jsonl", "--store", str(tmp_path / "s")).code == 2


def test_save_and_merge_refuse_to_write_over_their_input(
    run: Run, tmp_path: Path, fixture_path: Fixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    log = tmp_path / "session.jsonl"
    log.write_bytes(fixture_path("claude-code/parallel_calls.jsonl").read_bytes())
    before = log.read_bytes()
    ran = run("save", "session.jsonl", "-o", "./session.jsonl")
    assert ran.code == 2 and ran.out == ""
    assert one_error_line(ran) == (
        "agent-checkpoint: error: -o ./session.jsonl is the input session.jsonl: writing there "
        "would replace it"
    )
    assert run("save", "session.jsonl", "-o", "turns.jsonl").code == 0
    ran = run("merge", "turns.jsonl", "session.jsonl", "-o", str(log))
    assert ran.code == 2 and f"-o {log} is the input session.jsonl" in one_error_line(ran)
    assert log.read_bytes() == before


def test_save_to_a_folder_that_does_not_exist_exits_2(run: Run, tmp_path: Path) -> None:
    source = write_json(tmp_path / "t.json", QUICK_START)
    ran = run("save", str(source), "-o", str(tmp_path / "no" / "such" / "dir" / "c.jsonl"))
    assert ran.code == 2 and "cannot write" in one_error_line(ran)


def marker_command(marker: Path) -> list[str]:
    return [PY, "-c", f"open({str(marker)!r}, 'w').close()"]


@pytest.mark.parametrize(
    ("content", "code", "message"),
    [
        (None, 3, "no such file"),
        ("", 5, "the file is empty"),
        (
            '{"role": "user", "content": "a", "ts": null}\n{"role": "use',
            5,
            "line 2 is not valid JSON",
        ),
        ("\x00\x01\x02", 5, "binary data"),
        ('{"type": "summary", "summary": "s", "leafUuid": "u"}\n', 5, "no conversation turns"),
    ],
)
def test_resume_refuses_a_bad_checkpoint_before_running_the_command(
    run: Run, tmp_path: Path, content: str | None, code: int, message: str
) -> None:
    checkpoint, marker = tmp_path / "ckpt.jsonl", tmp_path / "ran"
    if content is not None:
        checkpoint.write_text(content, encoding="utf-8")
    ran = run("resume", str(checkpoint), "--", *marker_command(marker))
    assert ran.code == code and message in one_error_line(ran)
    assert not marker.exists()


def test_resume_sets_an_absolute_path_to_the_checkpoint_itself(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert (
        run("save", str(write_json(tmp_path / "t.json", QUICK_START)), "-o", "ckpt.jsonl").code == 0
    )
    show = "import os; p = os.environ['AGENT_CHECKPOINT_INIT']; print(p); print(open(p).readline())"
    ran = run("resume", "ckpt.jsonl", "--", PY, "-c", show)
    path, first = ran.out.splitlines()[:2]
    assert ran.code == 0 and path == str(tmp_path / "ckpt.jsonl")
    assert json.loads(first)["content"] == "What's the capital of France?"


def test_resume_from_a_raw_transcript_hands_over_a_normalised_copy_and_removes_it(
    run: Run, tmp_path: Path, fixture_path: Fixture
) -> None:
    show = "import os; p = os.environ['AGENT_CHECKPOINT_INIT']; print(p); print(open(p).read())"
    source = fixture_path("transcripts/claude_code_compacted.jsonl")
    ran = run("resume", str(source), "--", PY, "-c", show)
    assert ran.code == 0
    path, *lines = ran.out.splitlines()
    turns = [json.loads(line) for line in lines if line]
    assert [t["role"] for t in turns] == [
        "user",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "user",
    ]
    assert os.path.isabs(path) and not os.path.exists(path)
    assert "resuming from a normalised copy" in ran.err


def test_resume_propagates_the_exit_code_and_signals(run: Run, tmp_path: Path) -> None:
    checkpoint = tmp_path / "ckpt.jsonl"
    assert (
        run("save", str(write_json(tmp_path / "t.json", QUICK_START)), "-o", str(checkpoint)).code
        == 0
    )
    assert run("resume", str(checkpoint), "--", PY, "-c", "raise SystemExit(7)").code == 7
    kill = "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"
    assert run("resume", str(checkpoint), "--", PY, "-c", kill).code == 128 + signal.SIGTERM
    missing = run("resume", str(checkpoint), "--", str(tmp_path / "no-such-agent"))
    assert missing.code == 127 and "command not found" in one_error_line(missing)
    assert run("resume", str(checkpoint)).code == 2


def test_resume_takes_its_options_anywhere_before_the_command(
    run: Run, tmp_path: Path, fixture_path: Fixture
) -> None:
    """``resume CKPT [--format F] [--on-dangling ...] -- COMMAND``, as docs/interchange.md
    writes it: options after CKPT are resume's, everything after ``--`` the command's."""
    source = str(fixture_path("transcripts/openai_chat_tools.json"))  # its last call dangles
    count = "import os; print(len(open(os.environ['AGENT_CHECKPOINT_INIT']).readlines()))"
    cut = run("resume", source, "--", PY, "-c", count)
    kept = run("resume", source, "--on-dangling", "synthesize", "--", PY, "-c", count)
    assert (cut.code, kept.code) == (0, 0), (cut.err, kept.err)
    assert int(kept.out) == int(cut.out) + 2  # the cut call and its made-up result
    assert "added an error result for tool call call_book" in kept.err
    # the command's own options, and a "--" of its own, are left to it
    echo = run("resume", source, "--", PY, "-c", "import sys; print(sys.argv[1:])", "--", "-x")
    assert echo.code == 0 and echo.out.strip() == "['--', '-x']"
    # a command's options without "--" are refused naming the fix, and nothing runs
    marker = tmp_path / "ran"
    bare = run("resume", source, *marker_command(marker), "-c")
    assert bare.code == 2 and "go after --" in bare.err and not marker.exists()
    store = str(tmp_path / "store")
    assert run("save", source, "--store", store, "--key", "k").code == 0
    mixed = run("resume", "--store", store, "k", "--format", "turns", "--", *marker_command(marker))
    assert mixed.code == 2 and "is a key of the store" in mixed.err and not marker.exists()


def test_save_and_resume_through_a_store(run: Run, tmp_path: Path, fixture_path: Fixture) -> None:
    store = str(tmp_path / "store")
    source = fixture_path("transcripts/anthropic_messages.json")
    ran = run("save", str(source), "--store", store, "--key", "weather")
    assert (
        ran.code == 0
        and ran.out == f"Saved 7 turns (6 messages) to {store} as weather (revision 1)\n"
    )
    assert "system prompt (a history holds none), at turn 1" in ran.err
    show = "import os; print(open(os.environ['AGENT_CHECKPOINT_INIT']).read())"
    resumed = run("resume", "--store", store, "weather", "--", PY, "-c", show)
    turns = [json.loads(line) for line in resumed.out.splitlines() if line]
    assert [t["role"] for t in turns] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]
    assert turns[1]["content"][0]["signature"].startswith("EqQBCgIYAhIM1gbcDa9GJwZA2b3h")
    assert turns[2]["tool_results"][0]["tool_call_id"] == "toolu_01A09q90qw90lq917835lq9"
    marker = tmp_path / "ran"
    absent = run("resume", "--store", store, "nokey", "--", *marker_command(marker))
    assert absent.code == 3 and "no checkpoint under key 'nokey'" in one_error_line(absent)
    assert not marker.exists()


def test_diff_exit_codes_and_json_output_match_the_seed(run: Run, tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    source = write_json(tmp_path / "t.json", QUICK_START)
    run("save", str(source), "-o", str(a))
    run("save", str(source), "-o", str(b))
    same = run("diff", str(a), str(b))
    assert (same.code, same.out, same.err) == (0, "identical\n", "")
    assert run("diff", str(a), str(b), "-f", "json").out == (
        '{"identical": true, "aTurns": 4, "bTurns": 4, "differences": []}\n'
    )
    assert (
        run("diff", str(a), str(b), "--json").out == run("diff", str(a), str(b), "-f", "json").out
    )
    write_json(source, [*QUICK_START[:2], {"role": "user", "content": "Aside"}, *QUICK_START[2:]])
    run("save", str(source), "-o", str(b))
    ran = run("diff", str(a), str(b))
    assert ran.code == 1
    assert ran.out.splitlines() == [
        "different",
        "A has 4 turns, B has 5: 1 inserted, 0 removed, 0 changed",
        '+ B turn 3 (user) inserted: "Aside"',
    ]
    assert json.loads(run("diff", str(a), str(b), "--format", "json").out)["differences"] == [
        {"op": "insert", "aIndex": None, "bIndex": 2, "role": "user", "preview": "Aside"}
    ]


def test_diff_failures_exit_with_every_commands_codes(run: Run, tmp_path: Path) -> None:
    # diff used to exit 2 for everything; now a missing file is 3 and a malformed one 5, as
    # for save, resume and merge (still >1, so `diff` in a script reads 0/1 the same way)
    a = tmp_path / "a.jsonl"
    a.write_text('{"role": "user", "content": "a", "ts": null}\n', encoding="utf-8")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"role": "user", "content": "a", "ts": null}\n{oops}\n', encoding="utf-8")
    assert run("diff", str(a), str(tmp_path / "missing")).code == 3
    assert run("diff", str(a), str(bad)).code == 5
    assert "line 2 is not valid JSON" in one_error_line(run("diff", str(a), str(bad)))
    assert run("diff", str(a)).code == 2


def test_merge_extends_refuses_divergence_and_honours_prefer(run: Run, tmp_path: Path) -> None:
    base, extra, other, out = (
        tmp_path / n for n in ("base.jsonl", "extra.jsonl", "other.jsonl", "out.jsonl")
    )
    source = tmp_path / "t.json"
    for path, messages in (
        (base, QUICK_START[:2]),
        (extra, QUICK_START),
        (other, [*QUICK_START[:2], {"role": "user", "content": "And Spain?"}]),
    ):
        write_json(source, messages)
        assert run("save", str(source), "-o", str(path)).code == 0
    ran = run("merge", str(base), str(extra), "-o", str(out))
    assert (ran.code, ran.out, ran.err) == (
        0,
        f"Merged 2 turns from {base} + 2 new turns from {extra} into {out}\n",
        "",
    )
    merged = [json.loads(line) for line in out.read_text().splitlines()]
    assert [m["content"] for m in merged] == [m["content"] for m in QUICK_START]
    assert [m["_meta"]["source"] for m in merged] == ["a", "a", "b", "b"]
    out.unlink()
    diverged = run("merge", str(extra), str(other), "-o", str(out))
    assert diverged.code == 4 and "share their first 2 turn(s)" in one_error_line(diverged)
    assert not out.exists()
    kept = run("merge", str(extra), str(other), "-o", str(out), "--prefer", "b")
    assert kept.code == 0 and "kept B's branch" in kept.err
    assert [json.loads(line)["content"] for line in out.read_text().splitlines()][
        -1
    ] == "And Spain?"
    assert run("merge", str(base), str(tmp_path / "missing"), "-o", str(out)).code == 3


@pytest.mark.parametrize(
    ("options", "report", "json_counts", "written"),
    [
        ([], "2 turns from {a} + 1 new turn from {b} into {out}", (2, 1, 0), 3),
        (
            ["--on-dangling", "synthesize"],
            "2 turns from {a} + 2 new turns from {b} into {out} with 1 added error result",
            (2, 2, 1),
            5,
        ),
    ],
    ids=["cut", "synthesized"],
)
def test_merge_reports_the_turns_it_wrote_after_the_repair(
    run: Run,
    tmp_path: Path,
    options: list[str],
    report: str,
    json_counts: tuple[int, int, int],
    written: int,
) -> None:
    a, b, out = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "out.jsonl"
    write_json(a, QUICK_START[:2])
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    unanswered = {"role": "assistant", "content": None, "tool_calls": [call]}
    write_json(b, [*QUICK_START[:3], unanswered])  # B's last turn is cut, or answered
    ran = run("merge", str(a), str(b), "-o", str(out), *options)
    assert ran.out == "Merged " + report.format(a=a, b=b, out=out) + "\n"
    assert len(out.read_text(encoding="utf-8").splitlines()) == written
    ran = run("merge", str(a), str(b), "-o", str(out), "--json", *options)
    counts = json.loads(ran.out)
    assert (counts["fromA"], counts["fromB"], counts["added"]) == json_counts


def _nested_input(levels: int) -> object:
    value: object = "x"
    for i in range(levels):
        value = {"a": value} if i % 2 else [value]
    return value


@pytest.mark.parametrize("target", ["-o", "--store"])
def test_save_refuses_a_tool_input_nested_past_the_depth_limit(
    run: Run, tmp_path: Path, target: str
) -> None:
    def transcript(levels: int) -> Path:
        tool_use = {"type": "tool_use", "id": "t1", "name": "deep", "input": _nested_input(levels)}
        messages = [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [tool_use]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}],
            },
            {"role": "assistant", "content": "done"},
        ]
        return write_json(tmp_path / f"deep{levels}.json", {"model": "m", "messages": messages})

    out = str(tmp_path / ("ckpt.jsonl" if target == "-o" else "store"))
    assert run("save", str(transcript(200)), target, out).code == 0
    ran = run("save", str(transcript(300)), target, out)
    assert ran.code == 5
    assert "nests objects and arrays deeper than 254 levels" in one_error_line(ran)


def test_save_to_dash_writes_the_turns_to_stdout_and_the_report_to_stderr(
    run: Run, tmp_path: Path, fixture_path: Fixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `-o -` made a file named "-" (and `put -` reads stdin, so users reach for it)
    monkeypatch.chdir(tmp_path)
    source = str(fixture_path("transcripts/openai_chat_tools.json"))
    assert run("save", source, "-o", str(tmp_path / "file.jsonl")).code == 0
    ran = run("save", source, "-o", "-")
    assert ran.code == 0
    written = (tmp_path / "file.jsonl").read_text(encoding="utf-8")

    def untimed(text: str) -> list[dict[str, Any]]:  # this transcript has no times: now's
        return [{**json.loads(line), "ts": None} for line in text.splitlines()]

    assert len(ran.out.splitlines()) == 11 and untimed(ran.out) == untimed(written)
    assert ran.err.endswith("agent-checkpoint: note: Saved 11 turns to stdout\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.jsonl"]


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ([], "save needs -o OUT.jsonl (a turn JSONL file, or - for stdout) or --store URL"),
        (["-o", "out.jsonl", "--key", "k"], "--key names a record in a store: save -o writes"),
    ],
)
def test_save_refuses_what_it_would_ignore(
    run: Run,
    tmp_path: Path,
    fixture_path: Fixture,
    extra: list[str],
    named: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    ran = run("save", str(fixture_path("transcripts/openai_chat_tools.json")), *extra)
    assert ran.code == 2 and named in one_error_line(ran)
    assert list(tmp_path.iterdir()) == []


def test_save_refuses_a_turn_file_forced_to_read_as_responses_items(
    run: Run, tmp_path: Path, fixture_path: Fixture
) -> None:
    turns = tmp_path / "turns.jsonl"
    assert (
        run("save", str(fixture_path("transcripts/openai_chat_tools.json")), "-o", str(turns)).code
        == 0
    )
    out = tmp_path / "out.jsonl"
    ran = run("save", str(turns), "-o", str(out), "--format", "openai-responses")
    assert ran.code == 5 and ran.out == ""
    assert one_error_line(ran) == (
        f"agent-checkpoint: error: {turns}: item 1 is not a Responses item: it has "
        "`tool_calls`, as a chat message or a turn does"
    )
    assert not out.exists()
