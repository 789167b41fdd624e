"""The shipped conformance suite fails a backend that breaks a rule of the record contract.

``Toy`` is a third-party-style backend: the memory backend's five record operations behind a
toy driver connection, with the driver's faults translated. Each mutant below breaks one rule
the way a backend author might; the suite's test for that rule must fail against the mutant and
pass against ``Toy``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import pytest

from agent_checkpoint import Store
from agent_checkpoint.backends import Query, Record, Summary, translate_errors
from agent_checkpoint.backends._memory import MemoryBackend
from agent_checkpoint.errors import ConflictError
from agent_checkpoint.testing import StoreConformance


class Toy:
    """The memory backend behind a driver whose connection ``break_connection`` can cut."""

    name = "toy"

    def __init__(self) -> None:
        self.inner = MemoryBackend()
        self.down = False

    def _connection(self) -> None:
        if self.down:
            raise ConnectionResetError("connection reset by peer")

    @contextmanager
    def _call(self, operation: str) -> Iterator[None]:
        with translate_errors(self.name, operation, transient=(ConnectionError,)):
            self._connection()
            yield

    def load(self, key: str) -> Record | None:
        with self._call("load"):
            return self.inner.load(key)

    def head(self, key: str) -> Summary | None:
        with self._call("head"):
            return self.inner.head(key)

    def save(
        self, record: Record, *, expect_revision: int | None = None, create_only: bool = False
    ) -> Summary:
        with self._call("save"):
            return self.inner.save(record, expect_revision=expect_revision, create_only=create_only)

    def drop(self, key: str, *, expect_revision: int | None = None) -> bool:
        with self._call("drop"):
            return self.inner.drop(key, expect_revision=expect_revision)

    def scan(self, query: Query) -> list[Summary]:
        with self._call("scan"):
            return self.inner.scan(query)

    def close(self) -> None:
        self.inner.close()


class DropFalseOnConflict(Toy):
    """``drop`` of a lost revision returns False instead of raising."""

    def drop(self, key: str, *, expect_revision: int | None = None) -> bool:
        try:
            return super().drop(key, expect_revision=expect_revision)
        except ConflictError:
            return False


class DropFalseWhenAbsent(Toy):
    """``drop`` of an absent key returns False even when a revision was expected."""

    def drop(self, key: str, *, expect_revision: int | None = None) -> bool:
        if self.head(key) is None:
            return False
        return super().drop(key, expect_revision=expect_revision)


class OldestTiesByKeyDescending(Toy):
    """Oldest first orders ties by key descending (``ORDER BY saved_at, key DESC``)."""

    def scan(self, query: Query) -> list[Summary]:
        found = super().scan(replace(query, limit=10**9))
        if query.oldest_first:
            found = sorted(
                sorted(found, key=lambda s: s.key, reverse=True), key=lambda s: s.saved_at
            )
        return found[: query.limit]


class ScanPastLimit(Toy):
    """``scan`` returns every match, leaving the limit to the caller."""

    def scan(self, query: Query) -> list[Summary]:
        return super().scan(replace(query, limit=10**9))


class Untranslated(Toy):
    """The driver's exception escapes as it is."""

    @contextmanager
    def _call(self, operation: str) -> Iterator[None]:
        self._connection()
        yield


class BusyUnderThreads(Toy):
    """A write from one of several threads fails (a driver that is not thread-safe)."""

    def save(
        self, record: Record, *, expect_revision: int | None = None, create_only: bool = False
    ) -> Summary:
        if record.summary.key == "w3-0":
            raise RuntimeError("driver busy")
        return super().save(record, expect_revision=expect_revision, create_only=create_only)


class Suite(StoreConformance):
    """The suite as a backend's test module subclasses it (run here method by method)."""

    @contextmanager
    def break_connection(self, store: Store) -> Iterator[None]:
        backend = store.backend
        assert isinstance(backend, Toy)
        backend.down = True
        try:
            yield
        finally:
            backend.down = False


DROP = "test_drop_of_a_lost_revision_raises_conflict_and_keeps_the_record"
CASES: list[tuple[type[Toy], str, str]] = [  # mutant, the test that catches it, how it fails
    (DropFalseOnConflict, DROP, "DID NOT RAISE.*ConflictError"),
    (DropFalseWhenAbsent, DROP, "DID NOT RAISE.*ConflictError"),
    (
        DropFalseWhenAbsent,
        "test_delete_with_if_revision_of_a_missing_key_conflicts",
        "DID NOT RAISE.*ConflictError",
    ),
    (
        OldestTiesByKeyDescending,
        "test_scan_orders_ties_of_saved_at_by_key_ascending_both_ways",
        r"oldest_first=True, prefix=None\) listed \['d', 'c', 'b', 'a', 'e'\]",
    ),
    (OldestTiesByKeyDescending, "test_retention_forgets_ties_in_key_order", "not d and a"),
    (ScanPastLimit, "test_scan_returns_at_most_limit_summaries", r"limit=1, .* listed \['e', 'a'"),
    # the suites' asserts are rewritten by pytest: a failure shows what the writers met
    (BusyUnderThreads, "test_concurrent_writers_on_distinct_keys_all_land", "driver busy"),
    (
        Untranslated,
        "test_driver_faults_reach_the_caller_as_library_errors",
        "raised ConnectionResetError.*not BackendError",
    ),
]


def run(backend: Toy, test: str) -> None:
    with Store(backend) as store:
        getattr(Suite(), test)(store)


@pytest.mark.parametrize(
    ("mutant", "test", "failure"), CASES, ids=lambda v: getattr(v, "__name__", None)
)
def test_the_suite_fails_a_backend_that_breaks_the_rule(
    mutant: type[Toy], test: str, failure: str
) -> None:
    with pytest.raises((AssertionError, pytest.fail.Exception), match=failure):
        run(mutant(), test)


@pytest.mark.parametrize("test", sorted({test for _, test, _ in CASES}))
def test_the_same_tests_pass_a_backend_that_keeps_the_rules(test: str) -> None:
    run(Toy(), test)
