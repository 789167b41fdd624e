"""The canonical turn JSONL of the interchange: one conversation turn per line.

Each line is a JSON object with, in this order, ``role``, ``content``, ``tool_calls``,
``tool_results``, ``provider``, ``model`` and ``ts`` (ISO 8601 UTC ending in ``Z``), then any
other keys the line carried, kept as they were. ``content`` keeps the provider's shape (a
string, or a list of the provider's blocks). The readers in this package write tool calls as
``{"id", "type": "function", "function": {"name", "arguments"}}`` (arguments a JSON string)
and tool results as ``{"tool_call_id", "name"?, "content", "is_error"?}``; when reading a
turn file, Anthropic-shaped ``tool_use`` / ``tool_result`` entries are understood as well.

``read_turns`` streams a file; ``write_turns`` writes one atomically: a temp file beside the
target, fsynced, renamed over it, the folder fsynced, and nothing left behind on any error.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from .._model import Json, JsonObject
from .._writable import dumps
from ._errors import MalformedTranscriptError, TranscriptNotFoundError
from ._jsonio import MAX_RECORD_BYTES, dump_line, read_values

__all__ = [
    "COMPACTION_SUMMARY",
    "TURN_KEYS",
    "CallNames",
    "Turn",
    "atomic_write",
    "call_arguments",
    "call_id",
    "call_name",
    "iso_utc",
    "make_tool_call",
    "make_tool_result",
    "now_iso",
    "read_turns",
    "result_id",
    "turn_from_json",
    "write_turns",
]

TURN_KEYS = ("role", "content", "tool_calls", "tool_results", "provider", "model", "ts")
COMPACTION_SUMMARY = "compactionSummary"
"""``_meta`` key (``true``) of the turn holding a compaction's summary of the turns before it,
which the log no longer holds (Claude Code ``isCompactSummary``, a Codex ``compacted`` line)."""


@dataclass(frozen=True)
class Turn:
    """One canonical turn. ``extra`` holds keys beyond ``TURN_KEYS``, in their read order.

    Not slotted: ``turn_from_json`` fills an instance's ``__dict__`` in one step, because a
    frozen dataclass's ``__init__`` (one ``object.__setattr__`` per field) would cost more
    than the rest of reading a turn."""

    role: str
    content: Json = None
    tool_calls: tuple[JsonObject, ...] | None = None
    tool_results: tuple[JsonObject, ...] | None = None
    provider: str | None = None
    model: str | None = None
    ts: str | None = None
    extra: JsonObject = field(default_factory=dict)

    def to_json(self) -> dict[str, Json]:
        """The line's object: the seven canonical keys, then ``extra``."""
        out: dict[str, Json] = {
            "role": self.role,
            "content": self.content,
            "tool_calls": None if self.tool_calls is None else [dict(c) for c in self.tool_calls],
            "tool_results": None
            if self.tool_results is None
            else [dict(r) for r in self.tool_results],
            "provider": self.provider,
            "model": self.model,
            "ts": self.ts,
        }
        for key, value in self.extra.items():
            if out.get(key) is None:
                out[key] = value
        return out

    @property
    def call_ids(self) -> tuple[str, ...]:
        return tuple(call_id(c) for c in self.tool_calls or ())

    @property
    def result_ids(self) -> tuple[str, ...]:
        return tuple(result_id(r) for r in self.tool_results or ())

    @property
    def is_result(self) -> bool:
        """A turn that answers tool calls (``role: tool``, or a user turn carrying results)."""
        return bool(self.tool_results) and self.role != "assistant"

    def compared(self) -> tuple[str, Json, Json, Json]:
        """What diff and merge compare, as the canonical format defines a turn: role,
        content, calls and results; not ts, provider, model or other keys. A result's
        ``name`` repeats the name of the call it answers (the seed writes none), so it is
        left out, and an empty list of calls or results is the same as none."""
        calls: Json = list(self.tool_calls) if self.tool_calls else None
        results: Json = None
        if self.tool_results:
            results = [{k: v for k, v in r.items() if k != "name"} for r in self.tool_results]
        return (self.role, self.content, calls, results)

    def fingerprint(self) -> bytes:
        """A digest of ``compared()``."""
        body = orjson.dumps(list(self.compared()), option=orjson.OPT_SORT_KEYS)
        return hashlib.blake2b(body, digest_size=16).digest()

    def evolve(self, **changes: Any) -> Turn:
        return replace(self, **changes)

    @property
    def is_compaction_summary(self) -> bool:
        meta = self.extra.get("_meta")
        return isinstance(meta, dict) and meta.get(COMPACTION_SUMMARY) is True

    def as_compaction_summary(self) -> Turn:
        """This turn marked as a compaction's summary (``_meta``, beside what it holds)."""
        meta = self.extra.get("_meta")
        meta = dict(meta) if isinstance(meta, dict) else {}
        return self.evolve(extra=dict(self.extra) | {"_meta": meta | {COMPACTION_SUMMARY: True}})


class CallNames:
    """The tool names of calls waiting for their results, by call id, for results that do
    not name their tool. A result answers the newest batch (assistant message) holding a
    waiting call with its id, that batch's first such call first: two calls of one batch may
    share an id, and a call left unanswered by an interrupted turn may see its id used again
    by a later one, which is the call its result answers."""

    __slots__ = ("_batch", "_waiting")

    def __init__(self) -> None:
        self._batch = 0
        self._waiting: dict[str, list[tuple[int, str]]] = {}

    def new_batch(self) -> None:
        """The calls added from now on belong to a new assistant message."""
        self._batch += 1

    def add(self, id_: str, name: str) -> None:
        self._waiting.setdefault(id_, []).append((self._batch, name))

    def take(self, id_: str) -> str | None:
        """The name of the call a result with ``id_`` answers (no longer waiting), if any."""
        waiting = self._waiting.get(id_)
        if not waiting:
            return None
        newest = waiting[-1][0]
        at = next(i for i, (batch, _) in enumerate(waiting) if batch == newest)
        name = waiting.pop(at)[1]
        if not waiting:
            del self._waiting[id_]
        return name


def call_id(call: JsonObject) -> str:
    """A tool call's id, whichever shape it has ("" when it has none)."""
    value = call.get("id", call.get("call_id"))
    return value if isinstance(value, str) else ""


def call_name(call: JsonObject) -> str:
    function = call.get("function")
    if isinstance(function, Mapping) and isinstance(function.get("name"), str):
        return str(function["name"])
    name = call.get("name")
    return name if isinstance(name, str) else ""


def call_arguments(call: JsonObject) -> Json:
    """The arguments as written: a JSON string (OpenAI shape) or an object (``input``/``args``)."""
    function = call.get("function")
    if isinstance(function, Mapping) and "arguments" in function:
        return function["arguments"]
    for key in ("input", "args", "arguments"):
        if key in call:
            return call[key]
    return None


def result_id(result: JsonObject) -> str:
    value = result.get("tool_call_id", result.get("tool_use_id", result.get("call_id")))
    return value if isinstance(value, str) else ""


def make_tool_call(id: str, name: str, arguments: Json, **extra: Json) -> dict[str, Json]:
    """A tool call in the canonical (OpenAI) shape; an object ``arguments`` is encoded."""
    if not isinstance(arguments, str):
        arguments = dumps({} if arguments is None else arguments, where="arguments").decode()
    return {
        "id": id,
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    } | extra


def make_tool_result(
    id: str, content: Json, *, name: str | None = None, is_error: bool = False
) -> dict[str, Json]:
    result: dict[str, Json] = {"tool_call_id": id}
    if name:
        result["name"] = name
    result["content"] = content
    if is_error:
        result["is_error"] = True
    return result


def now_iso() -> str:
    return iso_utc(datetime.now(timezone.utc)) or ""


def iso_utc(value: Json | datetime) -> str | None:
    """A timestamp as ISO 8601 UTC with ``Z``; ``None`` if ``value`` is not one.

    Accepts ISO strings with any offset (or none, taken as UTC), datetimes, and epoch
    seconds or milliseconds.
    """
    moment: datetime
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, bool) or value is None:
        return None
    elif isinstance(value, (int, float)):
        seconds = value / 1000 if value > 1e11 else value
        try:
            moment = datetime.fromtimestamp(seconds, timezone.utc)
        except (OverflowError, OSError, ValueError):
            return None
    elif isinstance(value, str):
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            return None
    else:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    moment = moment.astimezone(timezone.utc)
    spec = "milliseconds" if moment.microsecond else "seconds"
    return moment.replace(tzinfo=None).isoformat(timespec=spec) + "Z"


def _entries(value: Json, what: str, where: str | tuple[str, int]) -> tuple[JsonObject, ...] | None:
    if value is None:
        return None
    if isinstance(value, list):
        for v in value:
            if not isinstance(v, dict):
                break
        else:
            return tuple(value)
    raise MalformedTranscriptError(f"{_where(where)}: `{what}` must be a list of objects or null")


def turn_from_json(obj: Json, where: str = "turn") -> Turn:
    """A ``Turn`` from one decoded line; refuses a line that is not a turn."""
    return _turn(obj, where)


def _turn(obj: Json, where: str | tuple[str, int]) -> Turn:
    """``turn_from_json``; ``where`` may be (file, line), formatted only for an error."""
    if not isinstance(obj, dict):
        raise MalformedTranscriptError(f"{_where(where)}: expected a JSON object, got {_kind(obj)}")
    role = obj.get("role")
    if not isinstance(role, str) or not role:
        raise MalformedTranscriptError(f"{_where(where)}: a turn needs a string `role`")
    get = obj.get
    provider, model, ts = get("provider"), get("model"), get("ts")
    extra: dict[str, Json] = {}
    if not _TURN_KEY_SET.issuperset(obj):
        extra = {k: v for k, v in obj.items() if k not in _TURN_KEY_SET}
    if provider is not None and not isinstance(provider, str):
        extra["provider"], provider = provider, None  # kept as it was, beside the canonical null
    if model is not None and not isinstance(model, str):
        extra["model"], model = model, None
    if ts is not None and not isinstance(ts, str):
        extra["ts"], ts = ts, None
    calls, results = get("tool_calls"), get("tool_results")
    turn = object.__new__(Turn)
    turn.__dict__.update(
        role=role,
        content=get("content"),
        tool_calls=None if calls is None else _entries(calls, "tool_calls", where),
        tool_results=None if results is None else _entries(results, "tool_results", where),
        provider=provider,
        model=model,
        ts=ts,
        extra=extra,
    )
    return turn


def _where(where: str | tuple[str, int]) -> str:
    return where if isinstance(where, str) else f"{where[0]}: line {where[1]}"


_TURN_KEY_SET = frozenset(TURN_KEYS)


def _kind(value: Json) -> str:
    return "null" if value is None else type(value).__name__.replace("dict", "object")


def read_turns(
    path: str | os.PathLike[str], *, max_record_bytes: int = MAX_RECORD_BYTES
) -> Iterator[Turn]:
    """Stream the turns of a canonical turn file, refusing any line that is not a turn."""
    name = os.fspath(path)
    try:
        f = open(name, "rb")  # noqa: SIM115 - closed below; a generator cannot use `with` here
    except (FileNotFoundError, NotADirectoryError):
        raise TranscriptNotFoundError(f"{name}: no such file") from None
    except IsADirectoryError:
        raise MalformedTranscriptError(f"{name}: not a regular file") from None
    try:
        for number, value in read_values(f, name, max_record_bytes=max_record_bytes):
            yield _turn(value, (name, number))
    finally:
        f.close()


def write_turns(
    path: str | os.PathLike[str] | BinaryIO, turns: Iterable[Turn | Mapping[str, Json]]
) -> int:
    """Write ``turns`` to ``path`` atomically and return how many were written.

    If anything fails, including the iterable itself, ``path`` is left as it was. A new
    file is readable by its owner only (transcripts often hold secrets); a replaced file
    keeps its mode. ``path`` may instead be a binary stream (``sys.stdout.buffer``): the
    lines are written to it as they come, and it is flushed, not closed.
    """
    return atomic_write(path, lambda f: _write_lines(f, turns))


def atomic_write(path: str | os.PathLike[str] | BinaryIO, write: Callable[[BinaryIO], int]) -> int:
    """``write(file)`` into ``path`` atomically, as ``write_turns`` describes; its result."""
    if not isinstance(path, (str, os.PathLike)):
        count = write(path)
        path.flush()
        return count
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            count = write(f)
            f.flush()
            os.fsync(f.fileno())
        if target.exists():
            os.chmod(temp, target.stat().st_mode & 0o7777)
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    _fsync_dir(folder)
    return count


def _write_lines(stream: BinaryIO, turns: Iterable[Turn | Mapping[str, Json]]) -> int:
    count = 0
    for turn in turns:
        stream.write(dump_line(turn.to_json() if isinstance(turn, Turn) else dict(turn)))
        count += 1
    return count


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on a directory; the rename is done
    finally:
        os.close(fd)
