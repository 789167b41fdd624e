"""A Google ADK session service on any agent-checkpoint store (extra ``adk``)::

    from google.adk.runners import Runner
    from agent_checkpoint.integrations.adk import AgentCheckpointSessionService

    service = AgentCheckpointSessionService("redis://localhost:6379/0")
    runner = Runner(agent=agent, app_name="weather", session_service=service)

It implements ADK's ``BaseSessionService`` over a store URL (opened with
``open_async_store``), an ``AsyncStore`` (one per process, shared: the usual way in a server)
or a ``Store`` (run on a few threads of the service's own). As the Agents SDK session does,
it writes its logic once, synchronously, against the ``Store`` API, and runs it through
``AsyncStore.call``.

What it stores: one run record per session, under ``adk/<app>/<user>/<session id>`` (each
part with ``%`` and ``/`` escaped), owned by the ADK user id (the record's
``identity.principal``) and indexed under the agent id ``adk:<app>``. Its history holds one
message per event: the role and text of the event where it has them (a function call as a
tool call, a function response as a tool message, a thought as a thinking block), readable by
every tool of this library, and the event itself under ``adkEvent``
(``Event.model_dump(mode="json", exclude_none=True)``, as ADK's database service stores it;
where one text part holds the event's text, it is stored once, as the message's
``content``, and ``adkText`` names the part). The session's own state is in the record's
``adkSession`` field. App state (``app:`` keys) and user state (``user:`` keys) are records of
their own, ``adk-state/<app>`` and ``adk-state/<app>/<user>``, shared by every session of the
app or the user; ``temp:`` keys are never stored.

Concurrency: every session this service hands out carries the write it was read at (ADK's
own ``_storage_update_marker``, a random token each write stores). ``append_event`` writes
only if the record is still at that write, by our revisions (compare-and-swap); when another
writer appended meanwhile it raises ADK's ``StaleSessionError``, and nothing is written: get
the session again. Appends through one session object run one at a time, in the order they
were made (as ADK's database service does it), so concurrent appends on one fresh object all
land. An append runs to its end even when its caller is cancelled. When the store cannot say
whether an append landed (its reply was lost: ``BackendUnavailableError``), the record is read
back: if it names the append's write token, the append landed and returns as usual.

Keys, state scopes and events as messages are in ``_adk_records.py``. The service below is the
face: its reads over a ``Store`` are ``_adk_reads.py``'s, its writes ``_adk_writes.py``'s, app
and user state ``_adk_state.py``'s, and what it remembers of the sessions it wrote
``_adk_known.py``'s.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
import weakref
from dataclasses import dataclass
from functools import partial
from typing import Any

from google.adk.events.event import Event
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
    ListSessionsResponse,
)
from google.adk.sessions.session import Session
from pydantic_core import PydanticSerializationError

from agent_checkpoint import (
    AsyncStore,
    InvalidArgumentError,
    Store,
    open_store,
)

from . import _adk_reads as _reads
from . import _adk_writes as _writes
from ._adk_known import Ids, KnownSessions
from ._adk_records import (
    KEY_PREFIX,
    STATE_PREFIX,
    Scopes,
    agent_id,
    checked_id,
    json_of,
    listed_id,
    parsed,
    session_key,
    state_of,
    user_key,
)
from ._adk_state import merge, scoped_delta
from ._stores import OnStore, check_options, settled

__all__ = [
    "KEY_PREFIX",
    "SCHEME",
    "STATE_PREFIX",
    "AgentCheckpointSessionService",
    "SessionInfo",
    "SessionPage",
    "list_session_page",
    "register_session_schemes",
    "session_key",
]

SCHEME = "agent-checkpoint"
"""The session service URI scheme ``register_session_schemes`` registers with ADK."""


# -- listing ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """A session as ``list_session_page`` lists it: when it was last written (epoch ms), how
    many user and assistant messages with text it holds, and its stored size in bytes."""

    app_name: str
    user_id: str
    session_id: str
    updated_at: int
    message_count: int
    size: int


@dataclass(frozen=True, slots=True)
class SessionPage:
    """One page of sessions, newest first; pass ``cursor`` back for the next page (``None``:
    there is none)."""

    sessions: list[SessionInfo]
    cursor: str | None


def _page(store: Store, app: str, user: str | None, limit: int, cursor: str | None) -> SessionPage:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidArgumentError(f"limit must be a positive whole number, got {limit!r}")
    if "" in (app, user):
        return SessionPage([], None)
    found: list[SessionInfo] = []
    while True:  # each page read whole, so that its cursor is where the next one starts
        page = store.list(
            owner=user, agent_id=agent_id(app), limit=limit - len(found), cursor=cursor
        )
        for summary in page.items:
            ids = parsed(summary.key)
            if ids is not None and ids[0] == app and (user is None or ids[1] == user):
                found.append(
                    SessionInfo(*ids, summary.saved_at, summary.message_count, summary.size)
                )
        cursor = page.cursor
        if cursor is None or len(found) >= limit:
            return SessionPage(found, cursor)


def list_session_page(
    store: Store | str,
    *,
    app_name: str,
    user_id: str | None = None,
    limit: int = 50,
    cursor: str | None = None,
    **store_options: Any,
) -> SessionPage:
    """The sessions of ``app_name`` (of one user, with ``user_id``) in ``store`` (a ``Store``
    or a URL), last written first, a page of at most ``limit`` at a time, from the store's
    index: no record is read. From async code, ``await service.list_session_page(...)``."""
    app = listed_id("app_name", app_name)
    user = None if user_id is None else listed_id("user_id", user_id)
    if isinstance(store, Store):
        check_options(store, store_options)
        return _page(store, app, user, limit, cursor)
    if not isinstance(store, str):
        raise InvalidArgumentError(f"store must be a Store or a URL, not {store!r}")
    with open_store(store, **store_options) as opened:
        return _page(opened, app, user, limit, cursor)


# -- the service ------------------------------------------------------------------------------


class AgentCheckpointSessionService(OnStore, BaseSessionService):
    """ADK's ``BaseSessionService`` on an agent-checkpoint store (see the module docstring).

    ``store`` is a store URL, an ``AsyncStore`` or a ``Store``. ``store_options`` go to
    ``open_async_store`` with a URL: ``keyring=`` encrypts sessions at rest, ``ttl=``
    (seconds, Redis) lets an idle session expire.
    """

    def __init__(self, store: str | Store | AsyncStore, **store_options: Any) -> None:
        OnStore.__init__(self, store, store_options)
        self._known = KnownSessions()
        self._guard = threading.Lock()  # the locks' map; never held across I/O
        self._locks: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, weakref.WeakValueDictionary[str, asyncio.Lock]
        ] = weakref.WeakKeyDictionary()

    def __repr__(self) -> str:
        return f"AgentCheckpointSessionService({self._store!r})"

    # -- BaseSessionService -------------------------------------------------------------------

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        """A new session; ``AlreadyExistsError`` if ``session_id`` names one, and then
        nothing changes. ``app:`` and ``user:`` keys of ``state`` go to the app's and the
        user's state, ``temp:`` keys nowhere."""
        sid = str(uuid.uuid4()) if session_id is None else session_id
        ids = Ids(
            checked_id("app_name", app_name),
            checked_id("user_id", user_id),
            checked_id("session_id", sid),
        )
        scopes = Scopes.of(json_of("state", state or {}))
        return await settled(self._store.call(partial(_writes.create, self), ids, scopes))

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        """The session, or ``None``; with ``config.num_recent_events`` only that many
        newest events are read, not the whole history."""
        ids = Ids(
            checked_id("app_name", app_name),
            checked_id("user_id", user_id),
            checked_id("session_id", session_id),
        )
        recent = config.num_recent_events if config is not None else None
        after = config.after_timestamp if config is not None else None
        if recent is not None and (isinstance(recent, bool) or recent < 0):
            raise InvalidArgumentError(f"num_recent_events must be >= 0, got {recent!r}")
        return await self._store.call(partial(_reads.get, self), ids, recent, after)

    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        """Every session of the app (of one user, with ``user_id``), oldest update first, each
        with its state and no events, as ADK's own services list them: this reads each
        session's record (its head, not its history), a batch at a time. An empty
        ``app_name`` or ``user_id`` lists none, as ADK's services do. ``list_session_page``
        pages through the store's index instead, newest first, reading no record."""
        app = listed_id("app_name", app_name)
        user = None if user_id is None else listed_id("user_id", user_id)
        if "" in (app, user):
            return ListSessionsResponse()
        return await self._store.call(_reads.list_sessions, app, user)

    async def list_session_page(
        self,
        *,
        app_name: str,
        user_id: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> SessionPage:
        """The app's sessions (of one user, with ``user_id``), last written first, a page at a
        time, from the store's index alone (``list_session_page`` of the module)."""
        app = listed_id("app_name", app_name)
        user = None if user_id is None else listed_id("user_id", user_id)
        return await self._store.call(_page, app, user, limit, cursor)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Delete the session and its events (nothing if there is none); app and user state
        stay."""
        ids = Ids(
            checked_id("app_name", app_name),
            checked_id("user_id", user_id),
            checked_id("session_id", session_id),
        )
        await settled(self._store.call(partial(_writes.delete, self._known), ids))

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """The user's state in the app, keys without ``user:``."""
        key = user_key(checked_id("app_name", app_name), checked_id("user_id", user_id))
        return await self._store.call(lambda store: state_of(store.get_record(key), store))

    async def append_event(self, session: Session, event: Event) -> Event:
        """Append ``event`` and apply its state delta, if ``session`` is still what is stored
        (else ``StaleSessionError``, nothing written); partial events are not stored."""
        if event.partial:
            return event
        if not isinstance(session, Session) or not isinstance(event, Event):
            raise InvalidArgumentError("append_event takes an ADK Session and an ADK Event")
        ids = Ids(
            checked_id("app_name", session.app_name),
            checked_id("user_id", session.user_id),
            checked_id("session_id", session.id),
        )
        key = ids.key
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        try:
            dumped = event.model_dump(mode="json", exclude_none=True)
        except PydanticSerializationError as exc:
            raise InvalidArgumentError(f"the event is not JSON: {exc}; nothing was stored") from exc
        delta = dumped.get("actions", {}).get("state_delta") or {}
        async with self._lock(key):
            marker = session._storage_update_marker
            last = session.events[-1].id if session.events else None
            append = partial(_writes.append, self)
            write = await settled(
                self._store.call(append, ids, marker, last, dumped, delta, event.timestamp)
            )
            session._storage_update_marker = write
            session.last_update_time = event.timestamp
            self._commit(session, event)
        scoped = scoped_delta(Scopes.of(delta), event.timestamp, write)
        if scoped is not None:
            apply = partial(_writes.apply_scoped, self)
            await settled(self._store.call(apply, ids, write, scoped))
        return event

    def _commit(self, session: Session, event: Event) -> None:
        """The event into the in-memory session, as ``BaseSessionService.append_event`` does:
        through ``_commit_event_to_session`` from google-adk 2.10, its two steps inline
        before (2.7 to 2.9 have no such method)."""
        commit = getattr(super(), "_commit_event_to_session", None)
        if commit is not None:
            commit(session, event)
            return
        self._update_session_state(session, event)
        session.events.append(event)

    # every write of app or user state goes through here (a writer stopped there in tests)
    _merge = staticmethod(merge)

    # -- one call at a time per session, in this process ---------------------------------------

    def _lock(self, key: str) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        with self._guard:
            locks = self._locks.get(loop)
            if locks is None:
                locks = self._locks[loop] = weakref.WeakValueDictionary()
            lock = locks.get(key)
            if lock is None:
                lock = locks[key] = asyncio.Lock()
            return lock


# -- ADK's session service URIs ---------------------------------------------------------------

_STORE_SCHEMES = ("file", "memory", "redis", "rediss", "postgresql", "s3")


def _from_uri(uri: str, **kwargs: Any) -> AgentCheckpointSessionService:
    kwargs.pop("agents_dir", None)  # what ADK's CLI passes every factory
    if uri.startswith((SCHEME + ":", SCHEME + "+")):
        url = uri[len(SCHEME) + 1 :]
    else:
        raise InvalidArgumentError(f"not an {SCHEME} URI: {uri!r}")
    if not url:
        raise InvalidArgumentError(f"{uri!r} names no store: {SCHEME}:<store URL or path>")
    return AgentCheckpointSessionService(url, **kwargs)


def register_session_schemes() -> list[str]:
    """Register with ADK's service registry the session service URIs ``agent-checkpoint:<any
    store URL or path>`` and ``agent-checkpoint+<scheme>://...`` (file, memory, redis, rediss,
    postgresql, s3), so that ADK's CLI and web server (``--session_service_uri``) run on a
    store of this library. Call it from the ``services.py`` of the agents' folder, which ADK
    loads. Returns the schemes registered; calling it again changes nothing."""
    from google.adk.cli.service_registry import get_service_registry

    schemes = [SCHEME, *(f"{SCHEME}+{s}" for s in _STORE_SCHEMES)]
    registry = get_service_registry()
    for scheme in schemes:
        registry.register_session_service(scheme, _from_uri)
    return schemes
