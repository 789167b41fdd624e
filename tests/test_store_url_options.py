"""One rule for a connection passed in, on every scheme that takes one (``client=``, fsspec's
``fs=``): the caller made and configured it, so an option that configures the connection the
store would make (the library's, from ``SCHEMES``, or the driver's own) is refused by name
beside it, in the URL or as a keyword, before anything is made; the store's own options still
apply. Until this rule, S3 dropped ``endpoint_url`` and ``profile`` beside a client silently,
and fsspec its storage options beside ``fs=``. The clients here are the real drivers' (a
connection that is refused is never used, so most tests need no server)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import boto3
import fsspec
import pytest
import redis
import redis.asyncio
from psycopg_pool import AsyncConnectionPool, ConnectionPool
from support.seaweed import S3Server, purge
from support.services import POSTGRES_URL, REDIS_URL

from agent_checkpoint import open_async_store, open_store
from agent_checkpoint.backends import backend_class, registry
from agent_checkpoint.backends._url_options import SCHEMES
from agent_checkpoint.errors import InvalidArgumentError, InvalidKeyError
from agent_checkpoint.testing import checkpoint

EXAMPLES = {
    "min_size": "1",
    "max_size": "2",
    "pool_timeout": "3",
    "read_timeout": "4",
    "cluster": "true",
    "endpoint_url": "http://127.0.0.1:9",
    "profile": "default",
}
"""A value each connection option of the table takes."""

DRIVER_URL = {"postgres": ["sslmode", "application_name"], "redis": ["socket_timeout"]}
"""Options each driver takes in the URL beside ours (fsspec's URL is the filesystem's own)."""
DRIVER_KEYWORDS = {
    "redis": ["health_check_interval"],
    "fsspec": ["auto_mkdir", "skip_instance_cache"],
}
"""Options each driver takes as keywords beside ours."""
DRIVER_VALUES = {"sslmode": "disable", "application_name": "agent", "socket_timeout": "3",
                 "health_check_interval": 10, "auto_mkdir": True, "skip_instance_cache": True}  # fmt: skip

URLS = {
    "postgres": "postgresql://postgres@127.0.0.1:5432/test",
    "redis": "redis://127.0.0.1:6379/0",
    "s3": "s3://bucket/prefix",
    "fsspec": "fsspec+memory://options-test",
}


def make_client(backend: str) -> Any:
    """A real client of the driver the backend runs on, made without connecting."""
    makers: dict[str, Callable[[], Any]] = {
        "postgres": lambda: ConnectionPool(POSTGRES_URL, open=False),
        "redis": lambda: redis.Redis.from_url(REDIS_URL),
        "s3": lambda: boto3.client(
            "s3",
            endpoint_url="http://127.0.0.1:9",
            region_name="us-east-1",
            aws_access_key_id="unused",
            aws_secret_access_key="unused",
        ),
        "fsspec": lambda: fsspec.filesystem("memory"),
    }
    return makers[backend]()


WITH_CLIENT = sorted(name for name, scheme in SCHEMES.items() if scheme.client)


def connection_options(backend: str) -> list[str]:
    return [o.name for o in SCHEMES[backend].options if o.connection]


CASES = [
    *(
        (backend, option, where)
        for backend in WITH_CLIENT
        for option in connection_options(backend)
        for where in ("url", "keyword")
    ),
    *((backend, option, "url") for backend, names in DRIVER_URL.items() for option in names),
    *(
        (backend, option, "keyword")
        for backend, names in DRIVER_KEYWORDS.items()
        for option in names
    ),
]


def with_option(backend: str, option: str, where: str) -> tuple[str, dict[str, Any]]:
    """The backend's URL and keywords carrying ``option`` in the URL or as a keyword."""
    value = EXAMPLES.get(option, DRIVER_VALUES.get(option))
    url = URLS[backend]
    if where == "url":
        return f"{url}?{option}={value}", {}
    return url, {option: value}


def test_every_scheme_with_a_client_keyword_is_covered() -> None:
    assert WITH_CLIENT == ["fsspec", "postgres", "redis", "s3"]
    assert set(WITH_CLIENT) == set(URLS)
    assert {SCHEMES[backend].client for backend in WITH_CLIENT} == {"client", "fs"}
    for backend in WITH_CLIENT:  # a new connection option needs a value to test it with
        assert set(connection_options(backend)) <= set(EXAMPLES), backend


@pytest.mark.parametrize(("backend", "option", "where"), CASES)
def test_a_connection_option_beside_a_client_passed_in_is_refused_by_name(
    backend: str, option: str, where: str
) -> None:
    url, keywords = with_option(backend, option, where)
    passed = make_client(backend)
    keyword = SCHEMES[backend].client
    with pytest.raises(InvalidKeyError) as refused:
        open_store(url, **{keyword: passed}, **keywords)
    message = str(refused.value)
    assert f"{backend} option {option} configures the" in message
    assert f"but {keyword}= passes a" in message


@pytest.mark.parametrize("backend", WITH_CLIENT)
def test_each_refused_option_is_named_once_in_one_error(backend: str) -> None:
    in_url = DRIVER_URL.get(backend, [])
    keywords = {name: EXAMPLES[name] for name in connection_options(backend)}
    keywords |= {name: DRIVER_VALUES[name] for name in DRIVER_KEYWORDS.get(backend, [])}
    query = "&".join(f"{name}={DRIVER_VALUES[name]}" for name in in_url)
    url = f"{URLS[backend]}?{query}" if query else URLS[backend]
    with pytest.raises(InvalidKeyError) as refused:
        open_store(url, **{SCHEMES[backend].client: make_client(backend)}, **keywords)
    named = ", ".join(sorted([*in_url, *keywords]))
    assert f"{backend} options {named} configure the" in str(refused.value)


def test_s3_no_longer_drops_an_endpoint_beside_a_client(s3_server: S3Server) -> None:
    client = s3_server.client()
    bucket = f"options-{uuid.uuid4().hex[:8]}"
    url = f"s3://{bucket}/p?create_bucket=true&endpoint_url=http://elsewhere.invalid:9000"
    with pytest.raises(InvalidKeyError, match=r"s3 option endpoint_url configures the client"):
        open_store(url, client=client)
    with pytest.raises(InvalidKeyError, match=r"s3 option profile configures the client"):
        open_store(f"s3://{bucket}/p?create_bucket=true", client=client, profile="other")
    names = [b["Name"] for b in client.list_buckets().get("Buckets", [])]
    assert bucket not in names  # refused before the store made anything
    client.close()


def test_store_options_beside_an_s3_client_apply(s3_server: S3Server) -> None:
    client = s3_server.client()
    bucket = f"options-{uuid.uuid4().hex[:8]}"
    url = f"s3://{bucket}/p?create_bucket=yes&region=us-east-1"
    try:
        with open_store(url, client=client) as store:
            store.put(checkpoint(), key="k")  # the first use makes the bucket
            assert store.get("k") is not None
        assert client.head_bucket(Bucket=bucket)["ResponseMetadata"]["HTTPStatusCode"] == 200
    finally:
        purge(client, bucket, "")
        client.delete_bucket(Bucket=bucket)
        client.close()


def test_an_fsspec_filesystem_passed_in_is_used_and_its_options_refused() -> None:
    fs = fsspec.filesystem("memory")
    root = f"/options-{uuid.uuid4().hex[:8]}"
    with open_store(f"fsspec+memory://{root}", fs=fs) as store:
        assert store.backend.fs is fs  # type: ignore[attr-defined]
    with pytest.raises(InvalidKeyError, match=r"fsspec option auto_mkdir .* fs= passes a"):
        open_store(f"fsspec+memory://{root}", fs=fs, auto_mkdir=True)


@pytest.mark.parametrize("backend", ["postgres", "redis"])
def test_the_rule_holds_for_an_async_store_too(backend: str) -> None:
    option = connection_options(backend)[0]
    url, _ = with_option(backend, option, "url")

    async def attempt() -> None:
        passed: Any = (
            AsyncConnectionPool(POSTGRES_URL, open=False)
            if backend == "postgres"
            else redis.asyncio.Redis.from_url(REDIS_URL)
        )
        async with open_async_store(url, client=passed) as store:
            await store.get("k")

    with pytest.raises(InvalidKeyError, match=rf"{backend} option {option} configures the"):
        asyncio.run(attempt())


@pytest.mark.parametrize("url", ["memory://", "file"])
def test_a_store_that_makes_no_connection_takes_no_client(url: str, tmp_path: Any) -> None:
    target = url if url == "memory://" else str(tmp_path / "store")
    with pytest.raises(InvalidArgumentError, match=r"store: unknown option 'client'"):
        open_store(target, client=object())
    assert list(tmp_path.iterdir()) == []


def test_every_built_in_backend_reads_its_options_from_the_table() -> None:
    names = {backend_class(scheme).name for scheme in [*registry, "fsspec+memory"]}
    assert names == set(SCHEMES)


@pytest.mark.parametrize("backend", sorted(set(SCHEMES) - {"fsspec"}))  # fsspec's: any
def test_keywords_no_one_takes_are_refused_all_by_name_on_every_scheme(
    backend: str, tmp_path: Any
) -> None:
    url = {
        **URLS,
        "disk": str(tmp_path / "store"),
        "memory": "memory://",
        "sqlite": f"sqlite://{tmp_path / 'store.db'}",
    }[backend]
    with pytest.raises(InvalidArgumentError) as refused:
        open_store(url, prefx="mine", tabel="runs")
    assert "store: unknown options 'prefx', 'tabel' (" in str(refused.value)
    assert list(tmp_path.iterdir()) == []
