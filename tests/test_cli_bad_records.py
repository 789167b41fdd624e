"""A stored record the library refuses, as the CLI says it: one line naming the key, what is
wrong and the remedy (the library's own message, written in the runtime's words, only under
--verbose), and ``migrate`` fails on what the door refuses, as ``verify`` does. On disk and
PostgreSQL, with the bad bytes written by the backend's own record primitive."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from support.store_urls import url_for_processes

from agent_checkpoint import open_store
from agent_checkpoint._cli import EXIT, main
from agent_checkpoint.backends import Record, Summary
from agent_checkpoint.testing import checkpoint

RUNTIME_WORDS = ("[hosting]", "[resumeOnError]", "toEnvelope", "agentfootprint", "runtime")


@pytest.fixture(params=["disk", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with url_for_processes(request.param, request, tmp_path) as found:
        yield found


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def store_bad(url: str, key: str, body: bytes) -> None:
    """``body`` stored under ``key`` as it is, past the codec and the door."""
    with open_store(url) as store:
        store.backend.save(Record(Summary(key, key, 5000, None, None, None, None, 1, 1, 0), body))


def envelope_of(key: str, **changes: object) -> bytes:
    data = checkpoint(key).to_json()
    for name, value in changes.items():
        if value is None:
            del data[name]
        else:
            data[name] = value
    return orjson.dumps({"format": "conversation-v1", "data": data, "savedAt": 5000})


def fill_with_bad_records(url: str) -> None:
    with open_store(url) as store:
        store.put(checkpoint("good"), key="good")
    store_bad(url, "no-version", envelope_of("no-version", version=None))
    store_bad(url, "from-v7", envelope_of("from-v7", version=7))
    store_bad(url, "garbage", b"\x00not an envelope " * 20)


def test_verify_says_each_bad_record_in_one_line_with_its_remedy(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    fill_with_bad_records(url)
    code, out, _ = run(capsys, "verify", "--store", url)
    assert code == EXIT["invalid"]
    lines = out.splitlines()
    assert lines[0].startswith("checked 4 record(s): 3 unreadable")
    assert sorted(lines[1:]) == [
        "  unreadable: from-v7: its checkpoint is version 7, newer than this version reads (1); "
        "read it with a newer localab-checkpoint (pip install -U localab-checkpoint)",
        '  unreadable: garbage: not a checkpoint envelope; its bytes begin "\\u0000not an '
        'envelope \\u0000not an envelope \\u0000not an envelope \\u0000not an envel…" (340 '
        "chars); restore it from a copy, or delete it: agent-checkpoint rm garbage",
        "  unreadable: no-version: its checkpoint has no version (damaged, or written by other "
        "software); restore it from a copy, or delete it: agent-checkpoint rm no-version",
    ]
    assert not any(word in out for word in RUNTIME_WORDS)
    code, out, _ = run(capsys, "verify", "--verbose", "--store", url)
    assert code == EXIT["invalid"]  # and under each line, the library's whole message
    assert "future agentfootprint version need a matching runtime" in out
    assert "toEnvelope() / toPausedEnvelope()" in out


def test_migrate_fails_a_record_the_door_refuses_as_verify_does(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A record at the current version that ``get`` refuses is not "already migrated"."""
    with open_store(url) as store:
        store.put(checkpoint("good"), key="good")
    store_bad(url, "no-version", envelope_of("no-version", version=None))
    code, out, err = run(capsys, "migrate", "--store", url)
    assert code == run(capsys, "verify", "--store", url)[0] == EXIT["invalid"]
    assert out.strip() == "upgraded 0 record(s); 1 already at version 1; 1 failed"
    assert err.strip() == (
        "no-version: its checkpoint has no version (damaged, or written by other software); "
        "restore it from a copy, or delete it: agent-checkpoint rm no-version"
    )
    code, out, _ = run(capsys, "migrate", "--dry-run", "--json", "--store", url)
    report = orjson.loads(out)
    assert code == EXIT["invalid"] and [f["key"] for f in report["failed"]] == ["no-version"]
    assert report["current"] == 1


def test_show_and_get_of_a_bad_record_name_it_what_is_wrong_and_the_remedy(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    fill_with_bad_records(url)
    code, _, err = run(capsys, "show", "no-version", "--store", url)
    assert code == EXIT["invalid"] and err == (
        "agent-checkpoint: error: record 'no-version' is stored, but this library cannot read "
        "it: its checkpoint has no version (damaged, or written by other software); restore it "
        "from a copy, or delete it: agent-checkpoint rm no-version\n"
    )
    code, _, err = run(capsys, "get", "from-v7", "--store", url)
    assert code == EXIT["invalid"] and err.count("\n") == 1
    assert "record 'from-v7' is stored" in err and "newer than this version reads (1)" in err
    code, _, err = run(capsys, "get", "from-v7", "--verbose", "--store", url)
    assert "unsupported checkpoint version: 7. This runtime supports version 1" in err


def test_resume_of_a_bad_stored_record_refuses_in_one_line_before_running_anything(
    url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import sys

    fill_with_bad_records(url)
    marker = tmp_path / "ran"
    command = [sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    code, _, err = run(capsys, "resume", "no-version", "--store", url, "--", *command)
    assert code == EXIT["invalid"] and not marker.exists()
    assert err == (
        "agent-checkpoint: error: record 'no-version' is stored, but this library cannot read "
        "it: its checkpoint has no version (damaged, or written by other software); restore it "
        "from a copy, or delete it: agent-checkpoint rm no-version\n"
    )
