"""Whole-store operations: copy, migrate, rekey, verify. Each is resumable and reports.

They walk the listing page by page and touch one record at a time, so they run on stores of any
size; ``on_record`` is called once per record visited (for progress bars). Rewrites are
compare-and-swap on the revision that was read, so a record changed meanwhile is reported, not
clobbered, and running the operation again finishes the job.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from ._store import Store, check_store
from ._store_types import VerifyReport
from .backends._base import Record
from .errors import (
    BackendError,
    CheckpointError,
    ConflictError,
    InvalidCheckpointError,
    UnsafeStageError,
)

__all__ = [
    "CopyReport",
    "MigrateReport",
    "RekeyReport",
    "VerifyReport",
    "copy_records",
    "migrate_records",
    "rekey_records",
    "verify_store",
]

Tick = Callable[[], None]


def _noop() -> None:
    pass


@dataclass
class CopyReport:
    copied: int = 0
    already_there: int = 0
    conflicts: list[str] = field(default_factory=list)
    """Keys the target holds with other content (found there, or written there while the copy
    ran): left as they are."""
    unreadable: list[str] = field(default_factory=list)
    """Source records that do not decode: skipped, or copied as they are when asked."""
    unchecked: int = 0
    """Records encrypted under a key the source store lacks: copied without decoding."""


def copy_records(
    source: Store,
    target: Store,
    *,
    overwrite: bool = False,
    include_unreadable: bool = False,
    workers: int = 8,
    on_record: Tick = _noop,
    report: CopyReport | None = None,
) -> CopyReport:
    """Copy every record's stored bytes to ``target`` and read each back to verify it.

    Each record is decoded first: one that does not decode is listed in ``unreadable`` and
    left behind unless ``include_unreadable``. A record already in the target with the same
    bytes is skipped (so a copy can be resumed); one with other bytes is listed in
    ``conflicts`` and kept unless ``overwrite``. Writes are conditional (create-only, or on the
    revision read), so a record written in the target meanwhile is never overwritten.
    ``workers`` records are copied at a time, since each one costs a few round trips on a
    network backend; ``report`` (filled in as records are copied) tells how far an
    interrupted copy got.
    """
    check_store(source, "copy_records source")
    check_store(target, "copy_records target")
    report = report if report is not None else CopyReport()
    lock = threading.Lock()

    def copy_one(key: str) -> None:
        record = source.get_record(key)
        if record is not None:  # else: deleted since it was listed
            readable = _decodes(source, record) if source.can_open(record) else None
            outcome = (
                "skipped"
                if readable is False and not include_unreadable
                else _copy_record(record, target, overwrite, as_is=readable is not True)
            )
            with lock:
                if readable is False:
                    report.unreadable.append(key)
                elif readable is None and outcome == "copied":
                    report.unchecked += 1
                if outcome == "copied":
                    report.copied += 1
                elif outcome == "already":
                    report.already_there += 1
                elif outcome == "conflict":
                    report.conflicts.append(key)
        on_record()

    pool = ThreadPoolExecutor(max_workers=max(1, workers))
    try:
        pending: set[Future[None]] = set()
        for summary in source.iter_summaries(page_size=500):
            pending.add(pool.submit(copy_one, summary.key))
            if len(pending) >= 4 * workers:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    future.result()  # the first failure stops the copy
        for future in pending:
            future.result()
    finally:
        pool.shutdown(cancel_futures=True)  # Ctrl-C: finish the records in flight, no more
    return report


def _copy_record(record: Record, target: Store, overwrite: bool, *, as_is: bool) -> str:
    """``copied``, ``already`` (the same bytes are there) or ``conflict`` (other content).
    ``as_is``: the source could not decode the bytes (unreadable, or encrypted under a key it
    lacks), so the target stores them unchecked with the source's summary."""
    existing = target.get_record(record.key)
    if existing is not None and existing.body == record.body:
        return "already"
    if existing is not None and not overwrite:
        return "conflict"
    try:
        if existing is None:
            target.put_record(record, create_only=True, as_is=as_is)
        else:
            target.put_record(record, if_revision=existing.summary.revision, as_is=as_is)
    except ConflictError:  # written in the target since we looked (or owned by another)
        again = target.get_record(record.key)
        return "already" if again is not None and again.body == record.body else "conflict"
    again = target.get_record(record.key)
    if again is None or again.body != record.body:
        raise BackendError(
            f"verification failed for {record.key!r}: the target holds other bytes",
            operation="copy",
        )
    return "copied"


@dataclass
class MigrateReport:
    upgraded: int = 0
    current: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)


def migrate_records(
    store: Store, *, dry_run: bool = False, on_record: Tick = _noop
) -> MigrateReport:
    """Rewrite every record stored in an older version at ``store.migrations.current``, and
    every record stored in an older layout (as version 0.4 stored long histories, in
    segments) whole."""
    check_store(store, "migrate_records")
    report = MigrateReport()
    for summary in store.iter_summaries(page_size=500):
        on_record()
        record = store.get_record(summary.key)
        if record is None:
            continue
        try:
            doc = store.migrated(record)
        except CheckpointError as exc:
            report.failed.append((summary.key, str(exc)))
            continue
        if doc is None and not store.in_old_layout(summary.key):
            report.current += 1
            continue
        if dry_run:
            report.upgraded += 1
            continue
        try:
            if doc is None:  # the bytes as they are, in today's layout
                store.put_record(record, if_revision=record.summary.revision)
            else:
                store.put(doc, key=summary.key, if_revision=record.summary.revision)
        except ConflictError:
            report.failed.append((summary.key, "changed during migration; run it again"))
            continue
        except (InvalidCheckpointError, UnsafeStageError) as exc:  # no put may store it
            report.failed.append((summary.key, str(exc)))
            continue
        report.upgraded += 1
    return report


@dataclass
class RekeyReport:
    rewritten: int = 0
    current: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)


def rekey_records(store: Store, *, on_record: Tick = _noop) -> RekeyReport:
    """Re-encrypt every record under the keyring's primary key (and current compression)."""
    check_store(store, "rekey_records")
    report = RekeyReport()
    for summary in store.iter_summaries(page_size=500):
        on_record()
        record = store.get_record(summary.key)
        if record is None:
            continue
        try:
            resealed = store.resealed(record)
            if resealed is None:
                report.current += 1
                continue
            store.put_record(resealed, if_revision=record.summary.revision)
        except ConflictError:
            report.failed.append((summary.key, "changed during rekey; run it again"))
            continue
        except CheckpointError as exc:
            report.failed.append((summary.key, str(exc)))
            continue
        report.rewritten += 1
    return report


def _decodes(store: Store, record: Record) -> bool:
    try:
        store.decode(record)
    except CheckpointError:
        return False
    return True


def verify_store(
    store: Store, *, repair: bool = False, on_record: Tick = _noop, grace: float = 300.0
) -> VerifyReport:
    """``store.verify(...)``: decode every record and check the index against the records."""
    check_store(store, "verify_store")
    return store.verify(repair=repair, grace=grace, on_record=on_record)
