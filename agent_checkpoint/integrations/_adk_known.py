"""What ``AgentCheckpointSessionService`` knows of the sessions it wrote or read whole
(``KnownSessions``): each one's revision, write token, history and state, so that an append
through the session it handed out writes without reading the record first. Bounded, least
recently used first out."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any

from agent_checkpoint import Message

from ._adk_records import session_key

__all__ = ["Ids", "Known", "KnownSessions"]

_KNOWN = 256  # sessions whose history the service keeps, to append without reading it


@dataclass(frozen=True, slots=True)
class Known:
    """A session's record as the service last wrote or read it whole."""

    revision: int
    write: str
    history: tuple[Message, ...]
    state: dict[str, Any]  # the session's own
    asked: str  # the last user message's text: the record's originalInput
    scoped: dict[str, Any] | None = None  # its SCOPED, unless the service has applied it


@dataclass(frozen=True, slots=True)
class Ids:
    app: str
    user: str
    sid: str

    @property
    def key(self) -> str:
        return session_key(self.app, self.user, self.sid)


class KnownSessions:
    """The sessions a service knows, by key; one lock, never held across I/O."""

    __slots__ = ("_guard", "_known")

    def __init__(self) -> None:
        self._known: OrderedDict[str, Known] = OrderedDict()
        self._guard = threading.Lock()

    def recall(self, key: str) -> Known | None:
        with self._guard:
            known = self._known.get(key)
            if known is not None:
                self._known.move_to_end(key)
            return known

    def remember(self, key: str, known: Known) -> None:
        with self._guard:
            self._known[key] = known
            self._known.move_to_end(key)
            while len(self._known) > _KNOWN:
                self._known.popitem(last=False)

    def forget(self, key: str) -> None:
        with self._guard:
            self._known.pop(key, None)

    def applied(self, key: str, write: str) -> None:
        """Remember that the write ``write`` of ``key`` has its app and user deltas applied."""
        known = self.recall(key)
        if known is not None and known.write == write:
            self.remember(key, replace(known, scoped=None))
