"""A LangGraph checkpoint saver on any agent-checkpoint store (extra ``langgraph``)::

    from agent_checkpoint.integrations.langgraph import AgentCheckpointSaver

    graph = builder.compile(checkpointer=AgentCheckpointSaver("redis://localhost:6379/0"))

It implements ``BaseCheckpointSaver``, sync and async, over a store URL (each side opens its
own store: ``open_store`` and ``open_async_store``), a ``Store`` or an ``AsyncStore``. The
logic is written once, synchronously, against the ``Store`` API; the async methods run that
same code through ``AsyncStore.call``, where the store runs its own I/O (the asyncio drivers
on Redis and PostgreSQL, the store's own threads elsewhere).

What it stores, under keys ``langgraph/<thread>/<namespace>/...``:

- ``m/<lineage>``: the thread's lineage, one record holding its messages channel
  (``add_messages``) and its checkpoints, in the order they were written, as the history of
  a run record: one message per LangChain message (role and text readable by any of our
  tools, the LangChain fields under ``lc``, those holding what JSON lacks, a datetime or a
  UUID, through LangGraph's serializer under ``lct``; a tuple as a list, as that serializer
  stores it and LangGraph's savers give it back), and after the messages a checkpoint saw, its
  entry (role ``checkpoint``, no text: our tools count no message for it): its id, its
  versions and metadata, the other channels' values (LangGraph's serializer, no pickle
  fallback), its parent and message count only where they are not the entry and messages
  before it. A put appends the new messages and the entry through the store's segment
  layer: one write, of what the step added. A history that does not extend the lineage (a
  message removed or replaced, a fork from an older checkpoint) starts a new lineage;
  checkpoints stay in the lineage they were saved in.
  The lineage is owned by ``owner``, indexed under the agent id ``langgraph:<thread>`` and
  saved when its newest checkpoint is: a thread's checkpoints list newest first from the
  store's index, and all threads' from its owner index. Every put writes it conditionally
  on the revision this saver last read or wrote, so a second writer that read the thread
  before another wrote it gets ``ConflictError`` rather than silently forking it; a run that
  read the thread empty gets it too once another run has started the thread. A put from an
  older checkpoint branches where the graph asked for that: the checkpoint read by id (time
  travel, ``update_state`` from its config) or copied (metadata ``source`` ``"fork"``,
  ``as_node="__copy__"``).
- ``c/<inverted checkpoint id>/w/<task>``: the pending writes of one task, saved at their
  checkpoint's time.

A thread id that would make one of these keys longer than the store takes (``MAX_KEY_LENGTH``,
with the namespace, the checkpoint's id and a task id of LangGraph's) is refused at its put,
naming the longest allowed, before anything is written.

This layout replaced one with a record per checkpoint (``c/<inverted checkpoint id>``)
before any release: what that one stored is not read, and there is no migration.

Keys are in ``_langgraph_records.py``, the LangChain messages' codec in
``_langgraph_messages.py``; a lineage's entries, and reading a lineage for its checkpoints, in
``_langgraph_lineage.py``.
"""

from __future__ import annotations

import base64
import builtins
import os
import random
import threading
from collections import OrderedDict, defaultdict
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from datetime import datetime
from operator import attrgetter
from typing import Any, cast

import orjson
from langchain_core.messages import (
    BaseMessage,
)
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from agent_checkpoint import (
    DEFAULT_STORE_PATH,
    MAX_KEY_LENGTH,
    STORE_ENV,
    AgentRef,
    AsyncClaim,
    AsyncStore,
    Claim,
    ConflictError,
    Identity,
    InvalidArgumentError,
    Message,
    NotFoundError,
    OwnershipConflictError,
    Record,
    RunCheckpoint,
    Store,
    Summary,
    open_store,
)
from agent_checkpoint import OriginalInput as _Input
from agent_checkpoint.envelope import to_envelope

from ._langgraph_lineage import (
    NO_LINEAGE,
    Entry,
    Lineage,
    LineageRead,
    by_time,
    entry_message,
    loaded_parts,
    read_lineage,
    saver_part,
    scan_entries,
    writes_at,
)
from ._langgraph_messages import is_messages, round_trip, same, to_langchain
from ._langgraph_records import (
    ENTRY_ROLE,
    ROOT_NS,
    Key,
    check_room,
    escape,
    id_time,
    pack,
    pack_ts,
    parse,
    parse_head,
    retarget,
    saved_at,
    thread_of,
    unescape,
    unpack,
    unpack_ts,
)
from ._stores import async_store_of, check_options

__all__ = ["AgentCheckpointSaver", "Thread", "server_checkpointer"]

TTL_ENV = "AGENT_CHECKPOINT_TTL_MINUTES"
SWEEP_SECONDS = 300.0

_MERGE_TRIES = 16


@dataclass(frozen=True, slots=True)
class Thread:
    """A thread as ``AgentCheckpointSaver.threads`` lists it: its latest checkpoint, when it
    was written (epoch ms) and how many user and assistant messages with text it holds."""

    thread_id: str
    checkpoint_id: str
    updated_at: int
    message_count: int


_ASKED = 4096  # checkpoints read by id (time travel) a saver remembers
_EMPTY_READS = 16384  # threads a saver remembers reading empty (a run's first put checks it)


# -- the saver ----------------------------------------------------------------------------


class AgentCheckpointSaver(BaseCheckpointSaver[str]):
    """LangGraph's checkpointer on an agent-checkpoint store (see the module docstring).

    ``store`` is a store URL (``redis://``, ``postgresql://``, ``s3://``, a path...), a
    ``Store`` or an ``AsyncStore``; a URL opens a sync store for the sync methods and an
    async one for the async methods, each on first use, and ``close`` closes them.
    ``messages_channel`` names the channel kept as an appended history (``"messages"``,
    the ``add_messages`` channel of ``MessagesState``); ``owner`` is the principal the
    checkpoints are owned by (listing across threads reads that owner's index).
    ``store_options`` go to ``open_store``/``open_async_store`` with a URL.

    ``ttl`` is LangGraph's TTL setting (``{"default_ttl": minutes}``, as its Redis saver and
    its server's ``checkpointer.ttl`` take it), mapped onto the store's retention: on a
    ``redis://`` URL every key the saver writes expires ``default_ttl`` after its last write
    (the store's native expiry, segments of long histories included), so a thread lives on
    while it is written to; elsewhere ``sweep()`` deletes what was last written longer ago
    than that (run it on a schedule; the server entry point ``lifespan`` does).
    """

    def __init__(
        self,
        store: str | Store | AsyncStore,
        *,
        serde: SerializerProtocol | None = None,
        messages_channel: str = "messages",
        owner: str = "langgraph",
        ttl: Mapping[str, Any] | None = None,
        cache_threads: int = 1024,
        **store_options: Any,
    ) -> None:
        super().__init__(serde=serde)
        if not isinstance(owner, str) or not owner:
            # a number (a user id) was taken, and stored as no owner at all
            raise InvalidArgumentError(f"owner must be a non-empty string, got {owner!r}")
        if type(cache_threads) is not int or cache_threads < 0:
            raise InvalidArgumentError(
                f"cache_threads must be a whole number from 0, got {cache_threads!r}"
            )
        check_options(store, store_options)
        self.ttl_seconds = _ttl_seconds(ttl)
        self.expires_natively = isinstance(store, str) and store.startswith(
            ("redis://", "rediss://")
        )  # Redis expires every key itself; elsewhere ``sweep`` deletes what is old
        if self.ttl_seconds is not None and self.expires_natively and "ttl" not in store_options:
            store_options = {**store_options, "ttl": self.ttl_seconds}
        self.messages_channel = messages_channel
        self.owner = owner
        self._given = store
        self._url = store if isinstance(store, str) else None
        self._options = store_options
        self._sync: Store | None = store if isinstance(store, Store) else None
        self._async: AsyncStore | None = None
        self._lock = threading.Lock()  # the lineage cache's; never held across I/O
        self._opening = threading.RLock()
        self._lineages: OrderedDict[Key, Lineage] = OrderedDict()
        self._asked: OrderedDict[tuple[Key, str], None] = OrderedDict()
        self._empty: OrderedDict[Key, None] = OrderedDict()
        self._capacity = cache_threads

    # -- stores ---------------------------------------------------------------------------

    @property
    def store(self) -> Store:
        """The sync store (opened from the URL on first use)."""
        if self._sync is None:
            if self._url is None:
                raise InvalidArgumentError(
                    "this saver was given an AsyncStore: use the graph's async methods "
                    "(ainvoke, astream), or give the saver a store URL"
                )
            with self._opening:
                if self._sync is None:
                    self._sync = open_store(self._url, **self._options)
        return self._sync

    @property
    def async_store(self) -> AsyncStore:
        """The async store: opened from the URL, or running the given ``Store`` on threads
        of its own."""
        if self._async is None:
            with self._opening:
                if self._async is None:
                    sync = lambda: self.store  # noqa: E731 - opened only where it is needed
                    self._async = async_store_of(self._given, self._options, sync)
        return self._async

    def close(self) -> None:
        """Close the stores this saver opened from a URL (a store given to it stays open)."""
        if self._url is not None and self._sync is not None:
            self._sync.close()

    async def aclose(self) -> None:
        if self._url is not None and self._async is not None:
            await self._async.close()  # over the sync store on memory://: that closes it too
        self.close()

    def __enter__(self) -> AgentCheckpointSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> AgentCheckpointSaver:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def setup(self) -> None:
        """Create what the backend needs (PostgreSQL's tables); idempotent."""
        self.store.setup()

    async def asetup(self) -> None:
        await self.async_store.setup()

    # -- the BaseCheckpointSaver API -------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._get_tuple(self.store, config)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self.async_store.call(self._get_tuple, config)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        yield from self._list(self.store, config, filter, before, limit)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        found = await self.async_store.call(
            lambda store: builtins.list(self._list(store, config, filter, before, limit))
        )
        for item in found:
            yield item

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._put(self.store, config, checkpoint, metadata)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await self.async_store.call(self._put, config, checkpoint, metadata)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._put_writes(self.store, config, writes, task_id, task_path)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await self.async_store.call(self._put_writes, config, writes, task_id, task_path)

    def delete_thread(self, thread_id: str) -> None:
        self._delete_thread(self.store, thread_id)

    async def adelete_thread(self, thread_id: str) -> None:
        await self.async_store.call(self._delete_thread, thread_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._delete_for_runs(self.store, run_ids)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self.async_store.call(self._delete_for_runs, run_ids)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and pending write of ``source_thread_id`` (all namespaces) to
        ``target_thread_id``, which must have nothing stored: LangGraph leaves a copy onto a
        thread in use undefined (its official savers do not implement ``copy_thread``), so
        one is refused with ``ConflictError`` naming the target, both threads unchanged. A
        copy that meets a write to the target midway is undone and refused the same way."""
        self._copy_thread(self.store, source_thread_id, target_thread_id)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self.async_store.call(self._copy_thread, source_thread_id, target_thread_id)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._prune(self.store, thread_ids, strategy)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self.async_store.call(self._prune, thread_ids, strategy)

    def get_next_version(self, current: str | None, channel: None) -> str:
        """As LangGraph's PostgreSQL saver: a zero-padded counter and a random fraction."""
        if current is None:
            number = 0
        elif isinstance(current, int):
            number = current
        else:
            number = int(str(current).split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    def threads(self, *, limit: int = 100) -> builtins.list[Thread]:
        """The threads written to most recently, newest first (their root namespace), from
        the store's index alone: one listing, no record read."""
        return self._threads(self.store, limit)

    async def athreads(self, *, limit: int = 100) -> builtins.list[Thread]:
        return await self.async_store.call(self._threads, limit)

    def _threads(self, store: Store, limit: int) -> builtins.list[Thread]:
        found: dict[str, Thread] = {}
        page = min(max(limit + limit // 4, 10), 1000)  # a few more: forks, pending writes
        heads = store.iter_summaries(owner=self.owner, page_size=page)
        for group in by_time(heads):
            if len(group) > 1:  # one millisecond's heads newest first by their latest checkpoint
                group.sort(key=attrgetter("run_id"), reverse=True)
            for summary in group:
                parts = summary.key.split("/")
                if len(parts) != 5 or parts[3] != "m" or parts[2] != ROOT_NS:
                    continue
                thread_id = unescape(parts[1]) if "%" in parts[1] else parts[1]
                if thread_id not in found and summary.run_id:  # the thread's newest head
                    found[thread_id] = Thread(
                        thread_id, summary.run_id, summary.saved_at, summary.message_count
                    )
            if len(found) >= limit:
                break
        return builtins.list(found.values())[:limit]

    # -- retention and claims ----------------------------------------------------------------

    def sweep(self, *, limit: int = 1000) -> int:
        """Delete this saver's records (its owner's, under ``langgraph/``) last written more
        than ``ttl`` ago (idle threads, the pending writes of old checkpoints), at most
        ``limit`` a call; the number deleted. Other records in the store, and other owners'
        threads, are left alone. A no-op without ``ttl``."""
        return self._sweep(self.store, limit)

    async def asweep(self, *, limit: int = 1000) -> int:
        return await self.async_store.call(self._sweep, limit)

    def claim(self, thread_id: str, worker: str, *, ttl: float) -> Claim:
        """An exclusive, expiring lease on resuming ``thread_id`` (``Store.claim``): of the
        workers that claim an interrupted thread, one gets it, the others ``ClaimedError``."""
        return self.store.claim(self._claimable(self.store, thread_id), worker, ttl=ttl)

    async def aclaim(self, thread_id: str, worker: str, *, ttl: float) -> AsyncClaim:
        key = await self.async_store.call(self._claimable, thread_id)
        return await self.async_store.claim(key, worker, ttl=ttl)

    def _claimable(self, store: Store, thread_id: str) -> str:
        """The key a claim on the thread is made on: its first lineage, put back (empty) if
        retention or pruning removed it while the thread lives on."""
        thread = Key(thread_id, "")
        key = thread.first_lineage
        if store.head(key) is None and self._heads(store, thread):
            with suppress(ConflictError):  # another worker put it back first
                store.put(self._head(thread, "", (), 0), key=key, create_only=True)
        return key

    def _sweep(self, store: Store, limit: int) -> int:
        if self.ttl_seconds is None:
            return 0
        cutoff = datetime.now().timestamp() - self.ttl_seconds
        with self._lock:
            self._lineages.clear()  # what it knew may be gone: read again
        forgotten = 0
        expired = store.iter_summaries(owner=self.owner, before=cutoff * 1000, page_size=500)
        for summary in expired:  # this saver's records only: the store may hold others'
            if forgotten >= limit:
                break
            if not summary.key.startswith("langgraph/"):
                continue
            with suppress(ConflictError, NotFoundError):  # written or deleted meanwhile: kept
                store.delete(summary.key, if_revision=summary.revision)
                forgotten += 1
        return forgotten

    # -- the one implementation, over a Store ------------------------------------------------

    def _put(
        self,
        store: Store,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
    ) -> RunnableConfig:
        thread = thread_of(config)
        checkpoint_id = checkpoint["id"]
        check_room(thread, checkpoint_id)
        parent = get_checkpoint_id(config)
        values = dict(checkpoint["channel_values"])
        messages = values.pop(self.messages_channel, None)
        if messages is not None and not is_messages(messages):
            values[self.messages_channel] = messages
            messages = None
        step = metadata.get("step", 0)
        entry = {"id": checkpoint_id, **pack_ts(checkpoint_id, checkpoint.get("ts"))}
        if id_time(checkpoint_id) is None:
            entry["at"] = saved_at(checkpoint_id, checkpoint.get("ts"))
        rest = {k: v for k, v in checkpoint.items() if k not in ("id", "ts", "channel_values")}
        entry.update(self._packed(rest, "c"))
        if values:
            entry["vals"] = {k: self._dump(v) for k, v in values.items()}
        entry.update(self._packed(get_checkpoint_metadata(config, metadata), "m"))
        if self.messages_channel != "messages":
            entry["ch"] = self.messages_channel
        self._commit(
            store,
            thread,
            checkpoint_id,
            parent,
            messages,
            entry,
            step if isinstance(step, int) else 0,
            forking=metadata.get("source") == "fork",
        )
        return _config(thread, checkpoint_id)

    def _commit(
        self,
        store: Store,
        thread: Key,
        checkpoint_id: str,
        parent: str | None,
        messages: builtins.list[BaseMessage] | None,
        entry: dict[str, Any],
        step: int,
        *,
        forking: bool = False,
    ) -> None:
        """Append the messages and the checkpoint's entry to the thread's lineage (or a new
        lineage when the messages do not extend it), conditional on the revision this saver
        last saw: one write. A step that continues the thread's latest checkpoint as this
        saver gave it out (a run's own last put, or the thread read empty) is refused where
        another writer has moved the thread on since; a branch from an older checkpoint is
        made where the graph asked for it: the checkpoint read by id (time travel,
        ``update_state`` from its config) or copied (``as_node="__copy__"``)."""
        seen = self._lineage(store, thread, parent)
        if not forking and seen.latest is not None and seen.latest != parent:
            if parent is None and self._read_empty(thread):
                # The run read the thread empty, and another run wrote it since: this put
                # would start a second lineage beside the other run's.
                self._forget(thread)
                raise _conflict(
                    thread,
                    f"this run found the thread empty, but it now holds checkpoint "
                    f"{seen.latest!r}.",
                )
            if parent is not None and not self._was_asked(thread, parent):
                # A step from a checkpoint that is no longer the latest, which the graph did
                # not ask for by id: another run wrote the thread since this one read it.
                self._forget(thread)
                raise _conflict(
                    thread,
                    f"this step continues checkpoint {parent!r}, but the thread's latest is "
                    f"now {seen.latest!r} (to branch from an older checkpoint on purpose, "
                    "name it: pass its checkpoint_id in the config).",
                )
        known = seen.langchain
        count: int | None
        if messages is None:
            langchain, ours, count = known, seen.ours, None
        elif len(messages) >= len(known) and same(messages[: len(known)], known):
            added = [round_trip(m, self.serde) for m in messages[len(known) :]]
            langchain = (*known, *(back for _, back in added))
            ours = seen.ours + tuple(message for message, _ in added)
            count = len(messages)
        elif same(messages, known[: len(messages)]):
            langchain, ours, count = known, seen.ours, len(messages)
        else:
            self._fork(store, thread, seen, checkpoint_id, parent, messages, entry, step)
            return
        key = seen.key or thread.first_lineage
        previous = seen.entries[-1].id if seen.entries else None
        message, stored = entry_message(thread, key, entry, parent, previous, count, len(langchain))
        ours = (*ours, message)
        head = self._head(thread, checkpoint_id, ours, step)
        try:
            if seen.key is None:
                summary = store.put(head, key=key, create_only=True)
            else:
                summary = store.put(head, key=key, if_revision=seen.revision)
        except OwnershipConflictError as exc:
            self._forget(thread)
            raise self._foreign(thread) from exc
        except ConflictError as exc:
            self._forget(thread)
            raise _conflict(thread, str(exc)) from exc
        self._remember(
            thread,
            Lineage(key, summary.revision, langchain, ours, checkpoint_id, (*seen.entries, stored)),
        )

    def _fork(
        self,
        store: Store,
        thread: Key,
        seen: Lineage,
        checkpoint_id: str,
        parent: str | None,
        messages: builtins.list[BaseMessage],
        entry: dict[str, Any],
        step: int,
    ) -> None:
        """A history that does not extend the lineage: a new lineage for it, after checking
        (and moving on) the old one's revision, so that a writer still on it conflicts."""
        pairs = [round_trip(m, self.serde) for m in messages]
        langchain = tuple(back for _, back in pairs)
        key = thread.lineage(checkpoint_id)
        message, saved = entry_message(
            thread, key, entry, parent, None, len(langchain), len(langchain)
        )
        ours = (*(ours for ours, _ in pairs), message)
        try:
            if seen.key is not None:
                store.put(
                    self._head(thread, checkpoint_id, seen.ours, step),
                    key=seen.key,
                    if_revision=seen.revision,
                )
            summary = store.put(
                self._head(thread, checkpoint_id, ours, step), key=key, create_only=True
            )
        except OwnershipConflictError as exc:
            self._forget(thread)
            raise self._foreign(thread) from exc
        except ConflictError as exc:
            self._forget(thread)
            raise _conflict(thread, str(exc)) from exc
        self._remember(
            thread, Lineage(key, summary.revision, langchain, ours, checkpoint_id, (saved,))
        )

    def _head(
        self, thread: Key, latest: str, ours: tuple[Message, ...], step: int
    ) -> RunCheckpoint:
        return RunCheckpoint(
            run_id=latest,  # the thread's latest checkpoint: listed from the index alone
            history=ours,
            last_completed_iteration=step,
            original_input=_Input(""),  # not the last question: rewritten at every step
            identity=Identity(thread.thread, principal=self.owner),
            agent=AgentRef(thread.tag),
        )

    def _heads(self, store: Store, thread: Key, *, any_ns: bool = False) -> builtins.list[Summary]:
        """The summaries of a thread's lineages (of its namespace, or of all), newest first."""
        found = []
        for summary in store.iter_summaries(agent_id=thread.tag, page_size=100):
            head = parse_head(summary.key)
            if head is not None and head.thread == thread.thread and (any_ns or head == thread):
                found.append(summary)
        return found

    def _lineage(self, store: Store, thread: Key, parent: str | None) -> Lineage:
        """The lineage a put extends: this saver's knowledge of the thread, else the lineage
        that holds the parent checkpoint (or the thread's latest) read from the store."""
        with self._lock:
            known = self._lineages.get(thread)
        if (
            known is not None
            and known.key is not None
            and parent is None
            and store.head(known.key) is None
        ):
            # The graph starts the thread anew (it found no checkpoint), and the lineage this
            # saver remembers is gone: deleted by another saver, swept, or expired on Redis.
            self._forget(thread)
            known = None
        if known is not None:
            return known
        if parent is None and store.head(thread.first_lineage) is None:
            # a new thread: no listing (on S3 and memory a listing by agent reads the
            # whole index). A thread whose first lineage was swept while a fork lives on
            # starts it again; its checkpoints are all listed still.
            return NO_LINEAGE
        heads = self._heads(store, thread)
        if not heads:
            return NO_LINEAGE
        latest = max(s.run_id for s in heads) or None
        wanted = parent or latest
        chosen = heads[0]
        if len(heads) > 1:
            for summary, record in zip(
                heads, store.get_records([s.key for s in heads]), strict=True
            ):
                if record is not None and wanted is not None:
                    read = read_lineage(store, thread, record, self.serde)
                    if any(e.id == wanted for e in read.entries):
                        chosen = summary
                        break
        record = store.get_record(chosen.key)
        if record is None:
            return NO_LINEAGE
        if record.summary.owner not in (None, self.owner):
            raise self._foreign(thread)
        lineage = self._lineage_of(store, thread, record, latest)
        self._remember(thread, lineage)
        return lineage

    def _lineage_of(self, store: Store, thread: Key, record: Record, latest: str | None) -> Lineage:
        ours = store.decode(record).conversation.history
        langchain = [to_langchain(m, self.serde) for m in ours if m.role != ENTRY_ROLE]
        return Lineage(
            record.key,
            record.summary.revision,
            tuple(langchain),
            ours,
            latest,
            tuple(scan_entries(thread, record.key, ((m.role, m.extra) for m in ours))),
        )

    def _noticed(self, thread: Key, record: Record) -> Lineage | None:
        """What this saver knows of the thread, if it is that lineage at that revision. A
        newer write seen (another writer's) makes it forget what it knew: its next put reads
        the thread again, and continues it where the graph now is."""
        with self._lock:
            known = self._lineages.get(thread)
        if known is None:
            return None
        if known.key == record.key:
            if known.revision == record.summary.revision:
                return known
            self._forget(thread)
        elif record.summary.run_id > (known.latest or ""):
            self._forget(thread)
        return None

    def _remember(self, thread: Key, lineage: Lineage) -> None:
        with self._lock:
            self._lineages[thread] = lineage
            self._lineages.move_to_end(thread)
            while len(self._lineages) > self._capacity:
                self._lineages.popitem(last=False)

    def _foreign(self, thread: Key) -> OwnershipConflictError:
        return OwnershipConflictError(
            f"thread {thread.thread!r} belongs to another owner than this saver's "
            f"({self.owner!r}): nothing was written, and its checkpoints read as absent here"
        )

    def _ask(self, thread: Key, checkpoint_id: str) -> None:
        with self._lock:
            self._asked[(thread, checkpoint_id)] = None
            self._asked.move_to_end((thread, checkpoint_id))
            while len(self._asked) > _ASKED:
                self._asked.popitem(last=False)

    def _was_asked(self, thread: Key, checkpoint_id: str) -> bool:
        with self._lock:
            return (thread, checkpoint_id) in self._asked

    def _saw_empty(self, thread: Key) -> None:
        """Remember that the thread was read with no checkpoint: a put with no parent is then
        a run starting it, refused once another run has. Not forgotten at a later read: two
        runs through this saver may both have read it empty."""
        with self._lock:
            self._empty[thread] = None
            self._empty.move_to_end(thread)
            while len(self._empty) > _EMPTY_READS:
                self._empty.popitem(last=False)

    def _read_empty(self, thread: Key) -> bool:
        with self._lock:
            return thread in self._empty

    def _forget(self, thread: Key) -> None:
        with self._lock:
            self._lineages.pop(thread, None)

    def _forget_thread(self, thread_id: str) -> None:
        with self._lock:
            for known in [t for t in self._lineages if t.thread == thread_id]:
                del self._lineages[known]

    # -- pending writes ---------------------------------------------------------------------

    def _put_writes(
        self,
        store: Store,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> None:
        thread = thread_of(config)
        checkpoint_id = get_checkpoint_id(config)
        if checkpoint_id is None:
            raise InvalidArgumentError("put_writes needs the config of a stored checkpoint")
        check_room(thread, checkpoint_id, task_id)
        fresh = {
            WRITES_IDX_MAP.get(channel, idx): [channel, *self._dump(value)]
            for idx, (channel, value) in enumerate(writes)
        }
        key = thread.writes(checkpoint_id, task_id)
        at = id_time(checkpoint_id)
        if at is None:  # listed beside its checkpoint, at the checkpoint's time
            found = self._find(store, thread, checkpoint_id)
            if found is None:
                raise InvalidArgumentError(
                    f"put_writes: no checkpoint {checkpoint_id!r} stored on thread "
                    f"{thread.thread!r}"
                )
            at = found[0].at
        # first as a new record (a task writes once, in one round trip); where one is there
        # already (a retried task, or its error after its writes), read it and merge
        stored: Record | None = None
        for attempt in range(_MERGE_TRIES):
            if attempt > 0:
                stored = store.get_record(key)
            entries: dict[str, Any] = {}
            if stored is not None:
                entries = dict(saver_part(store.decode(stored).to_json())["writes"])
                # a task's regular writes are written once (a retried task repeats them);
                # the special channels (error, interrupt...) take the latest
                merged = {str(i): w for i, w in fresh.items() if i < 0 or str(i) not in entries}
                if not merged:
                    return
                entries.update(merged)
            else:
                entries = {str(i): w for i, w in fresh.items()}
            record = {  # the thread, namespace and checkpoint are the key's
                "task": task_id,
                "path": task_path,
                "writes": entries,
            }
            data = RunCheckpoint(
                run_id=task_id,
                history=(),
                last_completed_iteration=0,
                original_input=_Input(""),
                identity=Identity(thread.thread, principal=self.owner),  # listed by owner too
                agent=AgentRef(thread.tag),
                extra={"langgraph": record},
            )
            envelope = to_envelope(data, saved_at=at)
            try:
                if stored is None:
                    store.put(envelope, key=key, create_only=True)
                else:
                    store.put(envelope, key=key, if_revision=stored.summary.revision)
                return
            except ConflictError:
                continue  # another call of the same task wrote meanwhile: merge again
        raise ConflictError(f"pending writes {key!r}: {_MERGE_TRIES} concurrent writers in a row")

    def _pending(self, records: Sequence[Mapping[str, Any]]) -> builtins.list[PendingWrite]:
        """The writes of a checkpoint's task records, in LangGraph's order (task path, task
        id, index: ``writes_sort_key``)."""
        found: builtins.list[tuple[tuple[str, str, int], PendingWrite]] = []
        for record in records:
            for idx, (channel, kind, blob) in record["writes"].items():
                value = self.serde.loads_typed((kind, base64.b64decode(blob)))
                order = (str(record.get("path", "")), str(record["task"]), int(idx))
                found.append((order, (str(record["task"]), channel, value)))
        found.sort(key=lambda item: item[0])
        return [write for _, write in found]

    # -- reading ----------------------------------------------------------------------------

    def _get_tuple(self, store: Store, config: RunnableConfig) -> CheckpointTuple | None:
        thread = thread_of(config)
        checkpoint_id = get_checkpoint_id(config)
        if checkpoint_id is None:
            wanted: RunnableConfig = {
                "configurable": {"thread_id": thread.thread, "checkpoint_ns": thread.ns}
            }
            latest = next(self._list(store, wanted, None, None, 1), None)
            if latest is None:
                self._saw_empty(thread)
            return latest
        self._ask(thread, checkpoint_id)  # a step from it may branch the thread
        found = self._find(store, thread, checkpoint_id)
        if found is None:
            return None
        entry, read = found
        writes = writes_at(store, thread.tag, thread.checkpoint(checkpoint_id), entry.at)
        return self._tuples(store, [(entry, read, [s.key for s in writes])])[0]

    def _find(
        self, store: Store, thread: Key, checkpoint_id: str
    ) -> tuple[Entry, LineageRead] | None:
        """A checkpoint's entry and its lineage: from what this saver knows, else read."""
        with self._lock:
            known = self._lineages.get(thread)
        if known is not None:
            for entry in reversed(known.entries):
                if entry.id == checkpoint_id:
                    return entry, LineageRead.known(thread, known)
        heads = self._heads(store, thread)
        for record in store.get_records([s.key for s in heads]):
            if record is None or record.summary.owner != self.owner:
                continue
            known = self._noticed(thread, record)
            read = (
                read_lineage(store, thread, record, self.serde)
                if known is None
                else LineageRead.known(thread, known)
            )
            for entry in read.entries:
                if entry.id == checkpoint_id:
                    return entry, read
        return None

    def _list(
        self,
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
        thread_id = wanted.get("thread_id")
        ns = wanted.get("checkpoint_ns")
        wanted_id = wanted.get("checkpoint_id")
        batch = 100 if limit is None else min(limit, 100)
        page = max(batch + batch // 4, 20)
        if thread_id is not None:
            summaries = store.iter_summaries(agent_id=f"langgraph:{thread_id}", page_size=page)
        else:
            summaries = store.iter_summaries(owner=self.owner, page_size=page)
        left = limit
        unread: builtins.list[tuple[Key, str]] = []
        passed = 0  # summaries listed since the oldest unread lineage
        ready: builtins.list[tuple[Entry, LineageRead]] = []
        writes: dict[str, builtins.list[str]] = defaultdict(builtins.list)

        def admit(entries: Iterator[tuple[Entry, LineageRead]]) -> None:
            for entry, read in entries:
                if wanted_id is not None and entry.id != wanted_id:
                    continue
                if before_id is not None and not entry.id < before_id:
                    continue
                if filter and not _matches(self._unpacked(entry.data, "m"), filter):
                    continue
                ready.append((entry, read))

        def take(newer_than: int | None) -> builtins.list[CheckpointTuple]:
            nonlocal ready
            if newer_than is None:
                out, ready = ready, []
            else:
                out = [item for item in ready if item[0].at > newer_than]
                ready = [item for item in ready if item[0].at <= newer_than]
            out.sort(key=lambda item: (item[0].at, item[0].id), reverse=True)
            if left is not None:
                out = out[:left]
            items = [
                (e, r, writes.get(r.thread.checkpoint(e.id), ()) if writes else ()) for e, r in out
            ]
            return self._tuples(store, items)

        for group in by_time(summaries):
            if unread and (len(unread) >= batch or passed >= page):
                admit(self._read_heads(store, unread))
                unread, passed = [], 0
            if not unread and ready:
                for item in take(group[0].saved_at):
                    yield item
                    if left is not None:
                        left -= 1
                        if left == 0:
                            return
            for summary in group:
                passed += 1
                head = parse_head(summary.key)
                if head is not None:
                    if thread_id is not None and head.thread != str(thread_id):
                        continue
                    if ns is not None and head.ns != ns:
                        continue
                    unread.append((head, summary.key))
                    continue
                parsed = parse(summary.key)
                if parsed is not None and parsed[2] is not None:
                    writes[summary.key.split("/w/")[0]].append(summary.key)
        if unread:
            admit(self._read_heads(store, unread))
        for item in take(None):
            yield item

    def _read_heads(
        self, store: Store, heads: Sequence[tuple[Key, str]]
    ) -> Iterator[tuple[Entry, LineageRead]]:
        """The entries of these lineages (of this saver's owner), read in one batch (a
        lineage this saver knows at the revision listed is not decoded again)."""
        records = store.get_records([key for _, key in heads])
        for (thread, _), record in zip(heads, records, strict=True):
            if record is None or record.summary.owner != self.owner:
                continue  # deleted since it was listed, or another owner's
            known = self._noticed(thread, record)
            read = (
                LineageRead.known(thread, known)
                if known is not None
                else read_lineage(store, thread, record, self.serde)
            )
            for entry in read.entries:
                yield entry, read

    def _tuples(
        self,
        store: Store,
        items: Sequence[tuple[Entry, LineageRead, Sequence[str]]],
    ) -> builtins.list[CheckpointTuple]:
        """Checkpoint tuples of entries read, their writes read in one batch."""
        write_keys = [key for _, _, keys in items for key in keys]
        written = (
            loaded_parts(store, store.get_records(write_keys), self.owner) if write_keys else {}
        )
        found = []
        for entry, read, keys in items:
            data = entry.data
            values = {
                channel: self.serde.loads_typed((kind, base64.b64decode(blob)))
                for channel, (kind, blob) in data.get("vals", {}).items()
            }
            if entry.count is not None:
                values[str(data.get("ch", "messages"))] = read.messages(entry.count)
            checkpoint = cast(
                Checkpoint,
                {
                    **self._unpacked(data, "c"),
                    "id": entry.id,
                    "ts": unpack_ts(entry.id, data),
                    "channel_values": values,
                },
            )
            mine = [w for w in (written.get(key) for key in keys) if w is not None]
            thread = read.thread
            found.append(
                CheckpointTuple(
                    config=_config(thread, entry.id),
                    checkpoint=checkpoint,
                    metadata=cast(CheckpointMetadata, self._unpacked(data, "m")),
                    parent_config=_config(thread, entry.parent) if entry.parent else None,
                    pending_writes=self._pending(mine),
                )
            )
        return found

    # -- deleting and copying ----------------------------------------------------------------

    def _delete_thread(self, store: Store, thread_id: str) -> None:
        for summary in self._thread_records(store, thread_id):
            with suppress(NotFoundError):  # deleted meanwhile, by another saver or a sweep
                store.delete(summary.key)
        self._forget_thread(thread_id)

    def _thread_records(self, store: Store, thread_id: str) -> builtins.list[Summary]:
        """The summaries of a thread's records that are this saver's owner's: another
        owner's thread of the same id reads as absent here, and is never deleted, pruned or
        copied from here."""
        tag = f"langgraph:{thread_id}"
        return builtins.list(store.iter_summaries(agent_id=tag, owner=self.owner))

    def _delete_for_runs(self, store: Store, run_ids: Sequence[str]) -> None:
        """Every lineage of this saver's owner is read (a run's checkpoints are entries in
        them): the cost of a scan of the owner's threads, in batches."""
        runs = set(map(str, run_ids))
        if not runs:
            return
        heads = [
            (head, s.key)
            for s in store.iter_summaries(owner=self.owner)
            if (head := parse_head(s.key)) is not None
        ]
        for start in range(0, len(heads), 100):
            doomed: dict[str, tuple[Key, dict[str, int]]] = {}  # lineage: its entries' times
            for entry, read in self._read_heads(store, heads[start : start + 100]):
                if str(self._unpacked(entry.data, "m").get("run_id")) in runs:
                    doomed.setdefault(entry.lineage, (read.thread, {}))[1][entry.id] = entry.at
            for key, (thread, ids) in doomed.items():
                self._rewrite(store, key, lambda entry, ids=ids: entry.id not in ids)
                self._forget(thread)
                for checkpoint_id, at in ids.items():
                    for w in writes_at(store, thread.tag, thread.checkpoint(checkpoint_id), at):
                        store.delete(w.key)

    def _rewrite(self, store: Store, key: str, keep: Any) -> None:
        """Rewrite a lineage with only the entries ``keep(entry)`` keeps (their parents and
        message counts written out where the entry before them changed)."""
        for _ in range(_MERGE_TRIES):
            record = store.get_record(key)
            if record is None:
                return
            conversation = store.decode(record).conversation
            thread = parse_head(key)
            assert thread is not None
            scanned = scan_entries(thread, key, ((m.role, m.extra) for m in conversation.history))
            by_id = iter(scanned)
            history: builtins.list[Message] = []
            previous: str | None = None
            messages = 0
            for m in conversation.history:
                if m.role != ENTRY_ROLE:
                    history.append(m)
                    messages += 1
                    continue
                entry = next(by_id)
                if not keep(entry):
                    continue
                message, _ = entry_message(
                    thread, key, dict(entry.data), entry.parent, previous, entry.count, messages
                )
                history.append(message)
                previous = entry.id
            try:
                store.put(
                    conversation.evolve(history=tuple(history)),
                    key=key,
                    if_revision=record.summary.revision,
                )
                return
            except ConflictError:
                continue
        raise ConflictError(f"lineage {key!r}: {_MERGE_TRIES} concurrent writers in a row")

    def _copy_thread(self, store: Store, source: str, target: str) -> None:
        tag = f"langgraph:{target}"
        if next(iter(store.iter_summaries(agent_id=tag, page_size=1)), None) is not None:
            raise _occupied(target)
        summaries = self._thread_records(store, source)
        moves = [(s.key, retarget(s.key, target)) for s in reversed(summaries)]  # oldest first
        over = max((len(new) for _, new in moves), default=0) - MAX_KEY_LENGTH
        if over > 0:  # refused before a partial copy
            raise InvalidArgumentError(
                f"target_thread_id is too long for the store's keys: the copy's longest key "
                f"would be {over} characters over {MAX_KEY_LENGTH}; the longest allowed is "
                f"{len(escape(target)) - over} ('/' and '%' count three)"
            )
        written: builtins.list[Summary] = []
        try:
            for key, moved in moves:
                envelope = store.get_json(key)
                if envelope is None:
                    continue
                data = dict(cast(dict[str, Any], envelope["data"]))
                data["agent"] = {"id": tag}
                identity = data.get("identity")
                if isinstance(identity, dict):
                    data["identity"] = {**identity, "conversationId": target}
                written.append(store.put({**envelope, "data": data}, key=moved, create_only=True))
        except ConflictError as exc:  # the target was written meanwhile: undo the copy
            for summary in written:
                with suppress(ConflictError):
                    store.delete(summary.key, if_revision=summary.revision)
            raise _occupied(target) from exc
        finally:
            self._forget_thread(target)

    def _prune(self, store: Store, thread_ids: Sequence[str], strategy: str) -> None:
        if strategy not in ("keep_latest", "delete"):
            raise InvalidArgumentError(
                f"prune strategy must be 'keep_latest' or 'delete', not {strategy!r}"
            )
        for thread_id in thread_ids:
            if strategy == "delete":
                self._delete_thread(store, thread_id)
                continue
            summaries = self._thread_records(store, thread_id)
            heads = [(h, s.key) for s in summaries if (h := parse_head(s.key)) is not None]
            latest: dict[Key, Entry] = {}  # the latest checkpoint of each namespace
            for entry, read in self._read_heads(store, heads):
                best = latest.get(read.thread)
                if best is None or (entry.at, entry.id) > (best.at, best.id):
                    latest[read.thread] = entry
            keep = {e.lineage: e.id for e in latest.values()}
            kept_writes = {t.checkpoint(e.id) for t, e in latest.items()}
            for thread, key in heads:
                if key in keep:
                    self._rewrite(store, key, lambda entry, id=keep[key]: entry.id == id)
                elif key == thread.first_lineage:  # a claim on the thread is made on it
                    store.put(self._head(thread, "", (), 0), key=key)
                else:
                    store.delete(key)
            for summary in summaries:
                parsed = parse(summary.key)
                if parsed is not None and summary.key.split("/w/")[0] not in kept_writes:
                    store.delete(summary.key)
            self._forget_thread(thread_id)

    # -- values --------------------------------------------------------------------------------

    def _dump(self, value: Any) -> builtins.list[str]:
        kind, blob = self.serde.dumps_typed(value)
        return [kind, base64.b64encode(blob).decode("ascii")]

    def _packed(self, value: Mapping[str, Any], name: str) -> dict[str, Any]:
        """``{name: value}`` where it is JSON (readable by any tool; a checkpoint's fields
        packed), else ``{name + "t": serialized}``."""
        try:
            plain = orjson.loads(orjson.dumps(value))
        except TypeError:
            return {name + "t": self._dump(dict(value))}
        return {name: pack(plain) if name == "c" else plain}

    def _unpacked(self, entry: Mapping[str, Any], name: str) -> dict[str, Any]:
        if name in entry:
            stored = entry[name]
            return unpack(stored) if name == "c" else dict(stored)
        kind, blob = entry[name + "t"]
        return dict(self.serde.loads_typed((kind, base64.b64decode(blob))))


@asynccontextmanager
async def server_checkpointer() -> AsyncIterator[AgentCheckpointSaver]:
    """The checkpointer for LangGraph's server: in ``langgraph.json``,
    ``"checkpointer": {"path": "agent_checkpoint.integrations.langgraph:server_checkpointer"}``.

    A saver on the store ``$AGENT_CHECKPOINT_STORE`` names (a disk store in
    ``./.agent-checkpoints`` without it), set up (PostgreSQL's tables) and closed with the
    server. ``$AGENT_CHECKPOINT_TTL_MINUTES`` sets its ``ttl``; where the backend has no
    native expiry, a task sweeps every five minutes while the server runs."""
    import asyncio

    minutes = os.environ.get(TTL_ENV)
    try:
        ttl = {"default_ttl": float(minutes)} if minutes else None
    except ValueError:
        raise InvalidArgumentError(
            f"${TTL_ENV} must be a number of minutes, got {minutes!r}"
        ) from None
    url = os.environ.get(STORE_ENV) or DEFAULT_STORE_PATH
    saver = AgentCheckpointSaver(url, ttl=ttl)
    await saver.asetup()

    async def sweeping() -> None:
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            while await saver.asweep() > 0:
                pass

    sweeper = asyncio.ensure_future(sweeping()) if ttl and not saver.expires_natively else None
    try:
        yield saver
    finally:
        if sweeper is not None:
            sweeper.cancel()
            with suppress(asyncio.CancelledError):
                await sweeper
        await saver.aclose()


_TTL_KEYS = frozenset({"default_ttl", "refresh_on_read", "sweep_interval_minutes"})
"""LangGraph's ``TTLConfig``."""


def _ttl_seconds(ttl: Mapping[str, Any] | None) -> float | None:
    if ttl is None:
        return None
    if not isinstance(ttl, Mapping) or not _TTL_KEYS.issuperset(ttl):
        raise InvalidArgumentError(
            f"ttl is LangGraph's TTLConfig, {{'default_ttl': minutes}}, got {ttl!r}"
        )
    minutes = ttl.get("default_ttl")
    if minutes is None:
        return None
    if isinstance(minutes, bool) or not isinstance(minutes, (int, float)) or minutes <= 0:
        raise InvalidArgumentError(
            f"ttl['default_ttl'] must be a positive number of minutes, got {minutes!r}"
        )
    return float(minutes) * 60


def _config(thread: Key, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread.thread,
            "checkpoint_ns": thread.ns,
            "checkpoint_id": checkpoint_id,
        }
    }


def _matches(metadata: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    return all(metadata.get(k) == v for k, v in wanted.items())


def _occupied(target: str) -> ConflictError:
    return ConflictError(
        f"thread {target!r} already has checkpoints or writes: copy_thread copies into a "
        "thread with nothing stored (delete_thread it first to replace it); neither thread "
        "was changed"
    )


def _conflict(thread: Key, why: str) -> ConflictError:
    where = f" (namespace {thread.ns!r})" if thread.ns else ""
    return ConflictError(
        f"thread {thread.thread!r}{where} was written by another writer since this run "
        "read it: its checkpoint was not saved. Read the thread again (graph.get_state) "
        f"and run the step again. {why}"
    )
