"""ADK's own session-service contract tests, run against our service on every backend.

Ported from google/adk-python, tests/unittests/sessions/test_session_service.py (commit
03301454c3cd2d85d3691b3026a60ce6cb703193), Copyright 2026 Google LLC, licensed under the
Apache License, Version 2.0 (http://www.apache.org/licenses/LICENSE-2.0). Changes: the
``session_service`` fixture gives ``AgentCheckpointSessionService`` on each of our backends
(ADK's gave its in-memory, database and SQLite services); the tests its database service ran
alone (stale sessions, markers) run on ours; each ``async def`` runs under ``asyncio.run``;
reformatted to this project's style. The bodies are ADK's.

Not ported, each being about the internals of one of ADK's services rather than the session
service contract: pool_pre_ping and engine options, time zones per SQL dialect, read-only
SQLAlchemy factories, SQLite URLs, rollback on commit failures, revision markers read before
a SQL commit, ``prepare_tables``, ``_get_or_create_state``, row locks per state scope, the
in-memory service's own storage object, Vertex AI's ``get_user_state``, and module exports.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types
from support.store_urls import store_url

from agent_checkpoint import open_async_store, open_store
from agent_checkpoint.integrations.adk import AgentCheckpointSessionService

Body = Callable[[AgentCheckpointSessionService], Awaitable[None]]


@pytest.fixture(params=["memory", "disk", "redis", "postgres", "s3"])
def run(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[Body], None]]:
    """Runs a test's body with our service on an empty store of the backend."""
    with store_url(request.param, request, tmp_path) as (url, options):

        def running(body: Body) -> None:
            async def go() -> None:
                if url.startswith("memory:"):
                    await body(AgentCheckpointSessionService(open_store(url)))
                    return
                store = open_async_store(url, **options)
                try:
                    if request.param == "postgres":
                        await store.setup()
                    await body(AgentCheckpointSessionService(store))
                finally:
                    await store.close()

            asyncio.run(go())

        yield running


def ported(body: Body) -> Callable[[Callable[[Body], None]], None]:
    def test(run: Callable[[Body], None]) -> None:
        run(body)

    test.__name__, test.__doc__ = body.__name__, body.__doc__
    return test


@ported
async def test_get_empty_session(session_service: Any) -> None:
    assert not await session_service.get_session(
        app_name="my_app", user_id="test_user", session_id="123"
    )


@ported
async def test_create_get_session(session_service: Any) -> None:
    app_name = "my_app"
    user_id = "test_user"
    state = {"key": "value"}

    session = await session_service.create_session(app_name=app_name, user_id=user_id, state=state)
    assert session.app_name == app_name
    assert session.user_id == user_id
    assert session.id
    assert session.state == state
    assert session.last_update_time <= datetime.now().astimezone(timezone.utc).timestamp()

    got_session = await session_service.get_session(
        app_name=app_name, user_id=user_id, session_id=session.id
    )
    assert got_session == session
    assert got_session.last_update_time <= datetime.now().astimezone(timezone.utc).timestamp()

    session_id = session.id
    await session_service.delete_session(app_name=app_name, user_id=user_id, session_id=session_id)

    assert (
        await session_service.get_session(app_name=app_name, user_id=user_id, session_id=session.id)
        is None
    )


@ported
async def test_create_and_list_sessions(session_service: Any) -> None:
    app_name = "my_app"
    user_id = "test_user"

    session_ids = ["session" + str(i) for i in range(5)]
    for session_id in session_ids:
        await session_service.create_session(
            app_name=app_name,
            user_id=user_id,
            session_id=session_id,
            state={"key": "value" + session_id},
        )

    list_sessions_response = await session_service.list_sessions(app_name=app_name, user_id=user_id)
    sessions = list_sessions_response.sessions
    assert len(sessions) == len(session_ids)
    assert {s.id for s in sessions} == set(session_ids)
    for session in sessions:
        assert session.state == {"key": "value" + session.id}


@ported
async def test_list_sessions_all_users(session_service: Any) -> None:
    app_name = "my_app"
    user_id_1 = "user1"
    user_id_2 = "user2"

    await session_service.create_session(
        app_name=app_name, user_id=user_id_1, session_id="session1a", state={"key": "value1a"}
    )
    await session_service.create_session(
        app_name=app_name, user_id=user_id_1, session_id="session1b", state={"key": "value1b"}
    )
    await session_service.create_session(
        app_name=app_name, user_id=user_id_2, session_id="session2a", state={"key": "value2a"}
    )

    # List sessions for user1 - should contain merged state
    list_sessions_response_1 = await session_service.list_sessions(
        app_name=app_name, user_id=user_id_1
    )
    sessions_1 = list_sessions_response_1.sessions
    assert len(sessions_1) == 2
    sessions_1_map = {s.id: s for s in sessions_1}
    assert sessions_1_map["session1a"].state == {"key": "value1a"}
    assert sessions_1_map["session1b"].state == {"key": "value1b"}

    # List sessions for user2 - should contain merged state
    list_sessions_response_2 = await session_service.list_sessions(
        app_name=app_name, user_id=user_id_2
    )
    sessions_2 = list_sessions_response_2.sessions
    assert len(sessions_2) == 1
    assert sessions_2[0].id == "session2a"
    assert sessions_2[0].state == {"key": "value2a"}

    # List sessions for all users - should contain merged state
    list_sessions_response_all = await session_service.list_sessions(
        app_name=app_name, user_id=None
    )
    sessions_all = list_sessions_response_all.sessions
    assert len(sessions_all) == 3
    sessions_all_map = {s.id: s for s in sessions_all}
    assert sessions_all_map["session1a"].state == {"key": "value1a"}
    assert sessions_all_map["session1b"].state == {"key": "value1b"}
    assert sessions_all_map["session2a"].state == {"key": "value2a"}


@ported
async def test_app_state_is_shared_by_all_users_of_app(session_service: Any) -> None:
    app_name = "my_app"
    # User 1 creates a session, establishing app:k1
    session1 = await session_service.create_session(
        app_name=app_name, user_id="u1", session_id="s1", state={"app:k1": "v1"}
    )
    # User 1 appends an event to session1, establishing app:k2
    event = Event(
        invocation_id="inv1", author="user", actions=EventActions(state_delta={"app:k2": "v2"})
    )
    await session_service.append_event(session=session1, event=event)

    # User 2 creates a new session session2, it should see app:k1 and app:k2
    session2 = await session_service.create_session(
        app_name=app_name, user_id="u2", session_id="s2"
    )
    assert session2.state == {"app:k1": "v1", "app:k2": "v2"}

    # If we get session session1 again, it should also see both
    session1_got = await session_service.get_session(
        app_name=app_name, user_id="u1", session_id="s1"
    )
    assert session1_got.state.get("app:k1") == "v1"
    assert session1_got.state.get("app:k2") == "v2"


@ported
async def test_user_state_is_shared_only_by_user_sessions(session_service: Any) -> None:
    app_name = "my_app"
    # User 1 creates a session, establishing user:k1 for user 1
    session1 = await session_service.create_session(
        app_name=app_name, user_id="u1", session_id="s1", state={"user:k1": "v1"}
    )
    # User 1 appends an event to session1, establishing user:k2 for user 1
    event = Event(
        invocation_id="inv1", author="user", actions=EventActions(state_delta={"user:k2": "v2"})
    )
    await session_service.append_event(session=session1, event=event)

    # Another session for User 1 should see user:k1 and user:k2
    session1b = await session_service.create_session(
        app_name=app_name, user_id="u1", session_id="s1b"
    )
    assert session1b.state == {"user:k1": "v1", "user:k2": "v2"}

    # A session for User 2 should NOT see user:k1 or user:k2
    session2 = await session_service.create_session(
        app_name=app_name, user_id="u2", session_id="s2"
    )
    assert session2.state == {}


@ported
async def test_session_state_is_not_shared(session_service: Any) -> None:
    app_name = "my_app"
    # User 1 creates a session session1, establishing sk1 only for session1
    session1 = await session_service.create_session(
        app_name=app_name, user_id="u1", session_id="s1", state={"sk1": "v1"}
    )
    # User 1 appends an event to session1, establishing sk2 only for session1
    event = Event(
        invocation_id="inv1", author="user", actions=EventActions(state_delta={"sk2": "v2"})
    )
    await session_service.append_event(session=session1, event=event)

    # Getting session1 should show sk1 and sk2
    session1_got = await session_service.get_session(
        app_name=app_name, user_id="u1", session_id="s1"
    )
    assert session1_got.state.get("sk1") == "v1"
    assert session1_got.state.get("sk2") == "v2"

    # Creating another session session1b for User 1 should NOT see sk1 or sk2
    session1b = await session_service.create_session(
        app_name=app_name, user_id="u1", session_id="s1b"
    )
    assert session1b.state == {}


@ported
async def test_temp_state_is_not_persisted_in_state_or_events(session_service: Any) -> None:
    app_name = "my_app"
    user_id = "u1"
    session = await session_service.create_session(
        app_name=app_name, user_id=user_id, session_id="s1"
    )
    event = Event(
        invocation_id="inv1",
        author="user",
        actions=EventActions(state_delta={"temp:k1": "v1", "sk": "v2"}),
    )
    await session_service.append_event(session=session, event=event)

    # Temp state IS available in the in-memory session (same invocation)
    assert session.state.get("temp:k1") == "v1"
    assert session.state.get("sk") == "v2"

    # Check event as stored in session does not contain temp keys in state_delta
    assert "temp:k1" not in event.actions.state_delta
    assert event.actions.state_delta.get("sk") == "v2"


@ported
async def test_temp_state_visible_across_sequential_events(session_service: Any) -> None:
    """Temp state set by one event should be readable before the next event.

    This simulates a SequentialAgent where agent-1 writes output_key='temp:out'
    and agent-2 needs to read it from session.state within the same invocation.
    """
    app_name = "my_app"
    user_id = "u1"
    session = await session_service.create_session(
        app_name=app_name, user_id=user_id, session_id="s_seq"
    )

    # Agent-1 writes temp state
    event1 = Event(
        invocation_id="inv1",
        author="agent1",
        actions=EventActions(state_delta={"temp:output": "result_from_a1"}),
    )
    await session_service.append_event(session=session, event=event1)

    # Agent-2 should be able to read temp state from the same session object
    assert session.state.get("temp:output") == "result_from_a1"

    # But the event delta should NOT contain the temp key (not persisted)
    assert "temp:output" not in event1.actions.state_delta


@ported
async def test_get_session_respects_user_id(session_service: Any) -> None:
    app_name = "my_app"
    # u1 creates session 's1' and adds an event
    session1 = await session_service.create_session(
        app_name=app_name, user_id="u1", session_id="s1"
    )
    event = Event(invocation_id="inv1", author="user")
    await session_service.append_event(session1, event)
    # u2 creates a session with the same session_id 's1'
    await session_service.create_session(app_name=app_name, user_id="u2", session_id="s1")
    # Check that getting s1 for u2 returns u2's session (with no events)
    # not u1's session.
    session2_got = await session_service.get_session(
        app_name=app_name, user_id="u2", session_id="s1"
    )
    assert session2_got.user_id == "u2"
    assert len(session2_got.events) == 0


@ported
async def test_create_session_with_existing_id_raises_error(session_service: Any) -> None:
    app_name = "my_app"
    user_id = "test_user"
    session_id = "existing_session"

    # Create the first session
    await session_service.create_session(app_name=app_name, user_id=user_id, session_id=session_id)

    # Attempt to create a session with the same ID
    with pytest.raises(AlreadyExistsError):
        await session_service.create_session(
            app_name=app_name, user_id=user_id, session_id=session_id
        )


@ported
async def test_append_event_bytes(session_service: Any) -> None:
    app_name = "my_app"
    user_id = "user"

    session = await session_service.create_session(app_name=app_name, user_id=user_id)

    test_content = types.Content(
        role="user",
        parts=[types.Part.from_bytes(data=b"test_image_data", mime_type="image/png")],
    )
    test_grounding_metadata = types.GroundingMetadata(
        search_entry_point=types.SearchEntryPoint(sdk_blob=b"test_sdk_blob")
    )
    event = Event(
        invocation_id="invocation",
        author="user",
        content=test_content,
        grounding_metadata=test_grounding_metadata,
    )
    await session_service.append_event(session=session, event=event)

    assert session.events[0].content == test_content

    session = await session_service.get_session(
        app_name=app_name, user_id=user_id, session_id=session.id
    )
    events = session.events
    assert len(events) == 1
    assert events[0].content == test_content
    assert events[0].grounding_metadata == test_grounding_metadata


@ported
async def test_append_event_complete(session_service: Any) -> None:
    app_name = "my_app"
    user_id = "user"

    session = await session_service.create_session(app_name=app_name, user_id=user_id)
    event = Event(
        invocation_id="invocation",
        author="user",
        content=types.Content(role="user", parts=[types.Part(text="test_text")]),
        turn_complete=True,
        partial=False,
        actions=EventActions(artifact_delta={"file": 0}, transfer_to_agent="agent", escalate=True),
        long_running_tool_ids={"tool1"},
        error_code="error_code",
        error_message="error_message",
        interrupted=True,
        grounding_metadata=types.GroundingMetadata(web_search_queries=["query1"]),
        usage_metadata=types.GenerateContentResponseUsageMetadata(
            prompt_token_count=1, candidates_token_count=1, total_token_count=2
        ),
        citation_metadata=types.CitationMetadata(),
        custom_metadata={"custom_key": "custom_value"},
        timestamp=1700000000.123,
        input_transcription=types.Transcription(text="input transcription", finished=True),
        output_transcription=types.Transcription(text="output transcription", finished=True),
    )
    await session_service.append_event(session=session, event=event)

    assert (
        await session_service.get_session(app_name=app_name, user_id=user_id, session_id=session.id)
        == session
    )


@ported
async def test_session_last_update_time_updates_on_event(session_service: Any) -> None:
    app_name = "my_app"
    user_id = "user"

    session = await session_service.create_session(app_name=app_name, user_id=user_id)
    original_update_time = session.last_update_time

    event_timestamp = original_update_time + 10
    event = Event(invocation_id="invocation", author="user", timestamp=event_timestamp)
    await session_service.append_event(session=session, event=event)

    assert session.last_update_time == pytest.approx(event_timestamp, abs=1e-6)

    refreshed_session = await session_service.get_session(
        app_name=app_name, user_id=user_id, session_id=session.id
    )
    assert refreshed_session is not None
    assert refreshed_session.last_update_time == pytest.approx(event_timestamp, abs=1e-6)
    assert refreshed_session.last_update_time > original_update_time


@ported
async def test_append_event_to_stale_session(session_service: Any) -> None:
    async with session_service:
        app_name = "my_app"
        user_id = "user"
        current_time = datetime.now().astimezone(timezone.utc).timestamp()

        original_session = await session_service.create_session(app_name=app_name, user_id=user_id)
        event1 = Event(
            invocation_id="inv1",
            author="user",
            timestamp=current_time + 1,
            actions=EventActions(state_delta={"sk1": "v1"}),
        )
        await session_service.append_event(original_session, event1)

        updated_session = await session_service.get_session(
            app_name=app_name, user_id=user_id, session_id=original_session.id
        )
        event2 = Event(
            invocation_id="inv2",
            author="user",
            timestamp=current_time + 2,
            actions=EventActions(state_delta={"sk2": "v2"}),
        )
        await session_service.append_event(updated_session, event2)

        # original_session is now stale
        assert original_session.last_update_time < updated_session.last_update_time
        assert len(original_session.events) == 1
        assert "sk2" not in original_session.state

        # Appending another event to stale original_session should be rejected.
        event3 = Event(
            invocation_id="inv3",
            author="user",
            timestamp=current_time + 3,
            actions=EventActions(state_delta={"sk3": "v3"}),
        )
        with pytest.raises(ValueError, match="modified in storage"):
            await session_service.append_event(original_session, event3)

        # If we fetch session from DB, it should only contain the committed events.
        session_final = await session_service.get_session(
            app_name=app_name, user_id=user_id, session_id=original_session.id
        )
        assert len(session_final.events) == 2
        assert session_final.state.get("sk1") == "v1"
        assert session_final.state.get("sk2") == "v2"
        assert session_final.state.get("sk3") is None
        assert [e.invocation_id for e in session_final.events] == ["inv1", "inv2"]


@ported
async def test_append_event_concurrent_stale_sessions_reject_stale_writer(
    session_service: Any,
) -> None:
    async with session_service:
        app_name = "my_app"
        user_id = "user"
        session = await session_service.create_session(app_name=app_name, user_id=user_id)

        iteration_count = 8
        for i in range(iteration_count):
            latest_session = await session_service.get_session(
                app_name=app_name, user_id=user_id, session_id=session.id
            )
            stale_session_1 = latest_session.model_copy(deep=True)
            stale_session_2 = latest_session.model_copy(deep=True)
            base_timestamp = latest_session.last_update_time + 10.0
            event_1 = Event(
                invocation_id=f"inv{i}-1",
                author="user",
                timestamp=base_timestamp + 1.0,
                actions=EventActions(state_delta={f"sk{i}-1": f"v{i}-1"}),
            )
            event_2 = Event(
                invocation_id=f"inv{i}-2",
                author="user",
                timestamp=base_timestamp + 2.0,
                actions=EventActions(state_delta={f"sk{i}-2": f"v{i}-2"}),
            )

            results = await asyncio.gather(
                session_service.append_event(stale_session_1, event_1),
                session_service.append_event(stale_session_2, event_2),
                return_exceptions=True,
            )
            errors = [result for result in results if isinstance(result, Exception)]
            successes = [result for result in results if not isinstance(result, Exception)]
            assert len(successes) == 1
            assert len(errors) == 1
            assert isinstance(errors[0], ValueError)
            assert "modified in storage" in str(errors[0])

        session_final = await session_service.get_session(
            app_name=app_name, user_id=user_id, session_id=session.id
        )

        for i in range(iteration_count):
            event_values = {
                session_final.state.get(f"sk{i}-1"),
                session_final.state.get(f"sk{i}-2"),
            }
            assert event_values & {f"v{i}-1", f"v{i}-2"}
            assert None in event_values
        assert len(session_final.events) == iteration_count


@ported
async def test_append_event_allows_timestamp_drift_for_current_session(
    session_service: Any,
) -> None:
    service = session_service
    session = await service.create_session(app_name="my_app", user_id="user", session_id="s1")
    event1 = Event(invocation_id="inv1", author="user", timestamp=session.last_update_time + 10)
    await service.append_event(session, event1)

    # Simulate a float round-trip mismatch without changing the persisted
    # session revision.
    session.last_update_time -= 0.0001

    event2 = Event(invocation_id="inv2", author="user", timestamp=event1.timestamp + 10)
    await service.append_event(session, event2)

    refreshed_session = await service.get_session(
        app_name="my_app", user_id="user", session_id=session.id
    )
    assert [event.invocation_id for event in refreshed_session.events] == ["inv1", "inv2"]


@ported
async def test_append_event_allows_markerless_current_session(session_service: Any) -> None:
    service = session_service
    session = await service.create_session(app_name="my_app", user_id="user", session_id="s1")
    event1 = Event(invocation_id="inv1", author="user", timestamp=session.last_update_time + 10)
    await service.append_event(session, event1)

    session._storage_update_marker = None
    session.last_update_time -= 0.0001

    event2 = Event(invocation_id="inv2", author="user", timestamp=event1.timestamp + 10)
    await service.append_event(session, event2)

    refreshed_session = await service.get_session(
        app_name="my_app", user_id="user", session_id=session.id
    )
    assert [event.invocation_id for event in refreshed_session.events] == ["inv1", "inv2"]


@ported
async def test_get_session_with_config(session_service: Any) -> None:
    app_name = "my_app"
    user_id = "user"

    num_test_events = 5
    session = await session_service.create_session(app_name=app_name, user_id=user_id)
    for i in range(1, num_test_events + 1):
        event = Event(author="user", timestamp=i)
        await session_service.append_event(session, event)

    # No config, expect all events to be returned.
    session = await session_service.get_session(
        app_name=app_name, user_id=user_id, session_id=session.id
    )
    events = session.events
    assert len(events) == num_test_events

    # Explicitly requesting zero recent events should return no event history.
    config = GetSessionConfig(num_recent_events=0)
    session = await session_service.get_session(
        app_name=app_name, user_id=user_id, session_id=session.id, config=config
    )
    assert not session.events

    # Only expect the most recent 3 events.
    num_recent_events = 3
    config = GetSessionConfig(num_recent_events=num_recent_events)
    session = await session_service.get_session(
        app_name=app_name, user_id=user_id, session_id=session.id, config=config
    )
    events = session.events
    assert len(events) == num_recent_events
    assert events[0].timestamp == num_test_events - num_recent_events + 1

    # Only expect events after timestamp 4.0 (inclusive), i.e., 2 events.
    after_timestamp = 4.0
    config = GetSessionConfig(after_timestamp=after_timestamp)
    session = await session_service.get_session(
        app_name=app_name, user_id=user_id, session_id=session.id, config=config
    )
    events = session.events
    assert len(events) == num_test_events - after_timestamp + 1
    assert events[0].timestamp == after_timestamp

    # Expect no events if none are > after_timestamp.
    way_after_timestamp = num_test_events * 10
    config = GetSessionConfig(after_timestamp=way_after_timestamp)
    session = await session_service.get_session(
        app_name=app_name, user_id=user_id, session_id=session.id, config=config
    )
    assert not session.events

    # Both filters applied, i.e., of 3 most recent events, only 2 are after
    # timestamp 4.0, so expect 2 events.
    config = GetSessionConfig(after_timestamp=after_timestamp, num_recent_events=num_recent_events)
    session = await session_service.get_session(
        app_name=app_name, user_id=user_id, session_id=session.id, config=config
    )
    events = session.events
    assert len(events) == num_test_events - after_timestamp + 1


@ported
async def test_partial_events_are_not_persisted(session_service: Any) -> None:
    app_name = "my_app"
    user_id = "user"
    session = await session_service.create_session(app_name=app_name, user_id=user_id)
    event = Event(author="user", partial=True)
    await session_service.append_event(session, event)

    # Check in-memory session
    assert len(session.events) == 0
    # Check persisted session
    session_got = await session_service.get_session(
        app_name=app_name, user_id=user_id, session_id=session.id
    )
    assert len(session_got.events) == 0


@ported
async def test_get_user_state_returns_empty_dict_when_no_state_exists(
    session_service: Any,
) -> None:
    """Verifies get_user_state returns empty dict when no state exists."""
    state = await session_service.get_user_state(app_name="my_app", user_id="u1")
    assert not state


@ported
async def test_get_user_state_returns_state_written_via_append_event(
    session_service: Any,
) -> None:
    """Verifies get_user_state returns state written via append_event."""
    session = await session_service.create_session(app_name="my_app", user_id="u1")
    await session_service.append_event(
        session,
        Event(
            author="system",
            actions=EventActions(state_delta={"user:profile": {"name": "Alice"}, "session_key": 1}),
        ),
    )

    state = await session_service.get_user_state(app_name="my_app", user_id="u1")

    assert state == {"profile": {"name": "Alice"}}
    assert "session_key" not in state


@ported
async def test_get_user_state_is_not_visible_across_users(session_service: Any) -> None:
    """Verifies user state is isolated between users."""
    session = await session_service.create_session(app_name="my_app", user_id="u1")
    await session_service.append_event(
        session,
        Event(author="system", actions=EventActions(state_delta={"user:secret": "only-for-u1"})),
    )

    other_state = await session_service.get_user_state(app_name="my_app", user_id="u2")
    assert not other_state


@ported
async def test_get_user_state_is_not_visible_across_apps(session_service: Any) -> None:
    """Verifies user state is isolated between apps."""
    session = await session_service.create_session(app_name="my_app", user_id="u1")
    await session_service.append_event(
        session,
        Event(author="system", actions=EventActions(state_delta={"user:data": "only-app-a"})),
    )

    other_state = await session_service.get_user_state(app_name="other_app", user_id="u1")
    assert not other_state


@ported
async def test_get_user_state_available_before_session_is_created(
    session_service: Any,
) -> None:
    """Verifies user state can be retrieved before a session is created."""
    first_session = await session_service.create_session(app_name="my_app", user_id="u1")
    await session_service.append_event(
        first_session,
        Event(author="system", actions=EventActions(state_delta={"user:ctx": {"v": 1}})),
    )

    state = await session_service.get_user_state(app_name="my_app", user_id="u1")
    assert state == {"ctx": {"v": 1}}


@ported
async def test_get_user_state_reflects_latest_write(session_service: Any) -> None:
    """Verifies get_user_state returns the latest state."""
    session = await session_service.create_session(app_name="my_app", user_id="u1")
    await session_service.append_event(
        session, Event(author="system", actions=EventActions(state_delta={"user:counter": 1}))
    )
    await session_service.append_event(
        session, Event(author="system", actions=EventActions(state_delta={"user:counter": 2}))
    )

    state = await session_service.get_user_state(app_name="my_app", user_id="u1")
    assert state["counter"] == 2
