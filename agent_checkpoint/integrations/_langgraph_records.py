"""The LangGraph saver's records: the keys it writes under (``langgraph/<thread>/<namespace>/
...``, parsed back by ``parse`` and ``parse_head``), the times a checkpoint id carries, and the
compact form of a checkpoint's entry in its lineage (``pack``, ``unpack``). Its messages are
``_langgraph_messages.py``'s."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from langchain_core.runnables import RunnableConfig

from agent_checkpoint import MAX_KEY_LENGTH, InvalidArgumentError

from .keys import LANGGRAPH_PREFIX

ROOT_NS = "-"  # the root namespace ("") in a key
ENTRY_ROLE = "checkpoint"
"""The role of a checkpoint's entry in its lineage's history (no text: no tool counts it)."""
_UUID_EPOCH = 0x01B21DD213814000  # 1582-10-15 to 1970-01-01 in 100 ns ticks (RFC 9562)
TASK_ID_LENGTH = len(str(uuid.UUID(int=0)))
"""The length of LangGraph's task ids (a UUID's text), which key a checkpoint's writes."""


# -- keys ---------------------------------------------------------------------------------


def escape(part: str) -> str:
    return part.replace("%", "%25").replace("/", "%2F")


def unescape(part: str) -> str:
    return part.replace("%2F", "/").replace("%25", "%")


_INVERT = str.maketrans("0123456789abcdef", "fedcba9876543210")


def inverted(checkpoint_id: str) -> str:
    """Ascending keys for descending ids: a listing gives ties (one millisecond) newest first."""
    return checkpoint_id.translate(_INVERT)


@dataclass(frozen=True, slots=True)
class Key:
    thread: str
    ns: str

    @property
    def base(self) -> str:
        ns = ROOT_NS if self.ns == "" else "+" + escape(self.ns)
        return f"{LANGGRAPH_PREFIX}{escape(self.thread)}/{ns}"

    @property
    def tag(self) -> str:
        """The agent id every record of the thread (all namespaces) is indexed under."""
        return f"langgraph:{self.thread}"

    @property
    def first_lineage(self) -> str:
        return f"{self.base}/m/0"

    def lineage(self, checkpoint_id: str) -> str:
        return f"{self.base}/m/{escape(checkpoint_id)}"

    def checkpoint(self, checkpoint_id: str) -> str:
        return f"{self.base}/c/{escape(inverted(checkpoint_id))}"

    def writes(self, checkpoint_id: str, task_id: str) -> str:
        return f"{self.checkpoint(checkpoint_id)}/w/{escape(task_id)}"

    def lineage_key(self, ref: Mapping[str, Any]) -> str:
        """The key of the lineage a checkpoint's messages reference names (by its suffix)."""
        return f"{self.base}/m/{ref['lineage']}"

    def holds_lineage(self, key: str) -> bool:
        prefix = f"{self.base}/m/"
        return key.startswith(prefix) and "/" not in key[len(prefix) :]


def check_room(thread: Key, checkpoint_id: str, task_id: str | None = None) -> None:
    """Refuse a thread id too long for the keys a checkpoint and its writes are stored under
    (``MAX_KEY_LENGTH``), before anything is written: the room left by the longest of them
    with the thread's namespace, ``checkpoint_id`` and ``task_id`` (at a put, a task id of
    LangGraph's: its writes come next)."""
    bare = Key("", thread.ns)
    task = "0" * TASK_ID_LENGTH if task_id is None else task_id
    taken = max(
        len(key)
        for key in (
            bare.first_lineage,
            bare.lineage(checkpoint_id),
            bare.writes(checkpoint_id, task),
        )
    )
    room = MAX_KEY_LENGTH - taken
    size = len(escape(thread.thread))
    if size <= room:
        return
    if room < 1:
        raise InvalidArgumentError(
            f"checkpoint_ns ({len(thread.ns)} characters), checkpoint_id ({len(checkpoint_id)}) "
            f"and task_id ({len(task)}) leave no room for a thread_id in the store's keys of "
            f"at most {MAX_KEY_LENGTH} characters"
        )
    raise InvalidArgumentError(
        f"thread_id is too long for the store's keys: {size} characters ('/' and '%' count "
        f"three), and the longest allowed is {room} (keys hold {MAX_KEY_LENGTH}; the thread's "
        "namespace, checkpoint ids and task ids take the rest)"
    )


def thread_of(config: RunnableConfig) -> Key:
    configurable = config.get("configurable") or {}
    thread = configurable.get("thread_id")
    if thread is None:
        raise InvalidArgumentError(
            "the config names no thread: pass {'configurable': {'thread_id': ...}}"
        )
    return Key(str(thread), str(configurable.get("checkpoint_ns") or ""))


def id_ticks(checkpoint_id: str) -> int | None:
    """100 ns ticks since the epoch of a UUIDv6 checkpoint id (LangGraph's ids carry their
    time), else ``None``."""
    # read from the canonical text (a listing reads one per checkpoint; uuid.UUID is slower)
    if len(checkpoint_id) == 36 and checkpoint_id[14] == "6" and checkpoint_id[8] == "-":
        try:
            high = int(checkpoint_id[:8], 16) << 28 | int(checkpoint_id[9:13], 16) << 12
            return (high | int(checkpoint_id[15:18], 16)) - _UUID_EPOCH
        except ValueError:
            pass
    with suppress(ValueError):
        parsed = uuid.UUID(checkpoint_id)
        if parsed.version == 6:
            ticks = ((parsed.int >> 96) << 28) | (((parsed.int >> 80) & 0xFFFF) << 12)
            ticks |= (parsed.int >> 64) & 0xFFF
            return ticks - _UUID_EPOCH
    return None


def id_time(checkpoint_id: str) -> int | None:
    """Epoch ms of a UUIDv6 checkpoint id, else ``None``."""
    ticks = id_ticks(checkpoint_id)
    return None if ticks is None else ticks // 10_000


def saved_at(checkpoint_id: str, ts: str | None) -> int:
    """The time a checkpoint is listed at: its id's, else its ``ts``, else now."""
    at = id_time(checkpoint_id)
    if at is None and ts:
        with suppress(ValueError):
            at = int(datetime.fromisoformat(ts).timestamp() * 1000)
    return at if at is not None else int(datetime.now().timestamp() * 1000)


# -- checkpoint entries ---------------------------------------------------------------------

_SHORT = {
    "v": "v",
    "channel_versions": "cv",
    "versions_seen": "vs",
    "updated_channels": "uc",
    "pending_sends": "ps",
}
_LONG = {short: name for name, short in _SHORT.items()}
_DEFAULTS: dict[str, Any] = {"pending_sends": [], "updated_channels": None}
_ABSENT = "x"  # the defaulted fields a checkpoint does not have
_PAD = 32  # the zero-padded counter of the versions ``get_next_version`` makes


def _short_version(version: Any) -> Any:
    if not isinstance(version, str):
        return version
    if len(version) > _PAD and version[_PAD] == "." and version[:_PAD].isdigit():
        return f"~{int(version[:_PAD])}{version[_PAD:]}"
    return "~" + version if version.startswith(("~", "=")) else version


def _long_version(version: Any) -> Any:
    if not isinstance(version, str) or not version.startswith("~"):
        return version
    if version.startswith(("~~", "~=")):
        return version[1:]
    number, dot, rest = version[1:].partition(".")
    return f"{int(number):0{_PAD}}{dot}{rest}"


def pack(fields: Mapping[str, Any]) -> dict[str, Any]:
    """A checkpoint's fields (all but id, ts and values) under short names, those at their
    default left out, its channel versions without their zero padding (a node's version seen
    that is the channel's current one as ``"="``); ``unpack`` gives them back exactly."""
    packed: dict[str, Any] = {}
    found = fields.get("channel_versions")
    current: Mapping[str, Any] = found if isinstance(found, dict) else {}
    for name, value in fields.items():
        if name in _DEFAULTS and value == _DEFAULTS[name]:
            continue
        if name == "channel_versions" and isinstance(value, dict):
            value = {ch: _short_version(v) for ch, v in value.items()}
        elif name == "versions_seen" and isinstance(value, dict):
            value = {
                node: {
                    ch: "=" if ch in current and v == current[ch] else _short_version(v)
                    for ch, v in seen.items()
                }
                if isinstance(seen, dict)
                else seen
                for node, seen in value.items()
            }
        packed[_SHORT.get(name, "+" + name)] = value
    absent = [_SHORT[name] for name in _DEFAULTS if name not in fields]
    if absent:
        packed[_ABSENT] = absent
    return packed


def unpack(packed: Mapping[str, Any]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    found = packed.get("cv")
    current = {ch: _long_version(v) for ch, v in found.items()} if isinstance(found, dict) else {}
    for short, value in packed.items():
        if short == _ABSENT:
            continue
        name = short[1:] if short.startswith("+") else _LONG[short]
        if name == "channel_versions" and isinstance(value, dict):
            value = {ch: _long_version(v) for ch, v in value.items()}
        elif name == "versions_seen" and isinstance(value, dict):
            value = {
                node: {ch: current[ch] if v == "=" else _long_version(v) for ch, v in seen.items()}
                if isinstance(seen, dict)
                else seen
                for node, seen in value.items()
            }
        fields[name] = value
    absent = packed.get(_ABSENT, ())
    for name, default in _DEFAULTS.items():
        if name not in fields and _SHORT[name] not in absent:
            fields[name] = [] if default == [] else default  # a list of its own
    return fields


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def pack_ts(checkpoint_id: str, ts: Any) -> dict[str, Any]:
    """A checkpoint's ``ts`` as microseconds after its id's time (``{"t": ...}``) where that
    gives it back exactly, else as it is (``{"ts": ...}``)."""
    ticks = id_ticks(checkpoint_id)
    if isinstance(ts, str) and ticks is not None:
        with suppress(ValueError, OverflowError):
            at = datetime.fromisoformat(ts)
            if at.tzinfo is not None:
                offset = (at - _EPOCH) // timedelta(microseconds=1) - ticks // 10
                if unpack_ts(checkpoint_id, {"t": offset}) == ts:
                    return {"t": offset}
    return {"ts": ts}


def unpack_ts(checkpoint_id: str, entry: Mapping[str, Any]) -> Any:
    if "t" not in entry:
        return entry.get("ts")
    ticks = id_ticks(checkpoint_id) or 0
    return (_EPOCH + timedelta(microseconds=ticks // 10 + int(entry["t"]))).isoformat()


def parse(key: str) -> tuple[Key, str, str | None] | None:
    """The thread, checkpoint id and task (writes) of a checkpoint's or writes' key; ``None``
    for any other key (a lineage, a record that is not the saver's)."""
    parts = key.split("/")
    if len(parts) not in (5, 7) or parts[0] != "langgraph" or parts[3] != "c":
        return None
    ns = "" if parts[2] == ROOT_NS else unescape(parts[2][1:])
    thread = Key(unescape(parts[1]), ns)
    checkpoint_id = inverted(unescape(parts[4]))
    task = unescape(parts[6]) if len(parts) == 7 and parts[5] == "w" else None
    if len(parts) == 7 and task is None:
        return None
    return thread, checkpoint_id, task


def parse_head(key: str) -> Key | None:
    """The thread and namespace of a lineage's key (``.../m/<lineage>``); ``None`` for any
    other key."""
    parts = key.split("/")
    if len(parts) != 5 or parts[0] != "langgraph" or parts[3] != "m":
        return None
    ns = "" if parts[2] == ROOT_NS else unescape(parts[2][1:])
    return Key(unescape(parts[1]), ns)


def retarget(key: str, thread_id: str) -> str:
    """``key`` moved to thread ``thread_id`` (same namespace, same record): ``copy_thread``."""
    parts = key.split("/")
    parts[1] = escape(thread_id)
    return "/".join(parts)
