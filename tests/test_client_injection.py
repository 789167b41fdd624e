"""A client the caller owns, passed through ``open_store(url, client=...)``: a redis client, a
psycopg pool, a boto3 client, each on its real server. The store works on it, closing the
store leaves it open, and connection options that could not reach it are refused."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import redis
from psycopg import sql
from psycopg_pool import ConnectionPool
from support.postgres_server import unique_schema
from support.seaweed import S3Server, purge
from support.services import POSTGRES_URL, REDIS_URL, service_missing

from agent_checkpoint import InvalidKeyError, Store, open_store
from agent_checkpoint.testing import checkpoint


def works_and_leaves_the_client_open(store: Store, still_open: Any) -> None:
    with store:
        store.setup()
        store.put(checkpoint("r1", text="injected"), key="k")
        got = store.get("k")
        assert got is not None and got.history[0].content == "injected 0"
        assert [s.key for s in store.list()] == ["k"]
        store.delete("k")
    still_open()  # the store closed; the caller's client did not


# -- redis -----------------------------------------------------------------------------------


@pytest.fixture
def redis_client() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.RedisError as exc:
        service_missing("redis", str(exc))
    yield client
    client.close()


def test_a_redis_client_passed_in_is_used_with_the_urls_store_options(
    redis_client: redis.Redis,
) -> None:
    prefix = f"inject-{uuid.uuid4().hex[:8]}"
    store = open_store(f"redis://?prefix={prefix}", client=redis_client)
    works_and_leaves_the_client_open(store, redis_client.ping)
    assert store.backend.prefix == prefix  # type: ignore[attr-defined]


def test_connection_options_beside_a_redis_client_are_refused(
    redis_client: redis.Redis,
) -> None:
    with pytest.raises(InvalidKeyError, match=r"socket_timeout.*client="):
        open_store("redis://h:6379/0?prefix=p&socket_timeout=3", client=redis_client)


# -- postgres --------------------------------------------------------------------------------


@pytest.fixture
def pool() -> Iterator[ConnectionPool[Any]]:
    try:
        psycopg.connect(POSTGRES_URL, connect_timeout=3).close()
    except psycopg.Error as exc:
        service_missing("postgres", str(exc))
    made: ConnectionPool[Any] = ConnectionPool(
        POSTGRES_URL, kwargs={"autocommit": True}, min_size=1, max_size=2, open=True
    )
    yield made
    made.close()


def test_a_psycopg_pool_passed_in_is_used_with_the_urls_schema(
    pool: ConnectionPool[Any],
) -> None:
    schema = unique_schema("ac_inject")
    store = open_store(f"postgresql://?schema={schema}", client=pool)
    try:
        works_and_leaves_the_client_open(store, lambda: pool.connection().__enter__())
        with pool.connection() as conn:
            found = conn.execute(
                "SELECT 1 FROM information_schema.tables WHERE table_schema = %s", (schema,)
            ).fetchone()
        assert found is not None  # the store's table lives where the URL said
    finally:
        with pool.connection() as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def test_pool_options_beside_a_psycopg_pool_are_refused(pool: ConnectionPool[Any]) -> None:
    with pytest.raises(InvalidKeyError, match=r"max_size.*client="):
        open_store("postgresql://?schema=s&max_size=3", client=pool)


# -- s3 --------------------------------------------------------------------------------------


def test_a_boto3_client_passed_in_is_used(s3_server: S3Server) -> None:
    client = s3_server.client()
    bucket = f"inject-{uuid.uuid4().hex[:8]}"
    client.create_bucket(Bucket=bucket)
    try:
        store = open_store(f"s3://{bucket}/p", client=client)
        works_and_leaves_the_client_open(store, lambda: client.head_bucket(Bucket=bucket))
    finally:
        purge(client, bucket, "")
        client.delete_bucket(Bucket=bucket)
        client.close()
