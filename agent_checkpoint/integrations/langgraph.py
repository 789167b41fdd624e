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
``_langgraph_lineage.py``. The saver below is the face: the write path is
``_langgraph_writes.py``'s, the read path ``_langgraph_reads.py``'s, whole threads (listing,
retention, deleting, copying, pruning) ``_langgraph_threads.py``'s, checkpoints to stored
fields and back ``_langgraph_serde.py``'s, and what a saver remembers of its threads
``_langgraph_known.py``'s.
"""

from __future__ import annotations

import builtins
import os
import random
import threading
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from functools import partial
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from agent_checkpoint import (
    DEFAULT_STORE_PATH,
    STORE_ENV,
    AsyncClaim,
    AsyncStore,
    Claim,
    InvalidArgumentError,
    Store,
    open_store,
)

from . import _langgraph_reads as _reads
from . import _langgraph_threads as _threads
from . import _langgraph_writes as _writes
from ._langgraph_known import Known
from ._stores import async_store_of, check_options

__all__ = ["AgentCheckpointSaver", "Thread", "server_checkpointer"]

TTL_ENV = "AGENT_CHECKPOINT_TTL_MINUTES"
SWEEP_SECONDS = 300.0


@dataclass(frozen=True, slots=True)
class Thread:
    """A thread as ``AgentCheckpointSaver.threads`` lists it: its latest checkpoint, when it
    was written (epoch ms) and how many user and assistant messages with text it holds."""

    thread_id: str
    checkpoint_id: str
    updated_at: int
    message_count: int


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
        self._opening = threading.RLock()
        self._known = Known(cache_threads)

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
        return _reads.get_tuple(self, self.store, config)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self.async_store.call(partial(_reads.get_tuple, self), config)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        yield from _reads.list_checkpoints(self, self.store, config, filter, before, limit)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        found = await self.async_store.call(
            lambda store: builtins.list(
                _reads.list_checkpoints(self, store, config, filter, before, limit)
            )
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
        return _writes.put(self, self.store, config, checkpoint, metadata)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await self.async_store.call(partial(_writes.put, self), config, checkpoint, metadata)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        _writes.put_writes(self, self.store, config, writes, task_id, task_path)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await self.async_store.call(
            partial(_writes.put_writes, self), config, writes, task_id, task_path
        )

    def delete_thread(self, thread_id: str) -> None:
        _threads.delete_thread(self, self.store, thread_id)

    async def adelete_thread(self, thread_id: str) -> None:
        await self.async_store.call(partial(_threads.delete_thread, self), thread_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        _threads.delete_for_runs(self, self.store, run_ids)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self.async_store.call(partial(_threads.delete_for_runs, self), run_ids)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and pending write of ``source_thread_id`` (all namespaces) to
        ``target_thread_id``, which must have nothing stored: LangGraph leaves a copy onto a
        thread in use undefined (its official savers do not implement ``copy_thread``), so
        one is refused with ``ConflictError`` naming the target, both threads unchanged. A
        copy that meets a write to the target midway is undone and refused the same way."""
        _threads.copy_thread(self, self.store, source_thread_id, target_thread_id)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self.async_store.call(
            partial(_threads.copy_thread, self), source_thread_id, target_thread_id
        )

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        _threads.prune(self, self.store, thread_ids, strategy)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self.async_store.call(partial(_threads.prune, self), thread_ids, strategy)

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
        return [Thread(*found) for found in _threads.threads(self, self.store, limit)]

    async def athreads(self, *, limit: int = 100) -> builtins.list[Thread]:
        found = await self.async_store.call(partial(_threads.threads, self), limit)
        return [Thread(*thread) for thread in found]

    # -- retention and claims ----------------------------------------------------------------

    def sweep(self, *, limit: int = 1000) -> int:
        """Delete this saver's records (its owner's, under ``langgraph/``) last written more
        than ``ttl`` ago (idle threads, the pending writes of old checkpoints), at most
        ``limit`` a call; the number deleted. Other records in the store, and other owners'
        threads, are left alone. A no-op without ``ttl``."""
        return _threads.sweep(self, self.store, limit)

    async def asweep(self, *, limit: int = 1000) -> int:
        return await self.async_store.call(partial(_threads.sweep, self), limit)

    def claim(self, thread_id: str, worker: str, *, ttl: float) -> Claim:
        """An exclusive, expiring lease on resuming ``thread_id`` (``Store.claim``): of the
        workers that claim an interrupted thread, one gets it, the others ``ClaimedError``."""
        return self.store.claim(_threads.claimable(self, self.store, thread_id), worker, ttl=ttl)

    async def aclaim(self, thread_id: str, worker: str, *, ttl: float) -> AsyncClaim:
        key = await self.async_store.call(partial(_threads.claimable, self), thread_id)
        return await self.async_store.claim(key, worker, ttl=ttl)


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
