"""The ``Store``: everything callers use, derived from a backend's five record operations.

Default keys, revisions, owner write-once, paged listing with a keyset cursor, retention and
retries live here once, so every backend behaves the same (the conformance suite in
``agent_checkpoint.testing`` proves it per backend). How a put reaches the backend is in
``_store_writes.py``; the values the Store takes and returns are in ``_store_types.py``.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, TypeVar

import orjson

from ._claims import Access, Claim, LeaseInfo, live_leases, set_up_leases
from ._codec import Codec
from ._container import Compression, Keyring, Sealer
from ._envelope import PAUSED_RUN, Envelope, conversation_of, to_envelope, validate_envelope
from ._migrations import DEFAULT as DEFAULT_MIGRATIONS
from ._migrations import Migrations
from ._model import Json, RunCheckpoint, now_ms
from ._segments import Collecting, Segmented
from ._shared import Lease, acquire, borrow, key_for, track
from ._store_types import (
    MAX_KEY_LENGTH,
    MAX_PAGE,
    Forgotten,
    Page,
    RetryPolicy,
    VerifyReport,
    check_count,
    check_flag,
    check_key,
    check_revision,
    decode_cursor,
    encode_cursor,
    to_epoch_ms,
    ttl_ms,
)
from ._store_writes import Attempts, Writer, summary_for
from ._telemetry import current, instrumented
from .backends import open_backend
from .backends._base import Backend, Namespaced, Query, Record, Repairable, Summary, closed_error
from .backends._legacy import OldLayouts
from .errors import (
    BackendError,
    BackendUnavailableError,
    CheckpointError,
    ConflictError,
    InvalidArgumentError,
    InvalidKeyError,
)

__all__ = [
    "DEFAULT_STORE_PATH",
    "MAX_KEY_LENGTH",
    "STORE_ENV",
    "Forgotten",
    "Page",
    "RetryPolicy",
    "Store",
    "VerifyReport",
    "open_store",
    "summary_for",
]

STORE_ENV = "AGENT_CHECKPOINT_STORE"
DEFAULT_STORE_PATH = ".agent-checkpoints"

T = TypeVar("T")
Putable = RunCheckpoint | Envelope | Mapping[str, Json]


def _noop() -> None:
    pass


class Store:
    """Checkpoints by key in one backend.

    Keys default to ``identity.conversationId``, else ``runId``. Every stored record has a
    revision; ``put`` is last-write-wins unless given ``if_revision=`` or ``create_only=True``,
    and a lost condition raises ``ConflictError`` with nothing overwritten. The owner is
    ``identity.principal``, write-once: another principal's write raises
    ``OwnershipConflictError`` and changes nothing. ``get`` returns ``None`` only for a key
    never written (or deleted); bytes that do not decode raise ``UnreadableEnvelopeError``.
    Transient backend faults are retried per ``retry``; a retried conditional write whose first
    attempt landed is recognised as landed, not reported as a conflict.
    """

    def __init__(
        self,
        backend: Backend,
        *,
        keyring: Keyring | None = None,
        compress: Compression | None = None,
        migrations: Migrations | None = None,
        retry: RetryPolicy | None = None,
        max_record_bytes: int | None = None,
        clock: Callable[[], int] = now_ms,
        codec: Codec | None = None,
    ) -> None:
        """``keyring``, ``compress``, ``migrations``, ``retry`` and ``max_record_bytes`` as
        ``open_store`` takes them. ``codec=Codec(...)`` is the 0.4 spelling of the first three,
        deprecated (it goes away in 0.6)."""
        check_backend(backend)
        check_options(migrations=migrations, retry=retry, max_record_bytes=max_record_bytes)
        self.backend = backend
        """The backend this store runs on. Go through the store's methods rather than this:
        they hold the checks, retries and segment handling every backend gets."""
        self._codec = codec_for(codec, keyring, compress, migrations)
        self.retry = retry or RetryPolicy()
        self._clock = clock
        self._closed = False
        self._lease: Lease | None = None  # the shared backend's reference (_shared.py)
        self._dropped: Callable[[], Any] | None = None
        self._shares = False  # on a shared backend: closing gives its share back
        borrowed = borrow(backend)
        if borrowed is not None:
            self._lease, self._dropped = borrowed, track(self, borrowed)
        # what every read and write goes through: the store-side segment layer over the
        # backend (it keeps growing histories in pieces: _segments.py), where the backend
        # has namespaces for them; without, every put writes the whole record
        self._records: Backend = (
            Segmented(backend)
            if isinstance(backend, Namespaced) and not isinstance(backend, Segmented)
            else backend
        )
        self._writer = Writer(self._records, self._call, max_record_bytes)
        self._appender = self._writer.appender

    @property
    def max_record_bytes(self) -> int | None:
        """A put of a bigger record raises ``RecordTooLargeError``; ``None``: no limit."""
        return self._writer.max_record_bytes

    @max_record_bytes.setter
    def max_record_bytes(self, limit: int | None) -> None:
        check_record_limit(limit)
        self._writer.max_record_bytes = limit

    # -- writing -------------------------------------------------------------------------

    def envelope_for(self, item: Putable) -> Envelope | Mapping[str, Json]:
        """The envelope ``put`` stores for ``item``, stamped now unless it is one already."""
        if isinstance(item, RunCheckpoint):
            return to_envelope(item, saved_at=self._clock())
        if isinstance(item, Envelope):
            return item
        if isinstance(item, Mapping) and "format" in item:
            return item
        if isinstance(item, Mapping):
            return {"format": "conversation-v1", "data": dict(item), "savedAt": self._clock()}
        raise InvalidArgumentError(
            f"put takes a RunCheckpoint, an Envelope or a JSON object, not {item!r}"
        )

    @instrumented("put")
    def put(
        self,
        item: Putable,
        *,
        key: str | None = None,
        if_revision: int | None = None,
        create_only: bool = False,
    ) -> Summary:
        """Store a checkpoint (or envelope, or its JSON) and return the stored summary."""
        check_revision(if_revision)
        check_flag(create_only, "create_only")
        if (
            isinstance(item, RunCheckpoint)
            and self._writer.appending is not None
            and not self._codec.sealer.active
        ):  # most puts: no envelope built, only its time
            key = check_key(item.default_key if key is None else key)
            return self._writer.put_appending(item, key, self._clock(), if_revision, create_only)
        envelope = self.envelope_for(item)
        if key is None:
            key = (
                envelope.conversation.default_key
                if isinstance(envelope, Envelope)
                else default_key(envelope)
            )
        check_key(key)
        body, digest = self._codec.encode(envelope, key)
        return self._write(
            Record(summary_for(key, digest, len(body)), body), if_revision, create_only
        )

    @instrumented("put")
    def put_record(
        self,
        record: Record,
        *,
        if_revision: int | None = None,
        create_only: bool = False,
        as_is: bool = False,
    ) -> Summary:
        """Store already-encoded bytes (``copy`` and ``rekey`` use this). They pass the checks
        ``put`` makes: they must decode under this store's codec to an envelope the door and
        the writer accept. The summary stored is derived from them (of ``record.summary``,
        only the key is used).

        ``as_is=True`` skips those checks and stores the bytes with ``record.summary``: for
        bytes no check can open (a record encrypted under a key this store lacks) or that a
        copy carries over on request although they do not decode (``copy
        --include-unreadable``). Nothing else should pass it."""
        key = check_key(record.key)
        check_revision(if_revision)
        check_flag(create_only, "create_only")
        if as_is:
            return self._write(record, if_revision, create_only)
        digest = self._codec.check_stored(record.body, key)
        checked = Record(summary_for(key, digest, len(record.body)), record.body)
        return self._write(checked, if_revision, create_only)

    def _write(self, record: Record, if_revision: int | None, create_only: bool) -> Summary:
        self._appender.forget(record.key)
        return self._writer.write(record, if_revision, create_only, None)

    # -- reading -------------------------------------------------------------------------

    @instrumented("get")
    def get_record(self, key: str) -> Record | None:
        """The stored bytes and summary, undecoded."""
        return self._call(lambda: self._records.load(check_key(key)))

    def get_records(self, keys: Sequence[str]) -> builtins.list[Record | None]:
        """``[get_record(k) for k in keys]``, in one round trip where the backend reads
        several records at once (Redis, PostgreSQL; S3 and fsspec in parallel)."""
        if isinstance(keys, (str, bytes)):
            raise InvalidArgumentError(
                f"get_records takes a list of keys, not the one key {keys!r}: use get_record"
            )
        checked = [check_key(key) for key in keys]
        if not checked:
            return []
        load_many = getattr(self._records, "load_many", None)
        if not callable(load_many):
            return [self.get_record(key) for key in checked]
        found: builtins.list[Record | None] = self._call(lambda: load_many(checked))
        return found

    @instrumented("get")
    def get_envelope(self, key: str) -> Envelope | None:
        record = self.get_record(key)
        return None if record is None else self._codec.decode(record.body, key)

    @instrumented("get")
    def get_json(self, key: str, *, last: int | None = None) -> dict[str, Json] | None:
        """The stored envelope as plain JSON (upgraded and validated). With ``last``, its
        history holds only the newest ``last`` entries, and a history kept in pieces is read
        only as far back as they go: the newest few of a long conversation cost about what
        the same few alone would (``last=0``: none, the rest of the record only)."""
        if last is None:
            record = self.get_record(key)
            return None if record is None else self._codec.decode_json(record.body, key)
        if isinstance(last, bool) or not isinstance(last, int) or last < 0:
            raise InvalidArgumentError(f"last must be a whole number >= 0, not {last!r}")
        checked = check_key(key)
        records = self._records
        tail = (
            self._call(lambda: records.load_tail(checked, last))
            if isinstance(records, Segmented)
            else self.get_record(checked)
        )
        return None if tail is None else self._codec.decode_json(tail.body, key, last=last)

    def get_json_many(
        self, keys: Sequence[str], *, last: int | None = None
    ) -> builtins.list[dict[str, Json] | None]:
        """``[get_json(k, last=last) for k in keys]``, the records read as ``get_records``
        reads them (in one round trip where the backend reads several at once). With
        ``last=0``, a listing of many records' fields other than their history reads no
        history kept in pieces."""
        if isinstance(keys, (str, bytes)):
            raise InvalidArgumentError(
                f"get_json_many takes a list of keys, not the one key {keys!r}: use get_json"
            )
        if last is not None and (isinstance(last, bool) or not isinstance(last, int) or last < 0):
            raise InvalidArgumentError(f"last must be a whole number >= 0, not {last!r}")
        checked = [check_key(key) for key in keys]
        if not checked:
            return []
        records = self._records
        found: builtins.list[Record | None]
        if isinstance(records, Segmented):
            found = self._call(lambda: records.load_many(checked, last))
        else:
            found = self.get_records(checked)
        decode = self._codec.decode_json
        return [
            None if record is None else decode(record.body, key, last=last)
            for key, record in zip(checked, found, strict=True)
        ]

    @instrumented("get")
    def get(self, key: str) -> RunCheckpoint | None:
        """The conversation stored under ``key``, or ``None`` if it was never written."""
        envelope = self.get_envelope(key)
        return None if envelope is None else conversation_of(envelope)

    def head(self, key: str) -> Summary | None:
        return self._call(lambda: self._records.head(check_key(key)))

    def owner(self, key: str) -> str | None:
        """The key's owner; ``None`` for a missing or unowned key."""
        summary = self.head(key)
        return summary.owner if summary is not None else None

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.head(key) is not None

    # -- deleting ------------------------------------------------------------------------

    @instrumented("delete")
    def delete(self, key: str, *, if_revision: int | None = None) -> bool:
        """Remove a record; ``True`` if it existed."""
        check_key(key)
        check_revision(if_revision)
        self._appender.forget(key)
        attempts = Attempts(self._records, key)

        def drop() -> bool:
            attempts.start()
            try:
                dropped = self._records.drop(key, expect_revision=if_revision)
            except ConflictError:
                if attempts.deleted():
                    return True
                raise
            return dropped or attempts.retried

        return self._call(drop)

    @instrumented("forget")
    def forget_older_than(self, cutoff: datetime | int | float, *, limit: int = 1000) -> Forgotten:
        """Delete records saved strictly before ``cutoff``, oldest first, at most ``limit``."""
        check_count(limit, "limit", least=1)
        before = to_epoch_ms(cutoff, "cutoff")
        victims = self._call(
            lambda: self._records.scan(
                Query(saved_before=before, oldest_first=True, limit=limit + 1)
            )
        )
        forgotten = 0
        for summary in victims[:limit]:
            try:
                if self._drop(summary):
                    forgotten += 1
            except ConflictError:
                continue  # rewritten since the scan: it is no longer old
        return Forgotten(forgotten, len(victims) > limit)

    def _drop(self, summary: Summary) -> bool:
        return self._call(lambda: self._records.drop(summary.key, expect_revision=summary.revision))

    # -- listing -------------------------------------------------------------------------

    @instrumented("list")
    def list(
        self,
        *,
        owner: str | None = None,
        agent_id: str | None = None,
        failed: bool | None = None,
        phase: str | None = None,
        before: datetime | int | float | None = None,
        since: datetime | int | float | None = None,
        limit: int = 50,
        cursor: str | None = None,
        prefix: str | None = None,
    ) -> Page:
        """Summaries newest first (ties by key), filtered, one page at a time. ``prefix``:
        only keys that begin with it (every character literal, no wildcard), served by the
        backend's listing."""
        filters = {"owner": owner, "agent_id": agent_id, "failed": failed, "phase": phase,
                   "before": before, "since": since, "prefix": prefix}  # fmt: skip
        found = self._scanned(self._records.scan, limit, cursor, filters)
        items = found[:limit]
        return Page(items, encode_cursor(items[-1]) if len(found) > limit else None)

    def _scanned(
        self,
        scan: Callable[[Query], builtins.list[T]],
        limit: int,
        cursor: str | None,
        filters: Mapping[str, Any],
    ) -> builtins.list[T]:
        """``scan`` of the query ``list`` makes of ``filters`` (its keyword arguments): up
        to ``limit + 1`` items, the last telling that there are more."""
        unknown = sorted(set(filters) - _FILTERS)
        if unknown:
            raise InvalidArgumentError(
                f"unknown listing filter {unknown[0]!r}; the filters are {sorted(_FILTERS)}"
            )
        owner, agent_id, phase, prefix, failed, before, since = (
            filters.get(name) for name in ("owner", "agent_id", "phase", "prefix", "failed",
                                           "before", "since")
        )  # fmt: skip
        if type(limit) is not int or not 1 <= limit <= MAX_PAGE:
            raise InvalidKeyError(f"limit must be between 1 and {MAX_PAGE}, got {limit!r}")
        if failed is not None and not isinstance(failed, bool):
            raise InvalidKeyError(f"the failed filter must be True, False or None, got {failed!r}")
        held = ("owner", "agent_id", "phase", "prefix")
        holdable = all(_holdable(name, filters.get(name)) for name in held)
        query = Query(
            owner=owner,
            agent_id=agent_id,
            failed=failed,
            phase=phase,
            saved_before=None if before is None else to_epoch_ms(before, "before"),
            saved_since=None if since is None else to_epoch_ms(since, "since"),
            after=None if cursor is None else decode_cursor(cursor),
            limit=limit + 1,
            prefix=prefix,
        )
        # a filter no stored record can hold matches nothing: no backend call (the other
        # arguments are still checked above, and a closed store still refuses)
        return self._call(lambda: scan(query) if holdable else [])

    def iter_summaries(self, *, page_size: int = 500, **filters: Any) -> Iterator[Summary]:
        """Every summary matching ``filters``, newest first, fetched page by page."""
        cursor: str | None = None
        while True:
            page = self.list(limit=page_size, cursor=cursor, **filters)
            yield from page.items
            if page.cursor is None:
                return
            cursor = page.cursor

    def iter_json(
        self, *, last: int | None = None, page_size: int = 500, **filters: Any
    ) -> Iterator[tuple[Summary, dict[str, Json]]]:
        """Every record matching ``filters`` (``list``'s), newest first, with its JSON as
        ``get_json(key, last=last)`` gives it: ``iter_summaries`` and a ``get_json_many`` of
        each page, where the backend can in one read of each record (S3: the GET that reads a
        record also proves its index entry current, which a listing checks with a HEAD). A
        record deleted between the listing and its read is left out."""
        cursor: str | None = None
        while True:
            pairs, cursor = self._json_page(last, page_size, cursor, filters)
            yield from pairs
            if cursor is None:
                return

    def _json_page(
        self, last: int | None, limit: int, cursor: str | None, filters: dict[str, Any]
    ) -> tuple[builtins.list[tuple[Summary, dict[str, Json]]], str | None]:
        """A page of ``iter_json``, and the cursor of the next (``None``: the last)."""
        if last is not None and (isinstance(last, bool) or not isinstance(last, int) or last < 0):
            raise InvalidArgumentError(f"last must be a whole number >= 0, not {last!r}")
        records = self._records
        if not isinstance(records, Segmented):
            page = self.list(limit=limit, cursor=cursor, **filters)
            found = self.get_json_many([summary.key for summary in page.items], last=last)
            pairs = [(s, j) for s, j in zip(page.items, found, strict=True) if j is not None]
            return pairs, page.cursor
        scanned = self._scanned(
            lambda query: records.scan_loaded(query, last), limit, cursor, filters
        )
        items = scanned[:limit]
        decode = self._codec.decode_json
        pairs = [(s, decode(r.body, s.key, last=last)) for s, r in items if r is not None]
        return pairs, encode_cursor(items[-1][0]) if len(scanned) > limit else None

    # -- lifecycle -----------------------------------------------------------------------

    def setup(self) -> None:
        """Create what the backend needs (tables, indexes), or bring it up to date: the
        records', the pieces' of long histories and, where the store has them, the claims';
        idempotent. A no-op where none."""
        setup = getattr(self._records, "setup", None)  # the segment layer's, with its pieces'
        self._call(setup if callable(setup) else lambda: None)  # a closed store refuses either way
        set_up_leases(self._claims_access())

    def close(self) -> None:
        """Close the backend (its connections, pools and threads; injected clients stay
        open). Idempotent. Every later operation raises ``StoreClosedError``."""
        self._closed = True
        lease, self._lease = self._lease, None
        if self._dropped is not None:
            self._dropped.detach()  # type: ignore[attr-defined]
        if lease is not None and not lease.borrowed:
            lease.close()  # from open_store: its share of the shared backend
            return
        if lease is not None:
            lease.release()
        if not self._shares:  # Store(backend): the backend is closed with the store
            self.backend.close()

    @property
    def closed(self) -> bool:
        """``close()`` was called on this store or on its backend."""
        return self._closed or getattr(self.backend, "closed", False) is True  # not a method

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- claims --------------------------------------------------------------------------

    @instrumented("claim")
    def claim(self, key: str, worker: str, *, ttl: float) -> Claim:
        """An exclusive lease on the run under ``key`` for ``ttl`` seconds, for one worker.

        Raises ``ClaimedError`` while another worker's lease is live, ``NotFoundError`` if no
        run is stored there. Writes through the returned ``Claim`` are fenced: once the lease
        expired and another worker took the run, they raise ``LeaseError``.
        """
        if not isinstance(worker, str) or not worker:
            raise InvalidKeyError("a claim needs a non-empty worker name")
        return Claim.acquire(self, self._claims_access(), check_key(key), worker, ttl_ms(ttl))

    def claims(self, *, limit: int = 1000) -> builtins.list[LeaseInfo]:
        """Live claims: key, worker and expiry (epoch ms)."""
        return live_leases(self._claims_access(), limit)

    def _claims_access(self) -> Access:
        return Access(call=self._call, now=self._now, backend=self.backend)

    # -- maintenance: what copy, migrate, rekey and verify use --------------------------

    @property
    def migrations(self) -> Migrations:
        """The chain reads go through: a record stored at an older version is read (and
        ``migrated``) at ``migrations.current``. Set by ``open_store(migrations=...)``."""
        return self._codec.migrations

    def decode(self, record: Record) -> Envelope:
        """The envelope a stored record holds (one ``get_record`` returned, here or in another
        store), opened with this store's keys and upgraded by its migration chain, as
        ``get_envelope`` reads it. Raises ``UnreadableEnvelopeError`` for bytes that do not
        decode, ``DecryptionError`` for a record this store's keys cannot open."""
        return self._codec.decode(record.body, record.key)

    def decode_json(self, record: Record) -> dict[str, Json]:
        """``decode`` as plain JSON, as ``get_json`` reads it: no typed values built."""
        return self._codec.decode_json(record.body, record.key)

    def can_open(self, record: Record) -> bool:
        """Whether this store holds what ``record`` needs to be opened: ``False`` only for a
        record encrypted under a key id its keyring lacks (or with no keyring). A damaged
        record counts as openable: ``decode`` then reports what is wrong with it."""
        return self._codec.sealer.can_open(record.body)

    def migrated(self, record: Record) -> dict[str, Json] | None:
        """The envelope ``record`` holds as JSON upgraded to ``migrations.current`` (what
        ``put`` takes to store it so), or ``None`` when it is not stored at an older version:
        nothing to migrate. Raises as ``decode`` does for a record that cannot be read or
        that the door refuses (one at the current version too: a record ``get`` refuses is
        not "already migrated"), and ``InvalidCheckpointError`` for a version the chain has no
        path from."""
        upgraded = self._codec.decode_json(record.body, record.key)
        doc = orjson.loads(self._codec.sealer.open(record.body, record.key))
        data = doc.get("data")
        if isinstance(data, dict) and doc.get("format") == PAUSED_RUN:
            data = data.get("conversation")
        return upgraded if self._codec.migrations.needs_upgrade(data) else None

    def in_old_layout(self, key: str) -> bool:
        """Whether ``key``'s record is stored as version 0.4 stored long histories (in
        segments beside it), which ``migrate`` rewrites whole; ``False`` on a backend that
        never stored them so."""
        backend = self.backend.inner if isinstance(self.backend, Segmented) else self.backend
        return isinstance(backend, OldLayouts) and self._call(
            lambda: backend.in_old_layout(check_key(key))
        )

    def resealed(self, record: Record) -> Record | None:
        """``record`` sealed as this store seals new records (encrypted under its keyring's
        primary key, compressed as it compresses), with the same summary, for ``rekey``;
        ``None`` when it is sealed so already. Raises ``DecryptionError`` for a record this
        store's keys cannot open, ``UnreadableEnvelopeError`` for a damaged container."""
        if self._codec.sealer.settled(record.body):
            return None
        return Record(record.summary, self._codec.reseal(record.body, record.key))

    def verify(
        self, *, repair: bool = False, grace: float = 300.0, on_record: Callable[[], None] = _noop
    ) -> VerifyReport:
        """Decode every record and check the index against the records, one page at a time;
        ``on_record`` is called once per record listed (for progress bars).

        Where the backend writes its index after the record (``Repairable``: disk, S3,
        fsspec), records missing from the index are found too, and ``repair`` rebuilds the
        index from the records; where it can only drop stale entries (Redis), ``repair``
        does that; where index and record change together, a stale index cannot happen and
        ``repair`` of one raises ``BackendError``. Where the backend keeps history segments
        as objects of their own (``Collecting``), segment objects older than ``grace``
        seconds that no record refers to are counted, and ``repair`` deletes them.
        """
        report = VerifyReport()
        backend = self.backend
        if isinstance(self._records, Collecting):
            collector = self._records
            report.orphans = self._call(
                lambda: collector.collect_orphans(delete=repair, grace=grace)
            )
        listed: set[str] = set()
        for summary in self.iter_summaries(page_size=500):
            on_record()
            listed.add(summary.key)
            record = self.get_record(summary.key)
            if record is None or record.summary.revision != summary.revision:
                report.stale.append(summary.key)
            elif (why := self._unreadable(record)) is not None:
                report.unreadable.append(summary.key)
                report.reasons[summary.key] = why
            report.checked += 1
        if isinstance(backend, Repairable):
            for record in backend.iter_records():
                if record.key not in listed:
                    report.unlisted.append(record.key)
                    if (why := self._unreadable(self._whole(record))) is not None:
                        report.unreadable.append(record.key)
                        report.reasons[record.key] = why
        if repair and (report.stale or report.unlisted):
            if isinstance(backend, Repairable):
                report.repaired = self._call(backend.rebuild_index)
            elif callable(repair_index := getattr(backend, "repair", None)):
                self._call(repair_index)  # drops index entries whose record is gone
                report.repaired = report.checked - len(report.stale)
            else:
                raise BackendError(
                    f"the {backend.name} backend updates its index atomically with each "
                    "record; there is no separate index to rebuild",
                    backend=backend.name,
                    operation="verify",
                )
        return report

    def _whole(self, record: Record) -> Record:
        """A record read past the segment layer (``iter_records``), assembled as ``get``
        assembles it; one the layer cannot assemble any more is returned as stored (and so
        reported unreadable)."""
        if isinstance(self._records, Segmented):
            with contextlib.suppress(CheckpointError):
                return self._records.whole(record) or record
        return record

    def _unreadable(self, record: Record) -> str | None:
        """Why ``record`` does not decode (its error's first line), or ``None``."""
        try:
            self.decode(record)
        except CheckpointError as exc:
            return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return None

    # -- internals -----------------------------------------------------------------------

    def _now(self) -> int:
        return self._clock()

    def _call(self, fn: Callable[[], T]) -> T:
        """Run a backend operation under this store's retry policy."""
        if self.closed:
            raise closed_error(self.backend.name)
        began = time.monotonic()
        try:
            return fn()  # most calls: once, with none of the retry machinery
        except BackendUnavailableError:
            if self.retry.attempts <= 1:
                raise
        operation = current()
        for attempt in self.retry.retrying(failed_in=time.monotonic() - began):
            if operation is not None:
                operation.retries += 1
            with attempt:
                return fn()
        raise AssertionError("unreachable: tenacity re-raises the last error")  # pragma: no cover


_FILTERS = frozenset({"owner", "agent_id", "failed", "phase", "before", "since", "prefix"})
"""The keyword arguments of ``Store.list`` that filter what it lists."""


def _holdable(name: str, value: str | None) -> bool:
    """Whether a stored record can hold ``value`` in the field a listing filter ``name``
    compares: none holds a NUL or a lone surrogate (the writer refuses them, and not every
    backend can even send them), so such a filter matches nothing, without a backend call."""
    if value is None:
        return True
    if not isinstance(value, str):
        raise InvalidKeyError(f"the {name} filter must be a string, got {type(value).__name__}")
    return "\x00" not in value and not any(0xD800 <= ord(ch) <= 0xDFFF for ch in value)


def default_key(envelope: Mapping[str, Any]) -> str:
    """``identity.conversationId`` when present, else ``runId`` (of the paused conversation)."""
    try:
        return _default_key(envelope)
    except (KeyError, TypeError, AttributeError):
        validate_envelope(envelope)  # raises the door's message for what is missing
        raise


def _default_key(envelope: Mapping[str, Any]) -> str:
    data = envelope["data"]
    conversation = data["conversation"] if envelope.get("format") == PAUSED_RUN else data
    identity = conversation.get("identity")
    conversation_id = identity.get("conversationId") if isinstance(identity, dict) else None
    if isinstance(conversation_id, str) and conversation_id:
        return conversation_id
    return str(conversation["runId"])


def open_store(
    url: str | os.PathLike[str] | None = None,
    *,
    create: bool = True,
    keyring: Keyring | None = None,
    compress: Compression | None = None,
    migrations: Migrations | None = None,
    retry: RetryPolicy | None = None,
    max_record_bytes: int | None = None,
    **backend_options: Any,
) -> Store:
    """A ``Store`` on the backend ``url`` names (see ``backends.open_backend``).

    With no URL: ``$AGENT_CHECKPOINT_STORE`` if set, else a disk store in ``./.agent-checkpoints``.
    ``create=False`` opens only a store that exists (``StoreNotFoundError`` for a disk folder
    that holds none; nothing is created), as the CLI's reading commands do.
    ``keyring`` encrypts new records (AES-256-GCM) and opens old ones; ``compress="zlib"``
    compresses them; either wraps records in the container of ``_container.py``.
    ``backend_options`` go to the backend (``prefix=``, ``schema=``, a ready ``client=``...).

    Stores opened from the same URL and backend options in one process share one backend and
    its pool (``_shared.py``; not for ``memory://`` or a ``client=`` of yours): ``close()``
    gives back this store's share, and the backend closes with the last one; a store dropped
    without ``close()`` gives its share back when it is garbage collected.
    """
    url = store_url(url)
    check_options(
        create=create, migrations=migrations, retry=retry, max_record_bytes=max_record_bytes
    )
    key = key_for("sync", url, backend_options, create)

    def make() -> tuple[Backend, Callable[[], None], None]:
        backend = open_backend(url, create=create, **backend_options)
        return backend, backend.close, None

    if key is None:  # not shared: the store's own backend, closed with it
        return store_on(
            open_backend(url, create=create, **backend_options),
            retry,
            max_record_bytes,
            keyring=keyring,
            compress=compress,
            migrations=migrations,
        )
    lease = acquire(key, make)
    return held_store(lease, lease.value, retry, max_record_bytes, keyring, compress, migrations)


def held_store(
    lease: Lease,
    backend: Any,
    retry: RetryPolicy | None,
    max_record_bytes: int | None,
    keyring: Keyring | None,
    compress: Compression | None,
    migrations: Migrations | None,
) -> Store:
    """A ``Store`` on ``backend``, the shared backend ``lease`` holds a share of; the share is
    given back if the store cannot be made. ``open_store`` and ``open_async_store`` both."""
    try:
        store = store_on(
            backend,
            retry,
            max_record_bytes,
            keyring=keyring,
            compress=compress,
            migrations=migrations,
        )
    except BaseException:
        lease.close()
        raise
    return hold(store, lease)


def hold(store: Store, lease: Lease) -> Store:
    """``store`` holds ``lease`` on its shared backend: its ``close()`` releases it, as does
    its garbage collection when it is dropped open (see ``_shared.py``)."""
    borrowed, dropped = store._lease, store._dropped
    if dropped is not None:
        dropped.detach()  # type: ignore[attr-defined]
    if borrowed is not None:
        borrowed.release()  # Store() borrowed it: this store owns a share instead
    store._lease, store._dropped, store._shares = lease, track(store, lease), True
    return store


def store_url(url: str | os.PathLike[str] | None) -> str:
    """The URL ``open_store`` opens: ``url`` (a path may be a ``pathlib.Path``), else
    ``$AGENT_CHECKPOINT_STORE``, else the default folder."""
    if isinstance(url, os.PathLike):
        url = os.fspath(url)
    if url is not None and not isinstance(url, str):
        raise InvalidArgumentError(f"a store URL or path is a str, got {url!r}")
    return url or os.environ.get(STORE_ENV) or DEFAULT_STORE_PATH


def check_options(
    *,
    create: object = True,
    migrations: object = None,
    retry: object = None,
    max_record_bytes: object = None,
) -> None:
    """The options ``open_store``, ``open_async_store`` and ``Store()`` take, refused when
    given, not at the first call that would trip on them."""
    check_flag(create, "create")
    if migrations is not None and not isinstance(migrations, Migrations):
        raise InvalidArgumentError(f"migrations must be a Migrations, got {migrations!r}")
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise InvalidArgumentError(
            f"retry must be a RetryPolicy (RetryPolicy(attempts=3), say), got {retry!r}"
        )
    check_record_limit(max_record_bytes)


def check_record_limit(limit: object) -> None:
    if limit is not None:
        check_count(limit, "max_record_bytes", least=1)


_OPERATIONS = ("load", "head", "save", "drop", "scan", "close")


def check_store(store: object, what: str) -> None:
    """Refuse, at once, a URL or a path (as the CLI takes) where ``what`` needs a ``Store``,
    or anything without a store's reading methods."""
    if isinstance(store, (str, os.PathLike)):
        raise InvalidArgumentError(
            f"{what} takes a Store, got {store!r}: open_store({store!r}) opens one"
        )
    if not callable(getattr(store, "iter_summaries", None)):
        raise InvalidArgumentError(f"{what} takes a Store, got {store!r}")


def check_backend(backend: object) -> None:
    """Refuse, at once, a ``Store`` built on something that is no backend: a URL or a path
    (``open_store`` opens those), or an object without the record operations."""
    if isinstance(backend, (str, os.PathLike)):
        raise InvalidArgumentError(
            f"Store() takes a backend object, not the URL or path {backend!r}: "
            f"use open_store({backend!r}) to open a store by URL"
        )
    missing = [name for name in _OPERATIONS if not callable(getattr(backend, name, None))]
    if missing:
        raise InvalidArgumentError(
            f"Store() takes a backend (an object with {', '.join(_OPERATIONS)}), "
            f"got {type(backend).__name__} without {', '.join(missing)}"
        )


def store_on(
    backend: Backend,
    retry: RetryPolicy | None,
    max_record_bytes: int | None,
    *,
    keyring: Keyring | None,
    compress: Compression | None,
    migrations: Migrations | None,
) -> Store:
    """The ``Store`` ``open_store`` (and ``open_async_store``) make on ``backend``."""
    return Store(
        backend,
        keyring=keyring,
        compress=compress,
        migrations=migrations,
        retry=retry,
        max_record_bytes=max_record_bytes,
    )


def codec_for(
    codec: object,
    keyring: Keyring | None,
    compress: Compression | None,
    migrations: Migrations | None,
) -> Codec:
    """The codec a ``Store`` reads and writes with: from its options, or the deprecated
    ``codec=`` (with a warning saying the new spelling; never both)."""
    if codec is None:
        return Codec(migrations or DEFAULT_MIGRATIONS, Sealer(keyring=keyring, compress=compress))
    if not isinstance(codec, Codec):
        raise InvalidArgumentError(f"codec must be a Codec, got {codec!r}")
    parts = {"keyring": keyring, "compress": compress, "migrations": migrations}
    given = [name for name, value in parts.items() if value is not None]
    if given:
        raise InvalidArgumentError(
            f"Store takes codec= or {'/'.join(f'{name}=' for name in given)}, not both: "
            "pass keyring=, compress= and migrations= alone (codec= is deprecated)"
        )
    warnings.warn(
        "Store(backend, codec=Codec(...)) is deprecated and goes away in 0.6: pass the options "
        "themselves, Store(backend, keyring=..., compress=..., migrations=...), as open_store "
        "takes them",
        DeprecationWarning,
        stacklevel=3,
    )
    return codec
