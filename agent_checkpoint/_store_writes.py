"""How a ``put`` reaches the backend (``_store.py`` holds the Store and its contract): a full
save, or through the segment layer (``Segmented``) an append of only the messages past the
history last written (``_appender.py`` keeps that bookkeeping); each under the Store's retry policy, with a
retried write whose first attempt landed recognised as landed, not reported as a conflict.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from ._appender import Appender
from ._codec import Digest
from ._model import RunCheckpoint
from ._segment_format import Split
from ._segments import Segmented
from .backends._base import Backend, Record, Summary
from .errors import ConflictError, RecordTooLargeError, WriteOutcomeUnknownError

__all__ = ["Attempts", "Caller", "Writer", "summary_for"]

T = TypeVar("T")


class Caller(Protocol):
    """Runs a backend operation under the Store's retry policy (``Store.call``)."""

    def __call__(self, fn: Callable[[], T], /) -> T: ...


class Attempts:
    """Counts the attempts of one write run under the retry policy, and tells, on a retry,
    whether an earlier attempt landed: its reply may have been lost after it did, so a retry
    that fails as if the record had moved on (a conflict, an append whose base is gone) reads
    the record back before reporting that."""

    def __init__(self, backend: Backend, key: str) -> None:
        self.backend = backend
        self.key = key
        self.count = 0

    def start(self) -> None:
        """Call at the top of each attempt."""
        self.count += 1

    @property
    def retried(self) -> bool:
        return self.count > 1

    def landed(self, body: bytes | Callable[[], bytes]) -> Summary | None:
        """On a retry, the stored summary if the record holds exactly ``body`` (built only
        when a record is there to compare with): an earlier attempt wrote it."""
        if not self.retried:
            return None
        stored = self.backend.load(self.key)
        if stored is None or stored.body != (body() if callable(body) else body):
            return None
        return stored.summary

    def deleted(self) -> bool:
        """On a retry, whether the record is gone: an earlier attempt deleted it."""
        return self.retried and self.backend.head(self.key) is None


def summary_for(key: str, digest: Digest, size: int) -> Summary:
    """The summary a new record of ``size`` bytes under ``key`` is stored with (revision 0:
    the backend assigns it)."""
    return Summary(
        key=key,
        run_id=digest.run_id,
        saved_at=digest.saved_at,
        owner=digest.owner,
        agent_id=digest.agent_id,
        failure_phase=digest.failure_phase,
        failure_iteration=digest.failure_iteration,
        message_count=digest.message_count,
        size=size,
        revision=0,
    )


class Writer:
    """How the Store's puts reach its backend (one per Store)."""

    def __init__(self, backend: Backend, call: Caller, max_record_bytes: int | None) -> None:
        self.backend = backend
        # Checked once: a runtime-checkable Protocol's isinstance costs ~10 us a put.
        self.appending = backend if isinstance(backend, Segmented) else None
        self.appender = Appender()
        self.max_record_bytes = max_record_bytes
        self._call = call

    def check_size(self, key: str, size: int) -> None:
        if self.max_record_bytes is not None and size > self.max_record_bytes:
            raise RecordTooLargeError(
                f"record {key!r} is {size} bytes; this store's limit is {self.max_record_bytes}"
            )

    def put_appending(
        self,
        checkpoint: RunCheckpoint,
        key: str,
        saved_at: int,
        if_revision: int | None,
        create_only: bool,
    ) -> Summary:
        """Write only the messages past the last history written under ``key`` when the new
        history extends it (see ``_appender.py``); otherwise a full write, split for later."""
        backend = self.appending
        assert backend is not None
        tail = None if create_only else self.appender.tail(key)
        if tail is not None and if_revision is not None and tail.revision != if_revision:
            tail = None
        encoded = self.appender.encode(checkpoint, saved_at, tail)
        base = encoded.extends
        attempts = Attempts(backend, key)
        try:
            if base is not None:
                self.check_size(key, encoded.size)
                summary = summary_for(key, encoded.digest, encoded.size)

                def append() -> Summary | None:
                    attempts.start()
                    done = backend.append(
                        summary, encoded.split, base_revision=base.revision, base_digest=base.digest
                    )
                    if done is None:
                        return attempts.landed(
                            lambda: self.appender.encode(checkpoint, saved_at, None).body()
                        )
                    return done

                landed = self._call(append)
                if landed is not None:
                    self.appender.landed(key, checkpoint, encoded, landed)
                    return landed
                encoded = self.appender.encode(checkpoint, saved_at, None)
            # A split write stores the head and the segment; the assembled bytes are built
            # only if a retry must compare them with what landed.
            record = Record(summary_for(key, encoded.digest, encoded.size), b"")
            uncertain = base is not None and attempts.retried
            landed = self.write(
                record, if_revision, create_only, encoded.split, uncertain, whole=encoded.body
            )
        except BaseException:
            self.appender.forget(key)
            raise
        self.appender.landed(key, checkpoint, encoded, landed)
        return landed

    def write(
        self,
        record: Record,
        if_revision: int | None,
        create_only: bool,
        split: Split | None,
        uncertain: bool = False,
        whole: Callable[[], bytes] | None = None,
    ) -> Summary:
        """One write under the retry policy. ``uncertain``: an earlier write of this put may
        already have landed (its reply was lost). ``whole``: the assembled bytes of a split
        write (whose ``record.body`` is empty)."""
        self.check_size(record.key, record.summary.size if whole else len(record.body))
        backend = self.backend
        attempts = Attempts(backend, record.key)

        def save() -> Summary:
            attempts.start()
            try:
                if split is not None and self.appending is not None:
                    return self.appending.save_split(
                        record, split, expect_revision=if_revision, create_only=create_only
                    )
                return backend.save(record, expect_revision=if_revision, create_only=create_only)
            except ConflictError:
                landed = attempts.landed(whole or record.body)
                if landed is None:
                    raise
                return landed

        try:
            return self._call(save)
        except ConflictError as exc:
            if attempts.retried or uncertain:
                raise WriteOutcomeUnknownError(
                    f"{backend.name} put failed: the write to {record.key!r} may have landed: "
                    "its reply was lost, and the "
                    f"record changed before the retry could tell ({exc}). Read it back before "
                    "writing again.",
                    backend=backend.name,
                    operation="put",
                ) from exc
            raise
