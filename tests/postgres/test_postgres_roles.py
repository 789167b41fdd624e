"""PostgreSQL roles: a role that may only read, and one that does not own an older ledger."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from psycopg import sql
from support.postgres_store import (
    FUTURE,
    Admin,
    _address,
    ledger,
    open_pg,
)

from agent_checkpoint._model import Message, RunCheckpoint
from agent_checkpoint.backends import _postgres as postgres
from agent_checkpoint.backends._postgres import LEDGER, MIGRATIONS
from agent_checkpoint.testing import checkpoint


def test_a_role_that_may_only_read_reads_long_histories_and_lists(
    admin: Admin, schema: str
) -> None:
    history = [Message("user", f"message {i} " * 40) for i in range(200)]  # ~100 KB, pieces
    with open_pg(schema) as store:
        store.setup()
        for n in (100, 150, 200):  # appends past 4 KiB inline: the history is in pieces
            store.put(RunCheckpoint.new("task", history[:n], run_id="r"), key="k")
    grants = "GRANT USAGE ON SCHEMA {s} TO {r}; GRANT SELECT ON ALL TABLES IN SCHEMA {s} TO {r}"
    with a_role(admin, schema, grants) as url, open_pg(schema, url) as store:
        got = store.get("k")  # opens the pieces' namespace: reads only, no CREATE
        assert got is not None and got.history == tuple(history)
        assert [s.key for s in store.list().items] == ["k"]


@contextmanager
def a_role(admin: Admin, schema: str, grants: str) -> Iterator[str]:
    """A new login role with ``grants`` (``{s}``: the schema, ``{r}``: the role) on
    ``schema``, as the URL a store opens with; dropped with what it owns afterwards."""
    role = f"ac_role_{uuid.uuid4().hex[:8]}"
    admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    try:
        admin.execute(sql.SQL(grants).format(s=sql.Identifier(schema), r=sql.Identifier(role)))
        yield _address(user=role)
    finally:
        admin.execute(sql.SQL("DROP OWNED BY {r}; DROP ROLE {r}").format(r=sql.Identifier(role)))


def test_a_role_that_does_not_own_an_older_ledger_still_sets_up_a_namespace(
    admin: Admin, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ledger an older library made has no ``older_ok`` column, and only its owner may add
    one: an application's role that writes and claims, but does not own the ledger, still
    sets up the claims' namespace on first use; its steps record no flag, and the owner's next
    setup that applies a step adds the column."""
    with open_pg(schema) as store:
        store.setup()
        store.put(checkpoint("r"), key="k")
    ledger_table = sql.Identifier(schema, LEDGER)
    admin.execute(sql.SQL("ALTER TABLE {} DROP COLUMN older_ok").format(ledger_table))
    grants = (
        "GRANT USAGE, CREATE ON SCHEMA {s} TO {r}; GRANT ALL ON ALL TABLES IN SCHEMA {s} TO {r};"
        " GRANT ALL ON ALL SEQUENCES IN SCHEMA {s} TO {r}"
    )
    with a_role(admin, schema, grants) as url:
        with open_pg(schema, url) as store:
            claim = store.claim("k", "worker-1", ttl=60)  # opens the claims' namespace
            assert [c.worker for c in store.claims()] == ["worker-1"]
            claim.release()
        assert ledger(admin, schema, "agent_checkpoints$leases") == [
            (v, n) for v, n, _ in MIGRATIONS
        ]
        with monkeypatch.context() as m, open_pg(schema) as newer:
            m.setattr(postgres, "MIGRATIONS", (*MIGRATIONS, FUTURE))
            newer.setup()  # the owner, applying a step: it adds the column, and flags the step
    flags = admin.execute(
        sql.SQL(
            "SELECT version, older_ok FROM {} WHERE table_name = %s AND older_ok IS NOT NULL"
        ).format(ledger_table),
        ("agent_checkpoints",),
    ).fetchall()
    assert flags == [(FUTURE[0], True)]
