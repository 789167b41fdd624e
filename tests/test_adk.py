"""The Google ADK session service (``agent_checkpoint.integrations.adk``) on every backend's
real server: ADK's own ``Runner`` (a scripted model, no network) continuing a conversation in
another process, stale writers refused with ADK's error, concurrent writers that lose no
event, the newest events read without the rest, sessions listed a page at a time, and bad
input refused by name. The session-service contract ADK promises is pinned, in our own
tests, in tests/test_adk_contract.py."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.adk.errors import StaleSessionError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events import Event, EventActions
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types
from support.adk_agent import APP, USER, one_turn
from support.processes import turn_in_a_process_of_its_own
from support.store_urls import url_for_processes as backend_url

from agent_checkpoint import (
    AsyncStore,
    InvalidArgumentError,
    Message,
    RunCheckpoint,
    Store,
    ToolCall,
    open_async_store,
    open_store,
)
from agent_checkpoint.integrations.adk import (
    AgentCheckpointSessionService,
    list_session_page,
    register_session_schemes,
)

BACKENDS = ["memory", "disk", "redis", "postgres", "s3"]
NETWORK = ["redis", "postgres", "s3"]


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with backend_url(request.param, request, tmp_path) as opened:
        yield opened


@pytest.fixture(params=NETWORK)
def network_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with backend_url(request.param, request, tmp_path) as opened:
        yield opened


def sid() -> str:
    return f"s-{uuid.uuid4().hex[:8]}"


def said(text: str, timestamp: float | None = None, **delta: Any) -> Event:
    extra: dict[str, Any] = {} if timestamp is None else {"timestamp": timestamp}
    return Event(
        invocation_id="inv",
        author="user",
        content=types.Content(role="user", parts=[types.Part(text=text)]),
        actions=EventActions(state_delta=delta),
        **extra,
    )


def two_stores(url: str) -> tuple[list[Any], list[Any]]:
    """Two services on one store, each on a store of its own, as two processes would have
    them (on memory://, where each opening is a store of its own, one ``Store``)."""
    if url.startswith("memory:"):
        store = open_store(url)
        stores: list[Any] = [store, store]
    else:
        stores = [open_async_store(url), open_async_store(url)]
    return [AgentCheckpointSessionService(store) for store in stores], stores


async def closing(stores: list[Any]) -> None:
    for store in stores:
        if isinstance(store, AsyncStore):
            await store.close()


# -- a conversation through ADK's Runner, continued by another process --------------------------


def first_turn_in_a_process_of_its_own(url: str, session_id: str, question: str) -> str:
    return turn_in_a_process_of_its_own("adk_agent", url, session_id, question)


def test_a_conversation_continues_after_the_process_that_began_it_ended(url: str) -> None:
    session_id = sid()
    store: Store | str = url
    if url.startswith("memory:"):  # one process: two services on one store stand for two
        store = open_store(url)
        first = asyncio.run(
            one_turn(
                AgentCheckpointSessionService(store), session_id, "What is the weather in Paris?"
            )
        )["output"]
    else:
        first = first_turn_in_a_process_of_its_own(url, session_id, "What is the weather in Paris?")
    assert first == "Paris is sunny. You asked about Paris"

    async def second_turn() -> dict[str, Any]:
        async with AgentCheckpointSessionService(store) as service:
            return await one_turn(service, session_id, "And in Rome?")

    turn = asyncio.run(second_turn())
    # the model was given the first turn, as the first process stored it, then the question
    assert turn["input"] == [
        ["user", "What is the weather in Paris?", None, None],
        ["model", None, "weather", None],
        ["user", None, None, {"result": "sunny"}],
        ["model", "Paris is sunny. You asked about Paris", None, None],
        ["user", "And in Rome?", None, None],
    ]
    assert turn["output"] == "Rome is rainy. You asked about Paris, Rome"
    # and any tool of this library reads the conversation as messages
    with open_store(url) if isinstance(store, str) else store as reader:
        stored = reader.get(f"adk/{APP}/{USER}/{session_id}")
        assert stored is not None
        assert [(m.role, m.content) for m in stored.history] == [
            ("user", "What is the weather in Paris?"),
            ("assistant", ""),
            ("tool", '{"result":"sunny"}'),
            ("assistant", "Paris is sunny. You asked about Paris"),
            ("user", "And in Rome?"),
            ("assistant", ""),
            ("tool", '{"result":"rainy"}'),
            ("assistant", "Rome is rainy. You asked about Paris, Rome"),
        ]
        assert stored.history[1].tool_calls == (ToolCall("call-1", "weather", {"city": "Paris"}),)
        assert stored.history[2].tool_call_id == "call-1"
        assert stored.identity is not None and stored.identity.principal == USER


# -- concurrency ------------------------------------------------------------------------------


def test_a_stale_session_is_refused_with_adks_error_and_nothing_is_written(
    network_url: str,
) -> None:
    async def run() -> tuple[list[Any], Any]:
        services, stores = two_stores(network_url)
        try:
            created = await services[0].create_session(app_name=APP, user_id=USER)
            ids = {"app_name": APP, "user_id": USER, "session_id": created.id}
            readers = [await services[i % 2].get_session(**ids) for i in range(8)]
            # eight writers, each holding the session as it was: one lands, seven are stale
            outcomes = await asyncio.gather(
                *(
                    services[i % 2].append_event(reader, said(f"from {i}", **{f"k{i}": i}))
                    for i, reader in enumerate(readers)
                ),
                return_exceptions=True,
            )
            return outcomes, await services[1].get_session(**ids)
        finally:
            await closing(stores)

    outcomes, final = asyncio.run(run())
    stale = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(stale) == 7 and all(isinstance(e, StaleSessionError) for e in stale)
    assert "modified in storage" in str(stale[0])
    landed = [o for o in outcomes if isinstance(o, Event)]
    assert len(landed) == 1
    assert [e.id for e in final.events] == [landed[0].id]  # the stale ones wrote nothing
    assert [k for k in final.state if k.startswith("k")] == list(landed[0].actions.state_delta)


def test_concurrent_appends_through_fresh_reads_lose_no_event(network_url: str) -> None:
    async def run() -> Any:
        services, stores = two_stores(network_url)
        try:
            created = await services[0].create_session(app_name=APP, user_id=USER)
            ids = {"app_name": APP, "user_id": USER, "session_id": created.id}

            async def writer(i: int) -> None:
                service = services[i % 2]
                while True:  # what ADK asks of a stale writer: read the session again
                    session = await service.get_session(
                        **ids, config=GetSessionConfig(num_recent_events=1)
                    )
                    try:
                        await service.append_event(session, said(f"event {i}"))
                        return
                    except StaleSessionError:
                        continue

            await asyncio.gather(*(writer(i) for i in range(30)))
            return await services[1].get_session(**ids)
        finally:
            await closing(stores)

    final = asyncio.run(run())
    texts = [e.content.parts[0].text for e in final.events]
    assert sorted(texts) == sorted(f"event {i}" for i in range(30))  # each once


def test_appends_on_one_fresh_session_object_all_land_in_order(tmp_path: Path) -> None:
    """As ADK's database service does it: appends through one session object run one at a
    time, each on what the one before stored."""
    service = AgentCheckpointSessionService(str(tmp_path / "store"))

    async def run() -> tuple[Any, Any]:
        session = await service.create_session(app_name=APP, user_id=USER)
        await asyncio.gather(*(service.append_event(session, said(str(i))) for i in range(20)))
        ids = {"app_name": APP, "user_id": USER, "session_id": session.id}
        return session, await service.get_session(**ids)

    session, stored = asyncio.run(run())
    assert [e.content.parts[0].text for e in stored.events] == [str(i) for i in range(20)]
    assert stored == session


# -- reading the newest events ------------------------------------------------------------------


@pytest.fixture(scope="module")
def five_events() -> Iterator[tuple[AgentCheckpointSessionService, str]]:
    store = open_store("memory://")
    service = AgentCheckpointSessionService(store)

    async def seed() -> str:
        session = await service.create_session(app_name=APP, user_id=USER, session_id="five")
        for t in (1.0, 2.0, 3.0, 3.0, 5.0):
            await service.append_event(session, said(f"at {t}", timestamp=t))
        return session.id

    yield service, asyncio.run(seed())


@pytest.mark.parametrize(
    ("recent", "after", "expected"),
    [
        (None, None, [1.0, 2.0, 3.0, 3.0, 5.0]),
        (0, None, []),
        (1, None, [5.0]),
        (5, None, [1.0, 2.0, 3.0, 3.0, 5.0]),
        (9, None, [1.0, 2.0, 3.0, 3.0, 5.0]),
        (None, 3.0, [3.0, 3.0, 5.0]),  # at the timestamp counts: both events of 3.0
        (None, 2.5, [3.0, 3.0, 5.0]),
        (None, 0.0, [1.0, 2.0, 3.0, 3.0, 5.0]),
        (None, 5.0, [5.0]),
        (None, 5.5, []),
        (2, 2.0, [3.0, 5.0]),  # of the two newest, those at or after 2.0
        (4, 3.0, [3.0, 3.0, 5.0]),
        (0, 0.0, []),
    ],
)
def test_get_session_filters_at_the_boundaries(
    five_events: tuple[AgentCheckpointSessionService, str],
    recent: int | None,
    after: float | None,
    expected: list[float],
) -> None:
    service, session_id = five_events
    config = GetSessionConfig(num_recent_events=recent, after_timestamp=after)
    session = asyncio.run(
        service.get_session(app_name=APP, user_id=USER, session_id=session_id, config=config)
    )
    assert session is not None and [e.timestamp for e in session.events] == expected


def test_the_newest_events_are_read_without_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    """``num_recent_events=k`` reads about what k events alone are, however long the session
    (the store's ``get_json(key, last=k)``); appends write their events, not the session."""
    from agent_checkpoint.backends._memory import MemoryBackend

    read: list[int] = []
    written: list[int] = []
    load, save = MemoryBackend.load, MemoryBackend.save

    def loading(self: MemoryBackend, key: str) -> Any:
        found = load(self, key)
        read.append(0 if found is None else len(found.body))
        return found

    def saving(self: MemoryBackend, record: Any, **kwargs: Any) -> Any:
        written.append(len(record.body))
        return save(self, record, **kwargs)

    monkeypatch.setattr(MemoryBackend, "load", loading)
    monkeypatch.setattr(MemoryBackend, "save", saving)
    service = AgentCheckpointSessionService(open_store("memory://"))
    steps: list[int] = []

    async def run() -> Any:
        session = await service.create_session(app_name=APP, user_id=USER, session_id="long")
        for i in range(400):
            before = sum(written)
            await service.append_event(session, said(f"event {i} " + "x" * 1000))
            steps.append(sum(written) - before)
        read.clear()
        config = GetSessionConfig(num_recent_events=3)
        return await service.get_session(
            app_name=APP, user_id=USER, session_id="long", config=config
        )

    newest = asyncio.run(run())
    assert [e.content.parts[0].text[:9] for e in newest.events] == [
        "event 397",
        "event 398",
        "event 399",
    ]
    assert sum(read) < 100_000  # the session holds 400 KB
    # each append writes its event with a bounded recent part, now and then the segment
    # layer merges pieces: O(N) bytes in all (a rewrite each time would be 80 MB)
    assert sorted(steps)[len(steps) // 2] < 20_000 and sum(steps) < 5_000_000


# -- listing, deleting, state ------------------------------------------------------------------


def test_sessions_list_newest_first_a_page_at_a_time(url: str) -> None:
    async def run() -> tuple[list[list[str]], list[str], list[str], list[str]]:
        store = open_store(url) if url.startswith("memory:") else open_async_store(url)
        service = AgentCheckpointSessionService(store)
        try:
            for n in range(5):
                user = "bob" if n == 2 else USER
                await service.create_session(app_name=APP, user_id=user, session_id=f"chat-{n}")
                await asyncio.sleep(0.003)  # each written in a millisecond of its own
            await service.create_session(app_name="other-app", user_id=USER, session_id="x")
            pages, cursor = [], None
            while True:
                page = await service.list_session_page(app_name=APP, limit=2, cursor=cursor)
                pages.append([s.session_id for s in page.sessions])
                cursor = page.cursor
                if cursor is None:
                    break
            mine = await service.list_session_page(app_name=APP, user_id=USER)
            listed = await service.list_sessions(app_name=APP, user_id=USER)
            everyone = await service.list_sessions(app_name=APP)
            return (
                pages,
                [s.session_id for s in mine.sessions],
                [s.id for s in listed.sessions],
                [s.id for s in everyone.sessions],
            )
        finally:
            await closing([store])

    pages, mine, listed, everyone = asyncio.run(run())
    assert pages == [["chat-4", "chat-3"], ["chat-2", "chat-1"], ["chat-0"]]
    assert mine == ["chat-4", "chat-3", "chat-1", "chat-0"]
    assert listed == ["chat-0", "chat-1", "chat-3", "chat-4"]  # ADK's order: oldest first
    assert everyone == ["chat-0", "chat-1", "chat-2", "chat-3", "chat-4"]


def test_an_empty_app_or_user_id_lists_no_sessions_as_adks_own_service_does(
    tmp_path: Path,
) -> None:
    from google.adk.sessions import InMemorySessionService

    path = str(tmp_path / "store")

    async def run(service: Any) -> list[list[str]]:
        await service.create_session(app_name=APP, user_id=USER, session_id="kept")
        listings = [
            await service.list_sessions(app_name=APP, user_id=""),
            await service.list_sessions(app_name="", user_id=USER),
            await service.list_sessions(app_name=""),
            await service.list_sessions(app_name=APP),  # the session is there
        ]
        return [[s.id for s in listing.sessions] for listing in listings]

    async def pages() -> list[list[str]]:
        async with AgentCheckpointSessionService(path) as service:
            listed = [
                await service.list_session_page(app_name=APP, user_id=""),
                await service.list_session_page(app_name=""),
                list_session_page(path, app_name=APP, user_id=""),
            ]
            return [[s.session_id for s in page.sessions] for page in listed]

    ours = asyncio.run(run(AgentCheckpointSessionService(path)))
    assert ours == asyncio.run(run(InMemorySessionService())) == [[], [], [], ["kept"]]
    assert asyncio.run(pages()) == [[], [], []]


def test_list_session_page_reads_a_store_url_and_refuses_a_bad_limit(tmp_path: Path) -> None:
    path = str(tmp_path / "store")

    async def seed() -> None:
        async with AgentCheckpointSessionService(path) as service:
            await service.create_session(app_name="a/b", user_id="u%1", session_id="x/y")

    asyncio.run(seed())
    page = list_session_page(path, app_name="a/b")
    assert [(s.app_name, s.user_id, s.session_id) for s in page.sessions] == [("a/b", "u%1", "x/y")]
    assert open_store(path).head("adk/a%2Fb/u%251/x%2Fy") is not None  # escaped, not nested
    with pytest.raises(InvalidArgumentError, match="limit must be a positive whole number"):
        list_session_page(path, app_name="a", limit=0)


def test_delete_removes_the_session_and_leaves_app_and_user_state(tmp_path: Path) -> None:
    service = AgentCheckpointSessionService(str(tmp_path / "store"))

    async def run() -> tuple[Any, Any, dict[str, Any]]:
        session = await service.create_session(
            app_name=APP, user_id=USER, session_id="gone", state={"app:a": 1, "user:u": 2}
        )
        await service.append_event(session, said("hello"))
        ids = {"app_name": APP, "user_id": USER, "session_id": "gone"}
        await service.delete_session(**ids)
        await service.delete_session(**ids)  # nothing there: nothing happens
        again = await service.create_session(app_name=APP, user_id=USER, session_id="gone")
        with pytest.raises(StaleSessionError):
            await service.append_event(session, said("to the old one"))
        return (
            await service.get_session(**ids),
            again,
            await service.get_user_state(app_name=APP, user_id=USER),
        )

    got, again, user = asyncio.run(run())
    assert got is not None and got.events == [] and got.state == {"app:a": 1, "user:u": 2}
    assert again.state == got.state and user == {"u": 2}


class Stopped(Exception):
    """The writer stopping (a crash) between its session write and its state writes."""


def test_app_and_user_deltas_survive_a_writer_that_stops_after_the_event(url: str) -> None:
    # The event (with its app: and user: deltas) is written first, then the app's and the
    # user's state records: a writer that stops between the two must not lose the deltas.
    services, stores = two_stores(url)
    writer, reader = services
    session_id = sid()

    def stop(*args: Any) -> None:
        raise Stopped

    async def run() -> tuple[Any, dict[str, Any], Any]:
        try:
            session = await writer.create_session(
                app_name=APP, user_id=USER, session_id=session_id, state={"app:a": 0}
            )
            writer._merge = stop  # type: ignore[method-assign]
            with pytest.raises(Stopped):
                await writer.append_event(session, said("hi", **{"app:a": 1, "user:u": "x"}))
            ids = {"app_name": APP, "user_id": USER, "session_id": session_id}
            again = await reader.get_session(**ids)  # another process, after the stop
            user = await reader.get_user_state(app_name=APP, user_id=USER)
            other = await reader.create_session(app_name=APP, user_id=USER)
            return again, user, other
        finally:
            await closing(stores)

    again, user, other = asyncio.run(run())
    assert again is not None and [e.content.parts[0].text for e in again.events] == ["hi"]
    assert again.state == {"app:a": 1, "user:u": "x"}
    assert user == {"u": "x"} and other.state == {"app:a": 1, "user:u": "x"}


def test_a_late_delta_sets_only_what_no_newer_delta_set(
    tmp_path: Path,
) -> None:
    store = open_store(str(tmp_path / "store"))
    stopped, other = AgentCheckpointSessionService(store), AgentCheckpointSessionService(store)

    def stop(*args: Any) -> None:
        raise Stopped

    async def run() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        first = await stopped.create_session(app_name=APP, user_id=USER, session_id="a")
        stopped._merge = stop  # type: ignore[method-assign]
        with pytest.raises(Stopped):  # user:k = old and user:j = only, never applied
            await stopped.append_event(first, said("1", 1_000.0, **{"user:k": "old", "user:j": 1}))
        second = await other.create_session(app_name=APP, user_id=USER, session_id="b")
        await other.append_event(second, said("2", 2_000.0, **{"user:k": "new"}))
        before = await other.get_user_state(app_name=APP, user_id=USER)
        del stopped._merge  # the same service carries on
        again = await stopped.get_session(app_name=APP, user_id=USER, session_id="a")
        assert again is not None
        await stopped.append_event(again, said("3", 3_000.0))
        after = await other.get_user_state(app_name=APP, user_id=USER)
        latest = await other.get_session(app_name=APP, user_id=USER, session_id="a")
        assert latest is not None
        return before, after, latest.state

    before, after, state = asyncio.run(run())
    assert before == {"k": "new"}
    assert after == {"k": "new", "j": 1}  # the late delta set j, and left the newer k alone
    assert state == {"user:k": "new", "user:j": 1}


def test_appending_to_a_deleted_session_raises_adks_not_found(tmp_path: Path) -> None:
    service = AgentCheckpointSessionService(str(tmp_path / "store"))

    async def run() -> None:
        session = await service.create_session(app_name=APP, user_id=USER)
        await service.delete_session(app_name=APP, user_id=USER, session_id=session.id)
        await service.append_event(session, said("anyone?"))

    with pytest.raises(SessionNotFoundError, match="not found"):
        asyncio.run(run())


# -- what is stored ------------------------------------------------------------------------------


def test_an_event_comes_back_exactly_and_its_text_is_stored_once(tmp_path: Path) -> None:
    path = str(tmp_path / "store")
    text = "Zürich is rainy ☂ " + "y" * 2000
    event = Event(
        invocation_id="inv-1",
        author="forecaster",
        content=types.Content(
            role="model",
            parts=[
                types.Part(text="let me think", thought=True),
                types.Part(text=text),
                types.Part(function_call=types.FunctionCall(id="c1", name="f", args={"n": 1})),
                types.Part.from_bytes(data=b"\x00\xff", mime_type="image/png"),
            ],
        ),
        long_running_tool_ids={"c1"},
        custom_metadata={"n": None, "big": 2**63, "f": -0.5},
        usage_metadata=types.GenerateContentResponseUsageMetadata(prompt_token_count=3),
    )

    async def run() -> Any:
        async with AgentCheckpointSessionService(path) as service:
            session = await service.create_session(app_name=APP, user_id=USER, session_id="e")
            await service.append_event(session, event.model_copy(deep=True))
        async with AgentCheckpointSessionService(path) as service:
            return await service.get_session(app_name=APP, user_id=USER, session_id="e")

    got = asyncio.run(run())
    assert got.events == [event]
    stored = open_store(path).get(f"adk/{APP}/{USER}/e")
    assert stored is not None
    message = stored.history[0]
    assert (message.role, message.content) == ("assistant", text)
    assert message.tool_calls == (ToolCall("c1", "f", {"n": 1}),)
    assert (
        message.thinking_blocks is not None and message.thinking_blocks[0].content == "let me think"
    )
    summary = open_store(path).head(f"adk/{APP}/{USER}/e")
    assert summary is not None and summary.size < len(text) + 2000  # the text once


def test_a_history_another_tool_wrote_reads_as_events(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "store"))
    history = (Message("user", "find x"), Message("assistant", "found it"))
    store.put(
        RunCheckpoint.new("find x", history, extra={"adkSession": {"state": {"k": 1}}}),
        key=f"adk/{APP}/{USER}/imported",
    )
    service = AgentCheckpointSessionService(store)
    got = asyncio.run(service.get_session(app_name=APP, user_id=USER, session_id="imported"))
    assert got is not None and got.state == {"k": 1}
    assert [(e.author, e.content.parts[0].text) for e in got.events] == [
        ("user", "find x"),
        ("model", "found it"),
    ]


# -- ADK's service URIs ----------------------------------------------------------------------------


def test_adks_cli_opens_the_service_from_a_registered_uri(tmp_path: Path) -> None:
    from google.adk.cli.utils.service_factory import create_session_service_from_options

    schemes = register_session_schemes()
    assert "agent-checkpoint" in schemes and "agent-checkpoint+redis" in schemes
    assert register_session_schemes() == schemes  # again: nothing changes
    for uri in (f"agent-checkpoint:{tmp_path / 'a'}", f"agent-checkpoint+file://{tmp_path / 'b'}"):
        service = create_session_service_from_options(base_dir=tmp_path, session_service_uri=uri)
        assert isinstance(service, AgentCheckpointSessionService)

        async def use(service: Any = service) -> Any:
            async with service:
                await service.create_session(app_name=APP, user_id=USER, session_id="via-uri")
                return await service.list_session_page(app_name=APP)

        assert [s.session_id for s in asyncio.run(use()).sessions] == ["via-uri"]


# -- bad input ---------------------------------------------------------------------------------------


def test_bad_arguments_are_refused_by_name_and_nothing_is_stored(tmp_path: Path) -> None:
    path = str(tmp_path / "store")
    service = AgentCheckpointSessionService(path)
    ok = {"app_name": APP, "user_id": USER}

    async def refused(call: Any, message: str) -> None:
        with pytest.raises(InvalidArgumentError, match=message):
            await call

    async def run() -> None:
        await service.create_session(**ok, session_id="kept")
        await refused(service.create_session(app_name="", user_id=USER), "app_name must be")
        await refused(service.create_session(app_name=APP, user_id=3), "user_id must be")
        await refused(service.create_session(**ok, session_id="a\nb"), "control or non-printable")
        await refused(service.create_session(**ok, state={"k": object()}), "state is not JSON")
        await refused(service.get_session(**ok, session_id=""), "session_id must be")
        await refused(service.list_sessions(app_name=None), "app_name must be")
        await refused(service.delete_session(**ok, session_id="\x00"), "control or non-printable")
        assert await service.get_session(**ok, session_id="missing") is None

    asyncio.run(run())
    assert [s.session_id for s in list_session_page(path, app_name=APP).sessions] == ["kept"]
    assert open_store(path).get(f"adk/{APP}/{USER}/kept").history == ()
    with pytest.raises(InvalidArgumentError, match="store must be"):
        AgentCheckpointSessionService(3.5)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="store options go with a store URL"):
        AgentCheckpointSessionService(open_store(path), ttl=5)
