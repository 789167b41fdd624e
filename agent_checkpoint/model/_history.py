"""Histories typed from JSON, remembered so that a history that grew is typed only where it grew.

An agent that keeps its checkpoint as JSON (a resumed run, a service that receives dicts) puts
``RunCheckpoint.from_json(doc)`` after every message, with ``doc["history"]`` one message
longer each time. Typing the whole history again on every put costs N ``Message`` builds per
put, and the Store's incremental write (``appender.py``) then compares N pairs of distinct,
equal messages field by field before it reaches the one new message: O(N^2) over a
conversation, 5-10x the cost of the same loop with ``Message`` values.

So typing a history looks for a remembered one that shares its first messages and reuses those
``Message`` objects; only the messages past the shared prefix are typed. The prefix is found
by comparing the messages as JSON values, not by identity: the caller may have changed a dict
in place since, or decoded fresh ones from a request body. The comparison is one C-level list
comparison of the new messages with a private copy of the JSON each remembered message was
typed from (dicts and lists copied, strings shared, so a dict compared with its own copy
checks a pointer per string). A message the caller changed, dropped or whose keys it reordered ends the prefix
and is typed again, with everything after it: the C-level comparison is followed by one of
the messages' top-level key orders. Keys reordered inside a nested object (a tool call's
arguments) with every value equal compare as the same JSON value, and keep the earlier
typing's order there.

The reused messages are the very objects the Store remembered from the last put, so its check
that the new history extends the stored one is a pass over pointers, and the put encodes only
the new messages, as the ``Message`` loop does.

The copy costs about half a typing, so a history is remembered only from the second time a
history of its conversation is typed: a one-off read (``Store.get``) pays nothing extra.
Histories are looked up by their conversation (the checkpoint's default store key); a
conversation may hold several (a run resumed twice from the same point), so up to
``_PER_CONVERSATION`` are kept for each, and ``CAPACITY`` conversations at most (the Store
remembers as many last writes), the least recently used dropped.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from operator import eq

from ._struct import JsonObject, copied
from .messages import Message

CAPACITY = 256
_PER_CONVERSATION = 4
_SEEN = 4096
"""Conversations remembered as typed once (by hash), so that their next history is kept."""


@dataclass(frozen=True, slots=True)
class _Typed:
    """A typed history and the JSON it was typed from (private copies)."""

    sources: list[JsonObject]
    orders: list[tuple[str, ...]]
    messages: tuple[Message, ...]

    def common(self, items: Sequence[JsonObject]) -> int:
        """How many of the first ``items`` equal this history's messages, keys in order."""
        n = min(len(self.sources), len(items))
        head = list(items[:n])
        # Key orders lazily: each tuple is freed once compared, not N made per put.
        if head == self.sources[:n] and all(map(eq, map(tuple, head), self.orders)):
            return n
        for i in range(n):  # they part somewhere: find where
            if head[i] != self.sources[i] or tuple(head[i]) != self.orders[i]:
                return i
        return n


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
        base, shared = None, 0
        for typed in candidates or ():  # most recent first
            k = typed.common(items)
            if k > shared:
                base, shared = typed, k
                if k == len(typed.sources):
                    break  # the new history extends it
        fresh = items[shared:]
        messages = Message.from_json_many(fresh)
        sources = [copied(m) for m in fresh]
        orders = [tuple(m) for m in fresh]
        if base is not None:
            messages = base.messages[:shared] + messages
            sources = base.sources[:shared] + sources
            orders = base.orders[:shared] + orders
        extended = base if base is not None and shared == len(base.sources) else None
        self._remember(conversation, extended, _Typed(sources, orders, messages))
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
