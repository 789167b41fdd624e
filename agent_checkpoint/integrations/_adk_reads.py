"""The ADK session service's reads over a ``Store``: a session with its newest events
(``get``), and every session of an app with its state and no events (``list_sessions``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from google.adk.sessions.base_session_service import ListSessionsResponse
from google.adk.sessions.session import Session

from agent_checkpoint import Store

from ._adk_known import Ids
from ._adk_records import (
    SESSION,
    agent_id,
    app_key,
    event_of,
    latest,
    merged,
    parsed,
    scoped_of,
    state_of,
    timestamp_of,
    unreadable,
    user_key,
)
from ._adk_state import app_and_user

if TYPE_CHECKING:
    from .adk import AgentCheckpointSessionService

__all__ = ["get", "list_sessions"]

_FIRST_READ = 16  # events the first read of a session filtered by time takes
_LIST_PAGE = 500  # sessions list_sessions reads in one batch


def get(
    service: AgentCheckpointSessionService,
    store: Store,
    ids: Ids,
    recent: int | None,
    after: float | None,
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
    app, user = app_and_user(store, ids, scoped_of(meta), service._merge)
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


def list_sessions(store: Store, app: str, user: str | None) -> ListSessionsResponse:
    metas: list[tuple[Ids, dict[str, Any]]] = []
    # each record's head, no history, read with its listing (one request a session on S3)
    for summary, found in store.iter_json(
        owner=user, agent_id=agent_id(app), page_size=_LIST_PAGE, last=0
    ):
        found_ids = parsed(summary.key)
        if found_ids is None or found_ids[0] != app or user not in (None, found_ids[1]):
            continue
        meta = found["data"].get(SESSION)
        if isinstance(meta, dict):
            metas.append((Ids(*found_ids), meta))
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
