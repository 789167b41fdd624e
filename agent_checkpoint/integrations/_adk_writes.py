"""The ADK session service's writes over a ``Store``: a new session (``create``), an event
appended by compare-and-swap on the write the session was read at (``append``), the app and
user deltas it recorded applied after it (``apply_scoped``), and a session deleted. Each
keeps the service's ``KnownSessions`` up to date."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.sessions.session import Session

from agent_checkpoint import (
    AgentRef,
    BackendUnavailableError,
    CheckpointError,
    ConflictError,
    Identity,
    Message,
    OriginalInput,
    RunCheckpoint,
    Store,
)

from ._adk_known import Ids, Known, KnownSessions
from ._adk_records import (
    EVENT,
    SCOPED,
    SESSION,
    Scopes,
    agent_id,
    merged,
    scoped_of,
    to_message,
    unreadable,
)
from ._adk_state import TRIES, app_and_user, scoped_delta

if TYPE_CHECKING:
    from .adk import AgentCheckpointSessionService

__all__ = ["append", "apply_scoped", "create", "delete"]


def create(
    service: AgentCheckpointSessionService, store: Store, ids: Ids, scopes: Scopes
) -> Session:
    known = service._known
    now = time.time()
    write = uuid.uuid4().hex
    scoped = scoped_delta(scopes, now, write)
    record = _record(ids, (), scopes.session, now, write, "", scoped)
    try:
        summary = store.put(record, key=ids.key, create_only=True)
    except ConflictError as exc:
        raise AlreadyExistsError(f"Session with id {ids.sid} already exists.") from exc
    known.remember(ids.key, Known(summary.revision, write, (), scopes.session, "", scoped))
    app, user = app_and_user(store, ids, scoped, service._merge)
    if scoped is not None:
        known.applied(ids.key, write)
    session = Session(
        id=ids.sid,
        app_name=ids.app,
        user_id=ids.user,
        state=merged(scopes.session, app, user),
        last_update_time=now,
    )
    session._storage_update_marker = write
    return session


def delete(known: KnownSessions, store: Store, ids: Ids) -> None:
    key = ids.key
    try:
        for _ in range(TRIES):
            head = store.head(key)
            if head is None:
                return
            try:
                store.delete(key, if_revision=head.revision)
                return
            except ConflictError:
                continue  # written meanwhile: delete what is there now
        raise ConflictError(
            f"session {ids.sid!r}: delete lost {TRIES} races in a row to other writers; "
            "it was not deleted. Try again.",
            key=key,
        )
    finally:
        known.forget(key)


def append(
    service: AgentCheckpointSessionService,
    store: Store,
    ids: Ids,
    marker: str | None,
    last: str | None,
    event: dict[str, Any],
    delta: dict[str, Any],
    timestamp: float,
) -> str:
    key = ids.key
    known_sessions = service._known
    known = _current(known_sessions, store, ids, marker, last)
    if known.scoped is not None:
        # the previous event's app and user deltas, not known to be applied: they would
        # leave the record with this write, so they are applied first (again is harmless)
        app_and_user(store, ids, known.scoped, service._merge)
    message = to_message(event)
    history = (*known.history, message)  # the same objects: the store appends
    scopes = Scopes.of(delta)
    state = {**known.state, **scopes.session}
    asked = message.content if message.role == "user" and message.content else known.asked
    write = uuid.uuid4().hex
    scoped = scoped_delta(scopes, timestamp, write)
    record = _record(ids, history, state, timestamp, write, asked, scoped)
    try:
        summary = store.put(record, key=key, if_revision=known.revision)
    except ConflictError as exc:
        known_sessions.forget(key)
        if type(exc) is ConflictError:
            if store.head(key) is None:
                raise SessionNotFoundError(f"Session {ids.sid} not found.") from exc
            raise stale(ids.sid) from exc
        raise
    except BackendUnavailableError:
        known_sessions.forget(key)
        if _landed(known_sessions, store, ids, write):  # its reply was lost, not the write
            return write
        raise
    except BaseException:
        known_sessions.forget(key)  # the outcome may be unknown: read the record again
        raise
    known_sessions.remember(key, Known(summary.revision, write, history, state, asked, scoped))
    return write


def _current(
    known_sessions: KnownSessions, store: Store, ids: Ids, marker: str | None, last: str | None
) -> Known:
    """The session's record an append extends: as the service knows it at the session's
    write ``marker``, else read; ``StaleSessionError`` where another write came since."""
    known = known_sessions.recall(ids.key)
    if known is None or marker is None or known.write != marker:
        known = _read(known_sessions, store, ids)
        if marker is None:
            # a session no service of this kind handed out: as ADK's database service
            # takes one, if its newest event is the stored newest event
            newest = known.history[-1].extra.get(EVENT) if known.history else None
            stored = newest.get("id") if isinstance(newest, dict) else None
            if stored != last:
                raise stale(ids.sid)
        elif known.write != marker:
            raise stale(ids.sid)
    return known


def _landed(known: KnownSessions, store: Store, ids: Ids, write: str) -> bool:
    """Whether the record names the write ``write`` (read again, and remembered)."""
    try:
        return _read(known, store, ids).write == write
    except CheckpointError:
        return False  # unreadable now too: the outcome stays unknown


def apply_scoped(
    service: AgentCheckpointSessionService,
    store: Store,
    ids: Ids,
    write: str,
    scoped: dict[str, Any],
) -> None:
    """Apply the app and user deltas ``scoped`` that the session's write ``write``
    recorded (again, if a later write of the service applied them first: harmless)."""
    app_and_user(store, ids, scoped, service._merge)
    service._known.applied(ids.key, write)


def _read(known_sessions: KnownSessions, store: Store, ids: Ids) -> Known:
    key = ids.key
    record = store.get_record(key)
    if record is None:
        raise SessionNotFoundError(f"Session {ids.sid} not found.")
    conversation = store.decode(record).conversation
    meta = conversation.extra.get(SESSION)
    if not isinstance(meta, dict):
        raise unreadable(f"record {key!r} holds no ADK session ({SESSION})")
    state = meta.get("state")
    known = Known(
        record.summary.revision,
        str(meta.get("write")),
        conversation.history,
        dict(state) if isinstance(state, dict) else {},
        conversation.original_input.message,
        scoped_of(meta),
    )
    known_sessions.remember(key, known)
    return known


def _record(
    ids: Ids,
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


def stale(session_id: str) -> StaleSessionError:
    return StaleSessionError(
        f"session {session_id!r} was modified in storage since it was loaded (another "
        "writer appended to it): get the session again before appending more events"
    )
