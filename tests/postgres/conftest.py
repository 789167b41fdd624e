"""Fixtures of the PostgreSQL tests: the admin connection (the tests skip, saying why, without a
server), a schema of its own for each test, and a store set up in it."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from support.postgres_server import unique_schema
from support.postgres_store import (
    Admin,
    drop_schema,
    open_pg,
)
from support.services import POSTGRES_URL, service_missing

from agent_checkpoint import Store


@pytest.fixture(scope="session")
def admin() -> Iterator[Admin]:
    try:
        conn = psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=3)
    except psycopg.Error as exc:
        service_missing("postgres", f"{POSTGRES_URL}: {exc}")
    with conn:
        yield conn


@pytest.fixture
def schema(admin: Admin) -> Iterator[str]:
    name = unique_schema()
    yield name
    drop_schema(admin, name)


@pytest.fixture
def store(schema: str) -> Iterator[Store]:
    with open_pg(schema) as s:
        s.setup()
        yield s
