"""Gemini CLI sessions (``~/.gemini/tmp/<project>/chats/session-*.json`` and ``.jsonl``) to
canonical turns.

Two forms hold the same messages. The older one is one JSON object: ``sessionId``,
``projectHash``, ``startTime``, ``lastUpdated`` and ``messages[]``, read element by element
(``JsonDocument``). The newer one is append-only JSON Lines: a first line of the same
metadata, then one message per line; a message written again under the same ``id`` (a reply
growing, a tool call finishing) replaces the earlier one in place, ``{"$set": {"messages":
[...]}}`` replaces the whole list, ``{"$rewindTo": id}`` drops that message and every later
one, and other ``$set`` lines only update metadata. Only where each message was last written
is kept between the two passes, never the messages themselves.

A message is ``{id, timestamp, type, content}``; ``content`` is a string or a list of parts
whose ``text`` is read. ``user`` becomes a user turn. ``gemini`` becomes an assistant turn
(its ``model``; its ``thoughts`` as thinking blocks before the text) and each of its
``toolCalls`` a tool call, whose ``result`` (``functionResponse`` parts) follows as a tool
turn; a call with no result is left to the integrity pass. ``info``, ``error`` and
``warning`` messages are the CLI's notices to the user, not part of what the model saw: they
are left out and counted in the notes.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice

from .._model import Json
from .._writable import dumps
from ._errors import MalformedTranscriptError
from ._jsonio import JsonDocument, JsonLines
from ._turns import Turn, iso_utc, make_tool_call, make_tool_result

__all__ = ["MESSAGE_TYPES", "PROVIDER", "is_gemini_record", "read_document", "read_lines"]

PROVIDER = "gemini-cli"
MESSAGE_TYPES = frozenset({"user", "gemini", "info", "error", "warning"})
NOTICES = ("info", "error", "warning")
_HEADER_KEYS = frozenset({"sessionId", "projectHash"})


def is_gemini_record(record: Json) -> bool:
    """Whether a record plainly belongs to a Gemini CLI session: a message (typed, with no
    ``role`` and none of a Claude Code line's keys), the JSON Lines metadata line, or one of
    its ``$set`` / ``$rewindTo`` lines."""
    if not isinstance(record, dict):
        return False
    if "$set" in record or "$rewindTo" in record:
        return True
    if record.keys() >= _HEADER_KEYS and "type" not in record:
        return True
    return (
        _typed(record)
        and "id" in record
        and not {"role", "uuid", "sessionId", "message"} & record.keys()
    )


def _text(content: Json, lost: list[int]) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        content = [content]
    if not isinstance(content, list):
        return ""
    pieces: list[str] = []
    for part in content:
        text = part.get("text") if isinstance(part, dict) else part
        if isinstance(text, str):
            pieces.append(text)
        else:
            lost[0] += 1
    return "".join(pieces)


def _result(call: dict[str, Json]) -> tuple[Json, bool] | None:
    """A call's result content and whether it is an error; ``None`` if it has none."""
    parts = call.get("result")
    if isinstance(parts, dict):
        parts = [parts]
    if not isinstance(parts, list) or not parts:
        return None
    outputs: list[str] = []
    error = call.get("status") == "error"
    for part in parts:
        response = part.get("functionResponse") if isinstance(part, dict) else None
        body = response.get("response") if isinstance(response, dict) else part
        if isinstance(body, dict) and set(body) <= {"output", "error"}:
            value = body.get("output", body.get("error"))
            error = error or "error" in body
        else:
            value = body
        outputs.append(value if isinstance(value, str) else dumps(value).decode())
    return "\n".join(outputs), error


class Reader:
    """Turns of Gemini CLI messages, fed one by one; ``notes`` says what was left out."""

    def __init__(self, *, ts: str) -> None:
        self.ts = ts
        self.notices: dict[str, int] = dict.fromkeys(NOTICES, 0)
        self.lost = [0]

    def feed(self, message: Json, where: str) -> Iterator[Turn]:
        if not isinstance(message, dict) or not isinstance(message.get("type"), str):
            raise MalformedTranscriptError(f"{where}: not a Gemini CLI message (needs a type)")
        kind = message["type"]
        ts = iso_utc(message.get("timestamp")) or self.ts
        if kind in self.notices:
            self.notices[kind] += 1
            return
        text = _text(message.get("content"), self.lost)
        if kind == "user":
            yield Turn("user", text, provider=PROVIDER, ts=ts)
            return
        if kind != "gemini":
            raise MalformedTranscriptError(
                f"{where}: a message of type {kind!r}; Gemini CLI messages are "
                f"{', '.join(sorted(MESSAGE_TYPES))}"
            )
        content: Json = text
        thoughts = message.get("thoughts")
        if isinstance(thoughts, list) and thoughts:
            blocks: list[Json] = []
            for thought in thoughts:
                if isinstance(thought, dict):
                    said = [thought.get("subject"), thought.get("description")]
                    body = "\n".join(s for s in said if isinstance(s, str) and s)
                    blocks.append({"type": "thinking", "thinking": body})
            content = [*blocks, {"type": "text", "text": text}] if text else blocks
        raw_calls = message.get("toolCalls")
        calls: list[dict[str, Json]] = []
        results: list[Turn] = []
        for k, call in enumerate(raw_calls if isinstance(raw_calls, list) else [], 1):
            if not isinstance(call, dict):
                raise MalformedTranscriptError(f"{where}: tool call {k} is not an object")
            id_ = call.get("id")
            id_ = id_ if isinstance(id_, str) and id_ else f"{message.get('id')}-call-{k}"
            name = str(call.get("name", ""))
            calls.append(make_tool_call(id_, name, call.get("args")))
            found = _result(call)
            if found is not None:
                output, error = found
                result = make_tool_result(id_, output, name=name or None, is_error=error)
                at = iso_utc(call.get("timestamp")) or ts
                results.append(
                    Turn("tool", output, tool_results=(result,), provider=PROVIDER, ts=at)
                )
        model = message.get("model")
        yield Turn(
            "assistant",
            content,
            tool_calls=tuple(calls) or None,
            provider=PROVIDER,
            model=model if isinstance(model, str) else None,
            ts=ts,
        )
        yield from results

    def notes(self) -> list[str]:
        found = [f"{n} {kind}" for kind, n in self.notices.items() if n]
        notes = []
        if found:
            notes.append(
                f"left out the CLI's notices to the user ({', '.join(found)} message(s)), "
                "which the model did not see"
            )
        if self.lost[0]:
            notes.append(f"left out {self.lost[0]} content part(s) that are not text")
        return notes


def read_document(doc: JsonDocument, *, ts: str, notes: list[str]) -> Iterator[Turn]:
    """Turns of the older form: one object with a ``messages`` array."""
    reader = Reader(ts=ts)
    for k, message in enumerate(doc.items(["messages"]), 1):
        yield from reader.feed(message, f"message {k}")
    notes.extend(reader.notes())


Entry = tuple[int, int | None]
"""Where a message was last written: a line's byte offset, and its index in that line's
``$set.messages`` (``None`` for a line holding the message itself)."""


def _index(lines: JsonLines) -> dict[str, Entry]:
    """The messages the session holds now, in order, each by where it was last written."""
    held: dict[str, Entry] = {}
    others = 0
    for line in lines:
        record = line.value
        if not isinstance(record, dict):
            continue
        rewind = record.get("$rewindTo")
        changes = record.get("$set")
        if isinstance(rewind, str):
            if rewind in held:
                keys = list(held)
                for key in keys[keys.index(rewind) :]:
                    del held[key]
        elif isinstance(changes, dict):
            messages = changes.get("messages")
            if isinstance(messages, list):
                held.clear()
                for k, message in enumerate(messages):
                    held[_key(message, line.number, k)] = (line.offset, k)
        elif _typed(record) and "sessionId" not in record:
            held[_key(record, line.number, None)] = (line.offset, None)
        elif "sessionId" not in record:
            others += 1
    if others:
        lines.notes.append(f"skipped {others} line(s) that are not Gemini CLI messages")
    return held


def _typed(record: dict[str, Json]) -> bool:
    """Whether ``record`` names a Gemini CLI message type (a string: any other JSON is not)."""
    kind = record.get("type")
    return isinstance(kind, str) and kind in MESSAGE_TYPES


def _key(message: Json, number: int, k: int | None) -> str:
    id_ = message.get("id") if isinstance(message, dict) else None
    return (
        id_ if isinstance(id_, str) and id_ else f"line {number}" + ("" if k is None else f" #{k}")
    )


def read_lines(lines: JsonLines, *, ts: str, notes: list[str]) -> Iterator[Turn]:
    """Turns of the newer form: append-only JSON Lines, messages rewritten by ``id``."""
    entries = list(_index(lines).values())
    reader = Reader(ts=ts)
    offsets = [offset for offset, _ in entries]
    for n, ((_, k), record) in enumerate(zip(entries, lines.records_at(offsets), strict=True), 1):
        if k is not None:
            changes = record.get("$set") if isinstance(record, dict) else None
            messages = changes.get("messages") if isinstance(changes, dict) else None
            record = next(islice(messages, k, None)) if isinstance(messages, list) else None
        yield from reader.feed(record, f"message {n}")
    notes.extend(lines.notes)
    notes.extend(reader.notes())
