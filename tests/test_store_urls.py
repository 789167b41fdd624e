"""Store URLs: an option a backend does not take, or a value an option cannot take, is refused
when the store opens, naming the option and the value, before a typo can send checkpoints to
another prefix or fail at the first write; a mistyped scheme is refused naming the schemes
known, and a store opened only to read is never created. Nothing here needs a server: the URL
is checked before anything connects."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent_checkpoint import open_store
from agent_checkpoint._cli import main
from agent_checkpoint.errors import (
    InvalidArgumentError,
    InvalidKeyError,
    MissingDependencyError,
    StoreNotFoundError,
)
from agent_checkpoint.testing import checkpoint

PG = "postgresql://postgres@127.0.0.1:5432/test"
REDIS = "redis://127.0.0.1:6379/0"
S3 = "s3://bucket/prefix?endpoint_url=http://127.0.0.1:9"

REFUSED = [
    (f"{PG}?min_size=abc", r"postgres option min_size must be a whole number >= 0, not 'abc'"),
    (f"{PG}?max_size=0", r"postgres option max_size must be a whole number >= 1, not '0'"),
    (f"{PG}?pool_timeout=soon", r"postgres option pool_timeout must be a number > 0, not 'soon'"),
    (f"{PG}?read_timeout=-1", r"postgres option read_timeout must be a number >= 0, not '-1'"),
    (f"{PG}?read_timeout=inf", r"read_timeout must be a number >= 0, not 'inf'"),
    (f"{PG}?read_timeout=nan", r"read_timeout must be a number >= 0, not 'nan'"),
    (f"{PG}?schema=s&tabel=t", r'postgres URL refused: invalid URI query parameter: "tabel"'),
    (f"{REDIS}?ttl=abc", r"redis option ttl must be a number > 0, not 'abc'"),
    (f"{REDIS}?ttl=0", r"redis option ttl must be a number > 0, not '0'"),
    (f"{REDIS}?prefx=mine", r"unknown redis URL option: prefx \(this library's: prefix, ttl"),
    (f"{S3}&create_bucket=maybe", r"s3 option create_bucket must be true or false, not 'maybe'"),
    (f"{S3}&bucket=x", r"unknown s3 URL option: bucket \(known: create_bucket, endpoint_url"),
]


@pytest.mark.parametrize(("url", "message"), REFUSED, ids=[u.split("?")[-1] for u, _ in REFUSED])
def test_a_bad_url_option_is_refused_on_open_naming_it(url: str, message: str) -> None:
    with pytest.raises(InvalidKeyError, match=message):
        open_store(url)


@pytest.mark.parametrize("kind", ["disk", "memory"])  # fsspec passes them to its filesystem
def test_a_keyword_option_a_backend_does_not_take_is_refused_naming_it(
    kind: str, tmp_path: Path
) -> None:
    url = {"disk": str(tmp_path / "s"), "memory": "memory://"}
    with pytest.raises(InvalidArgumentError, match=rf"{kind if kind != 'disk' else 'file'} store: "
                       r"unknown option 'prefx'"):  # fmt: skip
        open_store(url[kind], prefx="mine")
    assert not (tmp_path / "s").exists()


def test_a_keyword_option_redis_py_does_not_take_is_refused_and_its_own_are_accepted() -> None:
    with pytest.raises(InvalidArgumentError, match=r"redis store: unknown option 'prefx'"):
        open_store(REDIS, prefx="mine")
    with pytest.raises(InvalidArgumentError, match=r"unknown option 'socket_timout'"):
        open_store(f"{REDIS}?cluster=true", socket_timout=3)
    taken = {"socket_timeout": 3, "max_connections": 5, "health_check_interval": 10}
    open_store(REDIS, prefix="mine", single_connection_client=False, **taken).close()


def test_the_cli_reports_a_bad_url_option_as_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["ls", "--store", f"{REDIS}?prefx=mine"]) == 2
    assert "unknown redis URL option: prefx" in capsys.readouterr().err


@pytest.mark.parametrize(
    "url",
    [
        f"{PG}?schema=s&sslmode=disable&application_name=agent&read_timeout=0&max_size=2",
        f"{REDIS}?prefix=mine&ttl=3600&socket_timeout=3&health_check_interval=10&client_name=a",
        "rediss://127.0.0.1:6380/0?ssl_cert_reqs=none&prefix=mine",
        f"{S3}&region=us-east-1&create_bucket=yes",
    ],
    ids=["postgres", "redis", "rediss", "s3"],
)
def test_options_the_backend_or_its_driver_take_are_accepted(url: str) -> None:
    store = open_store(url)  # opening connects to nothing yet
    store.close()


def test_url_options_reach_the_backend() -> None:
    redis_store = open_store(f"{REDIS}?prefix=mine&ttl=1.5")
    assert (redis_store.backend.prefix, redis_store.backend.ttl_ms) == ("mine", 1500)
    redis_store.close()
    s3_store = open_store(f"{S3}&create_bucket=yes")
    assert s3_store.backend._bucket.create is True
    s3_store.close()


# -- typos are refused, not made into folders -----------------------------------------------

LOOKS_LIKE_A_URL = [
    ("redsi://127.0.0.1:6379", "unknown store URL scheme 'redsi://'"),
    ("postgress://db/x", "unknown store URL scheme 'postgress://'"),
    ("redis:/127.0.0.1:6379", "'redis:/...' looks like a URL but is not one"),
    ("s3:/bucket/prefix", "'s3:/...' looks like a URL but is not one"),
    ("file:/tmp/x", "'file:/...' looks like a URL but is not one"),
    ("redis:127.0.0.1", "'redis:...' looks like a URL but is not one"),
]


@pytest.mark.parametrize(("url", "message"), LOOKS_LIKE_A_URL)
def test_a_string_that_looks_like_a_url_but_names_no_backend_is_refused(
    url: str, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidKeyError) as caught:
        open_store(url)
    assert message in str(caught.value)
    assert "known: file, memory, postgres, postgresql, redis, rediss, s3" in str(caught.value)
    assert "install" not in str(caught.value)
    assert list(tmp_path.iterdir()) == []  # no folder named after the typo


def test_fsspec_urls_go_to_fsspec_by_its_registry_or_an_explicit_prefix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for url in (
        "fsspec+memory://h16/a",
        "simplecache::memory://h16/b",
        "fsspec+file://" + str(tmp_path),
    ):
        with open_store(url) as store:
            assert store.backend.name == "fsspec", url
    with pytest.raises(
        MissingDependencyError, match="gcsfs"
    ):  # fsspec knows gs://, its driver is missing
        open_store("gs://bucket/prefix")
    assert list(tmp_path.iterdir()) == []


WITHOUT_FSSPEC = r"""
import sys
sys.modules["fsspec"] = None  # as if fsspec were not installed
from agent_checkpoint import open_store
from agent_checkpoint.errors import InvalidKeyError, MissingDependencyError
for url, error, needle in [
    ("redsi://x", InvalidKeyError, "unknown store URL scheme 'redsi://'"),
    ("gs://bucket/p", MissingDependencyError, "pip install 'localab-checkpoint[fsspec]'"),
]:
    try:
        open_store(url)
    except error as exc:
        assert needle in str(exc), str(exc)
        assert (error is MissingDependencyError) == ("install" in str(exc)), str(exc)
    else:
        raise AssertionError(url)
print("ok")
"""


def test_without_fsspec_a_typo_is_refused_and_a_fsspec_url_names_the_extra(
    tmp_path: Path,
) -> None:
    ran = subprocess.run(
        [sys.executable, "-c", WITHOUT_FSSPEC], cwd=tmp_path, capture_output=True, text=True
    )
    assert (ran.returncode, ran.stdout.strip()) == (0, "ok"), ran.stderr


def test_opening_without_create_refuses_a_missing_folder_and_makes_nothing(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "typo"
    with pytest.raises(StoreNotFoundError, match=f"no store at '{missing}': the folder does not"):
        open_store(str(missing), create=False)
    not_a_store = tmp_path / "notes"
    not_a_store.mkdir()
    (not_a_store / "todo.txt").write_text("x")
    with pytest.raises(StoreNotFoundError, match="holds no checkpoint store"):
        open_store(str(not_a_store), create=False)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["notes", "todo.txt"]
    with open_store(str(tmp_path / "real")) as store:  # create=True: the library's default
        store.put(checkpoint("r"), key="k")
    with open_store(str(tmp_path / "real"), create=False) as store:
        assert [s.key for s in store.list()] == ["k"]


def test_a_file_where_the_store_folder_should_be_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "store.json"
    path.write_text("{}")
    for url in (str(path), str(path / "inside")):
        for create in (True, False):
            with pytest.raises(InvalidKeyError, match="is a file, not a folder"):
                open_store(url, create=create)
    assert path.read_text() == "{}"
