"""``AgentCheckpointSaver``'s read path: a checkpoint by id or a thread's latest
(``get_tuple``), one found for a put (``find``), and listings newest first from the store's
index (``list_checkpoints``), each lineage read once, in batches, with its pending writes."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointMetadata, CheckpointTuple, get_checkpoint_id

from agent_checkpoint import Store, Summary

from ._langgraph_lineage import (
    Entry,
    LineageRead,
    by_time,
    heads,
    loaded_parts,
    read_lineage,
    writes_at,
)
from ._langgraph_records import Key, parse, parse_head, thread_of
from ._langgraph_serde import checkpoint_of, config_of, pending, unpacked

if TYPE_CHECKING:
    from .langgraph import AgentCheckpointSaver

__all__ = ["find", "get_tuple", "list_checkpoints", "read_heads"]


def get_tuple(
    saver: AgentCheckpointSaver, store: Store, config: RunnableConfig
) -> CheckpointTuple | None:
    thread = thread_of(config)
    checkpoint_id = get_checkpoint_id(config)
    if checkpoint_id is None:
        wanted: RunnableConfig = {
            "configurable": {"thread_id": thread.thread, "checkpoint_ns": thread.ns}
        }
        latest = next(list_checkpoints(saver, store, wanted, None, None, 1), None)
        if latest is None:
            saver._known.saw_empty(thread)
        return latest
    saver._known.ask(thread, checkpoint_id)  # a step from it may branch the thread
    found = find(saver, store, thread, checkpoint_id)
    if found is None:
        return None
    entry, read = found
    writes = writes_at(store, thread.tag, thread.checkpoint(checkpoint_id), entry.at)
    return _tuples(saver, store, [(entry, read, [s.key for s in writes])])[0]


def find(
    saver: AgentCheckpointSaver, store: Store, thread: Key, checkpoint_id: str
) -> tuple[Entry, LineageRead] | None:
    """A checkpoint's entry and its lineage: from what the saver knows, else read."""
    known = saver._known.lineage(thread)
    if known is not None:
        for entry in reversed(known.entries):
            if entry.id == checkpoint_id:
                return entry, LineageRead.known(thread, known)
    for record in store.get_records([s.key for s in heads(store, thread)]):
        if record is None or record.summary.owner != saver.owner:
            continue
        known = saver._known.noticed(thread, record)
        read = (
            read_lineage(store, thread, record, saver.serde)
            if known is None
            else LineageRead.known(thread, known)
        )
        for entry in read.entries:
            if entry.id == checkpoint_id:
                return entry, read
    return None


def list_checkpoints(
    saver: AgentCheckpointSaver,
    store: Store,
    config: RunnableConfig | None,
    filter: Mapping[str, Any] | None,
    before: RunnableConfig | None,
    limit: int | None,
) -> Iterator[CheckpointTuple]:
    """Checkpoints newest first, from the index: lineages and pending writes newest first
    (a lineage is saved when its newest checkpoint is, a checkpoint's writes at its time),
    the lineages read a batch at a time (``get_records``); a checkpoint is given once
    the listing has passed its time, and with it every write it has and every lineage
    that could hold a newer one."""
    if limit is not None and limit <= 0:
        return
    before_id = get_checkpoint_id(before) if before is not None else None
    wanted = config.get("configurable", {}) if config is not None else {}
    listing = _Listing(saver, store, wanted, before_id, filter, limit)
    for group in by_time(listing.summaries()):
        if listing.unread and (
            len(listing.unread) >= listing.batch or listing.passed >= listing.page
        ):
            listing.admit()
        if not listing.unread and listing.ready:
            for item in listing.take(group[0].saved_at):
                yield item
                if listing.left is not None:
                    listing.left -= 1
                    if listing.left == 0:
                        return
        listing.note(group)
    if listing.unread:
        listing.admit()
    yield from listing.take(None)


class _Listing:
    """One listing under way: the lineages listed and not read yet (``unread``, ``passed``
    summaries since the oldest of them), the checkpoints read and not given yet (``ready``),
    the pending writes listed, by checkpoint key."""

    __slots__ = (
        "batch",
        "before_id",
        "filter",
        "left",
        "ns",
        "page",
        "passed",
        "ready",
        "saver",
        "store",
        "thread_id",
        "unread",
        "wanted_id",
        "writes",
    )

    def __init__(
        self,
        saver: AgentCheckpointSaver,
        store: Store,
        wanted: Mapping[str, Any],
        before_id: str | None,
        filter: Mapping[str, Any] | None,
        limit: int | None,
    ) -> None:
        self.saver = saver
        self.store = store
        self.before_id = before_id
        self.thread_id = wanted.get("thread_id")
        self.ns = wanted.get("checkpoint_ns")
        self.wanted_id = wanted.get("checkpoint_id")
        self.filter = filter
        self.batch = 100 if limit is None else min(limit, 100)
        self.page = max(self.batch + self.batch // 4, 20)
        self.left = limit
        self.unread: list[tuple[Key, str]] = []
        self.passed = 0
        self.ready: list[tuple[Entry, LineageRead]] = []
        self.writes: dict[str, list[str]] = defaultdict(list)

    def summaries(self) -> Iterator[Summary]:
        if self.thread_id is not None:
            tag = f"langgraph:{self.thread_id}"
            return self.store.iter_summaries(agent_id=tag, page_size=self.page)
        return self.store.iter_summaries(owner=self.saver.owner, page_size=self.page)

    def note(self, group: Sequence[Summary]) -> None:
        """A group's lineages to read, and its pending writes by checkpoint."""
        for summary in group:
            self.passed += 1
            head = parse_head(summary.key)
            if head is not None:
                if self.thread_id is not None and head.thread != str(self.thread_id):
                    continue
                if self.ns is not None and head.ns != self.ns:
                    continue
                self.unread.append((head, summary.key))
                continue
            parsed = parse(summary.key)
            if parsed is not None and parsed[2] is not None:
                self.writes[summary.key.split("/w/")[0]].append(summary.key)

    def admit(self) -> None:
        """Read the lineages listed, their checkpoints the listing asks for made ready."""
        serde = self.saver.serde
        for entry, read in read_heads(self.saver, self.store, self.unread):
            if self.wanted_id is not None and entry.id != self.wanted_id:
                continue
            if self.before_id is not None and not entry.id < self.before_id:
                continue
            if self.filter and not _matches(unpacked(serde, entry.data, "m"), self.filter):
                continue
            self.ready.append((entry, read))
        self.unread, self.passed = [], 0

    def take(self, newer_than: int | None) -> list[CheckpointTuple]:
        """The ready checkpoints newer than ``newer_than`` (all with None), newest first."""
        if newer_than is None:
            out, self.ready = self.ready, []
        else:
            out = [item for item in self.ready if item[0].at > newer_than]
            self.ready = [item for item in self.ready if item[0].at <= newer_than]
        out.sort(key=lambda item: (item[0].at, item[0].id), reverse=True)
        if self.left is not None:
            out = out[: self.left]
        writes = self.writes
        items = [
            (e, r, writes.get(r.thread.checkpoint(e.id), ()) if writes else ()) for e, r in out
        ]
        return _tuples(self.saver, self.store, items)


def read_heads(
    saver: AgentCheckpointSaver, store: Store, heads: Sequence[tuple[Key, str]]
) -> Iterator[tuple[Entry, LineageRead]]:
    """The entries of these lineages (of the saver's owner), read in one batch (a lineage
    the saver knows at the revision listed is not decoded again)."""
    records = store.get_records([key for _, key in heads])
    for (thread, _), record in zip(heads, records, strict=True):
        if record is None or record.summary.owner != saver.owner:
            continue  # deleted since it was listed, or another owner's
        known = saver._known.noticed(thread, record)
        read = (
            LineageRead.known(thread, known)
            if known is not None
            else read_lineage(store, thread, record, saver.serde)
        )
        for entry in read.entries:
            yield entry, read


def _tuples(
    saver: AgentCheckpointSaver,
    store: Store,
    items: Sequence[tuple[Entry, LineageRead, Sequence[str]]],
) -> list[CheckpointTuple]:
    """Checkpoint tuples of entries read, their writes read in one batch."""
    write_keys = [key for _, _, keys in items for key in keys]
    written = loaded_parts(store, store.get_records(write_keys), saver.owner) if write_keys else {}
    serde = saver.serde
    found = []
    for entry, read, keys in items:
        checkpoint = checkpoint_of(serde, entry, read)
        mine = [w for w in (written.get(key) for key in keys) if w is not None]
        thread = read.thread
        found.append(
            CheckpointTuple(
                config=config_of(thread, entry.id),
                checkpoint=checkpoint,
                metadata=cast(CheckpointMetadata, unpacked(serde, entry.data, "m")),
                parent_config=config_of(thread, entry.parent) if entry.parent else None,
                pending_writes=pending(serde, mine),
            )
        )
    return found


def _matches(metadata: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    return all(metadata.get(k) == v for k, v in wanted.items())
