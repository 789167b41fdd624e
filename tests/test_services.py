"""Stores inside an agent service: a store or session object per request, opened from a URL
and rarely closed, used from several event loops and threads at once. The process holds one
pool per URL whatever it opens, every loop can use every object, and the process exits
whatever it leaves open."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from agents import Runner
from google.adk.agents import LlmAgent
from google.adk.runners import Runner as AdkRunner
from google.genai import types
from support import adk_agent
from support.agents_sdk import ScriptedModel, agent, one_turn
from support.postgres_server import unique_schema, with_query
from support.processes import TESTS
from support.services import POSTGRES_URL, REDIS_URL, service_missing
from support.store_urls import url_for_processes

from agent_checkpoint import AsyncStore, Message, RunCheckpoint, open_async_store, open_store
from agent_checkpoint.integrations.adk import AgentCheckpointSessionService
from agent_checkpoint.integrations.openai_agents import AgentCheckpointSession

pytestmark = pytest.mark.filterwarnings("ignore::agent_checkpoint.backends.VolatileRedisWarning")

BACKENDS = ["memory", "disk", "fsspec", "redis", "postgres", "s3"]


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "fsspec":
        yield f"fsspec+memory:///agent-checkpoint-services/{uuid.uuid4().hex}"
        return
    with url_for_processes(request.param, request, tmp_path) as opened:
        yield opened


def item(key: str) -> RunCheckpoint:
    return RunCheckpoint.new("task", (Message("user", key),), run_id=key)


def in_threads(threads: int, work: Callable[[int], None]) -> None:
    """``work(n)`` in ``threads`` threads started at once; their errors are raised here."""
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def thread(n: int) -> None:
        start.wait()
        try:
            work(n)
        except BaseException as exc:
            errors.append(exc)

    running = [threading.Thread(target=thread, args=(n,)) for n in range(threads)]
    for each in running:
        each.start()
    for each in running:
        each.join()
    if errors:
        raise errors[0]


def on_loops(threads: int, work: Callable[[int], Coroutine[Any, Any, None]]) -> None:
    """``work(n)`` in ``threads`` threads at once, each on an event loop of its own
    (``asyncio.run``), as the frameworks' sync wrappers run; their errors are raised here."""
    in_threads(threads, lambda n: asyncio.run(work(n)))


# -- one pool per process ------------------------------------------------------------------


def postgres_connections(application: str) -> int:
    try:
        conn = psycopg.connect(POSTGRES_URL, autocommit=True)
    except psycopg.OperationalError as exc:
        service_missing("postgres", str(exc))
    with conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (application,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def redis_connections(name: str) -> int:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        clients = client.client_list()
    except redis.RedisError as exc:
        service_missing("redis", str(exc))
    finally:
        client.close()
    return sum(1 for each in clients if each.get("name") == name)


@pytest.fixture
def postgres_url() -> Iterator[tuple[str, str]]:
    """A PostgreSQL store URL whose connections carry an application name of their own."""
    application, schema = f"ac-pool-{uuid.uuid4().hex[:10]}", unique_schema()
    url = with_query(POSTGRES_URL, schema=schema, application_name=application, max_size=4)
    postgres_connections(application)  # skips when the server is missing
    with open_store(url) as store:
        store.setup()
    yield url, application
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def a_thousand_requests(url: str) -> None:
    """One session per simulated request, each from the URL: most dropped unclosed, some
    kept open, some closed, on loops of their own."""
    kept: list[AgentCheckpointSession] = []

    async def request(n: int) -> None:
        session = AgentCheckpointSession(f"user-{n % 7}", url)
        await session.get_items(limit=1)
        if n % 10 == 0:
            await session.close()
        elif n % 10 == 1:
            kept.append(session)  # never closed, still referenced

    for n in range(1000):
        asyncio.run(request(n))
    for n in range(100):  # sync stores too, from the same URL
        store = open_store(url)
        store.head("nothing")
        if n % 2:
            store.close()
    assert len(kept) == 100


def test_a_thousand_sessions_from_one_postgres_url_hold_one_pool_of_connections(
    postgres_url: tuple[str, str],
) -> None:
    url, application = postgres_url
    a_thousand_requests(url)
    # one pool for the async sessions and one for the sync stores, each of max_size=4
    assert 0 < postgres_connections(application) <= 2 * 4


def test_a_thousand_sessions_from_one_redis_url_hold_one_pool_of_connections() -> None:
    name = f"ac-pool-{uuid.uuid4().hex[:10]}"
    prefix = f"pool-{uuid.uuid4().hex[:10]}"
    url = f"{REDIS_URL}?client_name={name}&prefix={prefix}&max_connections=4"
    redis_connections(name)  # skips when the server is missing
    a_thousand_requests(url)
    assert 0 < redis_connections(name) <= 2 * 4


def test_a_store_dropped_without_close_gives_its_connections_back(
    postgres_url: tuple[str, str],
) -> None:
    url, application = postgres_url

    async def use() -> None:
        await open_async_store(url).head("nothing")

    asyncio.run(use())
    store = open_store(url)
    store.head("nothing")
    assert postgres_connections(application) > 0
    del store
    gc.collect()  # the async store's Store sits in a reference cycle
    deadline = time.monotonic() + 60  # closing runs in the background; this bounds a hang
    while postgres_connections(application) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert postgres_connections(application) == 0


def test_stores_opened_alike_share_one_backend_and_closing_one_leaves_the_other_open(
    tmp_path: Path,
) -> None:
    first = open_store(tmp_path / "store")
    second = open_store(tmp_path / "store", compress="zlib")  # a Store option: still shared
    assert first.backend is second.backend
    first.close()
    second.put(item("after"))  # the backend is still open for the second store
    assert second.get("after") is not None
    second.close()
    assert second.backend.closed


def test_a_process_opening_many_distinct_pools_is_told_how_to_share_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agent_checkpoint import _shared

    monkeypatch.setattr(_shared, "_warned", False)
    gc.collect()  # stores earlier tests dropped give their pools back now
    stores = []
    with caplog.at_level(logging.WARNING, logger="agent_checkpoint"):
        for n in range(_shared.POOL_WARNING - _shared.live()):
            stores.append(open_store(tmp_path / f"store-{n}"))
        assert not [r for r in caplog.records if "store backends" in r.getMessage()]
        stores.append(open_store(tmp_path / "one-too-many"))
    warned = [r.getMessage() for r in caplog.records if "store backends" in r.getMessage()]
    assert len(warned) == 1 and "same URL" in warned[0] and "Store" in warned[0]
    for store in stores:
        store.close()


# -- any loop, any thread --------------------------------------------------------------------


def test_sixteen_threads_each_on_its_own_loop_add_items_to_one_session(url: str) -> None:
    session = AgentCheckpointSession(f"s-{uuid.uuid4().hex[:8]}", url)

    async def add(thread: int) -> None:
        for n in range(50):
            await session.add_items([{"role": "user", "content": f"t{thread}-{n}"}])

    on_loops(16, add)

    async def read() -> list[Any]:
        return await session.get_items()

    stored = [each["content"] for each in asyncio.run(read())]
    expected = {f"t{thread}-{n}" for thread in range(16) for n in range(50)}
    assert len(stored) == 800 and set(stored) == expected  # each once
    for thread in range(16):  # a thread's items in the order it added them
        mine = [each for each in stored if each.startswith(f"t{thread}-")]
        assert mine == [f"t{thread}-{n}" for n in range(50)]


def test_sixteen_threads_each_on_its_own_loop_put_to_one_async_store(url: str) -> None:
    store: AsyncStore = open_async_store(url)
    if url.startswith("memory:"):
        store = AsyncStore.over(open_store(url))  # every memory:// opening is a new store

    async def put(thread: int) -> None:
        for n in range(50):
            await store.put(item(f"k-{thread}-{n}"))

    on_loops(16, put)

    async def read() -> list[str]:
        keys = [summary.key async for summary in store.iter_summaries()]
        await store.close()
        return keys

    keys = asyncio.run(read())
    assert sorted(keys) == sorted(f"k-{t}-{n}" for t in range(16) for n in range(50))


def test_the_sdk_runner_run_sync_in_a_worker_thread_continues_a_session_used_on_the_main_loop(
    url: str,
) -> None:
    session = AgentCheckpointSession(f"s-{uuid.uuid4().hex[:8]}", url)
    asyncio.run(one_turn(session, "What is the weather in Paris?"))
    outcome: dict[str, Any] = {}

    def worker() -> None:
        try:
            model = ScriptedModel()
            outcome["output"] = Runner.run_sync(agent(model), "And in Rome?", session=session)
            outcome["input"] = model.inputs[0]
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert "error" not in outcome, outcome.get("error")
    assert outcome["output"].final_output.endswith("You asked about Paris, Rome")
    assert outcome["input"][0]["content"] == "What is the weather in Paris?"

    async def stored() -> list[Any]:
        return await session.get_items()

    users = [each["content"] for each in asyncio.run(stored()) if each.get("role") == "user"]
    assert users == ["What is the weather in Paris?", "And in Rome?"]


def test_adks_sync_runner_run_from_eight_threads_stores_every_run_once(url: str) -> None:
    """One ADK service from the URL, its sessions made on the main loop, then eight threads at
    once each driving ADK's sync ``Runner.run`` (its own thread and loop inside) on a session
    of its own: every run's four events are stored, each once, in order."""
    service = AgentCheckpointSessionService(url)
    cities = list(adk_agent.WEATHER)
    ids = [f"s-{uuid.uuid4().hex[:8]}-{n}" for n in range(8)]

    async def create() -> None:
        for session_id in ids:
            await service.create_session(
                app_name=adk_agent.APP, user_id=adk_agent.USER, session_id=session_id
            )

    asyncio.run(create())
    answers: dict[int, str] = {}

    def run(n: int) -> None:
        model = adk_agent.ScriptedModel()
        forecaster = LlmAgent(
            name="forecaster", model=model, instruction="Answer.", tools=[adk_agent.weather]
        )
        runner = AdkRunner(agent=forecaster, app_name=adk_agent.APP, session_service=service)
        city = cities[n % len(cities)]
        question = types.Content(role="user", parts=[types.Part(text=f"Weather in {city}?")])
        for event in runner.run(user_id=adk_agent.USER, session_id=ids[n], new_message=question):
            if event.is_final_response() and event.content and event.content.parts:
                answers[n] = "".join(p.text or "" for p in event.content.parts)

    in_threads(8, run)

    async def stored() -> list[Any]:
        found = [
            await service.get_session(
                app_name=adk_agent.APP, user_id=adk_agent.USER, session_id=session_id
            )
            for session_id in ids
        ]
        await service.close()
        return found

    for n, session in enumerate(asyncio.run(stored())):
        city = cities[n % len(cities)]
        assert answers[n] == f"{city} is {adk_agent.WEATHER[city]}. You asked about {city}"
        assert session is not None
        events = session.events
        assert len({event.id for event in events}) == len(events) == 4  # each once
        parts = [
            event.content.parts[0] for event in events if event.content and event.content.parts
        ]
        assert [p.text for p in parts[::3]] == [f"Weather in {city}?", answers[n]]
        assert parts[1].function_call is not None and parts[1].function_call.args == {"city": city}
        assert parts[2].function_response is not None


# -- exit -----------------------------------------------------------------------------------


def test_a_process_that_leaves_its_stores_open_exits() -> None:
    prefix = f"leave-{uuid.uuid4().hex[:10]}"
    schema = unique_schema()
    pg = with_query(POSTGRES_URL, schema=schema)
    postgres_connections("nobody")  # skips when a server is missing
    redis_connections("nobody")
    with open_store(pg) as store:
        store.setup()
    try:
        for _ in range(6):
            done = subprocess.run(
                [sys.executable, "-m", "support.leave_open", pg, f"{REDIS_URL}?prefix={prefix}"],
                env=_environment(),
                capture_output=True,
                text=True,
                timeout=120,  # a hang fails here
            )
            assert done.returncode == 0, done.stderr
            assert done.stdout.strip().endswith("done")
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        client = redis.Redis.from_url(REDIS_URL)
        keys = list(client.scan_iter(match="{" + prefix + "}*", count=1000))
        if keys:
            client.delete(*keys)
        client.close()


def _environment() -> dict[str, str]:
    """This one's, with the tests folder and this interpreter's path importable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), *sys.path])
    return env
