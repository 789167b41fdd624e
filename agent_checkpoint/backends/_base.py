"""The record-level contract every backend implements, and the rules they share.

A backend stores *records*: the encoded bytes of one envelope plus the ``Summary`` fields that
listing needs. It knows nothing of checkpoints, retries or cursors; the ``Store`` derives those.
Five operations, each atomic on its own:

- ``load(key)``: the record, or ``None`` for a key never written (or dropped). Bytes that exist
  are returned even when they are garbage: deciding what is unreadable is the codec's job.
- ``head(key)``: the summary alone, without the body.
- ``save(record, expect_revision=, create_only=)``: write, as one atomic step, after checking
  the stored revision (``plan_save`` states the rule) and resolving the owner write-once. A
  live record's revision goes up by one; a new key starts past every revision it ever had,
  deletes (and expiry) included, so a key never repeats a revision (no ABA): one past the
  revision its tombstone keeps, a store-wide counter that every write moves on, or a
  store-wide floor every delete raises past the deleted revision. On a lost
  condition nothing changes.
- ``drop(key, expect_revision=)``: remove record and index entries; ``True`` if it existed.
  With ``expect_revision``, a key at another revision (or absent) raises ``ConflictError``.
- ``scan(query)``: summaries from the backend's own index, in ``query`` order, never by loading
  records: newest first ``(saved_at DESC, key ASC)`` or oldest first ``(saved_at ASC, key ASC)``.

Backends translate driver exceptions at this boundary (``translate_errors``): transient faults
become ``BackendUnavailableError`` (the Store retries those), everything else ``BackendError``,
both raised ``from`` the driver's exception and naming the backend and the operation.

Optional capabilities are separate protocols, feature-detected with ``isinstance``, so adding
one never changes this contract.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..errors import (
    BackendError,
    BackendUnavailableError,
    ConflictError,
    OwnershipConflictError,
    StoreClosedError,
    StoreConfigurationError,
)

__all__ = [
    "Backend",
    "Batched",
    "Expiring",
    "Forgetting",
    "Namespaced",
    "Query",
    "Record",
    "Repairable",
    "Summary",
    "exists_refused",
    "is_after",
    "matches",
    "order_key",
    "plan_drop",
    "plan_save",
    "resolve_owner",
    "revision_refused",
    "translate_errors",
]


@dataclass(frozen=True, slots=True)
class Summary:
    """What listing shows of a record; also the index entry a backend keeps for it.

    ``saved_at`` is the envelope's ``savedAt`` (epoch ms); ``owner`` is ``identity.principal``
    as resolved write-once (spec §6); ``failure_phase`` is ``None`` for a run that did not fail;
    ``message_count`` counts user and assistant messages with text; ``size`` is the stored bytes.
    """

    key: str
    run_id: str
    saved_at: int
    owner: str | None
    agent_id: str | None
    failure_phase: str | None
    failure_iteration: int | None
    message_count: int
    size: int
    revision: int

    @property
    def failed(self) -> bool:
        return self.failure_phase is not None

    def row(self) -> tuple[Any, ...]:
        """The fields in declaration order, as the SQL indexes store them (``Summary(*row)``
        reads one back)."""
        return (
            self.key,
            self.run_id,
            self.saved_at,
            self.owner,
            self.agent_id,
            self.failure_phase,
            self.failure_iteration,
            self.message_count,
            self.size,
            self.revision,
        )

    def revised(self, *, owner: str | None, revision: int, size: int) -> Summary:
        """``dataclasses.replace(self, owner=owner, revision=revision, size=size)`` at half
        its cost: a put or get passes a summary through it once or twice."""
        return Summary(
            self.key,
            self.run_id,
            self.saved_at,
            owner,
            self.agent_id,
            self.failure_phase,
            self.failure_iteration,
            self.message_count,
            size,
            revision,
        )


@dataclass(frozen=True, slots=True)
class Record:
    """Stored bytes plus their summary. On ``save``, ``summary.revision`` is ignored, and
    ``summary.size`` is the size a reader gets back through the Store (which sets it; it
    differs from ``len(body)`` for a record whose history is stored in pieces, ``_segments``);
    0 stands for ``len(body)``."""

    summary: Summary
    body: bytes

    @property
    def key(self) -> str:
        return self.summary.key


@dataclass(frozen=True, slots=True)
class Query:
    """One page of a listing. ``after`` is the keyset position ``(saved_at, key)`` of the last
    entry already seen; entries strictly after it in the chosen order are returned.
    ``saved_before`` is exclusive, ``saved_since`` inclusive. ``prefix`` keeps the keys that
    begin with it, compared character for character: no character in it is a wildcard or an
    escape (``%``, ``_``, ``*``, ``?``, ``[``, ``\\`` are themselves). Filters combine with AND."""

    owner: str | None = None
    agent_id: str | None = None
    failed: bool | None = None
    phase: str | None = None
    saved_before: int | None = None
    saved_since: int | None = None
    after: tuple[int, str] | None = None
    limit: int = 50
    oldest_first: bool = False
    prefix: str | None = None


@runtime_checkable
class Backend(Protocol):
    """A store's persistence. ``name`` (``"disk"``, ``"redis"``...) appears in errors."""

    name: str

    def load(self, key: str) -> Record | None: ...

    def head(self, key: str) -> Summary | None: ...

    def save(
        self, record: Record, *, expect_revision: int | None = None, create_only: bool = False
    ) -> Summary: ...

    def drop(self, key: str, *, expect_revision: int | None = None) -> bool: ...

    def scan(self, query: Query) -> list[Summary]: ...

    def close(self) -> None:
        """Release what the backend created; idempotent; leaves injected clients open. After
        it, ``closed`` (where a backend has it: all of ours do) is true, and a ``Store`` over
        the backend raises ``StoreClosedError`` for every operation."""
        ...


class Closable:
    """``closed`` for the ``Store`` to check; a backend's ``close()`` sets ``_closed``."""

    _closed: bool = False

    @property
    def closed(self) -> bool:
        return self._closed


def closed_error(backend: str, operation: str = "") -> StoreClosedError:
    doing = f" {operation}" if operation else ": an operation"
    return StoreClosedError(
        f"{backend}{doing} on a closed store: open the store again to use it",
        backend=backend,
        operation=operation,
    )


@runtime_checkable
class Namespaced(Protocol):
    """Optional: an isolated sibling backend on the same connection, for the Store's own
    bookkeeping (claims live in ``namespace("leases")``). Its records never appear in this
    backend's listing, and ``name`` must be a short identifier (letters, digits, ``_``).

    A backend whose ``namespace()`` creates storage (a folder, a table) may also offer
    ``namespace_exists(name) -> bool``, so that reads of a namespace never opened find nothing
    without creating it."""

    def namespace(self, name: str) -> Backend: ...


@runtime_checkable
class Batched(Protocol):
    """Optional: several records read in one round trip. The ``Store``'s segment layer reads
    the pieces of a long history with it (one request instead of one per piece)."""

    def load_many(self, keys: Sequence[str]) -> list[Record | None]:
        """``[load(k) for k in keys]``, in one round trip where the server allows it."""
        ...


@runtime_checkable
class Expiring(Protocol):
    """Optional, for backends whose records expire (a ``ttl``): give ``keys`` a fresh expiry,
    as a write would. The segment layer calls it before each commit of a layout record whose
    history is in pieces, so that the pieces live as long as the record that refers to them
    (a backend keeps its namespaces' records at least twice its ttl, so one refresh lost to
    a crash after the commit still leaves them the record's lifetime)."""

    def keep(self, keys: Sequence[str]) -> None:
        """Refresh the expiry of the records under ``keys`` (those stored; none if no ttl)."""
        ...


@runtime_checkable
class Forgetting(Protocol):
    """Optional, for backends whose ``drop`` leaves a tombstone or raises a floor (so that a
    key's revisions never repeat): remove a record whose key is never written again, leaving
    nothing and raising nothing. The segment layer removes replaced pieces with it (a piece
    key is used once); without it, each replaced piece leaves a tombstone behind."""

    def forget(self, key: str) -> None:
        """Remove ``key``'s record and its index entry, if any; no tombstone."""
        ...


@runtime_checkable
class Repairable(Protocol):
    """Optional, for backends whose index is written after the record (disk, S3): read the
    records themselves, bypassing the index, and rebuild the index from them."""

    def iter_records(self) -> Iterator[Record]: ...

    def rebuild_index(self) -> int: ...


def resolve_owner(key: str, stored: str | None, incoming: str | None) -> str | None:
    """Owner write-once: the first principal keeps the key; a leaner write keeps the stored one."""
    if stored is None:
        return incoming
    if incoming is None or incoming == stored:
        return stored
    raise OwnershipConflictError(
        f"key {key!r} is owned by principal {stored!r}; a write signed by {incoming!r} was refused "
        "and nothing was changed",
        key=key,
        owner=stored,
        principal=incoming,
    )


def plan_save(
    current: Summary | None,
    record: Record,
    *,
    expect_revision: int | None,
    create_only: bool,
    revision: int | None = None,
) -> Summary:
    """The summary to store for ``record`` given what is stored now, or the refusal.

    Backends call this inside their atomic section (a lock, a transaction); a backend that
    cannot (Redis runs it as Lua) must implement exactly these rules. ``revision`` is the one
    this write gets: one past ``current``'s for a live record (the default), and for a new key
    one past every revision the key ever had (its tombstone's, a store-wide counter's or
    floor's).
    """
    key = record.key
    if create_only and current is not None:
        raise exists_refused(key, current.revision)
    found = current.revision if current is not None else None
    if expect_revision is not None and found != expect_revision:
        raise revision_refused(key, expect_revision, found)
    owner = resolve_owner(key, current.owner if current else None, record.summary.owner)
    if revision is None:
        revision = current.revision + 1 if current is not None else 1
    size = record.summary.size or len(record.body)
    return record.summary.revised(owner=owner, revision=revision, size=size)


def plan_drop(key: str, found: int | None, expect_revision: int | None) -> bool:
    """Whether a drop of ``key``, stored at revision ``found`` (``None``: no record), has a
    record to remove; the refusal when ``expect_revision`` is not the one stored."""
    if expect_revision is not None and found != expect_revision:
        raise revision_refused(key, expect_revision, found, "nothing was deleted")
    return found is not None


def exists_refused(key: str, revision: int | None) -> ConflictError:
    """The refusal of a ``create_only`` write of a key that exists."""
    return ConflictError(
        f"key {key!r} already exists (revision {revision}); create_only refused it",
        key=key,
        revision=revision,
    )


def revision_refused(
    key: str, expected: int | None, found: int | None, outcome: str = "the write was refused"
) -> ConflictError:
    """The refusal of a write or drop on ``expected`` of a key at ``found`` (``None``: none)."""
    shown = "no record" if found is None else f"revision {found}"
    return ConflictError(
        f"key {key!r} is at {shown}, not revision {expected}; {outcome}",
        key=key,
        expected=expected,
        found=found,
    )


def matches(summary: Summary, query: Query) -> bool:
    """Whether ``summary`` passes the filters of ``query`` (not its position or limit)."""
    if query.owner is not None and summary.owner != query.owner:
        return False
    if query.agent_id is not None and summary.agent_id != query.agent_id:
        return False
    if query.failed is not None and summary.failed != query.failed:
        return False
    if query.phase is not None and summary.failure_phase != query.phase:
        return False
    if query.prefix is not None and not summary.key.startswith(query.prefix):
        return False
    if query.saved_before is not None and summary.saved_at >= query.saved_before:
        return False
    return not (query.saved_since is not None and summary.saved_at < query.saved_since)


def order_key(summary: Summary, oldest_first: bool = False) -> tuple[int, str]:
    """Sort key for a listing: ascending tuples give the listing order."""
    return (summary.saved_at if oldest_first else -summary.saved_at, summary.key)


def is_after(summary: Summary, query: Query) -> bool:
    """Whether ``summary`` lies strictly after the keyset position ``query.after``."""
    if query.after is None:
        return True
    saved, key = query.after
    if query.oldest_first:
        return (summary.saved_at, summary.key) > (saved, key)
    return (-summary.saved_at, summary.key) > (-saved, key)


@contextmanager
def translate_errors(
    backend: str,
    operation: str,
    *,
    transient: tuple[type[BaseException], ...],
    fatal: tuple[type[BaseException], ...] = (),
    misconfigured: Callable[[BaseException], bool] | None = None,
) -> Iterator[None]:
    """Re-raise driver exceptions as the library's, ``from`` the driver's, naming where; a
    fatal one that ``misconfigured`` recognises (the server refused the store's settings) as
    ``StoreConfigurationError``."""
    try:
        yield
    except transient as exc:
        raise BackendUnavailableError(
            f"{backend} {operation} failed: {type(exc).__name__}: {exc}",
            backend=backend,
            operation=operation,
        ) from exc
    except fatal as exc:
        kind = StoreConfigurationError if misconfigured and misconfigured(exc) else BackendError
        raise kind(
            f"{backend} {operation} failed: {type(exc).__name__}: {exc}",
            backend=backend,
            operation=operation,
        ) from exc
