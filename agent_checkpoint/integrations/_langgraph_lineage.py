"""A LangGraph thread's lineage as ``AgentCheckpointSaver`` stores and reads it: its
checkpoints' entries among its messages (``Entry``, ``scan_entries``, ``entry_message``), what
the saver last read or wrote of it (``Lineage``), a lineage read for its checkpoints, its
messages turned into LangChain's only as far as needed (``LineageRead``), and the records of
pending writes listed beside a checkpoint (``writes_at``, ``by_time``); a lineage's record as a
put writes it (``head``) and a thread's lineages as the index lists them (``heads``). The layout itself is
described in ``langgraph.py``; keys are ``_langgraph_records.py``'s, the message codec
``_langgraph_messages.py``'s.
"""

from __future__ import annotations

import builtins
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from langchain_core.messages import BaseMessage
from langgraph.checkpoint.serde.base import SerializerProtocol

from agent_checkpoint import (
    AgentRef,
    ConflictError,
    Identity,
    Message,
    Record,
    RunCheckpoint,
    Store,
    Summary,
)
from agent_checkpoint import OriginalInput as _Input

from ._langgraph_messages import langchain_of
from ._langgraph_records import ENTRY_ROLE, Key, id_time, parse_head

__all__ = [
    "NO_LINEAGE",
    "Entry",
    "Lineage",
    "LineageRead",
    "by_time",
    "entry_message",
    "head",
    "heads",
    "loaded_parts",
    "read_lineage",
    "saver_part",
    "scan_entries",
    "writes_at",
]


@dataclass(frozen=True, slots=True)
class Entry:
    """A checkpoint's entry in its lineage, with what its place there says."""

    lineage: str  # the key of the lineage that holds it
    id: str
    parent: str | None
    count: int | None  # messages in the checkpoint; None: no messages channel
    at: int  # epoch ms: its id's time (its writes are listed at it)
    data: Mapping[str, Any]  # as stored


@dataclass(frozen=True, slots=True)
class Lineage:
    """What this saver last read or wrote of a thread's lineage."""

    key: str | None  # None: no lineage stored yet (the first put creates the first)
    revision: int
    langchain: tuple[BaseMessage, ...]
    ours: tuple[Message, ...]  # the stored history: messages and entries
    latest: str | None  # the thread's latest checkpoint id
    entries: tuple[Entry, ...]


NO_LINEAGE = Lineage(None, 0, (), (), None, ())


class LineageRead:
    """A lineage read for its checkpoints: its entries, and its messages turned into
    LangChain's only as far as a checkpoint returned needs them."""

    __slots__ = ("_langchain", "_raw", "_serde", "entries", "thread")

    def __init__(
        self,
        thread: Key,
        entries: Sequence[Entry],
        raw: Sequence[Mapping[str, Any]],
        langchain: builtins.list[BaseMessage],
        serde: SerializerProtocol | None = None,
    ) -> None:
        self.thread = thread
        self.entries = entries
        self._raw = raw
        self._langchain = langchain
        self._serde = serde  # None: every message is in ``langchain`` already

    @classmethod
    def known(cls, thread: Key, lineage: Lineage) -> LineageRead:
        return cls(thread, lineage.entries, (), builtins.list(lineage.langchain))

    def messages(self, count: int) -> builtins.list[BaseMessage]:
        done = self._langchain
        while len(done) < count and len(done) < len(self._raw):
            assert self._serde is not None
            done.append(langchain_of(self._raw[len(done)], self._serde))
        if len(done) < count:
            raise ConflictError(
                f"thread {self.thread.thread!r}: its lineage holds {len(done)} messages, "
                f"fewer than the {count} a checkpoint saved"
            )
        return done[:count]


def saver_part(envelope: Mapping[str, Any]) -> dict[str, Any]:
    data = envelope["data"]
    return cast(dict[str, Any], data["langgraph"])


def scan_entries(
    thread: Key, key: str, history: Iterable[tuple[str | None, Any]]
) -> builtins.list[Entry]:
    """The entries of a lineage's history (each message's role and its ``lg`` field)."""
    found = []
    previous: str | None = None
    messages = 0
    for role, data in history:
        if role != ENTRY_ROLE:
            messages += 1
            continue
        if not isinstance(data, dict):
            continue
        checkpoint_id = str(data["id"])
        at = id_time(checkpoint_id)
        found.append(
            Entry(
                key,
                checkpoint_id,
                data.get("p", previous),
                data.get("n", messages),
                int(data.get("at", 0)) if at is None else at,
                data,
            )
        )
        previous = checkpoint_id
    return found


def entry_message(
    thread: Key,
    key: str,
    fields: Mapping[str, Any],
    parent: str | None,
    previous: str | None,
    count: int | None,
    preceding: int,
) -> tuple[Message, Entry]:
    """A checkpoint's entry (``fields``: its id and packed fields) as the message appended
    to lineage ``key`` after the entry ``previous`` and ``preceding`` messages: its parent and
    message count written only where they are not those."""
    data: dict[str, Any] = {"id": fields["id"]}
    if parent != previous:
        data["p"] = parent
    if count != preceding:
        data["n"] = count
    data.update((k, v) for k, v in fields.items() if k not in ("id", "p", "n"))
    checkpoint_id = str(data["id"])
    at = id_time(checkpoint_id)
    entry = Entry(
        key, checkpoint_id, parent, count, int(data.get("at", 0)) if at is None else at, data
    )
    return Message(ENTRY_ROLE, "", extra=data), entry


def read_lineage(
    store: Store, thread: Key, record: Record, serde: SerializerProtocol
) -> LineageRead:
    """A lineage's record as plain JSON: no LangChain message built until one is asked for
    (its typed fields then read with ``serde``)."""
    history = cast(dict[str, Any], store.decode_json(record)["data"]).get("history") or []
    raw = [m for m in history if m.get("role") != ENTRY_ROLE]
    entries = scan_entries(thread, record.key, ((m.get("role"), m) for m in history))
    return LineageRead(thread, entries, raw, [], serde)


def loaded_parts(
    store: Store, records: Sequence[Record | None], owner: str
) -> dict[str, dict[str, Any] | None]:
    """The saver's part of each record ``get_records`` returned, by key: those of ``owner``
    (another owner's checkpoints read as absent)."""
    found: dict[str, dict[str, Any] | None] = {}
    for record in records:
        if record is not None and record.summary.owner == owner:
            found[record.key] = saver_part(store.decode_json(record))
    return defaultdict(lambda: None, found)


def writes_at(store: Store, tag: str, key: str, saved_at: int) -> list[Summary]:
    """The pending-writes records of checkpoint ``key``: listed at its time, under its key."""
    prefix = key + "/w/"
    found: list[Summary] = []
    for summary in store.iter_summaries(
        agent_id=tag, since=saved_at, before=saved_at + 1, page_size=500
    ):
        if summary.key.startswith(prefix):
            found.append(summary)
    return found


def by_time(summaries: Iterator[Summary]) -> Iterator[list[Summary]]:
    """Summaries grouped by ``saved_at``: a checkpoint and its writes share one."""
    group: list[Summary] = []
    for summary in summaries:
        if group and summary.saved_at != group[0].saved_at:
            yield group
            group = []
        group.append(summary)
    if group:
        yield group


def head(
    owner: str, thread: Key, latest: str, ours: tuple[Message, ...], step: int
) -> RunCheckpoint:
    """A lineage's record: its history ``ours``, saved with the thread's latest checkpoint."""
    return RunCheckpoint(
        run_id=latest,  # the thread's latest checkpoint: listed from the index alone
        history=ours,
        last_completed_iteration=step,
        original_input=_Input(""),  # not the last question: rewritten at every step
        identity=Identity(thread.thread, principal=owner),
        agent=AgentRef(thread.tag),
    )


def heads(store: Store, thread: Key, *, any_ns: bool = False) -> list[Summary]:
    """The summaries of a thread's lineages (of its namespace, or of all), newest first."""
    found = []
    for summary in store.iter_summaries(agent_id=thread.tag, page_size=100):
        parsed = parse_head(summary.key)
        if parsed is not None and parsed.thread == thread.thread and (any_ns or parsed == thread):
            found.append(summary)
    return found
