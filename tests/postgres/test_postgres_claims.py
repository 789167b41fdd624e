"""PostgreSQL claims: their table never meets a store's, fits the name limit, and is made by the
first claim, not by a listing."""

from __future__ import annotations

import pytest
from support.postgres_store import (
    Admin,
    open_pg,
)

from agent_checkpoint.errors import InvalidKeyError
from agent_checkpoint.testing import checkpoint


def test_claims_never_touch_a_store_whose_table_looks_like_their_namespace(schema: str) -> None:
    """Claims of the store on table ``T`` live in a table no store can be opened on."""
    with (
        open_pg(schema, table="runs") as store,
        open_pg(schema, table="runs_leases") as neighbour,
    ):
        store.setup()
        neighbour.setup()
        store.put(checkpoint("r"), key="r")
        neighbour.put(checkpoint("bystander"), key="r")
        store.claim("r", "w1", ttl=30).release()
        got = neighbour.get("r")
        assert got is not None and got.run_id == "bystander"
        assert [s.key for s in neighbour.list()] == ["r"]
    with pytest.raises(InvalidKeyError, match=r"without NUL or \$"):
        open_pg(schema, table="runs$leases")


def test_a_long_table_name_keeps_its_claims_table_within_the_name_limit(schema: str) -> None:
    table = "t" * 48
    with open_pg(schema, table=table) as store:
        store.setup()
        store.put(checkpoint("r"), key="r")
        with store.claim("r", "w1", ttl=30):
            assert [c.worker for c in store.claims()] == ["w1"]
        assert store.claims() == []


def test_listing_claims_of_a_store_that_never_had_one_creates_no_table(
    admin: Admin, schema: str
) -> None:
    """``claims()`` is a read: an operator with a role that may not CREATE can run it."""

    def tables() -> list[str]:
        rows = admin.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY 1", (schema,)
        )
        return [row[0] for row in rows.fetchall()]

    with open_pg(schema) as store:
        store.setup()
        store.put(checkpoint("r", failed="llm"), key="r")
        before = tables()
        assert store.claims() == []
        assert tables() == before
        claim = store.claim("r", "w1", ttl=30)
        assert [c.worker for c in store.claims()] == ["w1"]
        made = [t for t in tables() if t not in before]  # by the first claim
        assert made and all("$leases" in t for t in made)
        claim.release()
    with open_pg(schema) as again:  # a new store object finds the existing table
        assert again.claims() == []
        again.claim("r", "w2", ttl=30)
        assert [c.worker for c in again.claims()] == ["w2"]
