"""The Agents SDK session and the ADK service when a write's reply is lost for real: the
server applied the write, then the connection was reset before the reply reached the client (a
TCP fault proxy, ``support/faultproxy.py``). They must find out whether the write landed, and a
caller that retries a failed call must never store an item twice."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
import redis
from psycopg import sql
from support.faultproxy import FaultProxy
from support.postgres_server import unique_schema, with_query
from support.services import POSTGRES_URL, REDIS_URL, service_missing

from agent_checkpoint import CheckpointError, RetryPolicy, open_store
from agent_checkpoint.integrations.adk import AgentCheckpointSessionService
from agent_checkpoint.integrations.openai_agents import AgentCheckpointSession

pytestmark = pytest.mark.filterwarnings("ignore::agent_checkpoint.backends.VolatileRedisWarning")

ONCE = RetryPolicy(attempts=1)  # the store does not retry: the lost reply reaches the session
FIRST = [{"role": "user", "content": "first question"}]
BATCH = [
    {"role": "user", "content": "second question"},
    {"type": "function_call_output", "call_id": "c1", "output": "the tool's answer"},
    {"role": "assistant", "content": "second answer"},
]


def through(url: str, proxy: FaultProxy) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[0]
    netloc = f"{netloc}@" if netloc else ""
    return parts._replace(netloc=f"{netloc}127.0.0.1:{proxy.port}").geturl()


@contextmanager
def redis_store() -> Iterator[tuple[str, str, FaultProxy]]:
    """A Redis store's URL, direct and through a fault proxy."""
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.RedisError as exc:
        service_missing("redis", f"{REDIS_URL}: {exc}")
    prefix = f"lost-{uuid.uuid4().hex[:12]}"
    url = with_query(REDIS_URL, prefix=prefix)
    target = client.connection_pool.connection_kwargs
    proxy = FaultProxy(target["host"], target["port"])
    try:
        yield url, through(url, proxy), proxy
    finally:
        proxy.close()
        keys = list(client.scan_iter(match="{" + prefix + "}*", count=1000))
        if keys:
            client.delete(*keys)
        client.close()


@contextmanager
def postgres_store() -> Iterator[tuple[str, str, FaultProxy]]:
    try:
        psycopg.connect(POSTGRES_URL, connect_timeout=3).close()
    except psycopg.Error as exc:
        service_missing("postgres", f"{POSTGRES_URL}: {exc}")
    schema = unique_schema("lost")
    url = with_query(POSTGRES_URL, schema=schema)
    with open_store(url) as store:
        store.setup()
    parts = urlsplit(POSTGRES_URL)
    proxy = FaultProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    try:
        yield url, through(url, proxy), proxy
    finally:
        proxy.close()
        with suppress(psycopg.Error), psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


STORES = {"redis": redis_store, "postgres": postgres_store}


def add_with_retries(
    direct: str, proxied: str, proxy: FaultProxy, passed: int, lost: int
) -> tuple[list[str], list[str]]:
    """A caller adds ``FIRST``, then ``BATCH`` with the proxy losing ``lost`` replies after
    ``passed`` others, retrying a failed call as callers do. Returns the stored items' texts
    (read through another session, straight from the server) and the errors the caller saw."""
    session_id = f"s-{uuid.uuid4().hex[:8]}"

    async def scenario() -> tuple[list[str], list[str]]:
        errors: list[str] = []
        async with AgentCheckpointSession(session_id, proxied, retry=ONCE) as session:
            await session.add_items(FIRST)  # type: ignore[arg-type]
            proxy.passed_replies, proxy.lost_replies = passed, lost
            for _ in range(6):
                try:
                    await session.add_items(BATCH)  # type: ignore[arg-type]
                    break
                except CheckpointError as exc:
                    errors.append(type(exc).__name__)
            proxy.heal()
        async with AgentCheckpointSession(session_id, direct) as reader:
            items = await reader.get_items()
        texts = [str(item.get("content", item.get("output"))) for item in items]
        return texts, errors

    return asyncio.run(asyncio.wait_for(scenario(), 120))


STORED_ONCE = ["first question", "second question", "the tool's answer", "second answer"]


@pytest.mark.parametrize("backend", ["redis", "postgres"])
def test_a_write_whose_reply_was_lost_is_resolved_before_it_is_reported(backend: str) -> None:
    """The write's reply is lost wherever in the call it falls (the request before the commit,
    or the commit itself, whose write landed); the session reads back whether its items
    landed: the call returns, with every item stored once."""
    with STORES[backend]() as (direct, proxied, proxy):
        for passed in range(6):
            texts, errors = add_with_retries(direct, proxied, proxy, passed, lost=1)
            assert texts == STORED_ONCE, passed
            assert errors == [], passed


@pytest.mark.parametrize("backend", ["redis", "postgres"])
def test_a_caller_retrying_a_call_whose_outcome_was_unknown_stores_no_item_twice(
    backend: str,
) -> None:
    """The reply is lost, and so is the reply of the read that would have settled it: the
    call reports the fault. The caller retries with the same items, which landed: they are not
    stored again."""
    with STORES[backend]() as (direct, proxied, proxy):
        for passed in range(4):
            texts, errors = add_with_retries(direct, proxied, proxy, passed, lost=2)
            assert texts == STORED_ONCE, (passed, errors)


def said(text: str) -> Any:
    from google.adk.events import Event
    from google.genai import types

    return Event(
        invocation_id="inv",
        author="user",
        content=types.Content(role="user", parts=[types.Part(text=text)]),
    )


def append_with_retries(
    direct: str, proxied: str, proxy: FaultProxy, passed: int
) -> tuple[list[str], list[str]]:
    """An ADK caller appends "first", then "second" with one reply lost after ``passed``
    others (retrying a failed call), then "third" on the same session object. Returns the
    stored events' texts and the errors the caller saw."""

    async def scenario() -> tuple[list[str], list[str]]:
        errors: list[str] = []
        service = AgentCheckpointSessionService(proxied, retry=ONCE)
        session = await service.create_session(app_name="app", user_id="u")
        await service.append_event(session, said("first"))
        proxy.passed_replies, proxy.lost_replies = passed, 1
        for _ in range(6):
            try:
                await service.append_event(session, said("second"))
                break
            except Exception as exc:
                errors.append(type(exc).__name__)
        proxy.heal()
        await service.append_event(session, said("third"))
        await service.close()
        reader = AgentCheckpointSessionService(direct)
        got = await reader.get_session(app_name="app", user_id="u", session_id=session.id)
        await reader.close()
        assert got is not None
        texts = [str(e.content.parts[0].text) for e in got.events if e.content and e.content.parts]
        return texts, errors

    return asyncio.run(asyncio.wait_for(scenario(), 120))


@pytest.mark.parametrize("backend", ["redis", "postgres"])
def test_an_adk_event_whose_reply_was_lost_is_stored_once_and_the_session_goes_on(
    backend: str,
) -> None:
    """Wherever in the append the reply is lost: an append that landed returns (the record
    names its write), one that did not raises and its retry lands; either way the event is
    stored once and the session object appends the next one without a StaleSessionError."""
    with STORES[backend]() as (direct, proxied, proxy):
        for passed in range(6):
            texts, errors = append_with_retries(direct, proxied, proxy, passed)
            assert texts == ["first", "second", "third"], (passed, errors)
            assert "StaleSessionError" not in errors, passed
