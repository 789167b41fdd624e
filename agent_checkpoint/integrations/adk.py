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
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
    ListSessionsResponse,
)
from google.adk.sessions.session import Session
from pydantic_core import PydanticSerializationError

from agent_checkpoint import (
    AgentRef,
    AsyncStore,
    BackendUnavailableError,
    CheckpointError,
    ConflictError,
    Identity,
    InvalidArgumentError,
    Message,
    OriginalInput,
    RunCheckpoint,
    Store,
    open_store,
)

from ._adk_records import (
    EVENT,
    KEY_PREFIX,
    SCOPED,
    SESSION,
    STAMPS,
    STATE,
    STATE_PREFIX,
    Scopes,
    agent_id,
    app_key,
    checked_id,
    event_of,
    json_of,
    latest,
    listed_id,
    merged,
    newer,
    parsed,
    scoped_of,
    session_key,
    stamped_state,
    state_of,
    timestamp_of,
    to_message,
    unreadable,
    user_key,
)
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

_TRIES = 100  # conditional writes of app or user state a call tries
_KNOWN = 256  # sessions whose history the service keeps, to append without reading it
_FIRST_READ = 16  # events the first read of a session filtered by time takes
_LIST_PAGE = 500  # sessions list_sessions reads in one batch


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


@dataclass(frozen=True, slots=True)
class _Known:
    """A session's record as this service last wrote or read it whole."""

    revision: int
    write: str
    history: tuple[Message, ...]
    state: dict[str, Any]  # the session's own
    asked: str  # the last user message's text: the record's originalInput
    scoped: dict[str, Any] | None = None  # its SCOPED, unless this service has applied it


@dataclass(frozen=True, slots=True)
class _Ids:
    app: str
    user: str
    sid: str

    @property
    def key(self) -> str:
        return session_key(self.app, self.user, self.sid)


def _scoped_of(scopes: Scopes, timestamp: float, write: str) -> dict[str, Any] | None:
    """What a session's write records of its app and user deltas (``SCOPED``), if any."""
    if not (scopes.app or scopes.user):
        return None
    return {"at": [timestamp, write], "app": scopes.app, "user": scopes.user}


def _stale(session_id: str) -> StaleSessionError:
    return StaleSessionError(
        f"session {session_id!r} was modified in storage since it was loaded (another "
        "writer appended to it): get the session again before appending more events"
    )


class AgentCheckpointSessionService(OnStore, BaseSessionService):
    """ADK's ``BaseSessionService`` on an agent-checkpoint store (see the module docstring).

    ``store`` is a store URL, an ``AsyncStore`` or a ``Store``. ``store_options`` go to
    ``open_async_store`` with a URL: ``keyring=`` encrypts sessions at rest, ``ttl=``
    (seconds, Redis) lets an idle session expire.
    """

    def __init__(self, store: str | Store | AsyncStore, **store_options: Any) -> None:
        OnStore.__init__(self, store, store_options)
        self._known: OrderedDict[str, _Known] = OrderedDict()
        self._guard = threading.Lock()  # the maps below; never held across I/O
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
        ids = _Ids(
            checked_id("app_name", app_name),
            checked_id("user_id", user_id),
            checked_id("session_id", sid),
        )
        scopes = Scopes.of(json_of("state", state or {}))
        return await settled(self._store.call(self._create, ids, scopes))

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
        ids = _Ids(
            checked_id("app_name", app_name),
            checked_id("user_id", user_id),
            checked_id("session_id", session_id),
        )
        recent = config.num_recent_events if config is not None else None
        after = config.after_timestamp if config is not None else None
        if recent is not None and (isinstance(recent, bool) or recent < 0):
            raise InvalidArgumentError(f"num_recent_events must be >= 0, got {recent!r}")
        return await self._store.call(self._get, ids, recent, after)

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
        return await self._store.call(self._list, app, user)

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
        ids = _Ids(
            checked_id("app_name", app_name),
            checked_id("user_id", user_id),
            checked_id("session_id", session_id),
        )
        await settled(self._store.call(self._delete, ids))

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
        ids = _Ids(
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
            write = await settled(
                self._store.call(self._append, ids, marker, last, dumped, delta, event.timestamp)
            )
            session._storage_update_marker = write
            session.last_update_time = event.timestamp
            self._commit(session, event)
        scoped = _scoped_of(Scopes.of(delta), event.timestamp, write)
        if scoped is not None:
            await settled(self._store.call(self._apply_scoped, ids, write, scoped))
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

    # -- the one implementation, over a Store ----------------------------------------------

    def _create(self, store: Store, ids: _Ids, scopes: Scopes) -> Session:
        now = time.time()
        write = uuid.uuid4().hex
        scoped = _scoped_of(scopes, now, write)
        record = self._record(ids, (), scopes.session, now, write, "", scoped)
        try:
            summary = store.put(record, key=ids.key, create_only=True)
        except ConflictError as exc:
            raise AlreadyExistsError(f"Session with id {ids.sid} already exists.") from exc
        self._remember(ids.key, _Known(summary.revision, write, (), scopes.session, "", scoped))
        app, user = self._scoped(store, ids, scoped)
        if scoped is not None:
            self._applied(ids.key, write)
        session = Session(
            id=ids.sid,
            app_name=ids.app,
            user_id=ids.user,
            state=merged(scopes.session, app, user),
            last_update_time=now,
        )
        session._storage_update_marker = write
        return session

    def _get(
        self, store: Store, ids: _Ids, recent: int | None, after: float | None
    ) -> Session | None:
        key = ids.key
        last = recent if recent is not None or after is None else _FIRST_READ
        while True:
            found = store.get_json(key, last=last)
            if found is None:
                return None
            data: dict[str, Any] = found["data"]
            history: list[Any] = data["history"]
            whole = last is None or len(history) < last
            # filtered by time alone: read further back until an older event shows
            if recent is not None or whole or timestamp_of(history[0]) < (after or 0.0):
                break
            last = (last or _FIRST_READ) * 4
        meta = data.get(SESSION)
        if not isinstance(meta, dict):
            raise unreadable(f"record {key!r} holds no ADK session ({SESSION})")
        saved = float(found.get("savedAt", 0)) / 1000
        kept = latest(history, recent, after)
        start = len(history) - len(kept)
        events = [event_of(key, start + i, entry, saved) for i, entry in enumerate(kept)]
        app, user = self._scoped(store, ids, scoped_of(meta))
        session = Session(
            id=ids.sid,
            app_name=ids.app,
            user_id=ids.user,
            state=merged(meta.get("state") or {}, app, user),
            events=events,
            last_update_time=float(meta.get("lastUpdateTime") or saved),
        )
        session._storage_update_marker = meta.get("write")
        return session

    def _list(self, store: Store, app: str, user: str | None) -> ListSessionsResponse:
        metas: list[tuple[_Ids, dict[str, Any]]] = []
        # each record's head, no history, read with its listing (one request a session on S3)
        for summary, found in store.iter_json(
            owner=user, agent_id=agent_id(app), page_size=_LIST_PAGE, last=0
        ):
            found_ids = parsed(summary.key)
            if found_ids is None or found_ids[0] != app or user not in (None, found_ids[1]):
                continue
            meta = found["data"].get(SESSION)
            if isinstance(meta, dict):
                metas.append((_Ids(*found_ids), meta))
        users = sorted({ids.user for ids, _ in metas})
        records = store.get_records([app_key(app), *(user_key(app, u) for u in users)])
        app_state = state_of(records[0], store)
        user_states = {u: state_of(r, store) for u, r in zip(users, records[1:], strict=True)}
        sessions = []
        for ids, meta in metas:
            session = Session(
                id=ids.sid,
                app_name=ids.app,
                user_id=ids.user,
                state=merged(meta.get("state") or {}, app_state, user_states[ids.user]),
                last_update_time=float(meta.get("lastUpdateTime") or 0.0),
            )
            session._storage_update_marker = meta.get("write")
            sessions.append(session)
        sessions.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=sessions)

    def _delete(self, store: Store, ids: _Ids) -> None:
        key = ids.key
        try:
            for _ in range(_TRIES):
                head = store.head(key)
                if head is None:
                    return
                try:
                    store.delete(key, if_revision=head.revision)
                    return
                except ConflictError:
                    continue  # written meanwhile: delete what is there now
            raise ConflictError(
                f"session {ids.sid!r}: delete lost {_TRIES} races in a row to other writers; "
                "it was not deleted. Try again.",
                key=key,
            )
        finally:
            self._forget(key)

    def _append(
        self,
        store: Store,
        ids: _Ids,
        marker: str | None,
        last: str | None,
        event: dict[str, Any],
        delta: dict[str, Any],
        timestamp: float,
    ) -> str:
        key = ids.key
        known = self._recall(key)
        if known is None or marker is None or known.write != marker:
            known = self._read(store, ids)
            if marker is None:
                # a session no service of this kind handed out: as ADK's database service
                # takes one, if its newest event is the stored newest event
                newest = known.history[-1].extra.get(EVENT) if known.history else None
                stored = newest.get("id") if isinstance(newest, dict) else None
                if stored != last:
                    raise _stale(ids.sid)
            elif known.write != marker:
                raise _stale(ids.sid)
        if known.scoped is not None:
            # the previous event's app and user deltas, not known to be applied: they would
            # leave the record with this write, so they are applied first (again is harmless)
            self._scoped(store, ids, known.scoped)
        message = to_message(event)
        history = (*known.history, message)  # the same objects: the store appends
        scopes = Scopes.of(delta)
        state = {**known.state, **scopes.session}
        asked = message.content if message.role == "user" and message.content else known.asked
        write = uuid.uuid4().hex
        scoped = _scoped_of(scopes, timestamp, write)
        record = self._record(ids, history, state, timestamp, write, asked, scoped)
        try:
            summary = store.put(record, key=key, if_revision=known.revision)
        except ConflictError as exc:
            self._forget(key)
            if type(exc) is ConflictError:
                if store.head(key) is None:
                    raise SessionNotFoundError(f"Session {ids.sid} not found.") from exc
                raise _stale(ids.sid) from exc
            raise
        except BackendUnavailableError:
            self._forget(key)
            if self._landed(store, ids, write):  # its reply was lost, not the write
                return write
            raise
        except BaseException:
            self._forget(key)  # the outcome may be unknown: read the record again
            raise
        self._remember(key, _Known(summary.revision, write, history, state, asked, scoped))
        return write

    def _landed(self, store: Store, ids: _Ids, write: str) -> bool:
        """Whether the record names the write ``write`` (read again, and remembered)."""
        try:
            return self._read(store, ids).write == write
        except CheckpointError:
            return False  # unreadable now too: the outcome stays unknown

    def _apply_scoped(self, store: Store, ids: _Ids, write: str, scoped: dict[str, Any]) -> None:
        """Apply the app and user deltas ``scoped`` that the session's write ``write``
        recorded (again, if a later write of this service applied them first: harmless)."""
        self._scoped(store, ids, scoped)
        self._applied(ids.key, write)

    def _applied(self, key: str, write: str) -> None:
        """Remember that the write ``write`` of ``key`` has its app and user deltas applied."""
        known = self._recall(key)
        if known is not None and known.write == write:
            self._remember(key, replace(known, scoped=None))

    def _scoped(
        self, store: Store, ids: _Ids, scoped: dict[str, Any] | None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The app's and the user's state, with the deltas ``scoped`` recorded merged in
        where a newer delta has not set the key since (read alone when all are)."""
        app_at, user_at = app_key(ids.app), user_key(ids.app, ids.user)
        records = store.get_records([app_at, user_at])
        stamp = scoped.get("at") if scoped is not None else None
        states: list[dict[str, Any]] = []
        for key, record, owner, scope in (
            (app_at, records[0], None, "app"),
            (user_at, records[1], ids.user, "user"),
        ):
            state, stamps = stamped_state(record, store)
            delta = scoped.get(scope) if scoped is not None else None
            if (
                isinstance(delta, dict)
                and isinstance(stamp, list)
                and any(newer(stamp, stamps.get(k)) for k in delta)
            ):
                state = self._merge(store, key, owner, ids.app, delta, stamp)
            states.append(state)
        return states[0], states[1]

    def _merge(
        self,
        store: Store,
        key: str,
        owner: str | None,
        app: str,
        delta: dict[str, Any],
        stamp: list[Any],
    ) -> dict[str, Any]:
        for _ in range(_TRIES):
            record = store.get_record(key)
            state, stamps = stamped_state(record, store)
            fresh = [k for k in delta if newer(stamp, stamps.get(k))]
            if not fresh:
                return state
            for k in fresh:
                state[k], stamps[k] = delta[k], stamp
            checkpoint = RunCheckpoint(
                run_id=key,
                history=(),
                last_completed_iteration=0,
                original_input=OriginalInput(""),
                identity=Identity(key, principal=owner),
                agent=AgentRef(f"adk-state:{app}"),
                extra={STATE: state, STAMPS: stamps},
            )
            try:
                if record is None:
                    store.put(checkpoint, key=key, create_only=True)
                else:
                    store.put(checkpoint, key=key, if_revision=record.summary.revision)
                return state
            except ConflictError as exc:
                if type(exc) is not ConflictError:
                    raise
        raise ConflictError(
            f"state {key!r}: lost {_TRIES} compare-and-swap races in a row to other writers; "
            "the event is stored, its state delta for this scope is not. Try again.",
            key=key,
        )

    def _read(self, store: Store, ids: _Ids) -> _Known:
        key = ids.key
        record = store.get_record(key)
        if record is None:
            raise SessionNotFoundError(f"Session {ids.sid} not found.")
        conversation = store.decode(record).conversation
        meta = conversation.extra.get(SESSION)
        if not isinstance(meta, dict):
            raise unreadable(f"record {key!r} holds no ADK session ({SESSION})")
        state = meta.get("state")
        known = _Known(
            record.summary.revision,
            str(meta.get("write")),
            conversation.history,
            dict(state) if isinstance(state, dict) else {},
            conversation.original_input.message,
            scoped_of(meta),
        )
        self._remember(key, known)
        return known

    def _record(
        self,
        ids: _Ids,
        history: Sequence[Message],
        state: dict[str, Any],
        updated: float,
        write: str,
        asked: str,
        scoped: dict[str, Any] | None,
    ) -> RunCheckpoint:
        meta: dict[str, Any] = {
            "appName": ids.app,
            "userId": ids.user,
            "id": ids.sid,
            "state": state,
            "lastUpdateTime": updated,
            "write": write,
        }
        if scoped is not None:
            meta[SCOPED] = scoped
        return RunCheckpoint(
            run_id=ids.sid,
            history=tuple(history),
            last_completed_iteration=0,
            original_input=OriginalInput(asked),
            identity=Identity(ids.sid, principal=ids.user),
            agent=AgentRef(agent_id(ids.app)),
            extra={SESSION: meta},
        )

    # -- what the service knows of the sessions it wrote --------------------------------------

    def _recall(self, key: str) -> _Known | None:
        with self._guard:
            known = self._known.get(key)
            if known is not None:
                self._known.move_to_end(key)
            return known

    def _remember(self, key: str, known: _Known) -> None:
        with self._guard:
            self._known[key] = known
            self._known.move_to_end(key)
            while len(self._known) > _KNOWN:
                self._known.popitem(last=False)

    def _forget(self, key: str) -> None:
        with self._guard:
            self._known.pop(key, None)


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
