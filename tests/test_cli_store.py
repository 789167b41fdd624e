"""The store commands as a person or a script uses them: output, exit codes, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import orjson
import pytest

from agent_checkpoint import open_store
from agent_checkpoint._cli import EXIT, main
from agent_checkpoint.integrations.keys import is_internal
from agent_checkpoint.testing import checkpoint, stamped


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return str(tmp_path / "store")


def write(tmp_path: Path, name: str, doc: Any) -> str:
    path = tmp_path / name
    path.write_bytes(orjson.dumps(doc))
    return str(path)


def test_put_ls_show_get_rm(
    tmp_path: Path, store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = checkpoint("run-7", principal="alice", agent="billing", failed="tool").to_json()
    code, out, _ = run(capsys, "put", write(tmp_path, "c.json", doc), "--store", store_url)
    assert code == 0 and out.startswith("Stored run-7 (revision 1,")

    code, out, _ = run(capsys, "ls", "--store", store_url)
    assert code == 0
    header, row = out.splitlines()
    assert header.split()[:2] == ["KEY", "SAVED"]
    assert row.split()[0] == "run-7" and "alice" in row and "billing" in row and "tool@2" in row

    code, out, _ = run(capsys, "show", "run-7", "--store", store_url)
    assert code == 0 and "failed     tool at iteration 2 (stage: call-llm)" in out
    assert "assistant: hello 1" in out

    code, out, _ = run(capsys, "get", "run-7", "--store", store_url)
    assert code == 0 and json.loads(out) == doc

    code, out, _ = run(capsys, "rm", "run-7", "--store", store_url)
    assert (code, out.strip()) == (0, "Deleted run-7")
    code, _, err = run(capsys, "get", "run-7", "--store", store_url)
    assert code == EXIT["not_found"] and err.count("\n") == 1


def test_put_accepts_an_envelope_and_keeps_its_saved_at(
    tmp_path: Path, store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    envelope = stamped(checkpoint("r-env"), 1_700_000_000_000).to_json()
    assert run(capsys, "put", write(tmp_path, "e.json", envelope), "--store", store_url)[0] == 0
    code, out, _ = run(capsys, "ls", "--json", "--store", store_url)
    assert code == 0
    assert json.loads(out)["items"][0]["savedAt"] == 1_700_000_000_000


def test_ls_json_filters_and_pages(
    tmp_path: Path, store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with open_store(store_url) as store:
        for i in range(5):
            store.put(
                stamped(
                    checkpoint(
                        f"r{i}", principal="p" if i % 2 else "q", failed="llm" if i == 3 else None
                    ),
                    1000 + i,
                ),
                key=f"k{i}",
            )
    code, out, _err = run(capsys, "ls", "--json", "--limit", "2", "--store", store_url)
    page = json.loads(out)
    assert [i["key"] for i in page["items"]] == ["k4", "k3"] and page["cursor"]
    code, out, _ = run(
        capsys, "ls", "--json", "--limit", "2", "--cursor", page["cursor"], "--store", store_url
    )
    assert [i["key"] for i in json.loads(out)["items"]] == ["k2", "k1"]
    code, out, _ = run(capsys, "ls", "--json", "--owner", "p", "--failed", "--store", store_url)
    assert code == 0
    assert [i["key"] for i in json.loads(out)["items"]] == ["k3"]
    code, out, _ = run(capsys, "ls", "--json", "--all", "--before", "1003", "--store", store_url)
    assert code == 0
    assert [i["key"] for i in json.loads(out)["items"]] == ["k2", "k1", "k0"]


def test_ls_prefix_lists_only_keys_that_begin_with_it_as_written(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    keys = ["job_1/a", "jobx1/b", "job%1/c", "job_1/d", "job[1]/e", "other"]
    with open_store(store_url) as store:
        for i, key in enumerate(keys):
            store.put(stamped(checkpoint(f"r{i}"), 1000 + i), key=key)
    for prefix, expected in [
        ("job_1/", ["job_1/d", "job_1/a"]),  # "_" is no wildcard
        ("job%", ["job%1/c"]),
        ("job[1]", ["job[1]/e"]),
        ("job", ["job[1]/e", "job_1/d", "job%1/c", "jobx1/b", "job_1/a"]),
    ]:
        code, out, _ = run(capsys, "ls", "--json", "--prefix", prefix, "--store", store_url)
        assert code == 0 and [i["key"] for i in json.loads(out)["items"]] == expected, prefix
    code, out, _ = run(capsys, "ls", "--prefix", "job_1/", "--limit", "1", "--store", store_url)
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["job_1/d"]
    code, out, _ = run(capsys, "ls", "--prefix", "nothing/", "--store", store_url)
    assert (code, out) == (0, "no checkpoints\n")


def test_internal_record_keys_are_the_integrations_bookkeeping_and_nothing_else() -> None:
    lg = pytest.importorskip("agent_checkpoint.integrations._langgraph_records")
    thread = lg.Key("ticket/7%", "sub:graph")
    cid, task = "1f0c-aa", "0f3a6b1e-0000-4000-8000-000000000000"
    assert is_internal(thread.writes(cid, task))
    assert is_internal(lg.Key("t", "").writes(cid, task))
    for run in (thread.first_lineage, thread.lineage(cid), lg.Key("t", "").first_lineage):
        assert not is_internal(run), run
    adk = pytest.importorskip("agent_checkpoint.integrations._adk_records")
    assert is_internal(adk.app_key("app/x")) and is_internal(adk.user_key("app", "u/1"))
    assert not is_internal(adk.session_key("app", "u/1", "s/2"))
    for other in ("openai-agents/s1", "langgraph", "langgraph/t/-/c/x", "adk-state/", "a/c/w"):
        assert not is_internal(other), other


def test_the_key_layouts_import_no_framework() -> None:
    code = (
        "import sys, agent_checkpoint.integrations.keys, agent_checkpoint._cli.store_commands\n"
        "frameworks = ('langgraph', 'langchain_core', 'google.adk', 'agents')\n"
        "assert not [m for m in frameworks if m in sys.modules], sorted(sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_ls_lists_runs_and_leaves_internal_records_out_unless_asked(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    lineage = "langgraph/t1/-/m/0"
    writes = [f"langgraph/t1/-/c/{i:04d}/w/task-{i}" for i in range(40)]
    state = ["adk-state/app", "adk-state/app/u1"]
    runs = [lineage, "adk/app/u1/s1", "openai-agents/s1", "conv-1", "conv-2"]
    with open_store(store_url) as store:
        # newest first: a run, 20 internal records, a run, ... so pages hold few runs or none
        order = [runs[0], *writes[:20], runs[1], *state, runs[2], *writes[20:], *runs[3:]]
        for i, key in enumerate(reversed(order)):
            store.put(stamped(checkpoint(f"r{i}"), 1000 + i), key=key)
    code, out, _ = run(capsys, "ls", "--json", "--all", "--store", store_url)
    assert code == 0 and [i["key"] for i in json.loads(out)["items"]] == runs
    seen: list[str] = []
    cursor: list[str] = []
    while True:
        code, out, _ = run(capsys, "ls", "--json", "--limit", "2", *cursor, "--store", store_url)
        page = json.loads(out)
        seen += [i["key"] for i in page["items"]]
        if page["cursor"] is None:
            break
        cursor = ["--cursor", page["cursor"]]
    assert seen == runs
    code, out, _ = run(capsys, "ls", "--json", "--all-records", "--all", "--store", store_url)
    assert [i["key"] for i in json.loads(out)["items"]] == order
    code, out, _ = run(
        capsys, "ls", "--json", "--all-records", "--limit", "3", "--store", store_url
    )
    assert [i["key"] for i in json.loads(out)["items"]] == order[:3]
    code, out, _ = run(capsys, "ls", "--prefix", "langgraph/", "--store", store_url)
    assert [line.split()[0] for line in out.splitlines()[1:]] == [lineage]


def test_prune_deletes_only_older_records(
    tmp_path: Path, store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with open_store(store_url) as store:
        store.put(stamped(checkpoint("old"), 1_000), key="old")
        store.put(checkpoint("new"), key="new")
    code, out, _ = run(capsys, "prune", "--older-than", "7d", "--dry-run", "--store", store_url)
    assert code == 0 and "would delete old" in out and "1 checkpoint(s)" in out
    code, out, _ = run(capsys, "prune", "--older-than", "7d", "--store", store_url)
    assert (code, out.strip()) == (0, "Deleted 1 checkpoint(s) older than 7d")
    with open_store(store_url) as store:
        assert [s.key for s in store.list()] == ["new"]


@pytest.mark.parametrize(
    ("content", "expected_code", "message"),
    [
        (b"not json", EXIT["invalid"], "is not JSON"),
        (b"[1, 2]", EXIT["invalid"], "not a checkpoint or envelope"),
        (
            b'{"version": 2, "runId": "r", "history": [], "lastCompletedIteration": 0, "originalInput": {"message": "m"}}',
            EXIT["invalid"],
            "unsupported checkpoint version: 2",
        ),
        (
            b'{"format": "conversation-v9", "data": {}, "savedAt": 1}',
            EXIT["invalid"],
            "unknown checkpoint format",
        ),
    ],
)
def test_bad_input_is_one_line_and_stores_nothing(
    tmp_path: Path,
    store_url: str,
    capsys: pytest.CaptureFixture[str],
    content: bytes,
    expected_code: int,
    message: str,
) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    code, _out, err = run(capsys, "put", str(path), "--store", store_url)
    assert code == expected_code
    assert err.startswith("agent-checkpoint: error: ") and message in err and err.count("\n") == 1
    assert run(capsys, "ls", "--json", "--store", store_url)[1].count('"key"') == 0


def test_conflicts_have_their_own_exit_code(
    tmp_path: Path, store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "c.json", checkpoint("r", principal="alice").to_json())
    assert run(capsys, "put", path, "--store", store_url)[0] == 0
    assert run(capsys, "put", path, "--create-only", "--store", store_url)[0] == EXIT["conflict"]
    assert (
        run(capsys, "put", path, "--if-revision", "7", "--store", store_url)[0] == EXIT["conflict"]
    )
    other = write(tmp_path, "o.json", checkpoint("r", principal="mallory").to_json())
    code, _, err = run(capsys, "put", other, "--store", store_url)
    assert code == EXIT["conflict"] and "owned by principal 'alice'" in err


def test_a_missing_file_is_not_found_and_a_bad_duration_a_usage_error(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # a missing input file is 3 for put as for save, resume, diff and merge (put said 2)
    code, _, err = run(capsys, "put", "/nonexistent/file.json", "--store", store_url)
    assert code == EXIT["not_found"] and "/nonexistent/file.json: no such file" in err
    code, _, err = run(capsys, "prune", "--older-than", "soon", "--store", store_url)
    assert code == EXIT["usage"] and "invalid duration 'soon'" in err


def test_store_defaults_to_the_environment_then_the_local_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, "c.json", checkpoint("r1").to_json())
    monkeypatch.delenv("AGENT_CHECKPOINT_STORE", raising=False)
    assert run(capsys, "put", path)[0] == 0
    assert (tmp_path / ".agent-checkpoints" / "records").is_dir()
    monkeypatch.setenv("AGENT_CHECKPOINT_STORE", str(tmp_path / "from-env"))
    assert run(capsys, "put", path)[0] == 0
    assert (tmp_path / "from-env" / "records").is_dir()


def test_unreadable_record_is_reported_not_hidden(
    tmp_path: Path, store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from agent_checkpoint.backends._disk import file_name

    with open_store(store_url) as store:
        store.put(checkpoint("r1"), key="k")
    record = Path(store_url) / "records" / file_name("k")
    record.write_bytes(record.read_bytes()[:-30])
    code, _, err = run(capsys, "get", "k", "--store", store_url)
    assert code == EXIT["invalid"] and "ERR" not in err and "cannot read" in err


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        (
            "postgresql://app:s3cr3t@db:5432/x?sslmode=require",
            "postgresql://app:***@db:5432/x?sslmode=require",
        ),
        ("redis://:hunter2@h:6379/0", "redis://:***@h:6379/0"),
        (
            "s3://b/p?endpoint_url=http://h:1&aws_secret_access_key=abc",
            "s3://b/p?endpoint_url=http://h:1&aws_secret_access_key=***",
        ),
        ("./local/path", "./local/path"),
    ],
)
def test_credentials_in_urls_are_masked(url: str, masked: str) -> None:
    from agent_checkpoint._cli._boundary import Boundary
    from agent_checkpoint.backends import mask_url

    assert mask_url(url) == masked
    assert Boundary().mask(f"cannot reach '{url}': refused") == f"cannot reach '{masked}': refused"


def test_put_of_json_that_is_no_checkpoint_names_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the door's words alone ("[resumeOnError] unsupported checkpoint version: undefined")
    # named neither the file nor what put takes
    url = str(tmp_path / "store")
    path = tmp_path / "obj.json"
    path.write_text("{}")
    code, out, err = run(capsys, "put", str(path), "--store", url)
    assert (code, out) == (EXIT["invalid"], "")
    assert f"error: {path}: not a checkpoint this store takes (a run checkpoint's JSON" in err
    assert "unsupported checkpoint version" in err
    with open_store(url) as store:
        assert store.list().items == []


def test_a_resource_left_to_the_collector_is_not_a_warning_of_the_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # a socket another part of the process dropped unclosed printed as the command's own
    # "agent-checkpoint: warning: unclosed <socket...>" (seen in a CI run); a real one still shows
    from agent_checkpoint._cli._boundary import Boundary

    with Boundary().installed():
        warnings.warn("unclosed <socket.socket fd=29>", ResourceWarning, stacklevel=1)
        warnings.warn("the store keeps nothing on disk", UserWarning, stacklevel=1)
    err = capsys.readouterr().err
    assert "unclosed" not in err
    assert err == "agent-checkpoint: warning: the store keeps nothing on disk\n"
