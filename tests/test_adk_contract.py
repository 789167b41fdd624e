"""The session-service contract of Google ADK, pinned for our ``AgentCheckpointSessionService``.

ADK's ``BaseSessionService`` promises its callers (its ``Runner``, its web UI, a user's own
code) a set of behaviours: what ``create_session``, ``get_session``, ``list_sessions``,
``delete_session``, ``append_event`` and ``get_user_state`` return and store; how a state
delta lands by the scope its key names (``app:`` shared by the app, ``user:`` by one user's
sessions, ``temp:`` seen in the invocation and never stored, any other key by one session);
what ``GetSessionConfig`` filters; and, for services that persist, that an append through an
outdated copy of a session is refused. Each test below states one of those rules in its name
and checks it on each of our backends' real servers. Where ADK's own ``InMemorySessionService``
keeps the rule too, at every google-adk version our ``adk`` extra allows, the test also runs
on it (``adk-in-memory``), so a rule written here is ADK's and not one we made up; the rules
about outdated copies are those of ADK's persistent services and run on ours alone.

These tests are this project's own: the behaviours come from ADK's documentation and from what
its test suite checks, the tests were written here (tests/test_adk.py has the rest of the
service's tests: processes, pages, races at scale, bad input).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig
from google.adk.sessions.in_memory_session_service import InMemorySessionService
from google.adk.sessions.session import Session
from google.genai import types
from support.store_urls import store_url

from agent_checkpoint import open_async_store, open_store
from agent_checkpoint.integrations.adk import AgentCheckpointSessionService

BACKENDS = ["memory", "disk", "redis", "postgres", "s3"]
ADKS_OWN = "adk-in-memory"
APP = "travel"

Check = Callable[[Any], Awaitable[None]]
OnService = Callable[[Check], None]


@pytest.fixture
def on_service(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OnService]:
    """Runs a check, in an event loop of its own, with a session service on an empty store of
    the backend the test is parametrized with (or ADK's own in-memory service)."""
    name: str = request.param
    if name == ADKS_OWN:
        yield lambda check: asyncio.run(check(InMemorySessionService()))
        return
    with store_url(name, request, tmp_path) as (url, options):

        async def on_ours(check: Check) -> None:
            if name == "memory":  # memory:// is one store per opening: a Store, as test_adk.py
                await check(AgentCheckpointSessionService(open_store(url)))
                return
            store = open_async_store(url, **options)
            try:
                if name == "postgres":
                    await store.setup()
                await check(AgentCheckpointSessionService(store))
            finally:
                await store.close()

        yield lambda check: asyncio.run(on_ours(check))


def rule(*, adks_own_too: bool = True) -> Callable[[Check], Callable[[OnService], None]]:
    """Makes ``async def test_..._rule(service)`` a test of every backend (and of ADK's own
    in-memory service, unless the rule is one of persistent services alone)."""
    services = [*BACKENDS, ADKS_OWN] if adks_own_too else BACKENDS

    def make(check: Check) -> Callable[[OnService], None]:
        def test(on_service: OnService) -> None:
            on_service(check)

        test.__name__ = test.__qualname__ = check.__name__
        test.__doc__ = check.__doc__
        marked: Callable[[OnService], None] = pytest.mark.parametrize(
            "on_service", services, indirect=True
        )(test)
        return marked

    return make


def event(
    delta: dict[str, Any] | None = None,
    *,
    invocation: str = "inv",
    author: str = "user",
    **fields: Any,
) -> Event:
    """An event of ``author``, with ``delta`` as its state delta."""
    return Event(
        invocation_id=invocation,
        author=author,
        actions=EventActions(state_delta=delta or {}),
        **fields,
    )


async def reread(service: BaseSessionService, session: Session, **config: Any) -> Session:
    found = await service.get_session(
        app_name=session.app_name,
        user_id=session.user_id,
        session_id=session.id,
        config=GetSessionConfig(**config) if config else None,
    )
    assert found is not None, f"session {session.id!r} is gone"
    return found


# -- create, get, delete -------------------------------------------------------------------------


@rule()
async def test_a_session_never_created_reads_as_none_rule(service: Any) -> None:
    assert await service.get_session(app_name=APP, user_id="ana", session_id="nope") is None


@rule()
async def test_a_new_session_gets_an_id_and_reads_back_as_created_rule(service: Any) -> None:
    before = time.time()
    made = await service.create_session(app_name=APP, user_id="ana", state={"city": "Lyon"})
    assert (made.app_name, made.user_id, made.state) == (APP, "ana", {"city": "Lyon"})
    assert isinstance(made.id, str) and made.id
    assert before - 1 <= made.last_update_time <= time.time()

    assert await reread(service, made) == made


@rule()
async def test_a_session_can_be_created_under_an_id_of_the_callers_choice_rule(
    service: Any,
) -> None:
    made = await service.create_session(app_name=APP, user_id="ana", session_id="trip-2027")
    assert made.id == "trip-2027"
    assert (await reread(service, made)).id == "trip-2027"


@rule()
async def test_creating_a_session_under_an_id_in_use_raises_already_exists_rule(
    service: Any,
) -> None:
    await service.create_session(
        app_name=APP, user_id="ana", session_id="trip", state={"city": "Lyon"}
    )
    with pytest.raises(AlreadyExistsError):
        await service.create_session(
            app_name=APP, user_id="ana", session_id="trip", state={"city": "Oslo"}
        )
    kept = await service.get_session(app_name=APP, user_id="ana", session_id="trip")
    assert kept is not None and kept.state == {"city": "Lyon"}


@rule()
async def test_one_session_id_under_two_users_names_two_sessions_rule(service: Any) -> None:
    anas = await service.create_session(app_name=APP, user_id="ana", session_id="shared-id")
    await service.append_event(anas, event(invocation="ana-said"))
    await service.create_session(app_name=APP, user_id="ben", session_id="shared-id")

    bens = await service.get_session(app_name=APP, user_id="ben", session_id="shared-id")
    assert bens is not None and bens.user_id == "ben"
    assert bens.events == []
    assert [e.invocation_id for e in (await reread(service, anas)).events] == ["ana-said"]


@rule()
async def test_a_deleted_session_reads_as_none_and_others_stay_rule(service: Any) -> None:
    gone = await service.create_session(app_name=APP, user_id="ana", session_id="gone")
    await service.create_session(app_name=APP, user_id="ana", session_id="kept")
    await service.append_event(gone, event(invocation="said"))

    await service.delete_session(app_name=APP, user_id="ana", session_id="gone")

    assert await service.get_session(app_name=APP, user_id="ana", session_id="gone") is None
    assert await service.get_session(app_name=APP, user_id="ana", session_id="kept") is not None
    listed = await service.list_sessions(app_name=APP, user_id="ana")
    assert [s.id for s in listed.sessions] == ["kept"]


@rule()
async def test_deleting_a_session_that_does_not_exist_is_no_error_rule(service: Any) -> None:
    await service.delete_session(app_name=APP, user_id="ana", session_id="never-was")
    assert await service.get_session(app_name=APP, user_id="ana", session_id="never-was") is None


# ADK's in-memory service raises this in google-adk 2.15; at our floor, 2.7, it logs a warning
@rule(adks_own_too=False)
async def test_appending_to_a_deleted_session_raises_session_not_found_rule(
    service: Any,
) -> None:
    session = await service.create_session(app_name=APP, user_id="ana")
    await service.delete_session(app_name=APP, user_id="ana", session_id=session.id)
    with pytest.raises(SessionNotFoundError):
        await service.append_event(session, event(invocation="too-late"))
    assert await service.get_session(app_name=APP, user_id="ana", session_id=session.id) is None


# -- list_sessions -------------------------------------------------------------------------------


@rule()
async def test_listing_a_user_gives_each_of_their_sessions_with_its_state_rule(
    service: Any,
) -> None:
    for n in range(5):
        await service.create_session(
            app_name=APP, user_id="ana", session_id=f"trip-{n}", state={"leg": n}
        )
    listed = (await service.list_sessions(app_name=APP, user_id="ana")).sessions
    assert sorted((s.id, s.state["leg"]) for s in listed) == [(f"trip-{n}", n) for n in range(5)]
    assert all(s.events == [] for s in listed)


@rule()
async def test_listing_without_a_user_gives_every_users_sessions_of_the_app_rule(
    service: Any,
) -> None:
    await service.create_session(app_name=APP, user_id="ana", session_id="a1", state={"n": 1})
    await service.create_session(app_name=APP, user_id="ana", session_id="a2", state={"n": 2})
    await service.create_session(app_name=APP, user_id="ben", session_id="b1", state={"n": 3})
    await service.create_session(app_name="other-app", user_id="ana", session_id="x")

    def seen(listed: Any) -> set[tuple[str, str, int]]:
        return {(s.user_id, s.id, s.state["n"]) for s in listed.sessions}

    assert seen(await service.list_sessions(app_name=APP, user_id="ana")) == {
        ("ana", "a1", 1),
        ("ana", "a2", 2),
    }
    assert seen(await service.list_sessions(app_name=APP, user_id="ben")) == {("ben", "b1", 3)}
    assert seen(await service.list_sessions(app_name=APP, user_id=None)) == {
        ("ana", "a1", 1),
        ("ana", "a2", 2),
        ("ben", "b1", 3),
    }


@rule()
async def test_listing_an_app_or_user_with_no_sessions_gives_an_empty_list_rule(
    service: Any,
) -> None:
    await service.create_session(app_name=APP, user_id="ana")
    assert (await service.list_sessions(app_name=APP, user_id="ben")).sessions == []
    assert (await service.list_sessions(app_name="no-such-app", user_id=None)).sessions == []


@rule()
async def test_sessions_are_listed_by_last_update_oldest_first_rule(service: Any) -> None:
    now = time.time()
    sessions = {
        name: await service.create_session(app_name=APP, user_id=user, session_id=name)
        for name, user in [("north", "ana"), ("south", "ben"), ("east", "ana")]
    }
    for offset, name in [(30, "north"), (10, "south"), (20, "east")]:
        await service.append_event(sessions[name], event(timestamp=now + offset))

    listed = await service.list_sessions(app_name=APP, user_id=None)
    assert [s.id for s in listed.sessions] == ["south", "east", "north"]
    of_ana = await service.list_sessions(app_name=APP, user_id="ana")
    assert [s.id for s in of_ana.sessions] == ["east", "north"]


# -- state by scope ------------------------------------------------------------------------------


@rule()
async def test_app_state_is_seen_by_every_session_of_every_user_of_the_app_rule(
    service: Any,
) -> None:
    first = await service.create_session(
        app_name=APP, user_id="ana", session_id="a", state={"app:currency": "EUR"}
    )
    await service.append_event(first, event({"app:season": "winter"}))

    later = await service.create_session(app_name=APP, user_id="ben", session_id="b")
    assert later.state == {"app:currency": "EUR", "app:season": "winter"}
    again = await reread(service, first)
    assert (again.state["app:currency"], again.state["app:season"]) == ("EUR", "winter")


@rule()
async def test_user_state_is_seen_by_that_users_sessions_and_no_one_elses_rule(
    service: Any,
) -> None:
    first = await service.create_session(
        app_name=APP, user_id="ana", session_id="a", state={"user:seat": "aisle"}
    )
    await service.append_event(first, event({"user:meal": "veg"}))

    anas_next = await service.create_session(app_name=APP, user_id="ana", session_id="a2")
    assert anas_next.state == {"user:seat": "aisle", "user:meal": "veg"}
    bens = await service.create_session(app_name=APP, user_id="ben", session_id="b")
    assert bens.state == {}


@rule()
async def test_session_state_stays_in_its_own_session_rule(service: Any) -> None:
    first = await service.create_session(
        app_name=APP, user_id="ana", session_id="a", state={"step": 1}
    )
    await service.append_event(first, event({"draft": "Lyon, 3 nights"}))

    again = await reread(service, first)
    assert (again.state["step"], again.state["draft"]) == (1, "Lyon, 3 nights")
    second = await service.create_session(app_name=APP, user_id="ana", session_id="a2")
    assert second.state == {}


@rule()
async def test_temp_state_is_seen_within_the_invocation_but_never_stored_rule(
    service: Any,
) -> None:
    session = await service.create_session(app_name=APP, user_id="ana", session_id="a")
    sent = event({"temp:scratch": "42 km", "kept": "yes"})
    await service.append_event(session, sent)

    assert (session.state["temp:scratch"], session.state["kept"]) == ("42 km", "yes")
    assert sent.actions.state_delta == {"kept": "yes"}
    stored = await reread(service, session)
    assert stored.state == {"kept": "yes"}
    assert [e.actions.state_delta for e in stored.events] == [{"kept": "yes"}]


@rule()
async def test_temp_state_one_agent_sets_is_readable_by_the_next_in_the_invocation_rule(
    service: Any,
) -> None:
    session = await service.create_session(app_name=APP, user_id="ana", session_id="a")
    said = event({"temp:plan": "fly, then train"}, author="planner")
    await service.append_event(session, said)
    assert session.state["temp:plan"] == "fly, then train"
    assert "temp:plan" not in said.actions.state_delta

    await service.append_event(session, event(author="booker"))
    assert session.state["temp:plan"] == "fly, then train"


# -- events --------------------------------------------------------------------------------------


@rule()
async def test_binary_parts_and_metadata_come_back_byte_for_byte_rule(service: Any) -> None:
    session = await service.create_session(app_name=APP, user_id="ana")
    picture = types.Content(
        role="user",
        parts=[types.Part.from_bytes(data=b"\x89PNG\r\n\x1a\n\x00\xff", mime_type="image/png")],
    )
    grounding = types.GroundingMetadata(
        search_entry_point=types.SearchEntryPoint(sdk_blob=b"\x00\x01blob\xfe")
    )
    await service.append_event(
        session,
        Event(invocation_id="inv", author="user", content=picture, grounding_metadata=grounding),
    )
    assert session.events[0].content == picture

    (stored,) = (await reread(service, session)).events
    assert stored.content == picture
    assert stored.grounding_metadata == grounding


@rule()
async def test_an_event_with_every_field_set_reads_back_equal_rule(service: Any) -> None:
    session = await service.create_session(app_name=APP, user_id="ana")
    full = Event(
        invocation_id="inv-full",
        author="user",
        content=types.Content(role="user", parts=[types.Part(text="Book Lyon")]),
        partial=False,
        turn_complete=True,
        interrupted=True,
        error_code="QUOTA",
        error_message="over the daily quota",
        long_running_tool_ids={"call-7"},
        actions=EventActions(
            artifact_delta={"itinerary.pdf": 2}, transfer_to_agent="booker", escalate=True
        ),
        grounding_metadata=types.GroundingMetadata(web_search_queries=["lyon hotels"]),
        citation_metadata=types.CitationMetadata(),
        usage_metadata=types.GenerateContentResponseUsageMetadata(
            prompt_token_count=7, candidates_token_count=5, total_token_count=12
        ),
        custom_metadata={"ticket": "T-19"},
        input_transcription=types.Transcription(text="book lyon", finished=True),
        output_transcription=types.Transcription(text="booking lyon", finished=True),
        timestamp=1_800_000_000.25,
    )
    await service.append_event(session, full)

    assert await reread(service, session) == session


@rule()
async def test_an_appended_event_sets_the_sessions_last_update_time_rule(service: Any) -> None:
    session = await service.create_session(app_name=APP, user_id="ana")
    created_at = session.last_update_time
    await service.append_event(session, event(timestamp=created_at + 25))

    assert session.last_update_time == pytest.approx(created_at + 25, abs=1e-6)
    stored = await reread(service, session)
    assert stored.last_update_time == pytest.approx(created_at + 25, abs=1e-6)
    assert stored.last_update_time > created_at


@rule()
async def test_partial_events_are_neither_stored_nor_added_to_the_session_rule(
    service: Any,
) -> None:
    session = await service.create_session(app_name=APP, user_id="ana")
    await service.append_event(session, event({"half": "done"}, partial=True))

    assert session.events == []
    stored = await reread(service, session)
    assert stored.events == []
    assert "half" not in stored.state


# -- get_session's filters -----------------------------------------------------------------------


async def five_events(service: Any) -> Session:
    """A session with events stamped 1.0 to 5.0, oldest first."""
    session: Session = await service.create_session(app_name=APP, user_id="ana")
    for stamp in range(1, 6):
        await service.append_event(session, event(invocation=f"e{stamp}", timestamp=stamp))
    return session


def stamps(session: Session) -> list[float]:
    return [e.timestamp for e in session.events]


@rule()
async def test_num_recent_events_keeps_that_many_newest_and_zero_keeps_none_rule(
    service: Any,
) -> None:
    session = await five_events(service)
    assert stamps(await reread(service, session)) == [1, 2, 3, 4, 5]
    assert stamps(await reread(service, session, num_recent_events=3)) == [3, 4, 5]
    assert stamps(await reread(service, session, num_recent_events=0)) == []


@rule()
async def test_after_timestamp_keeps_the_events_at_or_after_it_rule(service: Any) -> None:
    session = await five_events(service)
    assert stamps(await reread(service, session, after_timestamp=4.0)) == [4, 5]
    assert stamps(await reread(service, session, after_timestamp=50.0)) == []


@rule()
async def test_both_filters_together_keep_only_events_that_pass_each_rule(service: Any) -> None:
    session = await five_events(service)
    both = await reread(service, session, num_recent_events=3, after_timestamp=4.0)
    assert stamps(both) == [4, 5]
    assert stamps(await reread(service, session, num_recent_events=1, after_timestamp=2.0)) == [5]


# -- get_user_state ------------------------------------------------------------------------------


@rule()
async def test_user_state_of_a_user_who_has_none_is_empty_rule(service: Any) -> None:
    assert await service.get_user_state(app_name=APP, user_id="ana") == {}


@rule()
async def test_user_state_holds_only_user_keys_without_their_prefix_rule(service: Any) -> None:
    session = await service.create_session(app_name=APP, user_id="ana")
    await service.append_event(
        session,
        event({"user:profile": {"name": "Ana", "langs": ["fr", "pt"]}, "draft": 1, "app:v": 2}),
    )
    assert await service.get_user_state(app_name=APP, user_id="ana") == {
        "profile": {"name": "Ana", "langs": ["fr", "pt"]}
    }


@rule()
async def test_user_state_is_kept_apart_per_user_and_per_app_rule(service: Any) -> None:
    session = await service.create_session(app_name=APP, user_id="ana")
    await service.append_event(session, event({"user:passport": "X123"}))

    assert await service.get_user_state(app_name=APP, user_id="ben") == {}
    assert await service.get_user_state(app_name="other-app", user_id="ana") == {}
    assert await service.get_user_state(app_name=APP, user_id="ana") == {"passport": "X123"}


@rule()
async def test_user_state_is_read_without_a_session_and_seeds_the_next_one_rule(
    service: Any,
) -> None:
    first = await service.create_session(app_name=APP, user_id="ana", session_id="first")
    await service.append_event(first, event({"user:home": {"city": "Porto"}}))
    await service.delete_session(app_name=APP, user_id="ana", session_id="first")

    assert await service.get_user_state(app_name=APP, user_id="ana") == {"home": {"city": "Porto"}}
    later = await service.create_session(app_name=APP, user_id="ana", session_id="later")
    assert later.state == {"user:home": {"city": "Porto"}}


@rule()
async def test_user_state_reads_the_latest_value_written_rule(service: Any) -> None:
    session = await service.create_session(app_name=APP, user_id="ana")
    for visits in (1, 2, 3):
        await service.append_event(session, event({"user:visits": visits}))
    assert await service.get_user_state(app_name=APP, user_id="ana") == {"visits": 3}


# -- outdated copies of a session (ADK's persistent services) ------------------------------------


@rule(adks_own_too=False)
async def test_an_append_through_an_outdated_copy_raises_stale_and_stores_nothing_rule(
    service: Any,
) -> None:
    async with service:  # the service is an async context manager, as ADK's database one is
        now = time.time()
        outdated = await service.create_session(app_name=APP, user_id="ana")
        await service.append_event(
            outdated, event({"first": 1}, invocation="i1", timestamp=now + 1)
        )
        current = await reread(service, outdated)
        await service.append_event(
            current, event({"second": 2}, invocation="i2", timestamp=now + 2)
        )
        assert outdated.last_update_time < current.last_update_time
        assert "second" not in outdated.state

        with pytest.raises(StaleSessionError, match="modified in storage") as refused:
            await service.append_event(
                outdated, event({"third": 3}, invocation="i3", timestamp=now + 3)
            )
        assert isinstance(refused.value, ValueError)  # what callers of older ADKs catch
        assert [e.invocation_id for e in outdated.events] == ["i1"]

        stored = await reread(service, outdated)
        assert [e.invocation_id for e in stored.events] == ["i1", "i2"]
        assert stored.state == {"first": 1, "second": 2}


@rule(adks_own_too=False)
async def test_of_two_concurrent_appends_from_one_read_exactly_one_lands_rule(
    service: Any,
) -> None:
    async with service:
        session = await service.create_session(app_name=APP, user_id="ana")
        for round_ in range(8):
            read = await reread(service, session)
            left, right = read.model_copy(deep=True), read.model_copy(deep=True)
            base = read.last_update_time + 10
            outcomes = await asyncio.gather(
                service.append_event(
                    left, event({f"left{round_}": 1}, invocation=f"l{round_}", timestamp=base + 1)
                ),
                service.append_event(
                    right, event({f"right{round_}": 1}, invocation=f"r{round_}", timestamp=base + 2)
                ),
                return_exceptions=True,
            )
            refused = [o for o in outcomes if isinstance(o, BaseException)]
            assert len(refused) == 1, outcomes
            assert isinstance(refused[0], StaleSessionError)
            assert "modified in storage" in str(refused[0])

        stored = await reread(service, session)
        assert len(stored.events) == 8
        for round_ in range(8):
            landed = {f"left{round_}", f"right{round_}"} & stored.state.keys()
            assert len(landed) == 1, (round_, stored.state)


@rule(adks_own_too=False)
async def test_a_current_session_whose_update_time_drifted_still_appends_rule(
    service: Any,
) -> None:
    session = await service.create_session(app_name=APP, user_id="ana", session_id="a")
    await service.append_event(
        session, event(invocation="i1", timestamp=session.last_update_time + 5)
    )
    session.last_update_time -= 1e-4  # as a float that lost digits on its way through a database

    await service.append_event(
        session, event(invocation="i2", timestamp=session.last_update_time + 10)
    )
    assert [e.invocation_id for e in (await reread(service, session)).events] == ["i1", "i2"]


@rule(adks_own_too=False)
async def test_a_current_session_without_a_write_marker_still_appends_rule(service: Any) -> None:
    session = await service.create_session(app_name=APP, user_id="ana", session_id="a")
    await service.append_event(
        session, event(invocation="i1", timestamp=session.last_update_time + 5)
    )
    session._storage_update_marker = None  # as a session built by code that predates markers
    session.last_update_time -= 1e-4

    await service.append_event(
        session, event(invocation="i2", timestamp=session.last_update_time + 10)
    )
    assert [e.invocation_id for e in (await reread(service, session)).events] == ["i1", "i2"]
