"""An empty store on each backend, named by URL (and ``open_store`` options), on the suite's
servers; what it held is removed afterwards. Shared by the async store's tests."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import psycopg
import pytest
import redis
from psycopg import sql

from support.postgres_server import unique_schema, with_query
from support.services import POSTGRES_URL, REDIS_URL, service_missing

BUCKET = "agent-checkpoint-async-tests"


@contextmanager
def store_url(
    name: str, request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[str, dict[str, Any]]]:
    if name == "memory":
        yield "memory://", {}
    elif name == "disk":
        yield str(tmp_path / "store"), {}
    elif name == "fsspec":
        yield f"fsspec+memory:///agent-checkpoint-async/{uuid.uuid4().hex}", {}
    elif name == "redis":
        client = redis.Redis.from_url(REDIS_URL)
        try:
            client.ping()
        except redis.RedisError as exc:
            service_missing("redis", f"{REDIS_URL}: {exc}")
        prefix = f"async-{uuid.uuid4().hex[:12]}"
        try:
            yield REDIS_URL, {"prefix": prefix}
        finally:
            keys = list(client.scan_iter(match="{" + prefix + "}*", count=1000))
            if keys:
                client.delete(*keys)
            client.close()
    elif name == "postgres":
        schema = unique_schema()
        try:
            yield with_query(POSTGRES_URL, schema=schema), {}
        finally:
            with suppress(psycopg.Error), psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
                drop = sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
                conn.execute(drop)
    elif name == "s3":
        server = request.getfixturevalue("s3_server")
        from support.seaweed import ensure_bucket, purge

        client = server.client()
        ensure_bucket(client, BUCKET)
        prefix = f"a-{uuid.uuid4().hex[:12]}"
        try:
            yield f"s3://{BUCKET}/{prefix}", {"client": client}
        finally:
            purge(client, BUCKET, prefix + "/")
    else:
        raise ValueError(name)


@contextmanager
def url_for_processes(name: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty store on backend ``name``'s real server as one URL that another process can
    open too (PostgreSQL set up; S3 credentials in the environment, where any AWS client
    looks, and a bucket of its own, removed afterwards)."""
    if name != "s3":
        with store_url(name, request, tmp_path) as (url, options):
            if options:  # Redis: the store's prefix
                url = f"{url}?{urlencode(options)}"
            if name == "postgres":
                from agent_checkpoint import open_store

                with open_store(url) as store:
                    store.setup()
            yield url
        return
    from support.seaweed import ACCESS_KEY, REGION, SECRET_KEY

    server = request.getfixturevalue("s3_server")
    patch = pytest.MonkeyPatch()
    patch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    patch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    bucket = f"p-{uuid.uuid4().hex[:12]}"
    endpoint = server.endpoint_url
    try:
        yield f"s3://{bucket}/store?endpoint_url={endpoint}&region={REGION}&create_bucket=true"
    finally:
        patch.undo()
        client = server.client()
        with suppress(Exception):
            client.delete_bucket(Bucket=bucket)  # SeaweedFS drops a non-empty bucket whole
        client.close()
