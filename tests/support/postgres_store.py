"""What the PostgreSQL tests (tests/postgres/) share: opening a store in a schema of its own,
reading the migration ledger, a server that starts refusing, growing a history."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from agent_checkpoint import Store, open_store
from agent_checkpoint._model import Message
from agent_checkpoint._segments import Segmented
from agent_checkpoint.backends import Record, Summary
from agent_checkpoint.backends._postgres import LEDGER, MIGRATIONS, PostgresBackend
from agent_checkpoint.testing import checkpoint
from support.closed_port import refused_port
from support.postgres_server import with_query
from support.services import POSTGRES_URL

REVISIONS = next(step for step in MIGRATIONS if step[1] == "revision sequence")


Admin = psycopg.Connection[Any]


def drop_schema(admin: Admin, name: str) -> None:
    admin.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def open_pg(schema: str, url: str = POSTGRES_URL, **options: Any) -> Store:
    return open_store(with_query(url, schema=schema), **options)


def ledger(admin: Admin, schema: str, table: str = "agent_checkpoints") -> list[tuple[int, str]]:
    rows = admin.execute(
        sql.SQL("SELECT version, name FROM {} WHERE table_name = %s ORDER BY version").format(
            sql.Identifier(schema, LEDGER)
        ),
        (table,),
    ).fetchall()
    return [(v, n) for v, n in rows]


@contextmanager
def refusing(store: Store) -> Iterator[None]:
    """The server's port starts refusing: the pool's sessions are closed and new ones go to a
    closed port (a request waits half a second for one, not the pool's timeout)."""
    pool = postgres_of(store).pool
    conninfo, timeout = pool.conninfo, pool.timeout
    with refused_port() as port:
        pool.conninfo, pool.timeout = make_conninfo(conninfo, port=port), 0.5
        pool.drain()
        try:
            yield
        finally:
            pool.conninfo, pool.timeout = conninfo, timeout


def postgres_of(store: Store) -> PostgresBackend:
    backend = getattr(store.backend, "inner", store.backend)
    assert isinstance(backend, PostgresBackend)
    return backend


N = 10_000


BASE = 1_700_000_000_000


def scale_record(i: int) -> Record:
    """Three records per millisecond, keys shuffled against time so ties test key order."""
    phase = "tool" if i % 5 == 0 else "llm" if i % 5 == 1 else None
    summary = Summary(
        key=f"run-{(i * 7919) % N:05d}",
        run_id=f"r{i}",
        saved_at=BASE + i // 3,
        owner=f"owner{i % 10}",
        agent_id=f"agent{i % 7}",
        failure_phase=phase,
        failure_iteration=i if phase else None,
        message_count=2,
        size=0,
        revision=0,
    )
    return Record(summary, b'{"format":"conversation-v1"}')


FUTURE = (len(MIGRATIONS) + 1, "a step from the future", ("SELECT 1",))


def _address(user: str | None = None, database: str | None = None, port: int | None = None) -> str:
    parts = urlsplit(POSTGRES_URL)
    netloc = f"{user or parts.username or 'postgres'}@{parts.hostname}:{port or parts.port or 5432}"
    return urlunsplit(parts._replace(netloc=netloc, path=f"/{database or parts.path[1:]}"))


def grow(
    store: Store, count: int, *, key: str = "k", principal: str | None = None
) -> tuple[Message, ...]:
    """Checkpoint under ``key`` after every message, ``count`` times; the last history."""
    base = checkpoint("r", principal=principal)
    history: tuple[Message, ...] = ()
    for i in range(count):
        history = (*history, Message("user", f"message {i} " + "x" * 200))
        store.put(base.evolve(history=history), key=key)
    return history


def in_pieces(store: Store) -> Store:
    """A store on the same backend whose segment layer moves all history into pieces and
    merges them past four."""
    return Store(Segmented(postgres_of(store), inline_bytes=0, max_segments=4))
