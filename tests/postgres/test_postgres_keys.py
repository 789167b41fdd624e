"""PostgreSQL keys: injection strings are plain keys, schema and table names are quoted, and
keys order by code point under any collation."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg import sql
from support.postgres_store import (
    Admin,
    drop_schema,
    ledger,
    open_pg,
)
from support.services import POSTGRES_URL

from agent_checkpoint._model import Message
from agent_checkpoint.backends import Query
from agent_checkpoint.backends._postgres import LEDGER, MIGRATIONS
from agent_checkpoint.testing import (
    checkpoint,
    stamped,
)

# -- keys, order, injection -------------------------------------------------------------

INJECTIONS = [
    "'; DROP TABLE agent_checkpoints; --",
    "x' OR '1'='1",
    '"); DELETE FROM agent_checkpoints; --',
    "1; TRUNCATE agent_checkpoint_migrations",
    "\\'; SELECT pg_sleep(10); --",
    "$$; DROP SCHEMA public CASCADE; $$",
    "/* comment */ --",
    "%s",
    "%(key)s",
    "$1",
    "{table}",
    "%",
    "_",
    "*",
    "a?c[de]*",
    "{hash}:tag",
    "../../etc/passwd",
    "..\\..\\boot.ini",
    "prefix/../other/key",
    "/absolute/path",
    "%2e%2e%2f",
    "key%00nul",
    "E'\\x41'",
]


def test_injection_strings_are_plain_keys_owners_and_agents(admin: Admin, schema: str) -> None:
    with open_pg(schema) as store, open_pg(schema + "_n") as neighbour:
        store.setup()
        neighbour.setup()
        neighbour.put(checkpoint("bystander"), key="bystander")
        store.put(stamped(checkpoint("plain", principal="alice", agent="a"), 1), key="plain")
        for n, text in enumerate(INJECTIONS, start=2):
            summary = store.put(
                stamped(checkpoint("r", principal=text, agent=text, failed=text, text=text), n),
                key=text,
            )
            assert (summary.key, summary.owner, summary.agent_id) == (text, text, text)
        for text in INJECTIONS:
            got = store.get(text)
            assert got is not None and got.history[0].content == f"{text} 0"
            assert [s.key for s in store.list(owner=text)] == [text]
            assert [s.key for s in store.list(agent_id=text)] == [text]
            assert [s.key for s in store.list(phase=text)] == [text]
        assert sorted(s.key for s in store.iter_summaries()) == sorted([*INJECTIONS, "plain"])
        for wildcard in ["' OR 1=1 --", "%%", "%a%", ".*", "*a*", "owner\x00"]:
            assert store.list(owner=wildcard).items == []
            assert store.list(agent_id=wildcard).items == []
        for text in INJECTIONS:
            assert store.delete(text) is True
        assert [s.key for s in store.list()] == ["plain"]
        assert [s.key for s in neighbour.list()] == ["bystander"]
        assert len(ledger(admin, schema)) == len(MIGRATIONS)
    drop_schema(admin, schema + "_n")


def test_schema_and_table_names_are_quoted_not_interpolated(admin: Admin) -> None:
    weird_schema = 'ac_x"; DROP SCHEMA public CASCADE; --' + uuid.uuid4().hex[:6]
    weird_table = "t'); DELETE FROM pg_class; --"
    try:
        with open_pg(weird_schema, table=weird_table) as store:
            store.setup()
            safe = checkpoint(text="safe")
            store.put(safe, key="k")
            # past the inline threshold: the history's pieces go to the segments namespace
            grown = safe.evolve(history=(*safe.history, Message("user", "s" * 20_000)))
            store.put(grown, key="k")
            got = store.get("k")
            assert got is not None and got.history[0].content == "safe 0" and got == grown
        tables = admin.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            (weird_schema,),
        ).fetchall()
        pieces = f"{weird_table}$segments"
        assert sorted(t for (t,) in tables) == sorted(
            [weird_table, f"{weird_table}_segments", pieces, f"{pieces}_segments", LEDGER]
        )
        public = admin.execute("SELECT 1 FROM pg_namespace WHERE nspname = 'public'").fetchone()
        assert public is not None
    finally:
        drop_schema(admin, weird_schema)


def test_keys_order_by_code_point_like_python_even_under_a_linguistic_collation(
    admin: Admin,
) -> None:
    # A database whose default collation sorts "a" < "B" < "é" < "Z" (ICU en-US); the keyset
    # order must still be Python's str order, as on every other backend.
    database = f"ac_icu_{uuid.uuid4().hex[:10]}"
    try:
        admin.execute(
            sql.SQL(
                "CREATE DATABASE {} TEMPLATE template0 LOCALE_PROVIDER icu "
                "ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'"
            ).format(sql.Identifier(database))
        )
    except psycopg.Error as exc:
        pytest.skip(f"this server cannot create an ICU database: {exc}")
    url = POSTGRES_URL.rsplit("/", 1)[0] + "/" + database
    keys = ["a", "B", "_x", "é", "e", "Z", "ä", "😀", "日本", "ｚ", "ß", "a b", "a-b", "A", "~"]
    try:
        with open_pg("public", url=url) as store:
            store.setup()
            for key in keys:
                store.put(stamped(checkpoint(key), 1000), key=key)
            assert [s.key for s in store.list()] == sorted(keys)
            paged = [s.key for s in store.iter_summaries(page_size=2)]
            assert paged == sorted(keys)
            oldest = store.backend.scan(Query(oldest_first=True, after=(1000, "a"), limit=50))
            assert [s.key for s in oldest] == [k for k in sorted(keys) if k > "a"]
    finally:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database))
        )
