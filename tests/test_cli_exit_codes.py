"""One table of exit codes for every command (README "Exit codes"), one line per error, and
stores that only a writing command may create: a mistyped store is an error that leaves
nothing behind, never a new empty store."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from agent_checkpoint import open_store
from agent_checkpoint._cli import EXIT, main
from agent_checkpoint.testing import checkpoint

ROOT = Path(__file__).resolve().parents[1]

Argv = Callable[[Path], list[str]]

# Every command that reads a store, with the arguments it needs; STORE marks the store.
READERS: dict[str, list[str]] = {
    "ls": ["ls"],
    "show": ["show", "k"],
    "get": ["get", "k"],
    "rm": ["rm", "k"],
    "prune": ["prune", "--older-than", "1d"],
    "verify": ["verify"],
    "claims": ["claims"],
    "migrate": ["migrate"],
    "copy": ["copy", "--to", "{tmp}/target"],
    "resume-worker": ["resume-worker", "--", "true"],
    "resume": ["resume", "k", "--", "true"],
}
WRITERS: dict[str, list[str]] = {
    "put": ["put", "{tmp}/c.json"],
    "setup": ["setup"],
    "save": ["save", "{tmp}/t.json"],
}


def cli(capsys: pytest.CaptureFixture[str], tmp: Path, argv: list[str]) -> tuple[int, str, str]:
    try:
        code = main([a.replace("{tmp}", str(tmp)) for a in argv])
    except SystemExit as exc:  # argparse's usage errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("agent-checkpoint: error: "), err
    return lines[0]


@pytest.fixture
def inputs(tmp_path: Path) -> Path:
    (tmp_path / "c.json").write_bytes(orjson.dumps(checkpoint("r1").to_json()))
    (tmp_path / "t.json").write_text('[{"role": "user", "content": "hi"}]')
    return tmp_path


def files_under(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


@pytest.mark.parametrize("command", READERS)
def test_reading_commands_on_a_mistyped_store_fail_and_create_nothing(
    command: str, inputs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = files_under(inputs)
    typo = inputs / ".agent-checkpoint"  # one letter off the default
    code, _, err = cli(capsys, inputs, ["--store", str(typo), *READERS[command]])
    assert code == EXIT["not_found"], err
    assert f"no store at '{typo}': the folder does not exist" in one_error_line(err)
    assert files_under(inputs) == before


@pytest.mark.parametrize("command", [*READERS, *WRITERS])
@pytest.mark.parametrize("store", ["redsi://127.0.0.1:6379", "redis:/127.0.0.1", "s3:/bucket"])
def test_a_store_that_only_looks_like_a_url_is_a_usage_error_everywhere(
    command: str, store: str, inputs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = files_under(inputs)
    code, _, err = cli(capsys, inputs, ["--store", store, *{**READERS, **WRITERS}[command]])
    line = one_error_line(err)
    assert code == EXIT["usage"], err
    assert "known: file, memory, postgres" in line and "install" not in line
    assert files_under(inputs) == before


@pytest.mark.parametrize("command", [*READERS, *WRITERS])
def test_a_file_used_as_a_store_is_a_usage_error_everywhere(
    command: str, inputs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--store", str(inputs / "c.json"), *{**READERS, **WRITERS}[command]]
    code, _, err = cli(capsys, inputs, argv)
    assert code == EXIT["usage"], err
    assert "is a file, not a folder" in one_error_line(err)


MISSING_INPUT = {
    "put": ["put", "{tmp}/nope.json", "--store", "{tmp}/s"],
    "save": ["save", "{tmp}/nope.json", "-o", "{tmp}/out.jsonl"],
    "resume": ["resume", "{tmp}/nope.jsonl", "--", "true"],
    "diff": ["diff", "{tmp}/t.json", "{tmp}/nope.jsonl"],
    "merge": ["merge", "{tmp}/nope.jsonl", "{tmp}/t.json", "-o", "{tmp}/out.jsonl"],
}
MALFORMED_INPUT = {
    "put": ["put", "{tmp}/bad.json", "--store", "{tmp}/s"],
    "save": ["save", "{tmp}/bad.json", "-o", "{tmp}/out.jsonl"],
    "resume": ["resume", "{tmp}/bad.json", "--", "true"],
    "diff": ["diff", "{tmp}/t.json", "{tmp}/bad.json"],
    "merge": ["merge", "{tmp}/bad.json", "{tmp}/t.json", "-o", "{tmp}/out.jsonl"],
}


@pytest.mark.parametrize("command", MISSING_INPUT)
def test_a_missing_input_file_is_not_found_in_every_command(
    command: str, inputs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = cli(capsys, inputs, MISSING_INPUT[command])
    assert code == EXIT["not_found"], err
    assert "nope.json" in one_error_line(err)


@pytest.mark.parametrize("command", MALFORMED_INPUT)
def test_a_malformed_input_file_is_invalid_in_every_command(
    command: str, inputs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (inputs / "bad.json").write_text("{not json")
    code, _, err = cli(capsys, inputs, MALFORMED_INPUT[command])
    assert code == EXIT["invalid"], err
    one_error_line(err)
    assert not (inputs / "out.jsonl").exists()


def test_postgres_without_setup_is_not_found_with_a_hint_not_a_server_failure(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from support.postgres_server import unique_schema, with_query
    from support.services import POSTGRES_URL

    url = with_query(POSTGRES_URL, schema=unique_schema("ac_nosetup"))
    code, _, err = cli(capsys, tmp_path, ["ls", "--store", url])
    if "cannot connect" in err:
        pytest.skip("postgres is not running")
    assert code == EXIT["not_found"]
    assert "agent-checkpoint setup --store URL" in one_error_line(err)


def test_the_readme_table_is_the_table_the_cli_uses() -> None:
    section = (ROOT / "README.md").read_text(encoding="utf-8").split("### Exit codes", 1)[1]
    rows = [line for line in section.split("\n###", 1)[0].splitlines() if line.startswith("|")]
    documented = {int(code) for row in rows[2:] for code in re.findall(r"\d+", row.split("|")[1])}
    assert documented == set(EXIT.values())


def test_store_is_accepted_before_the_command_too(
    inputs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(inputs / "s")
    assert cli(capsys, inputs, ["--store", store, "put", "{tmp}/c.json"])[0] == 0
    code, out, _ = cli(capsys, inputs, ["--store", store, "ls"])
    assert code == 0 and out.splitlines()[1].split()[0] == "r1"
    code, out, _ = cli(capsys, inputs, ["--store", store, "save", "{tmp}/t.json"])
    assert code == 0 and out.startswith("Saved 1 turn (1 message) to ")
    # after the command, the option wins
    code, _, err = cli(capsys, inputs, ["--store", store, "ls", "--store", "{tmp}/nowhere"])
    assert code == EXIT["not_found"] and "nowhere" in err


def test_an_unreadable_record_is_one_short_line_and_verbose_has_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agent_checkpoint.backends._disk import file_name

    store = str(tmp_path / "s")
    with open_store(store) as opened:
        opened.put(checkpoint("r1"), key="k")
    record = Path(store) / "records" / file_name("k")
    record.write_bytes(record.read_bytes()[:-30])  # torn: not JSON any more
    code, _, err = cli(capsys, tmp_path, ["get", "k", "--store", store])
    line = one_error_line(err)
    assert code == EXIT["invalid"] and len(line) < 300
    assert "record 'k' is stored, but this library cannot read it" in line
    (tmp_path / "bad.json").write_bytes(orjson.dumps({"format": "v9", "data": {}, "savedAt": 1}))
    code, _, err = cli(capsys, tmp_path, ["put", "{tmp}/bad.json", "--store", store])
    line = one_error_line(err)
    assert code == EXIT["invalid"] and len(line) < 300
    assert "unknown checkpoint format 'v9'" in line
    code, _, err = cli(capsys, tmp_path, ["get", "k", "--store", store, "--verbose"])
    assert code == EXIT["invalid"]
    assert "An unreadable stored conversation and an absent one are different facts" in err
    assert "Traceback (most recent call last)" in err


@pytest.mark.parametrize(
    "argv",
    [["show", "k"], ["get", "k"], ["verify"], ["rekey"], ["ls"], ["put", "{tmp}/c.json"]],
    ids=lambda argv: argv[0],
)
def test_keys_set_without_the_encryption_extra_is_refused_once_at_open(
    inputs: Path, argv: list[str]
) -> None:
    """With $AGENT_CHECKPOINT_KEYS set on an install without ``cryptography``, every command
    stops at open with exit 7 and one line naming the extra: not an internal error at the
    first encrypted record, and not one line per record (rekey)."""
    import base64
    import os
    import subprocess
    import sys

    store = inputs / "store"
    with open_store(str(store)) as plain:
        for n in range(5):
            plain.put(checkpoint(f"r{n}"), key="k" if n == 0 else f"k{n}")
        before = {s.key: s.revision for s in plain.list().items}
    env = {**os.environ, "AGENT_CHECKPOINT_KEYS": "k1:" + base64.b64encode(b"\1" * 32).decode()}
    without_cryptography = (
        "import sys; sys.modules['cryptography'] = None; "
        "from agent_checkpoint._cli import main; raise SystemExit(main(sys.argv[1:]))"
    )
    args = [a.replace("{tmp}", str(inputs)) for a in argv]
    done = subprocess.run(
        [sys.executable, "-c", without_cryptography, "--store", str(store), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == EXIT["dependency"], done.stderr
    line = one_error_line(done.stderr)
    assert "pip install 'localab-checkpoint[encryption]'" in line
    with open_store(str(store)) as plain:  # nothing was written, and all reads as plain JSON
        assert {s.key: s.revision for s in plain.list().items} == before
        assert [plain.get(key).run_id for key in ("k", "k1")] == ["r0", "r1"]


def test_help_names_the_environment_and_every_exit_code(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, _ = cli(capsys, tmp_path, ["--help"])
    text = " ".join(out.split())
    assert code == 0
    for variable in ("AGENT_CHECKPOINT_STORE", "AGENT_CHECKPOINT_KEYS", "AGENT_CHECKPOINT_QUIET"):
        assert variable in text
    assert "localab-checkpoint[encryption]" in text.replace("- ", "-")
    for name, number in EXIT.items():
        assert f"{number} {name.replace('_', ' ')}" in text


def test_every_command_has_a_description_examples_that_parse_and_its_exit_codes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import argparse
    import shlex

    from agent_checkpoint._cli import _EXAMPLES, _split_command, build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert set(_EXAMPLES) == set(commands)
    for name, command in commands.items():
        code, out, _ = cli(capsys, tmp_path, [name, "--help"])
        text = " ".join(out.split())
        assert code == 0 and command.description, name
        assert "exit codes: 0 ok" in text and "7 missing extra" in text, name
        for example in _EXAMPLES[name]:
            argv = shlex.split(example.split("   (")[0].split(" > ")[0])
            assert f"agent-checkpoint {example.split()[0]}" in out, (name, example)
            args, unknown = parser.parse_known_args(_split_command(argv)[0])
            assert not unknown and args.run, (name, example, unknown)
    for name in ("get", "show", "rm"):
        code, out, _ = cli(capsys, tmp_path, [name, "--help"])
        assert "the stored run's key" in out or "keys of the runs" in out, name


def test_a_mistyped_option_gets_the_commands_usage_and_the_nearest_option(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = cli(capsys, tmp_path, ["ls", "--limt", "5"])
    assert code == EXIT["usage"]
    assert err.startswith("usage: agent-checkpoint ls ")
    assert "unrecognized arguments: --limt 5; --limt: did you mean --limit?" in err


def test_a_mistyped_key_or_scheme_is_not_found_with_the_nearest_one(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    store = tmp_path / "store"
    with open_store(str(store)) as opened:
        for n in (5, 6, 700):
            opened.put(checkpoint(f"r{n}"), key=f"conv-{n:05d}")
    for argv in (["show", "conv-0005"], ["get", "conv-0005"], ["rm", "conv-0005"]):
        code, _, err = cli(capsys, tmp_path, ["--store", str(store), *argv])
        assert code == EXIT["not_found"], argv
        assert one_error_line(err).endswith("did you mean 'conv-00005'?"), err
    code, _, err = cli(capsys, tmp_path, ["--store", str(store), "show", "nothing-like-it"])
    assert code == EXIT["not_found"] and "did you mean" not in err
    code, _, err = cli(capsys, tmp_path, ["--store", "redsi://localhost", "ls"])
    assert code == EXIT["usage"]
    assert "unknown store URL scheme 'redsi://': did you mean 'redis://'?" in one_error_line(err)
    with open_store(str(store)) as opened:  # rm of a near miss deleted nothing
        assert len(opened.list().items) == 3


def test_settings_the_server_refuses_are_usage_errors_in_the_users_words(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Redis database the server does not have, or S3 with no credentials, is a wrong URL
    or environment (exit 2), not a server failure (6); the line says what the command was
    doing, not the backend's operation name, and names commands, not Python calls."""
    import redis
    from support.postgres_server import unique_schema, with_query
    from support.services import POSTGRES_URL, REDIS_URL, service_missing

    try:
        redis.Redis.from_url(REDIS_URL).ping()
    except redis.RedisError as exc:
        service_missing("redis", str(exc))
    base = REDIS_URL.rsplit("/", 1)[0]
    code, _, err = cli(capsys, tmp_path, ["ls", "--store", f"{base}/99"])
    assert code == EXIT["usage"]
    assert one_error_line(err) == (
        "agent-checkpoint: error: redis: listing the store failed: "
        "ResponseError: DB index is out of range"
    )
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    code, _, err = cli(
        capsys, tmp_path, ["ls", "--store", "s3://bucket/p?endpoint_url=http://127.0.0.1:9"]
    )
    assert code == EXIT["usage"]
    assert "s3: listing the store failed: NoCredentialsError" in one_error_line(err)
    url = with_query(POSTGRES_URL, schema=unique_schema("ac_words"))
    code, _, err = cli(capsys, tmp_path, ["ls", "--store", url])
    line = one_error_line(err)
    assert "store.setup()" not in line and "scan failed" not in line
    assert "postgres: listing the store failed" in line
