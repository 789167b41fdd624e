"""What the commands print for people and for scripts: tables that keep every key whole at any
width, user strings printed as they are (never read as markup), and JSON in one key style on
every command that reports something."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from agent_checkpoint import Identity, open_store
from agent_checkpoint._cli import main
from agent_checkpoint.testing import checkpoint, stamped

LONG_KEY = "conversation-2026-11-29-billing-refund-order-41200"
HOSTILE = ["job[red]42[/red]", "a*?[x]", "x:smile:y", "[bold]k[/bold]", "back\\[/]"]


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def fill(url: str, keys: list[str], **kw: Any) -> None:
    with open_store(url) as store:
        for i, key in enumerate(keys):
            ckpt = checkpoint(f"run-{i}", principal="alice@acme.test", agent="billing", **kw)
            store.put(stamped(ckpt, 1_795_988_831_000 + 60_000 * i), key=key)


@pytest.mark.parametrize("width", [40, 60, 70, 80, 100, 120])
def test_ls_keeps_every_key_whole_and_fits_the_terminal(
    width: int, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = str(tmp_path / "s")
    fill(store, ["conv-1", LONG_KEY, "k"], failed="tool")
    monkeypatch.setenv("COLUMNS", str(width))
    code, out, _ = cli(capsys, "ls", "--store", store)
    lines = out.splitlines()
    assert code == 0 and lines[0].split()[0] == "KEY"
    # a key too long to leave room beside it is on a line of its own, its row below
    starts = [line.split()[0] for line in lines[1:] if not line.startswith(" ")]
    assert starts == ["k", LONG_KEY, "conv-1"]
    assert all(len(line) <= max(width, len(LONG_KEY)) for line in lines), out
    header = lines[0].split()
    for column in ("SIZE", "REV", "MSGS"):  # a column is shown whole or not at all
        if column in header:
            assert all("…" not in line[lines[0].index(column) - 4 :] for line in lines)
    if width >= 120:
        assert header == [
            "KEY",
            "SAVED",
            "(UTC)",
            "OWNER",
            "AGENT",
            "FAILED",
            "MSGS",
            "SIZE",
            "REV",
        ]


def test_the_ls_widths_shown_in_the_docs_are_what_ls_prints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = str(tmp_path / "s")
    fill(store, ["conv-41200", LONG_KEY, "conv-c"], failed="llm")
    doc = (Path(__file__).resolve().parents[1] / "docs" / "operations.md").read_text()
    for width in (60, 80, 120):
        monkeypatch.setenv("COLUMNS", str(width))
        _, out, _ = cli(capsys, "ls", "--store", store)
        shown = doc.split(f"$ COLUMNS={width} agent-checkpoint ls\n", 1)[1].split("```", 1)[0]
        assert shown == out, f"docs/operations.md at {width} columns"


def langgraph_thread(store: str) -> None:
    """The README's LangGraph example, two turns of thread ``ticket-7``: its keys are the
    saver's (a lineage ``langgraph/ticket-7/-/m/0``, and pending writes of ~100 characters)."""
    pytest.importorskip("langgraph.graph")
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.graph import START, MessagesState, StateGraph

    from agent_checkpoint.integrations.langgraph import AgentCheckpointSaver

    def reply(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(f"you said: {state['messages'][-1].text}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    saver = AgentCheckpointSaver(store)
    try:
        graph = builder.compile(checkpointer=saver)
        config: Any = {"configurable": {"thread_id": "ticket-7"}}
        graph.invoke({"messages": [HumanMessage("hello")]}, config)
        graph.invoke({"messages": [HumanMessage("still there?")]}, config)
    finally:
        saver.close()


@pytest.mark.parametrize(
    ("width", "columns"),
    [
        (60, ["KEY", "SAVED", "(UTC)", "OWNER", "AGENT", "FAILED"]),
        (80, ["KEY", "SAVED", "(UTC)", "OWNER", "AGENT", "FAILED", "MSGS", "SIZE", "REV"]),
        (120, ["KEY", "SAVED", "(UTC)", "OWNER", "AGENT", "FAILED", "MSGS", "SIZE", "REV"]),
    ],
)
def test_ls_of_langgraph_keys_keeps_the_other_columns_beside_keys_on_lines_of_their_own(
    width: int,
    columns: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = str(tmp_path / "s")
    langgraph_thread(store)
    with open_store(store) as opened:
        stored = [s.key for s in opened.iter_summaries()]
    assert max(map(len, stored)) > 90  # the pending writes' keys
    monkeypatch.setenv("COLUMNS", str(width))
    code, out, _ = cli(capsys, "ls", "--all-records", "--store", store)
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == columns
    starts = [line.split()[0] for line in lines[1:] if not line.startswith(" ")]
    assert sorted(starts) == sorted(stored)  # each key whole
    rows = [line for line in lines[1:] if "langgraph:ticket-7" in line]
    assert len(rows) == len(stored) and all(len(row) <= width for row in rows)
    for row in rows:  # a key over half the width on a line of its own, its row below it
        cells = row.split() if row.startswith(" ") else row.split()[1:]
        assert cells[2:4] == ["langgraph", "langgraph:ticket-7"]
    assert len(lines) >= 1 + len(stored) + sum(len(k) > width // 2 for k in stored)


LANGGRAPH_WRITES = [  # (checkpoint id, task id) as LangGraph makes them: UUIDs
    ("1f0c2b7e-4d1a-6e52-8001-5b3c0f2f9a11", "6a1f0c2e-3b8d-2f4e-91c7-0d5e8a7b4c21"),
    ("1f0c2b7e-4d0c-6a1e-8000-5b3c0f2f9a11", "0b7d3e91-8c2f-5a10-6e4d-93f1a2c7d805"),
]


def langgraph_like_store(store: str) -> None:
    """A thread as the LangGraph saver lays it out (a lineage and pending writes under its
    keys), at fixed times, so that ``ls`` prints the same table every time."""
    lg = pytest.importorskip("agent_checkpoint.integrations._langgraph_records")
    thread = lg.Key("ticket-7", "")
    keys = [thread.first_lineage] + [thread.writes(c, t) for c, t in LANGGRAPH_WRITES]
    with open_store(store) as opened:
        for i, key in enumerate(reversed(keys)):
            messages = 4 if key == thread.first_lineage else 0  # writes hold no message
            ckpt = checkpoint(
                f"run-{i}", principal="langgraph", agent="langgraph:ticket-7", messages=messages
            )
            opened.put(stamped(ckpt, 1_795_988_831_000 + 1_000 * i), key=key)


def test_the_langgraph_captures_in_the_docs_are_what_ls_prints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = str(tmp_path / "s")
    langgraph_like_store(store)
    doc = (Path(__file__).resolve().parents[1] / "docs" / "operations.md").read_text()
    for width in (60, 80, 120):
        monkeypatch.setenv("COLUMNS", str(width))
        _, out, _ = cli(capsys, "ls", "--all-records", "--store", store)
        command = f"$ COLUMNS={width} agent-checkpoint ls --all-records\n"
        shown = doc.split(command, 1)[1].split("```", 1)[0]
        assert shown == out, f"docs/operations.md at {width} columns"
    monkeypatch.setenv("COLUMNS", "80")
    _, out, _ = cli(capsys, "ls", "--store", store)
    shown = doc.rsplit("$ COLUMNS=80 agent-checkpoint ls\n", 1)[1].split("```", 1)[0]
    assert shown == out  # the last such capture: the thread's runs alone


def test_a_long_agent_id_is_cut_before_a_short_owner_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = str(tmp_path / "s")
    agent = "billing-refunds-agent-eu-west-002"
    with open_store(store) as opened:
        ckpt = checkpoint("r1", principal="alice@acme.test", agent=agent, failed="llm")
        opened.put(stamped(ckpt, 1_795_988_831_000), key="conv-41200")
    monkeypatch.setenv("COLUMNS", "80")
    _, out, _ = cli(capsys, "ls", "--store", store)
    header, row = out.splitlines()  # one row: its key stays beside it
    assert header.split()[:6] == ["KEY", "SAVED", "(UTC)", "OWNER", "AGENT", "FAILED"]
    assert row.split()[3] == "alice@acme.test"  # whole: the agent id had cells to spare
    assert row.split()[4].endswith("…") and len(row.split()[4]) >= len("alice@acme.test")
    assert len(row) <= 80


def test_keys_owners_and_agents_print_as_they_are_never_as_markup(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = str(tmp_path / "s")
    monkeypatch.setenv("COLUMNS", "200")
    opened = open_store(store)
    for i, key in enumerate(HOSTILE):
        ckpt = checkpoint(f"r{i}", principal="[i]alice[/i]", agent=":warning:[blink]b")
        opened.put(stamped(ckpt, 1_000 + i), key=key)
    claims = [opened.claim(key, f"w[red]{i}[/red]", ttl=60) for i, key in enumerate(HOSTILE)]
    _, out, _ = cli(capsys, "ls", "--store", store)
    assert [line.split()[0] for line in out.splitlines()[1:]] == HOSTILE[::-1]
    assert "[i]alice[/i]" in out and ":warning:[blink]b" in out
    for key in HOSTILE:
        _, out, _ = cli(capsys, "show", key, "--store", store)
        assert out.startswith(f"{key}  revision 2,")  # the claim rewrote it once
        assert "  owner      [i]alice[/i]\n" in out and "  agent      :warning:[blink]b\n" in out
    _, out, _ = cli(capsys, "claims", "--store", store)
    rows = [line.split() for line in out.splitlines()[1:]]
    assert sorted((row[0], row[1]) for row in rows) == sorted(
        (key, f"w[red]{i}[/red]") for i, key in enumerate(HOSTILE)
    )
    for claim in claims:
        claim.release()
    opened.close()


CAMEL = re.compile(r"^[a-z][a-zA-Z0-9]*$")


def keys_of(value: Any, skip: tuple[str, ...] = ()) -> set[str]:
    if isinstance(value, dict):
        found = {k for k in value if k not in skip}
        for k, v in value.items():
            if k not in skip:
                found |= keys_of(v, skip)
        return found
    if isinstance(value, list):
        return set().union(*(keys_of(v, skip) for v in value)) if value else set()
    return set()


def test_every_reporting_command_has_json_in_one_key_style(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, backup = str(tmp_path / "s"), str(tmp_path / "b")
    (tmp_path / "c.json").write_bytes(orjson.dumps(checkpoint("r1", failed="llm").to_json()))
    turns = [
        {"role": "user", "content": "Capital of Italy?"},
        {"role": "assistant", "content": "Rome."},
    ]
    (tmp_path / "t.json").write_text(json.dumps(turns))
    (tmp_path / "u.json").write_text(
        json.dumps([*turns[:1], {"role": "assistant", "content": "Milan."}])
    )
    base64_key = "MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTIzNDU2Nzg5MDE="
    t, u, o = (str(tmp_path / n) for n in ("t.json", "u.json", "o.jsonl"))
    commands: list[list[str]] = [
        ["put", str(tmp_path / "c.json"), "--store", store],
        ["ls", "--store", store],
        ["show", "r1", "--store", store],
        ["claims", "--store", store],
        ["verify", "--store", store],
        ["migrate", "--dry-run", "--store", store],
        ["copy", "--to", backup, "--store", store],
        ["prune", "--older-than", "1d", "--dry-run", "--store", store],
        ["prune", "--older-than", "1d", "--store", store],
        ["setup", "--store", store],
        ["save", t, "--store", store],
        ["save", t, "-o", o],
        ["diff", t, u],
        ["merge", t, t, "-o", o],
        ["resume-worker", "--store", store, "--", "true"],
        ["rm", "r1", "--store", store],
    ]
    for argv in commands:
        code, out, err = cli(capsys, argv[0], "--json", *argv[1:])
        assert code in (0, 1), (argv, err)
        doc = json.loads(out)
        bad = {k for k in keys_of(doc, skip=("envelope",)) if not CAMEL.match(k)}
        assert not bad, (argv, bad)
        assert "'" not in json.dumps(doc).replace("'s ", ""), (argv, out)  # no Python reprs
    monkeypatch.setenv("AGENT_CHECKPOINT_KEYS", f"k1:{base64_key}")
    code, out, _ = cli(capsys, "rekey", "--store", store, "--json")
    assert code == 0 and json.loads(out) == {"rewritten": 1, "current": 0, "failed": []}
    code, out, _ = cli(capsys, "diff", t, u, "--json")
    assert json.loads(out)["differences"][0]["preview"] == "Milan."


def test_saving_a_transcript_keys_it_by_its_session_so_saving_again_updates_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fixtures = Path(__file__).resolve().parent / "fixtures" / "transcripts"
    store = str(tmp_path / "s")
    for path, session in [
        (fixtures / "claude_code_branches.jsonl", "5f8a3c2e-9b1d-4e7f-a6c0-1d2e3f4a5b6c"),
        (fixtures / "codex_rollout.jsonl", "019a2d7a-41c4-78b1-b7cc-a45d62a89cd5"),
        (fixtures / "openai_chat_tools.json", None),  # no session id: a key from its path
    ]:
        first = json.loads(cli(capsys, "save", str(path), "--store", store, "--json")[1])
        again = json.loads(cli(capsys, "save", str(path), "--store", store, "--json")[1])
        assert again["key"] == first["key"] and (first["revision"], again["revision"]) == (1, 2)
        if session is not None:
            assert first["key"] == session
        with open_store(store) as opened:
            stored = opened.get(first["key"])
        assert stored is not None and stored.identity == Identity(first["key"])
    with open_store(store) as opened:
        assert len(opened.list().items) == 3  # one record per transcript, however often saved
