"""Exclusive, expiring claims on stored runs, derived from the backend's compare-and-swap.

A lease (``Lease``) is a small record in the backend's ``leases`` namespace (``Namespaced``).
Taking a lease is a create-only write, or a compare-and-swap over an expired one: exactly one
contender wins. Live leases are listed from the namespace's index, newest expiry first.

Fencing: on claiming, the run's record is rewritten unchanged, which bumps its revision; every
write under the claim is a compare-and-swap on the revision the claim last saw. A worker whose
lease expired and was taken over therefore cannot overwrite the newer state: its write fails
the revision check (and the lease check before it) with ``LeaseError``.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from types import TracebackType
from typing import TYPE_CHECKING

import orjson

from ._store_types import ttl_ms
from ._store_writes import Caller
from .backends._base import Backend, Namespaced, Query, Record, Summary
from .errors import (
    ClaimedError,
    ConflictError,
    LeaseError,
    NotFoundError,
    UnsupportedOperationError,
)

if TYPE_CHECKING:
    from ._model import RunCheckpoint
    from ._store import Putable, Store

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


@dataclass(frozen=True, slots=True)
class Lease:
    """One worker's lease on the run under ``key``: ``token`` names this grant (a renewal
    keeps it, a new grant gets another), ``expires_at`` is epoch ms, ``revision`` is the
    lease record's (0 for one not yet stored)."""

    key: str
    worker: str
    token: str
    expires_at: int
    revision: int = 0

    # The one mapping between a lease and the record that stores it. A lease is stored in a
    # checkpoint's summary fields, as leases always were (existing stores' leases still read,
    # and every backend's index serves them): the worker as ``agent_id``, the token as
    # ``run_id``, the expiry as ``saved_at`` (so live leases are a scan by ``saved_at``).
    # The summary is authoritative; the body repeats it for people reading the store.

    @classmethod
    def of(cls, summary: Summary) -> Lease:
        """The lease a record of the leases namespace holds."""
        return cls(
            summary.key, summary.agent_id or "", summary.run_id, summary.saved_at, summary.revision
        )

    def record(self) -> Record:
        body = orjson.dumps(
            {"worker": self.worker, "token": self.token, "expiresAt": self.expires_at}
        )
        summary = Summary(
            key=self.key,
            run_id=self.token,
            saved_at=self.expires_at,
            owner=None,
            agent_id=self.worker,
            failure_phase=None,
            failure_iteration=None,
            message_count=0,
            size=len(body),
            revision=0,
        )
        return Record(summary, body)

    @staticmethod
    def live_since(now: int, limit: int) -> Query:
        """The listing of the leases still live at ``now``."""
        return Query(saved_since=now + 1, limit=limit)

    def info(self) -> LeaseInfo:
        return LeaseInfo(self.key, self.worker, self.expires_at)


@dataclass(frozen=True, slots=True)
class Access:
    """What a Store hands its claims (``Store.claim``, ``Store.claims``): its retry policy,
    its clock and its backend. Claims read and write the run through the Store's public
    methods and only their own records (the ``leases`` namespace, and the fence) here."""

    call: Caller
    now: Callable[[], int]
    backend: Backend

    @property
    def leases(self) -> Backend:
        return leases_of(self.backend)


class Claim:
    """One worker's exclusive lease on a run. Use as a context manager to release on exit."""

    def __init__(self, store: Store, access: Access, lease: Lease, fence: int) -> None:
        self.store = store
        self._access = access
        self.lease = lease
        """The lease as this claim last stored it."""
        self.fence = fence
        """The record revision this claim last saw; writes are compare-and-swap on it."""
        self._released = False

    @property
    def key(self) -> str:
        return self.lease.key

    @property
    def worker(self) -> str:
        return self.lease.worker

    @property
    def token(self) -> str:
        return self.lease.token

    @property
    def expires_at(self) -> int:
        return self.lease.expires_at

    @classmethod
    def acquire(cls, store: Store, access: Access, key: str, worker: str, ttl_ms: int) -> Claim:
        leases = access.leases
        now = access.now()
        found = access.call(lambda: leases.load(key))
        current = None if found is None else Lease.of(found.summary)
        if current is not None and current.expires_at > now:
            raise ClaimedError(
                f"run {key!r} is claimed by worker {current.worker!r} for another "
                f"{(current.expires_at - now) / 1000:.1f} s",
                key=key,
                worker=current.worker,
            )
        lease = Lease(key, worker, uuid.uuid4().hex, now + ttl_ms)
        try:
            saved = access.call(
                lambda: leases.save(
                    lease.record(),
                    expect_revision=current.revision if current is not None else None,
                    create_only=current is None,
                )
            )
        except ConflictError as exc:
            raise ClaimedError(f"run {key!r} was claimed by another worker first", key=key) from exc
        claim = cls(store, access, replace(lease, revision=saved.revision), 0)
        try:
            claim.fence = claim._bump()
        except BaseException:
            claim.release()
            raise
        return claim

    def _bump(self) -> int:
        """Rewrite the record unchanged so its revision moves past any stale writer's. The
        stored bytes as they are (a record in pieces stays one, its pieces untouched)."""
        backend, call = self._access.backend, self._access.call
        for _ in range(5):
            record = call(lambda: backend.load(self.key))
            if record is None:
                raise NotFoundError(f"no run stored under {self.key!r} to claim")
            try:
                saved = call(
                    lambda r=record: backend.save(r, expect_revision=r.summary.revision)  # type: ignore[misc]
                )
            except ConflictError:
                continue  # a write landed in between; read it and try again
            return saved.revision
        raise LeaseError(f"run {self.key!r} kept changing while it was being claimed", key=self.key)

    def _check(self) -> None:
        leases = self._access.leases
        found = self._access.call(lambda: leases.load(self.key))
        if self._released:
            raise LeaseError(f"the claim on {self.key!r} was released", key=self.key)
        stored = None if found is None else Lease.of(found.summary)
        if stored is None or stored.token != self.token:
            raise LeaseError(
                f"the claim of worker {self.worker!r} on {self.key!r} was taken over; "
                "nothing was written",
                key=self.key,
            )
        if stored.expires_at <= self._access.now():
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
        renewed = replace(self.lease, expires_at=self._access.now() + ttl_ms(ttl))
        leases = self._access.leases
        try:
            saved = self._access.call(
                lambda: leases.save(renewed.record(), expect_revision=self.lease.revision)
            )
        except ConflictError as exc:
            raise LeaseError(f"the claim on {self.key!r} was taken over", key=self.key) from exc
        self.lease = replace(renewed, revision=saved.revision)

    def release(self) -> None:
        """Give the run up; idempotent, and harmless if the lease was already taken over."""
        if self._released:
            return
        self._released = True
        leases, call = self._access.leases, self._access.call
        with contextlib.suppress(ConflictError):  # someone else holds it now: not ours to drop
            call(lambda: leases.drop(self.key, expect_revision=self.lease.revision))

    def __enter__(self) -> Claim:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def set_up_leases(access: Access) -> None:
    """Bring the claims' namespace up to date, where the store has one and opening it sets it
    up (a PostgreSQL table: ``Store.setup``, so that a role that may not change the schema
    never has to). A store that never had a claim gets none."""
    exists = getattr(access.backend, "namespace_exists", None)
    if callable(exists) and access.call(lambda: exists(LEASES)):
        access.call(lambda: access.leases)


def live_leases(access: Access, limit: int = 1000) -> list[LeaseInfo]:
    """Claims not yet expired, soonest expiry last. A store that never had a claim is not
    changed by asking (no leases folder or table is made)."""
    exists = getattr(access.backend, "namespace_exists", None)
    if callable(exists) and not access.call(lambda: exists(LEASES)):
        return []
    leases = access.leases
    found = access.call(lambda: leases.scan(Lease.live_since(access.now(), limit)))
    return [Lease.of(s).info() for s in found]
