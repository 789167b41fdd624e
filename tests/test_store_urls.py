"""Store URLs: an option a backend does not take, or a value an option cannot take, is refused
when the store opens, naming the option and the value, before a typo can send checkpoints to
another prefix or fail at the first write. Nothing here needs a server: the URL is checked
before anything connects."""

from __future__ import annotations

import pytest

from agent_checkpoint import open_store
from agent_checkpoint.cli import main
from agent_checkpoint.errors import InvalidKeyError

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
    assert s3_store.backend._create is True
    s3_store.close()
