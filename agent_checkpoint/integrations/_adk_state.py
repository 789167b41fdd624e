"""App and user state of the ADK session service: the deltas a session's write records of
them (``scoped_delta``), and the two states read with those deltas merged in where a newer
one has not set the key since (``app_and_user``), each a record of its own updated by
compare-and-swap."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agent_checkpoint import (
    AgentRef,
    ConflictError,
    Identity,
    OriginalInput,
    RunCheckpoint,
    Store,
)

from ._adk_known import Ids
from ._adk_records import STAMPS, STATE, Scopes, app_key, newer, stamped_state, user_key

__all__ = ["TRIES", "Merge", "app_and_user", "merge", "scoped_delta"]

TRIES = 100  # conditional writes of app or user state a call tries


def scoped_delta(scopes: Scopes, timestamp: float, write: str) -> dict[str, Any] | None:
    """What a session's write records of its app and user deltas (``SCOPED``), if any."""
    if not (scopes.app or scopes.user):
        return None
    return {"at": [timestamp, write], "app": scopes.app, "user": scopes.user}


Merge = Callable[[Store, str, str | None, str, dict[str, Any], list[Any]], dict[str, Any]]
"""``merge``'s signature: the service passes its ``_merge`` (``merge`` itself, unless a test
stops a writer there)."""


def app_and_user(
    store: Store, ids: Ids, scoped: dict[str, Any] | None, merge: Merge
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The app's and the user's state, with the deltas ``scoped`` recorded merged in
    where a newer delta has not set the key since (read alone when all are), through
    ``merge``."""
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
            state = merge(store, key, owner, ids.app, delta, stamp)
        states.append(state)
    return states[0], states[1]


def merge(
    store: Store,
    key: str,
    owner: str | None,
    app: str,
    delta: dict[str, Any],
    stamp: list[Any],
) -> dict[str, Any]:
    """The state at ``key`` with the keys of ``delta`` that no newer delta set, written by
    compare-and-swap."""
    for _ in range(TRIES):
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
        f"state {key!r}: lost {TRIES} compare-and-swap races in a row to other writers; "
        "the event is stored, its state delta for this scope is not. Try again.",
        key=key,
    )
