"""``AgentCheckpointSaver``'s write path: a checkpoint appended to its thread's lineage with
the messages it added, in one conditional write (``put``), a new lineage where its history
does not extend the old one, and a task's pending writes in a record of their own
(``put_writes``). The lineage a put extends is what the saver last read or wrote of the
thread, else read from the store (``lineage``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    Checkpoint,
    CheckpointMetadata,
    get_checkpoint_id,
)

from agent_checkpoint import (
    AgentRef,
    ConflictError,
    Envelope,
    Identity,
    InvalidArgumentError,
    Message,
    OwnershipConflictError,
    Record,
    RunCheckpoint,
    Store,
)
from agent_checkpoint import OriginalInput as _Input
from agent_checkpoint.envelope import to_envelope

from ._langgraph_lineage import (
    NO_LINEAGE,
    Lineage,
    entry_message,
    head,
    heads,
    read_lineage,
    saver_part,
    scan_entries,
)
from ._langgraph_messages import round_trip, same, to_langchain
from ._langgraph_reads import find
from ._langgraph_records import ENTRY_ROLE, Key, check_room, id_time, thread_of
from ._langgraph_serde import config_of, dump, entry_fields

if TYPE_CHECKING:
    from .langgraph import AgentCheckpointSaver

__all__ = ["MERGE_TRIES", "lineage", "put", "put_writes"]

MERGE_TRIES = 16


def put(
    saver: AgentCheckpointSaver,
    store: Store,
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
) -> RunnableConfig:
    thread = thread_of(config)
    checkpoint_id = checkpoint["id"]
    check_room(thread, checkpoint_id)
    parent = get_checkpoint_id(config)
    entry, messages = entry_fields(
        saver.serde, config, checkpoint, metadata, saver.messages_channel
    )
    step = metadata.get("step", 0)
    _commit(
        saver,
        store,
        thread,
        checkpoint_id,
        parent,
        messages,
        entry,
        step if isinstance(step, int) else 0,
        forking=metadata.get("source") == "fork",
    )
    return config_of(thread, checkpoint_id)


def _commit(
    saver: AgentCheckpointSaver,
    store: Store,
    thread: Key,
    checkpoint_id: str,
    parent: str | None,
    messages: list[BaseMessage] | None,
    entry: dict[str, Any],
    step: int,
    *,
    forking: bool = False,
) -> None:
    """Append the messages and the checkpoint's entry to the thread's lineage (or a new
    lineage when the messages do not extend it), conditional on the revision the saver
    last saw: one write."""
    seen = lineage(saver, store, thread, parent)
    if not forking and seen.latest is not None and seen.latest != parent:
        _check_continues(saver, thread, seen, parent)
    extended = _extended(saver, seen, messages)
    if extended is None:
        assert messages is not None
        _fork(saver, store, thread, seen, checkpoint_id, parent, messages, entry, step)
        return
    langchain, ours, count = extended
    key = seen.key or thread.first_lineage
    previous = seen.entries[-1].id if seen.entries else None
    message, stored = entry_message(thread, key, entry, parent, previous, count, len(langchain))
    ours = (*ours, message)
    record = head(saver.owner, thread, checkpoint_id, ours, step)
    with _refused(saver, thread):
        if seen.key is None:
            summary = store.put(record, key=key, create_only=True)
        else:
            summary = store.put(record, key=key, if_revision=seen.revision)
    saver._known.remember(
        thread,
        Lineage(key, summary.revision, langchain, ours, checkpoint_id, (*seen.entries, stored)),
    )


def _check_continues(
    saver: AgentCheckpointSaver, thread: Key, seen: Lineage, parent: str | None
) -> None:
    """A step that continues the thread's latest checkpoint as the saver gave it out (a
    run's own last put, or the thread read empty) is refused where another writer has moved
    the thread on since; a branch from an older checkpoint is made where the graph asked
    for it: the checkpoint read by id (time travel, ``update_state`` from its config) or
    copied (``as_node="__copy__"``)."""
    if parent is None and saver._known.read_empty(thread):
        # The run read the thread empty, and another run wrote it since: this put
        # would start a second lineage beside the other run's.
        saver._known.forget(thread)
        raise conflict(
            thread,
            f"this run found the thread empty, but it now holds checkpoint {seen.latest!r}.",
        )
    if parent is not None and not saver._known.was_asked(thread, parent):
        # A step from a checkpoint that is no longer the latest, which the graph did
        # not ask for by id: another run wrote the thread since this one read it.
        saver._known.forget(thread)
        raise conflict(
            thread,
            f"this step continues checkpoint {parent!r}, but the thread's latest is "
            f"now {seen.latest!r} (to branch from an older checkpoint on purpose, "
            "name it: pass its checkpoint_id in the config).",
        )


def _extended(
    saver: AgentCheckpointSaver, seen: Lineage, messages: list[BaseMessage] | None
) -> tuple[tuple[BaseMessage, ...], tuple[Message, ...], int | None] | None:
    """The lineage's messages (LangChain's and ours) with what ``messages`` adds, and the
    checkpoint's message count; None where ``messages`` does not extend the lineage."""
    known = seen.langchain
    if messages is None:
        return known, seen.ours, None
    if len(messages) >= len(known) and same(messages[: len(known)], known):
        added = [round_trip(m, saver.serde) for m in messages[len(known) :]]
        langchain = (*known, *(back for _, back in added))
        return langchain, seen.ours + tuple(message for message, _ in added), len(messages)
    if same(messages, known[: len(messages)]):
        return known, seen.ours, len(messages)
    return None


def _fork(
    saver: AgentCheckpointSaver,
    store: Store,
    thread: Key,
    seen: Lineage,
    checkpoint_id: str,
    parent: str | None,
    messages: list[BaseMessage],
    entry: dict[str, Any],
    step: int,
) -> None:
    """A history that does not extend the lineage: a new lineage for it, after checking
    (and moving on) the old one's revision, so that a writer still on it conflicts."""
    pairs = [round_trip(m, saver.serde) for m in messages]
    langchain = tuple(back for _, back in pairs)
    key = thread.lineage(checkpoint_id)
    message, saved = entry_message(thread, key, entry, parent, None, len(langchain), len(langchain))
    ours = (*(ours for ours, _ in pairs), message)
    with _refused(saver, thread):
        if seen.key is not None:
            store.put(
                head(saver.owner, thread, checkpoint_id, seen.ours, step),
                key=seen.key,
                if_revision=seen.revision,
            )
        summary = store.put(
            head(saver.owner, thread, checkpoint_id, ours, step), key=key, create_only=True
        )
    saver._known.remember(
        thread, Lineage(key, summary.revision, langchain, ours, checkpoint_id, (saved,))
    )


@contextmanager
def _refused(saver: AgentCheckpointSaver, thread: Key) -> Iterator[None]:
    """A lineage's write refused: the saver forgets the thread, and says why."""
    try:
        yield
    except OwnershipConflictError as exc:
        saver._known.forget(thread)
        raise foreign(thread, saver.owner) from exc
    except ConflictError as exc:
        saver._known.forget(thread)
        raise conflict(thread, str(exc)) from exc


def lineage(saver: AgentCheckpointSaver, store: Store, thread: Key, parent: str | None) -> Lineage:
    """The lineage a put extends: the saver's knowledge of the thread, else the lineage
    that holds the parent checkpoint (or the thread's latest) read from the store."""
    known = saver._known.lineage(thread)
    if (
        known is not None
        and known.key is not None
        and parent is None
        and store.head(known.key) is None
    ):
        # The graph starts the thread anew (it found no checkpoint), and the lineage this
        # saver remembers is gone: deleted by another saver, swept, or expired on Redis.
        saver._known.forget(thread)
        known = None
    if known is not None:
        return known
    if parent is None and store.head(thread.first_lineage) is None:
        # a new thread: no listing (on S3 and memory a listing by agent reads the
        # whole index). A thread whose first lineage was swept while a fork lives on
        # starts it again; its checkpoints are all listed still.
        return NO_LINEAGE
    listed = heads(store, thread)
    if not listed:
        return NO_LINEAGE
    latest = max(s.run_id for s in listed) or None
    wanted = parent or latest
    chosen = listed[0]
    if len(listed) > 1:
        for summary, record in zip(listed, store.get_records([s.key for s in listed]), strict=True):
            if record is not None and wanted is not None:
                read = read_lineage(store, thread, record, saver.serde)
                if any(e.id == wanted for e in read.entries):
                    chosen = summary
                    break
    record = store.get_record(chosen.key)
    if record is None:
        return NO_LINEAGE
    if record.summary.owner not in (None, saver.owner):
        raise foreign(thread, saver.owner)
    found = _lineage_of(saver, store, thread, record, latest)
    saver._known.remember(thread, found)
    return found


def _lineage_of(
    saver: AgentCheckpointSaver, store: Store, thread: Key, record: Record, latest: str | None
) -> Lineage:
    ours = store.decode(record).conversation.history
    langchain = [to_langchain(m, saver.serde) for m in ours if m.role != ENTRY_ROLE]
    return Lineage(
        record.key,
        record.summary.revision,
        tuple(langchain),
        ours,
        latest,
        tuple(scan_entries(thread, record.key, ((m.role, m.extra) for m in ours))),
    )


# -- pending writes ---------------------------------------------------------------------


def put_writes(
    saver: AgentCheckpointSaver,
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
        WRITES_IDX_MAP.get(channel, idx): [channel, *dump(saver.serde, value)]
        for idx, (channel, value) in enumerate(writes)
    }
    key = thread.writes(checkpoint_id, task_id)
    at = _writes_time(saver, store, thread, checkpoint_id)
    # first as a new record (a task writes once, in one round trip); where one is there
    # already (a retried task, or its error after its writes), read it and merge
    stored: Record | None = None
    for attempt in range(MERGE_TRIES):
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
        envelope = _writes_record(saver, thread, task_id, task_path, entries, at)
        try:
            if stored is None:
                store.put(envelope, key=key, create_only=True)
            else:
                store.put(envelope, key=key, if_revision=stored.summary.revision)
            return
        except ConflictError:
            continue  # another call of the same task wrote meanwhile: merge again
    raise ConflictError(f"pending writes {key!r}: {MERGE_TRIES} concurrent writers in a row")


def _writes_time(saver: AgentCheckpointSaver, store: Store, thread: Key, checkpoint_id: str) -> int:
    """The time a checkpoint's writes are saved at (listed beside it): its id's, else its
    entry's, read."""
    at = id_time(checkpoint_id)
    if at is not None:
        return at
    found = find(saver, store, thread, checkpoint_id)
    if found is None:
        raise InvalidArgumentError(
            f"put_writes: no checkpoint {checkpoint_id!r} stored on thread {thread.thread!r}"
        )
    return found[0].at


def _writes_record(
    saver: AgentCheckpointSaver,
    thread: Key,
    task_id: str,
    task_path: str,
    entries: dict[str, Any],
    at: int,
) -> Envelope:
    """The envelope of a task's pending writes, saved at ``at``."""
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
        identity=Identity(thread.thread, principal=saver.owner),  # listed by owner too
        agent=AgentRef(thread.tag),
        extra={"langgraph": record},
    )
    return to_envelope(data, saved_at=at)


def conflict(thread: Key, why: str) -> ConflictError:
    where = f" (namespace {thread.ns!r})" if thread.ns else ""
    return ConflictError(
        f"thread {thread.thread!r}{where} was written by another writer since this run "
        "read it: its checkpoint was not saved. Read the thread again (graph.get_state) "
        f"and run the step again. {why}"
    )


def foreign(thread: Key, owner: str) -> OwnershipConflictError:
    return OwnershipConflictError(
        f"thread {thread.thread!r} belongs to another owner than this saver's "
        f"({owner!r}): nothing was written, and its checkpoints read as absent here"
    )
