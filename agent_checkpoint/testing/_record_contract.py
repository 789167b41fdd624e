"""The record operations' own rules, checked on the backend itself where the Store would hide a
mistake: ``drop``'s conflicts, ``scan``'s order, ties and limit, and driver faults reaching the
caller as the library's errors."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

import pytest

from .._store import Store
from .._store_types import NO_RETRY
from ..backends._base import Query
from ..errors import BackendError, CheckpointError, ConflictError
from ._samples import checkpoint, stamped

# Three ties at 200, one older, one newer; written out of key order so that a backend that
# lists in insertion order, or orders ties by key descending, shows it.
_STAMPS = [("b", 200), ("d", 100), ("a", 200), ("e", 300), ("c", 200)]
_NEWEST_FIRST = ["e", "a", "b", "c", "d"]
_OLDEST_FIRST = ["d", "a", "b", "c", "e"]
_FAILED = {"b", "c", "e"}


def _fill(store: Store) -> None:
    for key, saved in _STAMPS:
        store.put(
            stamped(checkpoint(key, failed="llm" if key in _FAILED else None), saved), key=key
        )


def _lists(store: Store, expected: list[str], **query: object) -> None:
    page = Query(**query)  # type: ignore[arg-type]
    found = [s.key for s in store.backend.scan(page)]
    assert found == expected, f"{page} listed {found}, not {expected}"


class _RecordContract:
    """Subclass with a ``store`` fixture yielding an empty ``Store`` (via ``StoreConformance``).

    Override ``break_connection`` to run the driver-fault test."""

    def break_connection(self, store: Store) -> AbstractContextManager[object]:
        """A context inside which ``store``'s backend cannot reach its storage, so that its
        driver raises (a refused connection, a lock held by another process); leaving it
        restores the connection. Not overridden: the fault test skips."""
        pytest.skip(
            f"{type(self).__name__} has no break_connection(store): override it to check that "
            "driver faults reach the caller as BackendError"
        )

    # -- drop ----------------------------------------------------------------------------

    def test_drop_of_a_lost_revision_raises_conflict_and_keeps_the_record(
        self, store: Store
    ) -> None:
        backend = store.backend
        first = store.put(checkpoint(text="one"), key="k")
        second = store.put(checkpoint(text="two"), key="k")
        with pytest.raises(ConflictError):
            backend.drop("k", expect_revision=first.revision)
        assert backend.head("k") == second
        assert backend.drop("k", expect_revision=second.revision) is True
        with pytest.raises(ConflictError):
            backend.drop("k", expect_revision=second.revision)  # dropped since: absent
        with pytest.raises(ConflictError):
            backend.drop("never-written", expect_revision=1)
        assert backend.drop("k") is False

    def test_delete_with_if_revision_of_a_missing_key_conflicts(self, store: Store) -> None:
        """As a put with ``if_revision`` does: the caller's expectation was wrong."""
        with pytest.raises(ConflictError):
            store.delete("ghost", if_revision=1)
        gone = store.put(checkpoint(), key="gone")
        store.delete("gone")
        with pytest.raises(ConflictError):
            store.delete("gone", if_revision=gone.revision)

    # -- scan ----------------------------------------------------------------------------

    def test_scan_orders_ties_of_saved_at_by_key_ascending_both_ways(self, store: Store) -> None:
        _fill(store)
        _lists(store, _NEWEST_FIRST)
        _lists(store, _OLDEST_FIRST, oldest_first=True)
        _lists(store, ["b", "c", "d"], after=(200, "a"))
        _lists(store, ["b", "c", "e"], oldest_first=True, after=(200, "a"))
        _lists(store, ["b", "c", "e"], oldest_first=True, failed=True)

    def test_retention_forgets_ties_in_key_order(self, store: Store) -> None:
        _fill(store)
        assert store.forget_older_than(250, limit=2).forgotten == 2
        kept = sorted(s.key for s in store.list())
        assert kept == ["b", "c", "e"], f"forgot d and {set('abc') - set(kept)}, not d and a"

    def test_scan_returns_at_most_limit_summaries(self, store: Store) -> None:
        _fill(store)
        cases: list[tuple[dict[str, object], list[str]]] = [
            ({}, _NEWEST_FIRST),
            ({"oldest_first": True}, _OLDEST_FIRST),
            ({"failed": True}, ["e", "b", "c"]),
            ({"oldest_first": True, "after": (100, "d")}, _OLDEST_FIRST[1:]),
        ]
        for query, everything in cases:
            for limit in (1, 2, 3, 10):
                _lists(store, everything[:limit], limit=limit, **query)

    # -- driver faults -------------------------------------------------------------------

    def test_driver_faults_reach_the_caller_as_library_errors(self, store: Store) -> None:
        """Each operation on a broken connection raises ``BackendError`` (or its subclass
        ``BackendUnavailableError``) naming the backend and the operation, raised ``from``
        the driver's exception; never the driver's own exception."""
        breaking = self.break_connection(store)  # skips here where there is no way to break
        fragile = Store(store.backend, retry=NO_RETRY)
        fragile.put(checkpoint(text="before"), key="k")
        calls: dict[str, Callable[[], object]] = {
            "get": lambda: fragile.get("k"),
            "head": lambda: fragile.head("k"),
            "put": lambda: fragile.put(checkpoint(text="during"), key="k"),
            "delete": lambda: fragile.delete("k"),
            "list": lambda: fragile.list(),
        }
        name = store.backend.name
        with breaking:
            for call, run in calls.items():
                try:
                    run()
                except BackendError as exc:
                    assert exc.backend == name, f"{call}: {exc!r} names {exc.backend!r}"
                    assert exc.operation and name in str(exc), f"{call}: {exc!r}"
                    cause = exc.__cause__
                    assert cause is not None and not isinstance(cause, CheckpointError), (
                        f"{call}: {exc!r} is not raised from the driver's exception"
                    )
                except Exception as exc:
                    pytest.fail(f"{call} on a broken connection raised {exc!r}, not BackendError")
                else:
                    pytest.fail(
                        f"{call} worked on a broken connection: break_connection broke nothing"
                    )
        got = fragile.get("k")
        assert got is not None and got.history[0].content == "before 0"
