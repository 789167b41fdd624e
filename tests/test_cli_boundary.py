"""What the command line prints about errors, warnings and logs, run as a user runs it (a
child process): never a secret it was given, one clean line per warning, and no driver log
unless asked for."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from support.postgres_server import free_port
from support.services import POSTGRES_URL, REDIS_URL

SECRET = "Hunter2Secret"
KEY = base64.b64encode(bytes(range(32))).decode()
CHECKPOINT = (
    '{"version": 1, "runId": "r", "history": [], "lastCompletedIteration": 0, '
    '"originalInput": {"message": "m"}}'
)

HOSTILE_URLS = [
    f"postgresql://app:{SECRET}%zz@127.0.0.1:5432/test",  # libpq quotes the bad escape
    f"postgresql://app:{SECRET}@127.0.0.1:{free_port()}/test",  # refused, driver message
    f"postgresql://app:{SECRET}@127.0.0.1:5432/ac_no_such_db",  # the server refuses the role
    f"postgresql://app@127.0.0.1:5432/test?password={SECRET}&sslmode=bogus",
    f"s3://AKIAEXAMPLE:{SECRET}@bucket/prefix",  # once echoed in "invalid bucket name"
    f"s3://bucket/p?endpoint_url=http://127.0.0.1:1&aws_secret_access_key={SECRET}",
    f"redis://:{SECRET}@127.0.0.1:6379/0?prefx=typo",
    f"rediss://user:{SECRET}@[::1/0",  # not even a URL urllib can split
    f"redsi://user:{SECRET}@host:6379",
    f"redis:/user:{SECRET}@host",
]


def cli(*argv: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[int, str]:
    ran = subprocess.run(
        [sys.executable, "-m", "agent_checkpoint", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={**os.environ, **(env or {})},
    )
    return ran.returncode, ran.stdout + ran.stderr


def assert_no_part_of(secret: str, output: str) -> None:
    for size in range(6, len(secret) + 1):
        for start in range(len(secret) - size + 1):
            assert secret[start : start + size] not in output, output


@pytest.mark.parametrize("url", HOSTILE_URLS, ids=range(len(HOSTILE_URLS)))
@pytest.mark.parametrize("verbose", [False, True], ids=["plain", "verbose"])
def test_no_secret_of_a_store_url_is_ever_printed(url: str, verbose: bool, tmp_path: Path) -> None:
    flags = ["--verbose"] if verbose else []
    code, output = cli(*flags, "ls", "--store", url)
    assert code != 0 and "agent-checkpoint: error: " in output
    assert_no_part_of(SECRET, output)
    (tmp_path / "c.json").write_text(CHECKPOINT)
    assert cli("put", str(tmp_path / "c.json"), "--store", str(tmp_path / "s"))[0] == 0
    code, output = cli(*flags, "copy", "--store", str(tmp_path / "s"), "--to", url)
    assert code != 0
    assert_no_part_of(SECRET, output)


@pytest.mark.parametrize(
    "keys",
    [KEY, f"k1:{KEY},{KEY}", f"k1:{KEY[:-4]}!!!!", f":{KEY}"],
    ids=["no id", "second without id", "bad base64", "empty id"],
)
def test_no_part_of_an_encryption_key_is_ever_printed(keys: str, tmp_path: Path) -> None:
    for flags in ([], ["--verbose"]):
        code, output = cli(
            *flags, "ls", "--store", str(tmp_path), env={"AGENT_CHECKPOINT_KEYS": keys}
        )
        assert code == 2 and "AGENT_CHECKPOINT_KEYS" in output
        assert_no_part_of(KEY, output)


def test_a_wrong_database_fails_in_one_line_without_the_pools_log() -> None:
    base = POSTGRES_URL.rsplit("/", 1)[0]
    code, output = cli("ls", "--store", f"{base}/ac_no_such_database_{uuid.uuid4().hex[:6]}")
    if "does not exist" not in output:
        pytest.skip(f"postgres is not running: {output}")
    assert code == 3
    assert output.count("\n") == 1 and output.startswith(
        "agent-checkpoint: error: postgres: listing the store failed"
    )
    code, output = cli("-v", "ls", "--store", f"{base}/ac_no_such_database")
    assert "agent-checkpoint: log: psycopg.pool: error connecting" in output  # -v lets it through


def test_the_redis_persistence_warning_is_one_clean_line_once_and_can_be_silenced(
    tmp_path: Path,
) -> None:
    url = f"{REDIS_URL}?prefix=ac-warn-{uuid.uuid4().hex[:8]}"
    (tmp_path / "c.json").write_text(CHECKPOINT)
    code, output = cli("put", str(tmp_path / "c.json"), "--store", url)
    if code != 0:
        pytest.skip(f"redis is not running: {output}")
    code, output = cli("ls", "--store", url, "--json")
    warnings = [line for line in output.splitlines() if "warning" in line.lower()]
    if not warnings:
        pytest.skip("this Redis keeps its data on disk: nothing to warn about")
    assert warnings == [
        "agent-checkpoint: warning: Redis keeps nothing on disk: a restart loses every "
        "checkpoint; set appendonly yes (or -q)"
    ]
    assert len(warnings[0]) <= 120  # two lines at 60 columns, on every command
    code, output = cli("-v", "ls", "--store", url, "--json")
    assert (
        f"the Redis server behind store prefix '{url.split('=')[-1]}' keeps no data on disk "
        "(appendonly no, save '')" in output
    )
    assert "contextlib" not in output and "VolatileRedisWarning" not in output
    for quiet in (["-q"], ["--quiet"]):
        assert "warning" not in cli(*quiet, "ls", "--store", url)[1]
    assert "warning" not in cli("ls", "--store", url, env={"AGENT_CHECKPOINT_QUIET": "1"})[1]
    cli("-q", "rm", "r", "--store", url)
