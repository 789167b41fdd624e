"""An OpenAI Agents SDK session on any agent-checkpoint store (extra ``openai-agents``)::

    from agents import Runner
    from agent_checkpoint.integrations.openai_agents import AgentCheckpointSession

    session = AgentCheckpointSession("user-42", "redis://localhost:6379/0")
    result = await Runner.run(agent, "Hello", session=session)

It implements the SDK's ``Session`` protocol over a store URL (opened with
``open_async_store``), an ``AsyncStore`` (one per process, shared by every session: the
usual way in a server) or a ``Store`` (run on a few threads of the session's own). The logic
is written once, synchronously, against the ``Store`` API; the async methods run that same
code through ``AsyncStore.call``, where the store runs its own I/O (the asyncio drivers on
Redis and PostgreSQL, the store's own threads elsewhere).

What it stores: one run record per session, under the key ``openai-agents/<session id>``,
owned by ``owner`` (the record's ``identity.principal``) and indexed under the agent id
``openai-agents``. Its history holds one message per item: the role and text of the item
where it has them (a function call as a tool call, its output as a tool message, a reasoning
item's summary as a thinking block), readable by every tool of this library, and the item
under ``responsesItem`` (its text stored once: as the message's ``content``, see ``TEXT``),
which ``get_items`` gives back exactly as it was added.

Concurrency: ``add_items`` appends (through the store's segment layer, a call writes only
its items when this process wrote the record last), conditionally on the revision the
session last read or wrote; a lost race reads the record again and retries, so concurrent
writers, in this process or others, lose no item. ``pop_item`` is the same compare-and-swap:
of concurrent pops, each gets a different item. Calls that change one session object run one
at a time (an ``asyncio.Lock`` per event loop), and each runs to its end even when its caller
is cancelled, as the SDK's own sessions do.

A lost reply: each ``add_items`` call's items carry a token of the call (``WRITE``, on the
last of them). When the store cannot say whether the write landed (its reply was lost, and the
retries did not settle it: ``BackendUnavailableError``, ``WriteOutcomeUnknownError``), the
call reads the session back and looks for its token: there, the call is done; absent, it
writes again, conditionally on what it read, so a late landing of the first write and the
second cannot both land. Only when the session cannot be read either is the error raised; a
retry of that call with the same items (on the same session object) reuses its token and
stores them only if they are not there yet. So a retried call never stores an item twice.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os
import threading
import uuid
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar, cast

import orjson
from agents.items import TResponseInputItem
from agents.memory import SessionSettings

from agent_checkpoint import (
    AgentRef,
    AsyncStore,
    BackendUnavailableError,
    ConflictError,
    Identity,
    InvalidArgumentError,
    Message,
    OriginalInput,
    OwnershipConflictError,
    Record,
    RunCheckpoint,
    Store,
    Summary,
    ThinkingBlock,
    ToolCall,
    open_store,
)

from ._stores import OnStore, settled
from .keys import OPENAI_AGENTS_PREFIX

if TYPE_CHECKING:
    from agents.memory import Session

__all__ = [
    "AGENT_ID",
    "DEFAULT_OWNER",
    "KEY_PREFIX",
    "AgentCheckpointSession",
    "SessionInfo",
    "SessionPage",
    "list_sessions",
]

KEY_PREFIX = OPENAI_AGENTS_PREFIX
"""A session's record is stored under ``KEY_PREFIX + session_id``."""

AGENT_ID = "openai-agents"
"""The agent id every session's record is indexed under."""

DEFAULT_OWNER = "openai-agents"
"""The principal a session's record is owned by when no ``owner`` is given."""

ITEM = "responsesItem"
"""The message field that keeps the SDK's item."""

TEXT = "responsesText"
"""The message field that says where in the item its text was (a path of keys and indexes):
the item keeps ``null`` there, and the text is the message's ``content`` alone."""

WRITE = "sessionWrite"
"""The message field holding the token of the ``add_items`` call that stored it (on the last
message of the call's items): how a call whose reply was lost finds out whether it landed."""

# Conditional writes a call tries. Each one lost means another writer's landed (progress, not a
# livelock); 16 writers on one session once lost 100 in a row.
_TRIES = 1000
_UNSETTLED_TRIES = 3  # writes a call tries whose outcome was unknown and read back as not landed
_MAX_NESTING = 200  # levels an item may nest (the stored record nests it 5 levels deep)
_INT_RANGE = (-(2**63), 2**64 - 1)  # what every backend's JSON holds

T = TypeVar("T")


# -- items and messages ---------------------------------------------------------------------


def _refused(path: Sequence[str | int], why: str) -> InvalidArgumentError:
    where = "".join(f"[{step!r}]" for step in path[1:])
    return InvalidArgumentError(f"add_items: items[{path[0]}]{where} {why}; nothing was stored")


def _plain(value: Any, path: list[str | int]) -> Any:
    """A JSON copy of ``value`` (found at ``path`` in the items): the session keeps what was
    added, whatever the caller does with its objects afterwards. Refuses, naming the place,
    what JSON cannot hold as it is."""
    if value is None or value is True or value is False:
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        if not _INT_RANGE[0] <= value <= _INT_RANGE[1]:
            raise _refused(path, f"is the integer {value}, outside the 64 bits JSON stores hold")
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _refused(path, f"is {value!r}, which JSON cannot hold")
        return float(value)
    if len(path) > _MAX_NESTING:
        raise _refused(path, f"nests deeper than {_MAX_NESTING} levels")
    if isinstance(value, Mapping):
        copy: dict[str, Any] = {}
        for key, inner in value.items():
            if not isinstance(key, str):
                raise _refused(path, f"has the key {key!r}, and a JSON object's keys are strings")
            path.append(key)
            copy[str.__str__(key)] = _plain(inner, path)
            path.pop()
        return copy
    if isinstance(value, (list, tuple)):
        items = []
        for i, inner in enumerate(value):
            path.append(i)
            items.append(_plain(inner, path))
            path.pop()
        return items
    raise _refused(path, f"is a {type(value).__name__}, which JSON cannot hold")


def _checked(items: object) -> list[dict[str, Any]]:
    """The items ``add_items`` was given, as JSON copies; refused whole, naming what is wrong,
    before anything is written."""
    if not isinstance(items, Sequence) or isinstance(items, (str, bytes, bytearray)):
        raise InvalidArgumentError(
            f"add_items takes a list of items (dicts), not a {type(items).__name__}; "
            "nothing was stored"
        )
    copies = []
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise _refused(
                [i], f"is a {type(item).__name__}, not a dict (the SDK's input items are dicts)"
            )
        if not isinstance(item.get("type"), str) and not isinstance(item.get("role"), str):
            raise _refused(
                [i], "has neither a 'type' nor a 'role' string, so it is no Responses input item"
            )
        copies.append(cast(dict[str, Any], _plain(item, [i])))
    return copies


def _text(content: Any) -> str:
    """The text of a message's ``content`` or a tool output: a string, or its text parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = []
    for part in content:
        if isinstance(part, dict):
            text = part.get("text", part.get("refusal"))
            if isinstance(text, str):
                parts.append(text)
    return "".join(parts)


def _call(item: dict[str, Any]) -> ToolCall:
    raw = item.get("arguments")
    try:
        args = orjson.loads(raw) if isinstance(raw, str) and raw.strip() else {}
    except orjson.JSONDecodeError:
        args = None
    if isinstance(args, dict):
        return ToolCall(str(item.get("call_id", "")), str(item.get("name", "")), args)
    # as the transcript converter keeps them: arguments that are no JSON object, verbatim
    return ToolCall(
        str(item.get("call_id", "")),
        str(item.get("name", "")),
        {},
        provider_meta={"arguments": raw},
    )


def _text_path(item: dict[str, Any], field: str) -> list[str | int] | None:
    """Where the item's text is, when one string holds all of it: ``field`` itself, or the
    ``text`` of its one text part."""
    value = item.get(field)
    if isinstance(value, str):
        return [field] if value else None
    if not isinstance(value, list):
        return None
    found: list[str | int] | None = None
    for i, part in enumerate(value):
        if isinstance(part, dict) and isinstance(part.get("text", part.get("refusal")), str):
            if found is not None:
                return None  # several parts: the text is their concatenation
            key = "text" if "text" in part else "refusal"
            found = [field, i, key] if part[key] else None
    return found


def _with(value: Any, path: Sequence[str | int], text: Any) -> Any:
    """A copy of ``value`` with ``text`` at ``path`` (the containers on the path copied)."""
    if not path:
        return text
    copy: Any = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = _with(value[path[0]], path[1:], text)
    return copy


def _holds_null(item: Any, path: Any) -> bool:
    """Whether ``path`` leads to a ``null`` in ``item`` (else the record was edited by hand,
    and the item is given back as it is)."""
    if not isinstance(path, list) or not path:
        return False
    for step in path:
        in_object = isinstance(item, dict) and isinstance(step, str) and step in item
        in_array = isinstance(item, list) and type(step) is int and 0 <= step < len(item)
        if not (in_object or in_array):
            return False
        item = item[step]
    return item is None


def _texted(role: str, item: dict[str, Any], field: str, **fields: Any) -> Message:
    """A message whose text is the item's ``field``; the item keeps ``null`` in its place
    (see ``TEXT``), so the text is stored once."""
    text = _text(item.get(field))
    path = _text_path(item, field)
    if path is None:
        return Message(role, text, extra={ITEM: item}, **fields)
    return Message(role, text, extra={ITEM: _with(item, path, None), TEXT: path}, **fields)


def _to_message(item: dict[str, Any]) -> Message:
    """Our message for an item (a JSON copy): role and text where the item has them, the item
    under ``ITEM``."""
    kind = item.get("type")
    role = item.get("role")
    extra = {ITEM: item}
    if isinstance(role, str) and kind in (None, "message"):
        return _texted(role, item, "content")
    if kind == "function_call":
        return Message("assistant", "", tool_calls=(_call(item),), extra=extra)
    if isinstance(kind, str) and kind.endswith("_output"):
        call_id = item.get("call_id")
        return _texted(
            "tool", item, "output", tool_call_id=call_id if isinstance(call_id, str) else None
        )
    if kind == "reasoning":
        summary = "\n\n".join(_text([part]) for part in item.get("summary") or ())
        blocks = (ThinkingBlock("thinking", summary, summary=True),) if summary else None
        return Message("assistant", "", thinking_blocks=blocks, extra=extra)
    return Message("assistant", "", extra=extra)  # the model's other calls (web search...)


def _items_of(message: Message) -> list[dict[str, Any]]:
    """The items a stored message stands for: the one this session kept, or, for a message
    another tool wrote, items made of its role, text and tool calls."""
    kept = message.extra.get(ITEM)
    if isinstance(kept, dict):
        path = message.extra.get(TEXT)
        if path is not None and _holds_null(kept, path):
            kept = _with(kept, path, message.content)
        return [kept]
    if message.role == "tool":
        return [
            {
                "type": "function_call_output",
                "call_id": message.tool_call_id or "",
                "output": message.content,
            }
        ]
    role = message.role if message.role in ("user", "system", "developer", "assistant") else "user"
    items: list[dict[str, Any]] = []
    if message.content or not message.tool_calls:
        items.append({"role": role, "content": message.content})
    for call in message.tool_calls or ():
        items.append(
            {
                "type": "function_call",
                "call_id": call.id,
                "name": call.name,
                "arguments": orjson.dumps(call.args).decode(),
            }
        )
    return items


def _token() -> str:
    return uuid.uuid4().hex


def _holds_write(history: Sequence[Message], token: str) -> bool:
    """Whether ``history`` holds the items of the ``add_items`` call ``token`` names."""
    return any(message.extra.get(WRITE) == token for message in reversed(history))


def _latest(history: Sequence[Message], limit: int | None) -> list[TResponseInputItem]:
    """The last ``limit`` items of ``history`` (all with ``None``), oldest first, as copies."""
    if limit is None:
        found = [item for message in history for item in _items_of(message)]
    else:
        found = []
        for message in reversed(history):
            if len(found) >= limit:
                break
            found.extend(reversed(_items_of(message)))
        found = found[:limit]
        found.reverse()
    return cast(list[TResponseInputItem], orjson.loads(orjson.dumps(found)))


# -- listing ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """A session as ``list_sessions`` lists it: when it was last written (epoch ms), how many
    user and assistant messages with text it holds, and its stored size in bytes."""

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


def _sessions(store: Store, owner: str, limit: int, cursor: str | None) -> SessionPage:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InvalidArgumentError(f"limit must be a positive whole number, got {limit!r}")
    found: list[SessionInfo] = []
    while True:  # each page read whole, so that its cursor is where the next one starts
        page = store.list(owner=owner, agent_id=AGENT_ID, limit=limit - len(found), cursor=cursor)
        found.extend(
            SessionInfo(s.key[len(KEY_PREFIX) :], s.saved_at, s.message_count, s.size)
            for s in page.items
            if s.key.startswith(KEY_PREFIX)
        )
        cursor = page.cursor
        if cursor is None or len(found) >= limit:
            return SessionPage(found, cursor)


def list_sessions(
    store: Store | str,
    *,
    owner: str = DEFAULT_OWNER,
    limit: int = 50,
    cursor: str | None = None,
    **store_options: Any,
) -> SessionPage:
    """The sessions of ``owner`` in ``store`` (a ``Store`` or a URL), last written first, a
    page of at most ``limit`` at a time, from the store's index: no record is read. From
    async code, ``await session.list_sessions()`` lists those of the session's owner."""
    if isinstance(store, Store):
        if store_options:
            raise InvalidArgumentError("store options go with a store URL, not a store")
        return _sessions(store, owner, limit, cursor)
    if not isinstance(store, str):
        raise InvalidArgumentError(f"store must be a Store or a URL, not {store!r}")
    with open_store(store, **store_options) as opened:
        return _sessions(opened, owner, limit, cursor)


# -- the session ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Seen:
    """The session's record as this object last read or wrote it."""

    revision: int | None  # None: no record
    history: tuple[Message, ...]
    asked: str  # the last user message's text: the record's originalInput


_NONE = _Seen(None, (), "")


def _looks_swapped(session_id: str, store: str) -> bool:
    """Whether ``(session_id, store)`` reads as ``(store, session_id)``: the id is a store URL
    or an existing folder, and the store is a path that names nothing yet (opening it would
    make a new disk store named after the session)."""
    if "://" in store or os.path.exists(store):
        return False
    return "://" in session_id or os.path.isdir(session_id)


def _settings(given: SessionSettings | Mapping[str, Any] | None) -> SessionSettings:
    """The SDK's ``SessionSettings`` for what a session was given: itself, a dict of its fields
    (as the SDK's own sessions take it), or ``None`` for the defaults."""
    if given is None:
        return SessionSettings()
    if isinstance(given, SessionSettings):
        return given
    if isinstance(given, Mapping):
        known = {field.name for field in dataclasses.fields(SessionSettings)}
        unknown = sorted(str(name) for name in given if name not in known)
        if unknown:
            raise InvalidArgumentError(
                f"Unknown session settings: {', '.join(unknown)} (known: {', '.join(sorted(known))})"
            )
        return SessionSettings(**given)
    raise InvalidArgumentError(
        f"session_settings must be the SDK's SessionSettings or a dict of its fields, got {given!r}"
    )


class AgentCheckpointSession(OnStore):
    """The Agents SDK's ``Session`` on an agent-checkpoint store (see the module docstring).

    ``session_id`` names the conversation; ``store`` is a store URL, an ``AsyncStore`` or a
    ``Store``. ``owner`` is the principal the session's record is owned by: a session owned
    by another is refused (``OwnershipConflictError``), and ``list_sessions`` lists one
    owner's sessions. ``store_options`` go to ``open_async_store`` with a URL: ``keyring=``
    encrypts the items at rest, ``ttl=`` (seconds, Redis) lets an idle session expire.
    ``session_settings`` is the SDK's (its ``limit`` is ``get_items``' default), or a dict of
    its fields, as ``SQLiteSession`` takes it (an unknown field is refused by name).
    """

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        session_id: str,
        store: str | Store | AsyncStore,
        *,
        owner: str = DEFAULT_OWNER,
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
        **store_options: Any,
    ) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise InvalidArgumentError(f"session_id must be a non-empty string, got {session_id!r}")
        if not session_id.isprintable():
            raise InvalidArgumentError(
                f"session_id {session_id!r} holds a control or non-printable character"
            )
        if not isinstance(owner, str) or not owner or not owner.isprintable():
            raise InvalidArgumentError(f"owner must be a non-empty printable string, got {owner!r}")
        if isinstance(store, str) and _looks_swapped(session_id, store):
            raise InvalidArgumentError(
                f"AgentCheckpointSession(session_id, store): the session id comes first, and "
                f"{session_id!r} looks like a store ({'a URL' if '://' in session_id else 'a folder'})"
                f" while the store {store!r} does not exist; was the order swapped?"
            )
        self.session_id = session_id
        self.owner = owner
        self.session_settings = _settings(session_settings)
        self.key = KEY_PREFIX + session_id
        # a Store given is never closed here (that would close the caller's store): its
        # threads end when this session is collected
        OnStore.__init__(self, store, store_options)
        self._seen: _Seen | None = None  # unknown until read or written
        self._unsettled: tuple[str, bytes] | None = None  # the token and items of a failed add
        self._guard = threading.Lock()  # the per-loop locks' map; never held across I/O
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )

    def __repr__(self) -> str:
        return f"AgentCheckpointSession({self.session_id!r}, owner={self.owner!r})"

    # -- the Session protocol -----------------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The latest ``limit`` items, oldest first (all of them with ``None``, unless
        ``session_settings.limit`` says otherwise), as they were added."""
        if limit is None and self.session_settings is not None:
            limit = self.session_settings.limit
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 0
        ):
            raise InvalidArgumentError(
                f"get_items: limit must be a whole number >= 0 or None, got {limit!r}"
            )
        return await self._store.call(self._get_items, limit)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items``; stored when the call returns. Items that JSON cannot hold are
        refused (``InvalidArgumentError`` naming the item and where in it), none stored. A
        call that raised, retried with the same items, stores them only if the first did not
        (see the module docstring)."""
        copies = _checked(items)
        if not copies:
            return
        fingerprint = orjson.dumps(copies)
        pending, self._unsettled = self._unsettled, None
        token = pending[0] if pending is not None and pending[1] == fingerprint else _token()
        messages = tuple(_to_message(item) for item in copies)
        last = messages[-1]
        messages = (*messages[:-1], replace(last, extra={**last.extra, WRITE: token}))
        try:
            await self._changing(self._add_items, messages, token, pending is not None)
        except BaseException:
            self._unsettled = (token, fingerprint)  # whether it landed, its retry finds out
            raise

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the latest item and return it (``None`` if the session holds none); of
        concurrent pops, each gets a different item."""
        return await self._changing(self._pop_item)

    async def clear_session(self) -> None:
        """Delete the session's record, and with it every item."""
        await self._changing(self._clear_session)

    async def list_sessions(self, *, limit: int = 50, cursor: str | None = None) -> SessionPage:
        """The sessions of this session's owner in its store, last written first
        (``list_sessions`` of the module, on this session's store)."""
        return await self._store.call(_sessions, self.owner, limit, cursor)

    # -- writing, one call at a time per session object --------------------------------------

    def _lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        with self._guard:
            lock = self._locks.get(loop)
            if lock is None:
                lock = self._locks[loop] = asyncio.Lock()
            return lock

    async def _changing(self, fn: Callable[..., T], *args: Any) -> T:
        async with self._lock():
            return await settled(self._store.call(fn, *args))

    # -- the one implementation, over a Store ----------------------------------------------

    def _get_items(self, store: Store, limit: int | None) -> list[TResponseInputItem]:
        if limit is None or self._seen is not None:
            return _latest(self._fresh(store).history, limit)
        # A session this object has not read: only the newest ``limit`` messages (each stands
        # for one item or more), so the last few of a long session cost what a short one does.
        found = store.get_json(self.key, last=limit)
        if found is None:
            return []
        data: dict[str, Any] = found["data"]
        identity = data.get("identity")
        owner = identity.get("principal") if isinstance(identity, dict) else None
        if isinstance(owner, str) and owner != self.owner:
            raise self._owned_by(owner)
        return _latest(Message.from_json_many(data["history"]), limit)

    def _add_items(
        self, store: Store, messages: tuple[Message, ...], token: str, retry: bool
    ) -> None:
        seen = self._seen if self._seen is not None else self._read(store)
        asked = next((m.content for m in reversed(messages) if m.role == "user"), None)
        unsettled = 0
        look = retry  # a new token cannot be stored yet: no need to look for it (O(history))
        for _ in range(_TRIES):
            if look and _holds_write(seen.history, token):
                return  # an earlier write of this call (or of the call it retries) landed
            look = True
            history = seen.history + messages  # the same objects: the store appends
            written = _Seen(None, history, seen.asked if asked is None else asked)
            try:
                if self._wrote(store, seen, written):
                    return
            except BackendUnavailableError:
                # its reply was lost: the record says whether it landed (a read that fails
                # too leaves the outcome unknown, and the error goes to the caller)
                seen = self._read(store)
                unsettled += 1
                if unsettled >= _UNSETTLED_TRIES and not _holds_write(seen.history, token):
                    raise
                continue
            seen = self._read(store)
        raise self._contended("add_items", "none of its items was stored")

    def _pop_item(self, store: Store) -> TResponseInputItem | None:
        seen = self._seen
        if seen is None or not seen.history:  # an empty session may have been added to since
            seen = self._fresh(store)
        for _ in range(_TRIES):
            if not seen.history:
                return None
            items = _items_of(seen.history[-1])
            # a message another tool wrote may stand for several items: the others stay
            history = seen.history[:-1] + tuple(_to_message(item) for item in items[:-1])
            asked = next((m.content for m in reversed(history) if m.role == "user"), "")
            if self._wrote(store, seen, _Seen(None, history, asked)):
                return cast(TResponseInputItem, orjson.loads(orjson.dumps(items[-1])))
            seen = self._read(store)
        raise self._contended("pop_item", "no item was removed")

    def _clear_session(self, store: Store) -> None:
        for _ in range(_TRIES):
            head = store.head(self.key)
            if head is not None:
                self._check_owner(head)
                try:
                    store.delete(self.key, if_revision=head.revision)
                except ConflictError:
                    continue  # written meanwhile: delete what is there now
            self._seen = _NONE
            return
        raise self._contended("clear_session", "the session was not cleared")

    def _wrote(self, store: Store, seen: _Seen, written: _Seen) -> bool:
        """Write ``written``'s history if the record is still at ``seen``'s revision; whether
        it was (``False``: another writer's landed first)."""
        record = RunCheckpoint(
            run_id=self.session_id,
            history=written.history,
            last_completed_iteration=0,
            original_input=OriginalInput(written.asked),
            identity=Identity(self.session_id, principal=self.owner),
            agent=AgentRef(AGENT_ID),
        )
        try:
            if seen.revision is None:
                summary = store.put(record, key=self.key, create_only=True)
            else:
                summary = store.put(record, key=self.key, if_revision=seen.revision)
        except OwnershipConflictError:
            self._seen = None
            raise
        except ConflictError:
            return False
        except BaseException:
            self._seen = None  # the outcome may be unknown: read the record again
            raise
        self._seen = _Seen(summary.revision, written.history, written.asked)
        return True

    def _fresh(self, store: Store) -> _Seen:
        """The record as stored now: what this object knows of it if its revision is still
        the stored one (one ``head``), else read again."""
        seen = self._seen
        if seen is None:
            return self._read(store)
        head = store.head(self.key)
        if head is None:
            self._seen = _NONE
            return _NONE
        if head.revision == seen.revision:
            self._check_owner(head)
            return seen
        return self._read(store)

    def _read(self, store: Store) -> _Seen:
        record: Record | None = store.get_record(self.key)
        if record is None:
            seen = _NONE
        else:
            self._check_owner(record.summary)
            conversation = store.decode(record).conversation
            seen = _Seen(
                record.summary.revision,
                conversation.history,
                conversation.original_input.message,
            )
        self._seen = seen
        return seen

    def _check_owner(self, summary: Summary) -> None:
        if summary.owner is not None and summary.owner != self.owner:
            raise self._owned_by(summary.owner)

    def _owned_by(self, owner: str) -> OwnershipConflictError:
        return OwnershipConflictError(
            f"session {self.session_id!r} is owned by {owner!r}; this session "
            f"object reads and writes as {self.owner!r} (owner=)",
            key=self.key,
        )

    def _contended(self, call: str, outcome: str) -> ConflictError:
        self._seen = None
        return ConflictError(
            f"session {self.session_id!r}: {call} lost {_TRIES} compare-and-swap races in a "
            f"row to other writers; {outcome}. Try again.",
            key=self.key,
        )


if TYPE_CHECKING:
    _: type[Session] = AgentCheckpointSession  # it implements the protocol
