"""PostgreSQL listing at scale: filters, pages and order over 10,000 records, and the partial
owner and agent indexes."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from psycopg import sql
from support.postgres_server import unique_schema
from support.postgres_store import (
    BASE,
    Admin,
    N,
    drop_schema,
    open_pg,
    scale_record,
)

from agent_checkpoint import Store
from agent_checkpoint.backends import Query, Record, Summary
from agent_checkpoint.backends._postgres import PostgresBackend
from agent_checkpoint.backends._postgres_sql import scan_statement
from agent_checkpoint.testing import checkpoint

# -- listing at scale -------------------------------------------------------------------


def newest_first(summaries: list[Summary]) -> list[str]:
    return [s.key for s in sorted(summaries, key=lambda s: (-s.saved_at, s.key))]


@pytest.fixture(scope="module")
def big(admin: Admin) -> Iterator[tuple[Store, list[Summary]]]:
    """A store of ``N`` records, and their stored summaries."""
    name = unique_schema("ac_scale")
    store = open_pg(name, max_size=8)
    store.setup()
    records = [scale_record(i) for i in range(N)]
    with ThreadPoolExecutor(8) as pool:
        saved = list(pool.map(store.backend.save, records))  # index rows: bodies unread
    admin.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(name, "agent_checkpoints")))
    yield store, saved
    store.close()
    drop_schema(admin, name)


class TestListingAtScale:
    def test_newest_100_of_10000_are_exactly_the_newest_in_order(
        self, big: tuple[Store, list[Summary]]
    ) -> None:
        store, saved = big
        page = store.list(limit=100)
        assert [s.key for s in page] == newest_first(saved)[:100]

    def test_paging_all_10000_while_a_writer_adds_newer_records_has_no_repeats_or_gaps(
        self, big: tuple[Store, list[Summary]]
    ) -> None:
        store, saved = big
        stop = threading.Event()
        started = threading.Event()
        written: list[str] = []

        def writer() -> None:
            j = 0
            while not stop.is_set():
                key = f"new-{j:05d}"
                newer = Summary(key, "new", BASE + N + j, None, None, None, None, 0, 0, 0)
                store.backend.save(Record(newer, b"{}"))
                written.append(key)
                started.set()
                j += 1

        thread = threading.Thread(target=writer)
        thread.start()
        try:
            assert started.wait(30)
            seen: list[str] = []
            cursor = None
            while True:
                page = store.list(limit=500, cursor=cursor)
                seen.extend(s.key for s in page)
                if page.cursor is None:
                    break
                cursor = page.cursor
        finally:
            stop.set()
            thread.join()
        assert len(seen) == len(set(seen))
        assert [k for k in seen if not k.startswith("new-")] == newest_first(saved)
        assert written
        for key in written:
            store.delete(key)

    @pytest.mark.parametrize(
        "filters",
        [
            {"owner": "owner3"},
            {"agent_id": "agent5"},
            {"failed": True},
            {"failed": False},
            {"phase": "llm"},
            {"owner": "owner1", "failed": True, "before": BASE + 2000},
            {"since": BASE + 1000, "before": BASE + 1500},
        ],
    )
    def test_filtered_paging_matches_the_filter_applied_to_everything(
        self, big: tuple[Store, list[Summary]], filters: dict[str, Any]
    ) -> None:
        store, saved = big

        def keep(s: Summary) -> bool:
            return (
                filters.get("owner", s.owner) == s.owner
                and filters.get("agent_id", s.agent_id) == s.agent_id
                and filters.get("failed", s.failed) == s.failed
                and filters.get("phase", s.failure_phase) == s.failure_phase
                and s.saved_at < filters.get("before", s.saved_at + 1)
                and s.saved_at >= filters.get("since", s.saved_at)
            )

        listed = [s.key for s in store.iter_summaries(page_size=300, **filters)]
        assert listed == newest_first([s for s in saved if keep(s)])
        assert listed

    def test_oldest_first_pages_run_by_saved_at_then_key(
        self, big: tuple[Store, list[Summary]]
    ) -> None:
        store, saved = big
        seen: list[str] = []
        after: tuple[int, str] | None = None
        while True:
            page = store.backend.scan(Query(oldest_first=True, after=after, limit=700))
            if not page:
                break
            seen.extend(s.key for s in page)
            after = (page[-1].saved_at, page[-1].key)
        assert seen == [s.key for s in sorted(saved, key=lambda s: (s.saved_at, s.key))]

    @pytest.mark.parametrize(
        "query",
        [
            Query(limit=101),
            Query(owner="owner3", limit=101),
            Query(agent_id="agent2", limit=101),
            Query(failed=True, limit=101),
            Query(phase="tool", limit=101),
            Query(after=(BASE + 2000, "run-05000"), limit=101),
            Query(owner="owner3", after=(BASE + 2000, "run-05000"), limit=101),
            Query(saved_before=BASE + 1000, oldest_first=True, limit=101),
            Query(oldest_first=True, after=(BASE + 500, "run-05000"), limit=101),
        ],
        ids=repr,
    )
    def test_each_listing_shape_reads_an_index_in_order(
        self, big: tuple[Store, list[Summary]], admin: Admin, query: Query
    ) -> None:
        store, _ = big
        assert isinstance(store.backend, PostgresBackend)
        statement, params = scan_statement(query, store.backend._sql)
        plan = "\n".join(
            row[0] for row in admin.execute(sql.SQL("EXPLAIN ") + statement, params).fetchall()
        )
        # An Incremental Sort only orders rows of equal saved_at the index already delivers.
        full_sort = re.search(r"(?<!Incremental )Sort  \(", plan)
        assert "Index" in plan and "Seq Scan" not in plan and not full_sort, plan


def test_owner_and_agent_indexes_hold_only_runs_that_have_one(
    admin: Admin, schema: str, store: Store
) -> None:
    store.put(checkpoint("a", principal="alice", agent="planner"), key="a")
    store.put(checkpoint("b"), key="b")
    definitions = dict(
        admin.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s", (schema,)
        ).fetchall()
    )
    assert "WHERE (owner IS NOT NULL)" in definitions["agent_checkpoints_owner_idx"]
    assert "WHERE (agent_id IS NOT NULL)" in definitions["agent_checkpoints_agent_idx"]
    assert [s.key for s in store.list(owner="alice")] == ["a"]
    assert [s.key for s in store.list(agent_id="planner")] == ["a"]
    assert sorted(s.key for s in store.list()) == ["a", "b"]
