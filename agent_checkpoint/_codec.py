"""Bytes <-> envelopes: what a backend stores and what a reader gets back.

The stored bytes are the JSON envelope, encoded with orjson (key order kept), after the door and
the writer's checks (``_writable.py``). Decoding applies the migration chain to the envelope's
data before the door, and reports anything that does not decode, or nests past
``writable.MAX_DEPTH``, as ``UnreadableEnvelopeError``, never as absent. ``summarize`` derives
the fields a backend indexes (owner, agent, failure point, message count) from the envelope on
the way in.
"""

from __future__ import annotations

import itertools
import re
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import orjson

from ._container import Sealer
from ._envelope import (
    PAUSED_RUN,
    Envelope,
    check_envelope,
    envelope_owner,
    preview_pieces,
    read_format,
    unreadable,
    validate_envelope,
)
from ._migrations import DEFAULT, Migrations
from ._model import Json
from ._writable import check_tree, check_writable, dumps, too_deep, unreadable_depth

__all__ = ["GAP", "Codec", "Digest", "count_messages", "digest_of", "encode_parts", "join_parts"]

_NOT_AN_OBJECT = re.compile(rb"[ \t\r\n]*[^ \t\r\n{]")

GAP = b"\x00"
"""Where a head's history array contents are cut out (JSON text never holds a NUL byte)."""

_TOKEN = f"agent-checkpoint-history-{uuid.uuid4().hex}"
_HOLE = orjson.dumps([_TOKEN])


# Immutable values made on every put, as named tuples: a third of a frozen dataclass's cost.
class Digest(NamedTuple):
    """What a backend indexes about one envelope, derived from its content."""

    run_id: str
    saved_at: int
    owner: str | None
    agent_id: str | None
    failure_phase: str | None
    failure_iteration: int | None
    message_count: int


def _conversation(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    data = doc["data"]
    return data["conversation"] if doc.get("format") == PAUSED_RUN else data  # type: ignore[no-any-return]


def _check_writable(doc: Mapping[str, Any]) -> None:
    """The writer's checks past the JSON (``_writable.check_writable``) of an envelope the door
    accepted."""
    where = "data.conversation" if doc.get("format") == PAUSED_RUN else "data"
    check_writable(doc, _conversation(doc), where)


def count_messages(history: Iterable[Mapping[str, Any]]) -> int:
    """The messages a summary counts: user and assistant turns that say something."""
    return len([m for m in history if m.get("role") in ("user", "assistant") and m.get("content")])


def digest_of(doc: Mapping[str, Any], *, message_count: int | None = None) -> Digest:
    """The index digest of an envelope; ``message_count`` if the caller counted already."""
    return _digest(doc, message_count)


def _digest(doc: Mapping[str, Any], message_count: int | None = None) -> Digest:
    conv = _conversation(doc)
    agent = conv.get("agent")
    fp = conv.get("failurePoint")
    phase = fp.get("phase") if isinstance(fp, dict) else None
    iteration = fp.get("iteration") if isinstance(fp, dict) else None
    count = count_messages(conv["history"]) if message_count is None else message_count
    saved = doc.get("savedAt")
    return Digest(
        run_id=conv["runId"],
        saved_at=saved if isinstance(saved, int) and not isinstance(saved, bool) else 0,
        owner=envelope_owner(doc),
        agent_id=agent.get("id")
        if isinstance(agent, dict) and isinstance(agent.get("id"), str)
        else None,
        failure_phase=phase if isinstance(phase, str) else ("unknown" if fp is not None else None),
        failure_iteration=iteration
        if isinstance(iteration, int) and not isinstance(iteration, bool)
        else None,
        message_count=count,
    )


def encode_parts(
    doc: Mapping[str, Any], messages: list[Any], *, first: int = 0
) -> tuple[bytes, memoryview]:
    """The one encoder of envelope bytes: ``doc`` (an envelope, checked) as its *head*, its
    bytes with the history array's contents cut out at ``GAP``, and ``messages`` (the history
    from message ``first`` on) as those contents, the messages joined by commas. Joined
    (``join_parts``), they are exactly the bytes of the whole envelope; every write path, whole
    or growing, gets its bytes here. ``doc``'s own history is not read, nor is ``doc`` changed."""
    conversation = dict(_conversation(doc))
    conversation["history"] = [_TOKEN]
    data = (
        conversation
        if doc.get("format") != PAUSED_RUN
        else {**doc["data"], "conversation": conversation}
    )
    before, hole, after = dumps({**doc, "data": data}).partition(_HOLE)
    assert hole, "the history placeholder must appear once in the envelope"
    where = "data.conversation.history" if doc.get("format") == PAUSED_RUN else "data.history"
    # a view, not a copy: the history may be megabytes, and its bytes are copied once, where
    # they are joined to the head
    contents = memoryview(dumps(messages, level=3, where=where, first=first))[1:-1]
    return b"".join((before, b"[", GAP, b"]", after)), contents


def join_parts(head: bytes, contents: bytes | memoryview) -> bytes:
    """The whole envelope's bytes from ``encode_parts``' two parts."""
    before, _, after = head.partition(GAP)
    return b"".join((before, contents, after))


class Codec:
    """Encodes envelopes to stored bytes and back, upgrading old versions on read.

    With a ``Sealer`` that has keys or compression, the bytes are a self-describing container
    (``_container.py``); reads open containers and plain envelopes alike.
    """

    def __init__(self, migrations: Migrations = DEFAULT, sealer: Sealer | None = None) -> None:
        self.migrations = migrations
        self.sealer = sealer or Sealer()

    def encode(self, envelope: Envelope | Mapping[str, Json], key: str) -> tuple[bytes, Digest]:
        """Validate an envelope (object or JSON) stored under ``key``; return its stored bytes
        and index digest."""
        doc = envelope.to_json() if isinstance(envelope, Envelope) else dict(envelope)
        check_tree(doc)  # JSON first, as on reading: the door sees only what can be stored
        validate_envelope(doc)
        _check_writable(doc)
        head, contents = encode_parts(doc, _conversation(doc)["history"])
        return self.sealer.seal(join_parts(head, contents), key), _digest(doc)

    def check_stored(self, body: bytes, key: str) -> Digest:
        """The index digest of encoded bytes handed over whole (``Store.put_record``), after
        the checks ``encode`` makes: the bytes must open and decode under this codec, and the
        envelope pass the door and the writer's checks."""
        doc = self._upgraded(body, key)
        validate_envelope(doc, key)
        _check_writable(doc)
        return _digest(doc)

    def reseal(self, body: bytes, key: str) -> bytes:
        """The same envelope under this codec's current container settings (for ``rekey``)."""
        return self.sealer.seal(self.sealer.open(body, key), key)

    def decode_json(
        self, body: bytes, key: str | None = None, *, last: int | None = None
    ) -> dict[str, Json]:
        """The envelope as plain JSON, upgraded and checked; unreadable bytes raise. With
        ``last``, its history holds only its newest ``last`` entries (``body`` may hold only
        some of the history: ``Segmented.load_tail``; they are checked, not the others)."""
        doc = self._upgraded(body, key)
        validate_envelope(doc, key)
        if last is None:
            return doc
        conversation = dict(_conversation(doc))
        history = conversation["history"]
        conversation["history"] = history[max(len(history) - last, 0) :]
        paused = doc.get("format") == PAUSED_RUN
        data = {**doc["data"], "conversation": conversation} if paused else conversation
        return {**doc, "data": data}

    def _upgraded(self, body: bytes, key: str | None) -> dict[str, Json]:
        pieces = self.sealer.pieces(body, key)
        first = next(pieces, b"")
        if _NOT_AN_OBJECT.match(first):  # no need to parse, or even hold, the rest
            raise unreadable(None, key, preview=preview_pieces(itertools.chain([first], pieces)))
        body = b"".join(itertools.chain([first], pieces))  # one piece: no copy
        try:
            doc, broken = orjson.loads(body), False
        except orjson.JSONDecodeError:
            broken = True  # and let the error go: it holds a decoded copy of the bytes
        if broken:
            raise unreadable(body, key)
        if too_deep(doc):
            raise unreadable_depth(doc, key)
        fmt = read_format(doc, key)
        if self.migrations.needs_upgrade(doc.get("data") if fmt != PAUSED_RUN else None):
            doc = {**doc, "data": self.migrations.upgrade(doc["data"])}
        elif fmt == PAUSED_RUN and isinstance(doc.get("data"), dict):
            conv = doc["data"].get("conversation")
            if self.migrations.needs_upgrade(conv):
                doc = {
                    **doc,
                    "data": {**doc["data"], "conversation": self.migrations.upgrade(conv)},
                }
        return doc  # type: ignore[no-any-return]

    def decode(self, body: bytes, key: str | None = None) -> Envelope:
        """The envelope as typed values."""
        return check_envelope(self._upgraded(body, key), key)

    def digest(self, doc: Mapping[str, Any]) -> Digest:
        return _digest(doc)
