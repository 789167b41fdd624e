"""PostgreSQL options and lifecycle: schema isolation, URL options, a pool of your own, a closed
store, and connections that retrying cannot fix."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg_pool import ConnectionPool
from support.postgres_server import unique_schema, with_query
from support.postgres_store import (
    Admin,
    _address,
    drop_schema,
    open_pg,
)
from support.services import POSTGRES_URL

from agent_checkpoint import Store, open_store
from agent_checkpoint.backends._postgres import PostgresBackend
from agent_checkpoint.errors import (
    BackendError,
    BackendUnavailableError,
    InvalidKeyError,
    StoreClosedError,
    StoreNotFoundError,
)
from agent_checkpoint.testing import checkpoint

# -- options and lifecycle --------------------------------------------------------------


def test_a_schema_store_is_isolated_from_another_schema(admin: Admin, schema: str) -> None:
    other = schema + "_b"
    try:
        with open_pg(schema) as a, open_pg(other) as b:
            a.setup()
            b.setup()
            a.put(checkpoint(principal="alice", text="in a"), key="same")
            b.put(checkpoint(principal="bob", text="in b"), key="same")
            assert a.owner("same") == "alice" and b.owner("same") == "bob"
            assert a.delete("same") is True
            got = b.get("same")
            assert got is not None and got.history[0].content == "in b 0"
            assert a.list().items == [] and [s.key for s in b.list()] == ["same"]
    finally:
        drop_schema(admin, other)


def test_url_options_name_the_table_and_keywords_override_them(admin: Admin) -> None:
    in_url, in_keyword = unique_schema(), unique_schema()
    url = with_query(POSTGRES_URL, schema=in_url, table="runs", application_name="ac-test")
    try:
        with open_store(url, schema=in_keyword, max_size=2) as store:
            store.setup()
            store.put(checkpoint(), key="k")
            backend = store.backend
            assert isinstance(backend, PostgresBackend)
            assert (backend.schema, backend.table) == (in_keyword, "runs")
            with backend.pool.connection() as conn:
                name = conn.execute("SHOW application_name").fetchone()
            assert name == ("ac-test",)
        found = admin.execute(
            "SELECT table_schema FROM information_schema.tables WHERE table_name = 'runs' "
            "AND table_schema IN (%s, %s)",
            (in_url, in_keyword),
        ).fetchall()
        assert found == [(in_keyword,)]
    finally:
        drop_schema(admin, in_keyword)
        drop_schema(admin, in_url)


def test_libpq_options_with_spaces_reach_the_server(schema: str) -> None:
    url = with_query(POSTGRES_URL, options="-c application_name=ac_probe")
    with open_pg(schema, url=url) as store:
        backend = store.backend
        assert isinstance(backend, PostgresBackend)
        with backend.pool.connection() as conn:
            row = conn.execute("SHOW application_name").fetchone()
        assert row == ("ac_probe",)


def test_names_postgres_cannot_hold_are_refused_up_front() -> None:
    for schema, table in [("s", "t" * 49), ("", "t"), ("nul\x00", "t"), ("s", "")]:
        with pytest.raises(InvalidKeyError):
            open_pg(schema, table=table)


def test_an_injected_pool_stays_open_after_close(schema: str) -> None:
    pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
        POSTGRES_URL, min_size=1, max_size=2, open=False
    )
    pool.open()
    try:
        store = Store(PostgresBackend(pool, schema=schema))
        store.setup()
        store.put(checkpoint(), key="k")
        store.close()
        store.close()
        with pool.connection() as conn:
            count = conn.execute(
                sql.SQL("SELECT count(*) FROM {}").format(
                    sql.Identifier(schema, "agent_checkpoints")
                )
            ).fetchone()
        assert count == (1,)
    finally:
        pool.close()


def test_a_closed_store_raises_a_library_error_at_once(schema: str) -> None:
    store = open_pg(schema)
    store.setup()
    store.close()
    store.close()
    with pytest.raises(StoreClosedError, match="closed store") as caught:
        store.get("k")
    assert not isinstance(caught.value, BackendUnavailableError)  # never retried
    with pytest.raises(StoreClosedError, match="postgres head on a closed store"):
        store.backend.head("k")  # the backend itself refuses, not only the Store


@pytest.mark.parametrize(
    ("url", "error", "message"),
    [
        (_address(database="ac_no_such_database"), StoreNotFoundError,
         'database "ac_no_such_database" does not exist'),
        (_address(user="ac_no_such_role"), InvalidKeyError, 'role "ac_no_such_role" does not exist'),
        (_address(port=1), BackendError, "Connection refused"),  # nothing listens on port 1
    ],
)  # fmt: skip
def test_a_connection_retrying_cannot_fix_fails_at_once_naming_why(
    url: str, error: type[Exception], message: str
) -> None:
    """A wrong database, role or port is not retried: the first failed connection attempt
    ends the operation (the pool does not wait out its timeout, the Store does not retry)."""
    with open_store(url) as store, pytest.raises(error) as caught:
        store.list()
    assert not isinstance(caught.value, BackendUnavailableError)
    assert str(caught.value).startswith("postgres scan failed: cannot connect") and message in str(
        caught.value
    )
    assert store.backend.pool.get_stats()["connections_num"] <= 2  # type: ignore[attr-defined]
