"""PostgreSQL racing writers of one new key: every creator lands, and of create-only writers
one wins."""

from __future__ import annotations

import threading
from typing import Any

from support.postgres_store import open_pg

from agent_checkpoint import Store
from agent_checkpoint.errors import ConflictError
from agent_checkpoint.testing import checkpoint

# -- racing creators --------------------------------------------------------------------


def race(store: Store, writes: int, **put: Any) -> tuple[list[int], list[BaseException]]:
    """``writes`` threads putting the same fresh key at once; the revisions they got, and errors."""
    barrier = threading.Barrier(writes)
    revisions: list[int] = []
    errors: list[BaseException] = []

    def write(i: int) -> None:
        barrier.wait()
        try:
            revisions.append(store.put(checkpoint(text=f"w{i}"), key="fresh", **put).revision)
        except BaseException as exc:  # judged by the caller
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return revisions, errors


def test_racing_creators_of_a_new_key_all_land_one_after_another(schema: str) -> None:
    with open_pg(schema) as store:
        store.setup()
        revisions, errors = race(store, 8)
        assert errors == []
        # the first lands at the revision sequence's next value (a creator that lost the race
        # for the row has taken one too, so it need not be 1); each later one adds one
        first = min(revisions)
        assert first >= 1 and sorted(revisions) == list(range(first, first + 8))
        assert store.head("fresh").revision == first + 7  # type: ignore[union-attr]


def test_racing_create_only_writers_of_a_new_key_have_one_winner(schema: str) -> None:
    with open_pg(schema) as store:
        store.setup()
        revisions, errors = race(store, 8, create_only=True)
        assert len(revisions) == 1 and revisions[0] >= 1  # the sequence's value it took
        assert len(errors) == 7 and all(isinstance(e, ConflictError) for e in errors)
        got = store.get("fresh")
        assert got is not None and store.head("fresh").revision == revisions[0]  # type: ignore[union-attr]
