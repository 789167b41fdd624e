"""Exclusive, expiring claims on stored runs, derived from the backend's compare-and-swap.

A lease is a small record in the backend's ``leases`` namespace (``Namespaced``): its summary
holds the worker (as ``agent_id``), the lease token (as ``run_id``) and the expiry (as
``saved_at``), so live claims are listed from the index. Taking a lease is a create-only
write, or a compare-and-swap over an expired one: exactly one contender wins.

Fencing: on claiming, the run's record is rewritten unchanged, which bumps its revision; every
write under the claim is a compare-and-swap on the revision the claim last saw. A worker whose
lease expired and was taken over therefore cannot overwrite the newer state: its write fails
the revision check (and the lease check before it) with ``LeaseError``.
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING

import orjson

from .backends.base import Backend, Namespaced, Query, Record, Summary
from .errors import (
    ClaimedError,
    ConflictError,
    LeaseError,
    NotFoundError,
    UnsupportedOperationError,
)

if TYPE_CHECKING:
    from .model import RunCheckpoint
    from .store import Putable, Store

__all__ = ["Claim", "ClaimedError", "LeaseInfo", "leases_of"]

LEASES = "leases"


@dataclass(frozen=True, slots=True)
class LeaseInfo:
    key: str
    worker: str
    expires_at: int


def leases_of(backend: Backend) -> Backend:
    if not isinstance(backend, Namespaced):
        raise UnsupportedOperationError(
            f"the {backend.name} backend has no namespaces, so it cannot hold claims"
        )
    return backend.namespace(LEASES)


def _lease_record(key: str, worker: str, token: str, expires_at: int) -> Record:
    body = orjson.dumps({"worker": worker, "token": token, "expiresAt": expires_at})
    return Record(Summary(key, token, expires_at, None, worker, None, None, 0, len(body), 0), body)


def _holder(record: Record) -> tuple[str, str, int]:
    """(worker, token, expires_at) of a lease record; the summary is authoritative."""
    s = record.summary
    return s.agent_id or "", s.run_id, s.saved_at


class Claim:
    """One worker's exclusive lease on a run. Use as a context manager to release on exit."""

    def __init__(
        self,
        store: Store,
        key: str,
        worker: str,
        token: str,
        expires_at: int,
        lease_rev: int,
        fence: int,
    ) -> None:
        self.store = store
        self.key = key
        self.worker = worker
        self.token = token
        self.expires_at = expires_at
        self.fence = fence
        """The record revision this claim last saw; writes are compare-and-swap on it."""
        self._lease_rev = lease_rev
        self._released = False

    @classmethod
    def acquire(cls, store: Store, key: str, worker: str, ttl_ms: int) -> Claim:
        leases = leases_of(store.backend)
        now = store.now()
        current = store.call(lambda: leases.load(key))
        if current is not None:
            holder, _, expires = _holder(current)
            if expires > now:
                raise ClaimedError(
                    f"run {key!r} is claimed by worker {holder!r} for another "
                    f"{(expires - now) / 1000:.1f} s",
                    key=key,
                    worker=holder,
                )
        token = uuid.uuid4().hex
        expires_at = now + ttl_ms
        try:
            lease = store.call(
                lambda: leases.save(
                    _lease_record(key, worker, token, expires_at),
                    expect_revision=current.summary.revision if current is not None else None,
                    create_only=current is None,
                )
            )
        except ConflictError as exc:
            raise ClaimedError(f"run {key!r} was claimed by another worker first", key=key) from exc
        claim = cls(store, key, worker, token, expires_at, lease.revision, 0)
        try:
            claim.fence = claim._bump()
        except BaseException:
            claim.release()
            raise
        return claim

    def _bump(self) -> int:
        """Rewrite the record unchanged so its revision moves past any stale writer's."""
        backend = self.store.backend
        for _ in range(5):
            record = self.store.call(lambda: backend.load(self.key))
            if record is None:
                raise NotFoundError(f"no run stored under {self.key!r} to claim")
            try:
                saved = self.store.call(
                    lambda r=record: backend.save(r, expect_revision=r.summary.revision)  # type: ignore[misc]
                )
            except ConflictError:
                continue  # a write landed in between; read it and try again
            return saved.revision
        raise LeaseError(f"run {self.key!r} kept changing while it was being claimed", key=self.key)

    def _check(self) -> None:
        lease = self.store.call(lambda: leases_of(self.store.backend).load(self.key))
        if self._released:
            raise LeaseError(f"the claim on {self.key!r} was released", key=self.key)
        if lease is None or lease.summary.run_id != self.token:
            raise LeaseError(
                f"the claim of worker {self.worker!r} on {self.key!r} was taken over; "
                "nothing was written",
                key=self.key,
            )
        if lease.summary.saved_at <= self.store.now():
            raise LeaseError(
                f"the claim of worker {self.worker!r} on {self.key!r} expired; nothing was written",
                key=self.key,
            )

    def get(self) -> RunCheckpoint | None:
        return self.store.get(self.key)

    def put(self, item: Putable) -> Summary:
        """Store ``item`` under the claimed key, only while this claim holds (fenced)."""
        self._check()
        try:
            summary = self.store.put(item, key=self.key, if_revision=self.fence)
        except ConflictError as exc:
            if isinstance(exc, LeaseError):
                raise
            raise LeaseError(
                f"run {self.key!r} changed under the claim of worker {self.worker!r} (another "
                "worker took it over); nothing was written",
                key=self.key,
            ) from exc
        self.fence = summary.revision
        return summary

    def renew(self, ttl: float) -> None:
        """Extend the lease to ``ttl`` seconds from now; ``LeaseError`` if it was lost."""
        self._check()
        expires_at = self.store.now() + int(ttl * 1000)
        leases = leases_of(self.store.backend)
        try:
            saved = self.store.call(
                lambda: leases.save(
                    _lease_record(self.key, self.worker, self.token, expires_at),
                    expect_revision=self._lease_rev,
                )
            )
        except ConflictError as exc:
            raise LeaseError(f"the claim on {self.key!r} was taken over", key=self.key) from exc
        self._lease_rev, self.expires_at = saved.revision, expires_at

    def release(self) -> None:
        """Give the run up; idempotent, and harmless if the lease was already taken over."""
        if self._released:
            return
        self._released = True
        leases = leases_of(self.store.backend)
        with contextlib.suppress(ConflictError):  # someone else holds it now: not ours to drop
            self.store.call(lambda: leases.drop(self.key, expect_revision=self._lease_rev))

    def __enter__(self) -> Claim:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def live_leases(store: Store, limit: int = 1000) -> list[LeaseInfo]:
    """Claims not yet expired, soonest expiry last. A store that never had a claim is not
    changed by asking (no leases folder or table is made)."""
    exists = getattr(store.backend, "namespace_exists", None)
    if callable(exists) and not store.call(lambda: exists(LEASES)):
        return []
    leases = leases_of(store.backend)
    now = store.now()
    found = store.call(lambda: leases.scan(Query(saved_since=now + 1, limit=limit)))
    return [LeaseInfo(s.key, s.agent_id or "", s.saved_at) for s in found]
