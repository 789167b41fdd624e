"""``AsyncStore`` on every backend, each on its real server: the shipped suites run unchanged
through ``BlockingStore``, and what only an async store can get wrong (the event loop, tasks,
cancellation) is tested here with real tasks."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import suppress
from typing import Any

import psycopg
import pytest
import redis
from psycopg import sql
from support.postgres_server import unique_schema, with_query
from support.services import POSTGRES_URL, REDIS_URL, service_missing

from agent_checkpoint._async_store import open_async_store
from agent_checkpoint.testing import (
    ClaimsConformance,
    EncryptionConformance,
    StoreConformance,
)
from agent_checkpoint.testing._async import BlockingStore

pytestmark = pytest.mark.filterwarnings("ignore::agent_checkpoint.backends.VolatileRedisWarning")

BACKENDS = ["memory", "disk", "redis", "postgres", "s3", "fsspec"]
BUCKET = "agent-checkpoint-async-tests"


@pytest.fixture(params=BACKENDS)
def backend_url(
    request: pytest.FixtureRequest, tmp_path: Any
) -> Iterator[tuple[str, dict[str, Any]]]:
    """A URL (and ``open_async_store`` options) of an empty store on each backend's server;
    what it held is removed afterwards."""
    name: str = request.param
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
        yield REDIS_URL, {"prefix": prefix}
        keys = list(client.scan_iter(match="{" + prefix + "}*", count=1000))
        if keys:
            client.delete(*keys)
        client.close()
    elif name == "postgres":
        schema = unique_schema()
        yield with_query(POSTGRES_URL, schema=schema), {}
        with suppress(psycopg.Error), psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    else:
        server = request.getfixturevalue("s3_server")
        from support.seaweed import ensure_bucket, purge

        client = server.client()
        ensure_bucket(client, BUCKET)
        prefix = f"a-{uuid.uuid4().hex[:12]}"
        yield f"s3://{BUCKET}/{prefix}", {"client": client}
        purge(client, BUCKET, prefix + "/")


class TestAsyncStore(StoreConformance, ClaimsConformance, EncryptionConformance):
    """The shipped suites against ``AsyncStore`` on each backend."""

    @pytest.fixture
    def store(self, backend_url: tuple[str, dict[str, Any]]) -> Iterator[Any]:
        url, options = backend_url
        with BlockingStore(open_async_store(url, **options)) as store:
            store.setup()
            yield store
