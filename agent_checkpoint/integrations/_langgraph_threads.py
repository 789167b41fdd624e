"""``AgentCheckpointSaver``'s administration of whole threads: listing them from the index
(``threads``), retention (``sweep``), the key a claim is made on (``claimable``), deleting a
thread or a run's checkpoints, copying a thread and pruning it."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import suppress
from datetime import datetime
from operator import attrgetter
from typing import TYPE_CHECKING, Any, cast

from agent_checkpoint import (
    MAX_KEY_LENGTH,
    ConflictError,
    InvalidArgumentError,
    Message,
    NotFoundError,
    Store,
    Summary,
)

from ._langgraph_lineage import Entry, by_time, entry_message, head, heads, scan_entries, writes_at
from ._langgraph_reads import read_heads
from ._langgraph_records import (
    ENTRY_ROLE,
    ROOT_NS,
    Key,
    escape,
    parse,
    parse_head,
    retarget,
    unescape,
)
from ._langgraph_serde import unpacked
from ._langgraph_writes import MERGE_TRIES

if TYPE_CHECKING:
    from .langgraph import AgentCheckpointSaver

__all__ = [
    "claimable",
    "copy_thread",
    "delete_for_runs",
    "delete_thread",
    "prune",
    "sweep",
    "threads",
]


def threads(
    saver: AgentCheckpointSaver, store: Store, limit: int
) -> list[tuple[str, str, int, int]]:
    """The threads written to most recently, newest first: each one's id, latest checkpoint,
    its time and its message count, from the index alone."""
    found: dict[str, tuple[str, str, int, int]] = {}
    page = min(max(limit + limit // 4, 10), 1000)  # a few more: forks, pending writes
    listed = store.iter_summaries(owner=saver.owner, page_size=page)
    for group in by_time(listed):
        if len(group) > 1:  # one millisecond's heads newest first by their latest checkpoint
            group.sort(key=attrgetter("run_id"), reverse=True)
        for summary in group:
            parts = summary.key.split("/")
            if len(parts) != 5 or parts[3] != "m" or parts[2] != ROOT_NS:
                continue
            thread_id = unescape(parts[1]) if "%" in parts[1] else parts[1]
            if thread_id not in found and summary.run_id:  # the thread's newest head
                found[thread_id] = (
                    thread_id,
                    summary.run_id,
                    summary.saved_at,
                    summary.message_count,
                )
        if len(found) >= limit:
            break
    return list(found.values())[:limit]


def claimable(saver: AgentCheckpointSaver, store: Store, thread_id: str) -> str:
    """The key a claim on the thread is made on: its first lineage, put back (empty) if
    retention or pruning removed it while the thread lives on."""
    thread = Key(thread_id, "")
    key = thread.first_lineage
    if store.head(key) is None and heads(store, thread):
        with suppress(ConflictError):  # another worker put it back first
            store.put(head(saver.owner, thread, "", (), 0), key=key, create_only=True)
    return key


def sweep(saver: AgentCheckpointSaver, store: Store, limit: int) -> int:
    if saver.ttl_seconds is None:
        return 0
    cutoff = datetime.now().timestamp() - saver.ttl_seconds
    saver._known.forget_all()  # what it knew may be gone: read again
    forgotten = 0
    expired = store.iter_summaries(owner=saver.owner, before=cutoff * 1000, page_size=500)
    for summary in expired:  # this saver's records only: the store may hold others'
        if forgotten >= limit:
            break
        if not summary.key.startswith("langgraph/"):
            continue
        with suppress(ConflictError, NotFoundError):  # written or deleted meanwhile: kept
            store.delete(summary.key, if_revision=summary.revision)
            forgotten += 1
    return forgotten


def delete_thread(saver: AgentCheckpointSaver, store: Store, thread_id: str) -> None:
    for summary in _thread_records(saver, store, thread_id):
        with suppress(NotFoundError):  # deleted meanwhile, by another saver or a sweep
            store.delete(summary.key)
    saver._known.forget_thread(thread_id)


def _thread_records(saver: AgentCheckpointSaver, store: Store, thread_id: str) -> list[Summary]:
    """The summaries of a thread's records that are the saver's owner's: another owner's
    thread of the same id reads as absent here, and is never deleted, pruned or copied from
    here."""
    tag = f"langgraph:{thread_id}"
    return list(store.iter_summaries(agent_id=tag, owner=saver.owner))


def delete_for_runs(saver: AgentCheckpointSaver, store: Store, run_ids: Sequence[str]) -> None:
    """Every lineage of the saver's owner is read (a run's checkpoints are entries in them):
    the cost of a scan of the owner's threads, in batches."""
    runs = set(map(str, run_ids))
    if not runs:
        return
    listed = [
        (parsed, s.key)
        for s in store.iter_summaries(owner=saver.owner)
        if (parsed := parse_head(s.key)) is not None
    ]
    for start in range(0, len(listed), 100):
        doomed: dict[str, tuple[Key, dict[str, int]]] = {}  # lineage: its entries' times
        for entry, read in read_heads(saver, store, listed[start : start + 100]):
            if str(unpacked(saver.serde, entry.data, "m").get("run_id")) in runs:
                doomed.setdefault(entry.lineage, (read.thread, {}))[1][entry.id] = entry.at
        for key, (thread, ids) in doomed.items():
            _rewrite(store, key, lambda entry, ids=ids: entry.id not in ids)
            saver._known.forget(thread)
            for checkpoint_id, at in ids.items():
                for w in writes_at(store, thread.tag, thread.checkpoint(checkpoint_id), at):
                    store.delete(w.key)


def _rewrite(store: Store, key: str, keep: Any) -> None:
    """Rewrite a lineage with only the entries ``keep(entry)`` keeps (their parents and
    message counts written out where the entry before them changed)."""
    for _ in range(MERGE_TRIES):
        record = store.get_record(key)
        if record is None:
            return
        conversation = store.decode(record).conversation
        thread = parse_head(key)
        assert thread is not None
        scanned = scan_entries(thread, key, ((m.role, m.extra) for m in conversation.history))
        by_id = iter(scanned)
        history: list[Message] = []
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
    raise ConflictError(f"lineage {key!r}: {MERGE_TRIES} concurrent writers in a row")


def copy_thread(saver: AgentCheckpointSaver, store: Store, source: str, target: str) -> None:
    tag = f"langgraph:{target}"
    if next(iter(store.iter_summaries(agent_id=tag, page_size=1)), None) is not None:
        raise _occupied(target)
    summaries = _thread_records(saver, store, source)
    moves = [(s.key, retarget(s.key, target)) for s in reversed(summaries)]  # oldest first
    over = max((len(new) for _, new in moves), default=0) - MAX_KEY_LENGTH
    if over > 0:  # refused before a partial copy
        raise InvalidArgumentError(
            f"target_thread_id is too long for the store's keys: the copy's longest key "
            f"would be {over} characters over {MAX_KEY_LENGTH}; the longest allowed is "
            f"{len(escape(target)) - over} ('/' and '%' count three)"
        )
    written: list[Summary] = []
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
        saver._known.forget_thread(target)


def prune(
    saver: AgentCheckpointSaver, store: Store, thread_ids: Sequence[str], strategy: str
) -> None:
    if strategy not in ("keep_latest", "delete"):
        raise InvalidArgumentError(
            f"prune strategy must be 'keep_latest' or 'delete', not {strategy!r}"
        )
    for thread_id in thread_ids:
        if strategy == "delete":
            delete_thread(saver, store, thread_id)
        else:
            _keep_latest(saver, store, thread_id)


def _keep_latest(saver: AgentCheckpointSaver, store: Store, thread_id: str) -> None:
    """Prune a thread to the latest checkpoint of each namespace, with its writes."""
    summaries = _thread_records(saver, store, thread_id)
    lineages = [(h, s.key) for s in summaries if (h := parse_head(s.key)) is not None]
    latest: dict[Key, Entry] = {}  # the latest checkpoint of each namespace
    for entry, read in read_heads(saver, store, lineages):
        best = latest.get(read.thread)
        if best is None or (entry.at, entry.id) > (best.at, best.id):
            latest[read.thread] = entry
    keep = {e.lineage: e.id for e in latest.values()}
    kept_writes = {t.checkpoint(e.id) for t, e in latest.items()}
    for thread, key in lineages:
        if key in keep:
            _rewrite(store, key, lambda entry, id=keep[key]: entry.id == id)
        elif key == thread.first_lineage:  # a claim on the thread is made on it
            store.put(head(saver.owner, thread, "", (), 0), key=key)
        else:
            store.delete(key)
    for summary in summaries:
        parsed = parse(summary.key)
        if parsed is not None and summary.key.split("/w/")[0] not in kept_writes:
            store.delete(summary.key)
    saver._known.forget_thread(thread_id)


def _occupied(target: str) -> ConflictError:
    return ConflictError(
        f"thread {target!r} already has checkpoints or writes: copy_thread copies into a "
        "thread with nothing stored (delete_thread it first to replace it); neither thread "
        "was changed"
    )
