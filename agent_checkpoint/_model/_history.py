"""Histories typed from JSON, remembered so that a history that grew is typed only where it grew.

An agent that keeps its checkpoint as JSON (a resumed run, a service that receives dicts) puts
``RunCheckpoint.from_json(doc)`` after every message, with ``doc["history"]`` one message
longer each time. Typing the whole history again on every put costs N ``Message`` builds per
put, and the Store's incremental write (``_appender.py``) then compares N pairs of distinct,
equal messages field by field before it reaches the one new message: O(N^2) over a
conversation, 5-10x the cost of the same loop with ``Message`` values.

So typing a history looks for a remembered one that shares its first messages and reuses those
``Message`` objects; only the messages past the shared prefix are typed. The prefix is found
by comparing the history's JSON *bytes* (one ``orjson.dumps`` of the new history, C speed)
with the bytes each remembered history was typed from: the caller may have changed a dict in
place since, or decoded fresh ones from a request body, and equal bytes are the same JSON with
the same key order at every depth, which the round trip must keep (spec §2.1; comparing dicts
as values would take ``{"b":1,"a":2}`` for ``{"a":2,"b":1}`` and write the earlier order
back). A message the caller changed, dropped or reordered ends the prefix and is typed again,
with everything after it.

The reused messages are the very objects the Store remembered from the last put, so its check
that the new history extends the stored one is a pass over pointers, and the put encodes only
the new messages, as the ``Message`` loop does.

Remembering costs an encoding of each message, so a history is remembered only from the second time a
history of its conversation is typed: a one-off read (``Store.get``) pays nothing extra.
Histories are looked up by their conversation (the checkpoint's default store key); a
conversation may hold several (a run resumed twice from the same point), so up to
``_PER_CONVERSATION`` are kept for each, and ``CAPACITY`` conversations at most (the Store
remembers as many last writes), the least recently used dropped.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from ._struct import JsonObject
from .messages import Message

CAPACITY = 256
_PER_CONVERSATION = 4
_SEEN = 4096
"""Conversations remembered as typed once (by hash), so that their next history is kept."""


@dataclass(frozen=True, slots=True)
class _Typed:
    """A typed history and the JSON bytes it was typed from: ``encoded`` is the history as
    orjson writes it, ``ends[i]`` the offset just past message ``i`` in it."""

    encoded: bytes
    ends: list[int]
    messages: tuple[Message, ...]

    def common(self, encoded: bytes) -> int:
        """How many of the first messages of the history ``encoded`` are byte for byte (key
        orders included, at every depth) this history's."""
        mine = self.encoded
        if encoded.startswith(mine[:-1]) and encoded[len(mine) - 1 : len(mine)] in (b",", b"]"):
            return len(self.ends)  # the new history extends this one
        lo, hi = 0, min(len(encoded), len(mine))
        while lo < hi:  # the longest common prefix, by halves (each compare a memcmp)
            mid = (lo + hi + 1) // 2
            if encoded[:mid] == mine[:mid]:
                lo = mid
            else:
                hi = mid - 1
        # a message is shared when all its bytes are: a JSON object is never a strict prefix
        # of another, so equal bytes up to its end are the same message
        return bisect.bisect_right(self.ends, lo)


def _ends(items: Sequence[JsonObject], start: int) -> list[int]:
    """The end offsets of ``items`` in the encoded history, the first starting at ``start``."""
    out, at = [], start
    for item in items:
        at += len(orjson.dumps(item))
        out.append(at)
        at += 1  # the comma
    return out


class Histories:
    """The histories typed lately (one per process: ``TYPED``)."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._by_conversation: OrderedDict[str, list[_Typed]] = OrderedDict()
        self._seen: OrderedDict[int, None] = OrderedDict()
        self._lock = threading.Lock()

    def type(self, items: Sequence[JsonObject], conversation: str) -> tuple[Message, ...]:
        """``Message.from_json`` of each of ``items``, reusing the messages of a history of
        ``conversation`` remembered for the prefix they share."""
        if not items:
            return ()
        with self._lock:
            candidates = self._by_conversation.get(conversation)
            if candidates is None and not self._seen_before(conversation):
                return Message.from_json_many(items)
        try:
            encoded = orjson.dumps(items)
        except TypeError:  # not JSON at all: typing reports it
            return Message.from_json_many(items)
        base, shared = None, 0
        for typed in candidates or ():  # most recent first
            k = typed.common(encoded)
            if k > shared:
                base, shared = typed, k
                if k == len(typed.ends):
                    break  # the new history extends it
        messages = Message.from_json_many(items[shared:])
        ends = base.ends[:shared] if base is not None else []
        ends += _ends(items[shared:], ends[-1] + 1 if ends else 1)
        if base is not None:
            messages = base.messages[:shared] + messages
        extended = base if base is not None and shared == len(base.ends) else None
        self._remember(conversation, extended, _Typed(encoded, ends, messages))
        return messages

    def _seen_before(self, conversation: str) -> bool:
        """Whether a history of ``conversation`` was typed before; notes it if not."""
        mark = hash(conversation)
        if mark in self._seen:
            return True
        self._seen[mark] = None
        if len(self._seen) > _SEEN:
            self._seen.popitem(last=False)
        return False

    def _remember(self, conversation: str, extended: _Typed | None, typed: _Typed) -> None:
        with self._lock:
            kept = self._by_conversation.pop(conversation, [])
            # The history the new one extends is dropped: the new one serves its readers too.
            kept = [t for t in kept if t is not extended]
            self._by_conversation[conversation] = [typed, *kept][:_PER_CONVERSATION]
            while len(self._by_conversation) > self.capacity:
                self._by_conversation.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._by_conversation.clear()
            self._seen.clear()


TYPED = Histories()
