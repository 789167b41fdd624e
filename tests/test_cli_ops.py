"""Operations commands on real stores: claims, copy, migrate, verify, resume-worker."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import orjson
import pytest
from support.legacy import legacy_record

from agent_checkpoint import open_store
from agent_checkpoint._cli import EXIT, main
from agent_checkpoint.backends import Record, Summary
from agent_checkpoint.backends._disk import file_name
from agent_checkpoint.testing import checkpoint, stamped


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def fill(url: str, n: int, **kw: object) -> None:
    with open_store(url) as store:
        for i in range(n):
            store.put(stamped(checkpoint(f"r{i}", **kw), 1000 + i), key=f"k{i}")  # type: ignore[arg-type]


def test_copy_is_byte_identical_verified_and_resumable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, dst = str(tmp_path / "a"), str(tmp_path / "b")
    fill(src, 30, principal="p")
    with open_store(dst) as target, open_store(src) as source:  # a partial earlier copy
        rec = source.get_record("k3")
        assert rec is not None
        target.put_record(rec)
    code, out, _ = run(capsys, "copy", "--store", src, "--to", dst)
    assert code == 0 and "Copied 29 record(s)" in out and "1 already there" in out
    with open_store(src) as a, open_store(dst) as b:
        assert [(s.key, s.saved_at, s.owner) for s in a.iter_summaries()] == [
            (s.key, s.saved_at, s.owner) for s in b.iter_summaries()
        ]
        for s in a.iter_summaries():
            assert a.get_record(s.key).body == b.get_record(s.key).body  # type: ignore[union-attr]


def test_copy_refuses_to_clobber_different_content(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, dst = str(tmp_path / "a"), str(tmp_path / "b")
    fill(src, 3)
    with open_store(dst) as target:
        target.put(checkpoint("other"), key="k1")
    code, out, err = run(capsys, "copy", "--store", src, "--to", dst)
    assert code == EXIT["conflict"]  # the others are copied; the conflict is listed
    assert f"left as it is: 'k1' holds other content in {dst} (--overwrite replaces it)" in err
    assert "Copied 2 record(s)" in out and "1 left as they are" in out
    assert run(capsys, "copy", "--store", src, "--to", dst, "--overwrite")[0] == 0


def test_migrate_upgrades_every_old_record_and_can_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = str(tmp_path)
    with open_store(url) as store:
        for i in range(12):
            store.backend.save(legacy_record(f"old{i}", 1000 + i, text=f"hello {i}"))
        store.put(checkpoint("new"), key="new")
    spec = "support.legacy:MIGRATIONS"
    code, out, _ = run(capsys, "migrate", "--dry-run", "--migrations", spec, "--store", url)
    assert code == 0
    assert (
        code == 0 and out.strip() == "would upgrade 12 record(s); 1 already at version 1; 0 failed"
    )
    code, out, _ = run(capsys, "migrate", "--migrations", spec, "--store", url)
    assert code == 0 and out.strip() == "upgraded 12 record(s); 1 already at version 1; 0 failed"
    code, out, _ = run(capsys, "migrate", "--migrations", spec, "--store", url)
    assert code == 0
    assert out.strip() == "upgraded 0 record(s); 13 already at version 1; 0 failed"
    with open_store(url) as store:  # readable now without the test-only step
        got = store.get("old7")
        assert got is not None and got.history[0].content == "hello 7" and got.version == 1
        assert store.head("old7").saved_at == 1007  # type: ignore[union-attr]


def test_migrate_interrupted_midway_finishes_on_the_next_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agent_checkpoint._store import Store

    url = str(tmp_path)
    with open_store(url) as store:
        for i in range(10):
            store.backend.save(legacy_record(f"old{i}", 1000 + i))
    calls = 0
    original = Store.put

    def flaky_put(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        if calls == 5:
            raise KeyboardInterrupt
        return original(self, *args, **kwargs)

    Store.put = flaky_put  # type: ignore[method-assign]
    try:
        code, _, _ = run(
            capsys, "migrate", "--migrations", "support.legacy:MIGRATIONS", "--store", url
        )
    finally:
        Store.put = original  # type: ignore[method-assign]
    assert code == 130
    code, out, _ = run(
        capsys, "migrate", "--migrations", "support.legacy:MIGRATIONS", "--store", url
    )
    assert out.strip() == "upgraded 6 record(s); 4 already at version 1; 0 failed"


def test_verify_reports_unreadable_records_and_repairs_the_index(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = str(tmp_path)
    fill(url, 5)
    bad = tmp_path / "records" / file_name("k2")
    bad.write_bytes(bad.read_bytes()[:-20])
    code, out, _ = run(capsys, "verify", "--json", "--store", url)
    report = json.loads(out)
    assert code == EXIT["invalid"] and report["unreadable"] == ["k2"] and report["checked"] == 5
    bad.unlink()
    with open_store(url) as store:
        store.backend._index.db().execute("DELETE FROM summaries WHERE key = 'k4'")  # type: ignore[attr-defined]
    code, out, _ = run(capsys, "verify", "--store", url)
    assert (
        code == EXIT["invalid"]
        and "stale index entry: k2" in out
        and "missing from index: k4" in out
    )
    code, out, _ = run(capsys, "verify", "--repair", "--store", url)
    assert code == 0 and "index rebuilt: 4 record(s) listed" in out
    code, out, _ = run(capsys, "verify", "--store", url)
    assert code == 0 and out.startswith("checked 4 record(s): 0 unreadable")


def test_claims_lists_live_leases(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = str(tmp_path)
    fill(url, 2, failed="llm")
    with open_store(url) as store, store.claim("k1", "worker-a", ttl=60):
        code, out, _ = run(capsys, "claims", "--json", "--store", url)
        assert code == 0
        listed = json.loads(out)["items"]  # {"items": [...]}, as ls --json
        assert [(c["key"], c["worker"]) for c in listed] == [("k1", "worker-a")]
        code, out, _ = run(capsys, "claims", "--store", url)
        assert code == 0
        assert "worker-a" in out and out.splitlines()[0].split()[:2] == ["KEY", "WORKER"]
    assert run(capsys, "claims", "--store", url)[1].strip() == "no live claims"


AGENT = textwrap.dedent(
    """
    import json, os, sys
    seed = json.load(open(os.environ["AGENT_CHECKPOINT_SEED"]))
    if seed["originalInput"]["message"] == "explode":
        sys.exit(3)
    seed["history"].append({"role": "assistant", "content": "resumed " + os.environ["AGENT_CHECKPOINT_KEY"]})
    print(json.dumps(seed))
    """
)


def test_resume_worker_runs_a_command_per_failed_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = str(tmp_path)
    with open_store(url) as store:
        store.put(stamped(checkpoint("a", failed="llm"), 1000), key="a")
        store.put(stamped(checkpoint("b"), 1001), key="b")  # did not fail
        bad = checkpoint("c", failed="tool").evolve(
            original_input=checkpoint().original_input.__class__("explode")
        )
        store.put(stamped(bad, 1002), key="c")
    code, out, err = run(
        capsys, "resume-worker", "--store", url, "--worker", "w1", "--", sys.executable, "-c", AGENT
    )
    assert code == EXIT["backend"]
    assert "resumed a" in out and "1 resumed, 1 failed" in out
    assert "failed c: RuntimeError: command failed with exit code 3" in err
    with open_store(url) as store:
        a = store.get("a")
        assert a is not None and a.failure_point is None and a.history[-1].content == "resumed a"
        c = store.get("c")
        assert c is not None and c.failure_point is not None  # left as it was
        assert store.claims() == []


def test_rekey_moves_every_record_to_the_new_primary_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import base64

    k1, k2 = base64.b64encode(b"1" * 32).decode(), base64.b64encode(b"2" * 32).decode()
    url = str(tmp_path / "store")
    monkeypatch.setenv("AGENT_CHECKPOINT_KEYS", f"k1:{k1}")
    path = tmp_path / "c.json"
    for i in range(3):
        path.write_text(json.dumps(checkpoint(f"r{i}").to_json()))
        assert run(capsys, "put", str(path), "--store", url)[0] == 0
    monkeypatch.delenv("AGENT_CHECKPOINT_KEYS")
    code, _, err = run(capsys, "get", "r0", "--store", url)
    assert code == EXIT["invalid"] and "encrypted under key id 'k1', which was not given" in err
    # verify said only "unreadable: r0", as if the records were damaged
    code, out, _ = run(capsys, "verify", "--store", url)
    assert code == EXIT["invalid"]
    assert (
        "unreadable: r0: encrypted under key id 'k1', which was not given; "
        "set AGENT_CHECKPOINT_KEYS to hold it" in out
    )
    code, _, err = run(capsys, "rekey", "--store", url)
    assert code == EXIT["usage"] and "AGENT_CHECKPOINT_KEYS" in err
    monkeypatch.setenv("AGENT_CHECKPOINT_KEYS", f"k2:{k2},k1:{k1}")
    code, out, _ = run(capsys, "rekey", "--store", url)
    assert (code, out.strip()) == (
        0,
        "re-encrypted 3 record(s); 0 already under the primary key; 0 failed",
    )
    monkeypatch.setenv("AGENT_CHECKPOINT_KEYS", f"k2:{k2}")
    code, out, _ = run(capsys, "get", "r2", "--store", url)
    assert code == 0 and json.loads(out)["runId"] == "r2"
    monkeypatch.setenv("AGENT_CHECKPOINT_KEYS", "k2:not-base64!")
    code, _, err = run(capsys, "ls", "--store", url)
    assert code == EXIT["usage"] and "not valid base64" in err


def test_get_and_verify_report_a_record_nested_past_the_depth_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = str(tmp_path)
    fill(url, 3)
    deep = checkpoint("deep").to_json()
    deep["version"] = "HOLE"
    body = orjson.dumps({"format": "conversation-v1", "data": deep, "savedAt": 5000})
    body = body.replace(b'"HOLE"', b"[" * 400 + b"1" + b"]" * 400)
    with open_store(url) as store:
        store.backend.save(
            Record(Summary("deep", "deep", 5000, None, None, None, None, 1, 1, 0), body)
        )
    code, _, err = run(capsys, "get", "deep", "--store", url)
    assert code == EXIT["invalid"] and "deeper than 254 levels" in err and "Traceback" not in err
    code, out, _ = run(capsys, "verify", "--json", "--store", url)
    report = json.loads(out)
    assert code == EXIT["invalid"] and report["unreadable"] == ["deep"] and report["checked"] == 4
    assert report["unreadableReasons"]["deep"].startswith("UnreadableEnvelopeError: ")
    assert "deeper than 254 levels" in report["unreadableReasons"]["deep"]


def test_migrate_reports_a_record_no_put_may_store_and_upgrades_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = str(tmp_path)
    with open_store(url) as store:
        store.backend.save(legacy_record("good", 1000))
        bad = legacy_record("bad", 1001)
        body = bad.body.replace(b'"old-bad"', b'"old-\\u0000bad"')  # NUL: no index holds it
        store.backend.save(Record(bad.summary, body))
    code, out, err = run(
        capsys, "migrate", "--migrations", "support.legacy:MIGRATIONS", "--store", url
    )
    assert code == EXIT["invalid"]
    assert out.strip() == "upgraded 1 record(s); 0 already at version 1; 1 failed"
    assert "bad: cannot store this checkpoint: data.runId holds NUL" in err
    with open_store(url) as store:
        assert store.get("good") is not None and store.get("good").version == 1  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("option", "named"),
    [
        (["--limit", "0"], "limit must be a whole number >= 1, got 0"),
        (["--limit", "-1"], "limit must be a whole number >= 1, got -1"),
        (["--ttl", "-5"], "ttl must be a positive number of seconds, got -5.0"),
    ],
)
def test_resume_worker_refuses_a_bad_option_even_with_no_failed_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: list[str], named: str
) -> None:
    # each exited 0 having done nothing ("0 resumed"), or failed only once a run was found
    url = str(tmp_path / "store")
    with open_store(url) as store:
        store.put(checkpoint("r"), key="k")
    code, out, err = run(capsys, "resume-worker", *option, "--store", url, "--", "true")
    assert (code, out) == (EXIT["usage"], "") and named in err


def test_show_refuses_a_negative_message_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = str(tmp_path / "store")
    with open_store(url) as store:
        store.put(checkpoint("r"), key="k")
    with pytest.raises(SystemExit) as exited:
        main(["show", "k", "--messages", "-1", "--store", url])
    assert exited.value.code == EXIT["usage"]
    assert "argument --messages: expected a whole number >= 0, got '-1'" in capsys.readouterr().err


def test_copy_into_a_store_opened_with_keys_says_the_records_stay_as_stored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import base64

    source, target = str(tmp_path / "plain"), str(tmp_path / "sealed")
    with open_store(source) as store:
        store.put(checkpoint("r"), key="k")
    monkeypatch.setenv("AGENT_CHECKPOINT_KEYS", "k1:" + base64.b64encode(b"1" * 32).decode())
    code, _, err = run(capsys, "copy", "--to", target, "--store", source)
    assert code == 0 and f"`agent-checkpoint rekey --store {target}` encrypts them" in err
    assert b'"originalInput"' in next((tmp_path / "sealed" / "records").iterdir()).read_bytes()
    code, out, _ = run(capsys, "rekey", "--store", target)
    assert code == 0 and out.startswith("re-encrypted 1 record(s)")
    assert b'"originalInput"' not in next((tmp_path / "sealed" / "records").iterdir()).read_bytes()


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        (
            "garbage",
            "cannot load migrations 'garbage': No module named 'garbage' (expected MODULE[:ATTR]",
        ),
        ("json:dumps", "'json:dumps' is a function, not a Migrations object (expected MODULE"),
    ],
)
def test_migrate_says_what_migrations_takes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spec: str, named: str
) -> None:
    url = str(tmp_path / "store")
    with open_store(url) as store:
        store.put(checkpoint("r"), key="k")
    code, out, err = run(capsys, "migrate", "--migrations", spec, "--store", url)
    assert (code, out) == (EXIT["usage"], "") and named in err


@pytest.mark.parametrize("to", ["{url}", "{url}/", "file://{url}", "{url}/../{name}"])
def test_copy_onto_its_own_store_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], to: str
) -> None:
    url = str(tmp_path / "store")
    fill(url, 2)
    target = to.format(url=url, name="store")
    code, _, err = run(capsys, "copy", "--to", target, "--store", url)
    assert code == 2
    assert "names the store it copies from" in err
    code, out, _ = run(capsys, "copy", "--to", str(tmp_path / "other"), "--store", url)
    assert code == 0 and out.startswith("Copied 2 record(s)")


def test_ls_refuses_a_failure_phase_with_ok(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = str(tmp_path)
    fill(url, 2, failed="llm")
    code, _, err = run(capsys, "ls", "--phase", "llm", "--ok", "--store", url)
    assert code == 2 and "cannot go with --ok" in err
    code, out, _ = run(capsys, "ls", "--phase", "llm", "--failed", "--store", url)
    assert code == 0 and "k0" in out and "k1" in out


def test_show_messages_all_prints_every_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = str(tmp_path)
    with open_store(url) as store:
        store.put(checkpoint("r1", messages=12, text="msg"), key="long")
    code, out, _ = run(capsys, "show", "long", "--messages", "all", "--store", url)
    assert code == 0 and "all 12 message(s):" in out
    assert all(f"msg {i}\n" in out for i in range(12))
    code, out, _ = run(capsys, "show", "long", "--store", url)
    assert "last 5 message(s):" in out and "msg 6\n" not in out and "msg 7\n" in out
    with pytest.raises(SystemExit) as usage:
        run(capsys, "show", "long", "--messages", "every", "--store", url)
    assert usage.value.code == 2 and "got 'every'" in capsys.readouterr().err
