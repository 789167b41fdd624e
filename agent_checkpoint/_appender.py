"""Incremental writes of growing histories, through the store's segment layer (``_segments.py``).

The Store remembers, per key, the history it last wrote (the message objects themselves), that
record's revision and the digest of its segments. A put whose history starts with exactly
those messages encodes and validates only the new ones, and asks the backend to append them;
the backend proves the extension against the stored revision and digest, so anything that
changed the record meanwhile (another writer, a delete, a rewrite) makes the append a no-op and
the Store falls back to a full write. Memory is bounded: the last ``capacity`` keys are kept.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import NamedTuple

from ._codec import GAP, Digest, count_messages, digest_of, encode_parts, join_parts
from ._model import Message, RunCheckpoint
from ._model.messages import messages_json
from ._segment_format import Split, chain
from ._validation import validate_checkpoint, validate_messages
from ._writable import check_tree, check_writable
from .backends._base import Summary

__all__ = ["Appender", "Encoded", "Tail"]


# Immutable values made on every put, as named tuples: a third of a frozen dataclass's cost.
class Tail(NamedTuple):
    """What the Store last wrote under a key: enough to prove and encode an extension."""

    revision: int
    digest: str
    history: tuple[Message, ...]
    history_size: int  # bytes of the history array's contents
    message_count: int


class Encoded(NamedTuple):
    """One put, encoded: the split, its digest fields, and the tail it leaves if it lands."""

    split: Split
    digest: Digest
    size: int
    history_size: int
    message_count: int
    extends: Tail | None  # the tail this write appends to; None for a full write

    def body(self) -> bytes:
        """The assembled bytes of a full write (``extends`` is None); for an append, the head
        with only the new segment."""
        return join_parts(self.split.head, self.split.segment)


def _extends(tail: Tail, history: tuple[Message, ...]) -> bool:
    n = len(tail.history)
    # Tuple equality compares element by element in C and takes an element that is the very
    # same object as equal without calling __eq__: for a history that grew by appending, this
    # is a pass over pointers (4 us for 1,000 messages), and a real comparison otherwise.
    return len(history) >= n and tail.history == history[:n]


class Appender:
    def __init__(self, capacity: int = 256) -> None:
        self.capacity = capacity
        self._tails: OrderedDict[str, Tail] = OrderedDict()
        self._lock = threading.Lock()

    def tail(self, key: str) -> Tail | None:
        with self._lock:
            tail = self._tails.get(key)
            if tail is not None:
                self._tails.move_to_end(key)
            return tail

    def remember(self, key: str, tail: Tail) -> None:
        with self._lock:
            self._tails[key] = tail
            self._tails.move_to_end(key)
            while len(self._tails) > self.capacity:
                self._tails.popitem(last=False)

    def forget(self, key: str) -> None:
        with self._lock:
            self._tails.pop(key, None)

    def encode(self, checkpoint: RunCheckpoint, saved_at: int, tail: Tail | None) -> Encoded:
        """Encode ``checkpoint`` as a split: only the messages past ``tail`` when its history
        extends the tail's, else all of them. Validates exactly as the door would."""
        history = checkpoint.history
        if tail is not None and not _extends(tail, history):
            tail = None
        start = len(tail.history) if tail is not None else 0
        data = checkpoint._head_json()
        check_tree(data, level=2, where="data")
        validate_checkpoint(data)
        new = messages_json(history[start:], start)
        check_tree(new, level=3, where="data.history", first=start)
        validate_messages(new, start)
        envelope = {"format": "conversation-v1", "data": data, "savedAt": saved_at}
        check_writable(envelope, data, "data")
        head, segment = encode_parts(envelope, new, first=start)
        if tail is not None:
            history_size = tail.history_size + (1 if tail.history_size and segment else 0)
            history_size += len(segment)
            message_count = tail.message_count + count_messages(new)
            digest = chain(tail.digest, segment)
        else:
            history_size, message_count = len(segment), count_messages(new)
            digest = chain("", segment)
        summary_digest = digest_of(envelope, message_count=message_count)
        return Encoded(
            split=Split(head, segment, digest),
            digest=summary_digest,
            size=len(head) - len(GAP) + history_size,
            history_size=history_size,
            message_count=message_count,
            extends=tail,
        )

    def landed(
        self, key: str, checkpoint: RunCheckpoint, encoded: Encoded, summary: Summary
    ) -> None:
        self.remember(
            key,
            Tail(
                revision=summary.revision,
                digest=encoded.split.digest,
                history=checkpoint.history,
                history_size=encoded.history_size,
                message_count=encoded.message_count,
            ),
        )
