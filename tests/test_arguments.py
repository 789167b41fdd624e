"""Arguments of the wrong type or shape are refused where they are passed, by the library's
errors naming the argument, never an AttributeError or a bare ValueError from inside; and
nothing stored changes."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from agent_checkpoint import (
    ClaimedError,
    InvalidArgumentError,
    InvalidKeyError,
    Keyring,
    Message,
    RetryPolicy,
    RunCheckpoint,
    Store,
    copy_records,
    migrate_records,
    open_async_store,
    open_store,
    register_backend,
    resume_failed_runs,
)
from agent_checkpoint.envelope import to_envelope


@pytest.fixture(params=["plain", "encrypted"])
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    # encrypted: the put that encodes a whole envelope, not the appending one
    keyring = Keyring({"k1": bytes(range(32))}, "k1") if request.param == "encrypted" else None
    with open_store("memory://", keyring=keyring) as store:
        yield store


def _run(history: Any) -> RunCheckpoint:
    return RunCheckpoint.new("task", history, run_id="r")


HISTORY_REFUSALS: list[tuple[Any, str]] = [
    (
        [Message("user", "hi"), {"role": "assistant", "content": "hello"}],
        r"RunCheckpoint\.history\[1\] is a dict, not a Message: build it with Message\(role, "
        r"content\), or read a checkpoint's whole JSON with RunCheckpoint\.from_json\(\.\.\.\)",
    ),
    (["hi"], r"RunCheckpoint\.history\[0\] is a str, not a Message"),
]


@pytest.mark.parametrize(("history", "message"), HISTORY_REFUSALS)
def test_a_history_item_that_is_not_a_message_is_named_by_its_index(
    store: Store, history: list[Any], message: str
) -> None:
    store.put(_run([Message("user", "hi")]), key="k")
    before = store.get_record("k")
    with pytest.raises(InvalidArgumentError, match=message):
        store.put(_run(history), key="k")
    assert store.get_record("k") == before


def test_a_grown_history_names_the_first_new_item_that_is_not_a_message(store: Store) -> None:
    history: list[Any] = [Message("user", "hi"), Message("assistant", "hello")]
    store.put(_run(history), key="k")
    with pytest.raises(InvalidArgumentError, match=r"RunCheckpoint\.history\[3\] is a dict"):
        store.put(_run([*history, Message("user", "and?"), {"role": "assistant"}]), key="k")
    assert [m.content for m in store.get("k").history] == ["hi", "hello"]  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("history", "message"),
    [
        (None, "history must be a list of Message, not None"),
        ("hello", "history must be a list of Message, not a str"),
        ({"role": "user", "content": "hi"}, "history must be a list of Message, not a dict"),
    ],
)
def test_a_history_that_is_not_a_list_is_refused_when_the_checkpoint_is_made(
    history: Any, message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        RunCheckpoint.new("task", history)


BAD_CALLS: list[tuple[str, Callable[[Store], Any], str]] = [
    (
        "if_revision a string",
        lambda s: s.put(_run([]), key="k", if_revision="1"),
        r"if_revision must be a record's revision, an int from 1, got '1'",
    ),
    (
        "if_revision a bool",
        lambda s: s.put(_run([]), key="k", if_revision=True),
        r"if_revision must be a record's revision, an int from 1, got True",
    ),
    (
        "if_revision zero",
        lambda s: s.put(_run([]), key="k", if_revision=0),
        r"if_revision must be a record's revision, an int from 1, got 0",
    ),
    (
        "delete's if_revision a float",
        lambda s: s.delete("k", if_revision=1.0),
        r"if_revision must be a record's revision, an int from 1, got 1\.0",
    ),
    (
        "put_record's if_revision negative",
        lambda s: s.put_record(s.get_record("k"), if_revision=-1),  # type: ignore[arg-type]
        r"if_revision must be a record's revision, an int from 1, got -1",
    ),
    (
        "list before a date string",
        lambda s: s.list(before="2024-01-01"),
        r"before must be a datetime with a timezone or epoch milliseconds, got '2024-01-01'",
    ),
    (
        "list since None-like text",
        lambda s: s.list(since="yesterday"),
        r"since must be a datetime with a timezone or epoch milliseconds, got 'yesterday'",
    ),
    (
        "claim ttl a string",
        lambda s: s.claim("k", "w1", ttl="30"),
        r"ttl must be a positive number of seconds, got '30'",
    ),
    (
        "claim ttl NaN",
        lambda s: s.claim("k", "w1", ttl=float("nan")),
        r"ttl must be a positive number of seconds, got nan",
    ),
    (
        "claim ttl infinite",
        lambda s: s.claim("k", "w1", ttl=float("inf")),
        r"ttl must be a positive number of seconds, got inf",
    ),
    (
        "claim ttl shorter than a millisecond",
        lambda s: s.claim("k", "w1", ttl=0.0005),  # was a lease expired when given
        r"ttl must be a positive number of seconds, got 0\.0005 \(from 0\.001 to 1e\+09\)",
    ),
    (
        "claim ttl past any clock",
        lambda s: s.claim("k", "w1", ttl=1e30),  # was TypeError: Integer exceeds 64-bit range
        r"ttl must be a positive number of seconds, got 1e\+30",
    ),
    (
        "get_records of one key",  # read "r" and "1" as keys
        lambda s: s.get_records("k1"),
        r"get_records takes a list of keys, not the one key 'k1': use get_record",
    ),
    (
        "list cursor not a str",  # was AttributeError: 'int' object has no attribute 'partition'
        lambda s: s.list(cursor=5),  # type: ignore[arg-type]
        r"cursor must be the str a page gave as its cursor, got 5",
    ),
    (
        "put create_only a string",  # "no" was taken as True
        lambda s: s.put(_run([]), key="k2", create_only="no"),  # type: ignore[arg-type]
        r"create_only must be True or False, got 'no'",
    ),
    (
        "forget_older_than limit negative",
        lambda s: s.forget_older_than(0, limit=-1),
        r"limit must be a whole number >= 1, got -1",
    ),
    (
        "forget_older_than limit None",  # was TypeError: unsupported operand type(s)
        lambda s: s.forget_older_than(0, limit=None),  # type: ignore[arg-type]
        r"limit must be a whole number >= 1, got None",
    ),
]


@pytest.mark.parametrize(
    ("call", "message"), [c[1:] for c in BAD_CALLS], ids=[c[0] for c in BAD_CALLS]
)
def test_a_wrongly_typed_argument_is_named(
    store: Store, call: Callable[[Store], Any], message: str
) -> None:
    store.put(_run([Message("user", "hi")]), key="k")
    before = store.get_record("k")
    with pytest.raises(InvalidArgumentError, match=message):
        call(store)
    assert store.get_record("k") == before
    assert store.claims() == []


def test_the_arguments_that_were_refused_work_in_their_documented_form(store: Store) -> None:
    first = store.put(_run([Message("user", "hi")]), key="k")
    assert store.put(_run([]), key="k", if_revision=first.revision).revision > first.revision
    moment = datetime(2100, 1, 1, tzinfo=timezone.utc)
    assert [s.key for s in store.list(before=moment)] == ["k"]
    assert [s.key for s in store.list(before=int(moment.timestamp() * 1000))] == ["k"]
    with store.claim("k", "w1", ttl=30) as claim:
        assert claim.worker == "w1"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (
            "redis://127.0.0.1:notaport",
            r"store URL 'redis://127\.0\.0\.1:notaport' cannot be used: ",
        ),
        (
            "redis://user:hunter2@127.0.0.1:99999",
            r"'redis://user:\*\*\*@127\.0\.0\.1:99999' cannot",
        ),
        ("redis://[::1", r"store URL 'redis://\.\.\.' cannot be used: Invalid IPv6 URL"),
        ("redis://127.0.0.1:6379?socket_timeout=soon", r"cannot be used: .*socket_timeout"),
        ("s3://bucket?endpoint_url=not-a-url", r"cannot be used: Invalid endpoint: not-a-url"),
    ],
)
def test_a_store_url_its_driver_cannot_parse_is_refused_by_the_library(
    url: str, message: str
) -> None:
    with pytest.raises(InvalidKeyError, match=message) as refused:
        open_store(url)
    assert "hunter2" not in str(refused.value)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: RunCheckpoint.from_json(None),
            r"RunCheckpoint\.from_json needs a JSON object, not None",
        ),
        (
            lambda: RunCheckpoint.from_json([]),
            r"RunCheckpoint\.from_json needs a JSON object, not a list",
        ),
        (
            lambda: RunCheckpoint.from_json({"runId": "r", "history": "none yet"}),
            r"RunCheckpoint\.from_json needs an object whose keys runId, history, "
            r"lastCompletedIteration, originalInput hold values of their JSON types: history is "
            r"a str, lastCompletedIteration is missing, originalInput is missing; got keys: "
            r"runId, history$",
        ),
        (
            lambda: Message.from_json({"role": "user"}),
            r"Message\.from_json needs an object whose keys role, content",
        ),
        (
            lambda: to_envelope({"runId": "r"}),
            r"to_envelope takes a RunCheckpoint, not a dict \(a checkpoint's JSON: RunCheckpoint.from_json\)",
        ),  # type: ignore[arg-type]
        (
            lambda: open_store("memory://", keyring="k1:secret"),  # type: ignore[arg-type]
            r"keyring must be a Keyring \(or None\), not str",
        ),
        (
            lambda: open_store("memory://", compress="gzip"),
            r"compress must be 'zlib' or None, not 'gzip'",
        ),
        (lambda: register_backend("", "pkg.mod:Backend"), r"a backend scheme is a URL scheme"),
        (lambda: register_backend("my db", "pkg.mod:Backend"), r"not 'my db'"),
        (
            lambda: register_backend("mydb", "pkg.mod.Backend"),
            r"'package\.module:Class', not 'pkg\.mod\.Backend'",
        ),
    ],
)
def test_a_value_of_the_wrong_kind_is_refused_by_the_call_that_takes_it(
    call: Callable[[], Any], message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        call()


def test_a_failed_filter_that_is_not_a_bool_is_refused(store: Store) -> None:
    with pytest.raises(
        InvalidKeyError, match=r"the failed filter must be True, False or None, got 'no'"
    ):
        store.list(failed="no")  # type: ignore[arg-type]  # truthy: it listed the failed runs


def test_an_async_store_refuses_the_same_arguments_the_same_way() -> None:
    # one implementation: the AsyncStore runs the Store's own checks
    async def refusals() -> list[str]:
        store = open_async_store("memory://")
        found = []
        for call in (
            lambda: store.put(_run([{"role": "user", "content": "x"}]), key="k"),
            lambda: store.put(_run([]), key="k", if_revision="1"),
            lambda: store.claim("k", "w1", ttl="30"),
        ):
            with pytest.raises(InvalidArgumentError) as refused:
                await call()  # type: ignore[no-untyped-call]
            found.append(str(refused.value).split(":")[0])
        assert await store.get("k") is None
        await store.close()
        return found

    assert asyncio.run(refusals()) == [
        "RunCheckpoint.history[0] is a dict, not a Message",
        "if_revision must be a record's revision, an int from 1, got '1'",
        "ttl must be a positive number of seconds, got '30' (from 0.001 to 1e+09)",
    ]


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ("postgresql://postgres@127.0.0.1/test", "use open_store('postgresql://"),
        ("./checkpoints", "use open_store('./checkpoints')"),
        (None, "got NoneType without load, head, save, drop, scan, close"),
        ({"url": "memory://"}, "got dict without load"),
    ],
)
def test_a_store_built_on_what_is_no_backend_is_refused_at_once(given: Any, named: str) -> None:
    # before: Store("postgresql://...") was built, and its first call raised
    # AttributeError: 'str' object has no attribute 'scan'
    with pytest.raises(InvalidArgumentError, match=re.escape(named)):
        Store(given)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        # each was accepted, and the first call that needed it raised AttributeError or
        # TypeError from inside (retry=3: only when the first network fault came)
        (lambda: open_store("memory://", retry=3), r"retry must be a RetryPolicy .*got 3"),
        (lambda: RetryPolicy(attempts=-1), r"RetryPolicy attempts must be a whole number >= 1"),
        (lambda: RetryPolicy(deadline=float("nan")), r"RetryPolicy deadline must be a number"),
        (lambda: open_store("memory://", migrations="x"), r"migrations must be a Migrations"),
        (lambda: open_store("memory://", max_record_bytes="10"), r"max_record_bytes must be"),
        (lambda: open_store("memory://", create="no"), r"create must be True or False"),
        (lambda: open_store(5), r"a store URL or path is a str, got 5"),  # type: ignore[arg-type]
        (lambda: open_async_store("memory://", retry=3), r"retry must be a RetryPolicy"),
        (lambda: open_async_store("memory://", threads=0), r"threads must be a whole number >= 1"),
        (
            lambda: copy_records("/tmp/a", "/tmp/b"),
            r"copy_records source takes a Store, got "
            r"'/tmp/a': open_store\('/tmp/a'\) opens one",
        ),
        (lambda: migrate_records("memory://"), r"migrate_records takes a Store"),
        (lambda: resume_failed_runs("memory://", print, worker="w"), r"resume_failed_runs takes"),
    ],
)
def test_a_store_option_of_the_wrong_kind_is_refused_when_given(
    call: Callable[[], Any], message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        call()


def test_a_store_path_may_be_a_pathlib_path(tmp_path: Path) -> None:
    # was InvalidKeyError "a store URL or path is required" (and a TypeError from the async one)
    with open_store(tmp_path / "s") as store:
        store.put(_run([Message("user", "hi")]), key="k")

    async def read() -> RunCheckpoint | None:
        async with open_async_store(tmp_path / "s", create=False) as store:
            return await store.get("k")

    found = asyncio.run(read())
    assert found is not None and found.history[0].content == "hi"


@pytest.mark.parametrize(
    "ttl",
    [
        -5,  # was accepted, and ended the lease: another worker could take the run at once
        None,  # was TypeError: unsupported operand type(s)
        "30",  # "30" * 1000 was a string of 2,000 digits
        float("nan"),
    ],
)
def test_a_renewal_refuses_a_ttl_the_claim_would_and_keeps_the_lease(
    store: Store, ttl: Any
) -> None:
    store.put(_run([Message("user", "hi")]), key="k")
    with store.claim("k", "w1", ttl=30) as claim:
        before = store.claims()
        with pytest.raises(InvalidArgumentError, match="ttl must be a positive number of seconds"):
            claim.renew(ttl)
        assert store.claims() == before
        with pytest.raises(ClaimedError):
            store.claim("k", "w2", ttl=30)


def test_a_key_id_given_twice_in_the_environment_is_refused() -> None:
    # "a:K1,a:K2" made K2 the primary key, silently
    from agent_checkpoint import keyring_from_env

    k1, k2 = (
        "MTExMTExMTExMTExMTExMTExMTExMTExMTExMTExMTE=",
        "MjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjI=",
    )
    with pytest.raises(InvalidArgumentError, match="key id 'a' is given twice"):
        keyring_from_env(f"a:{k1},a:{k2}")
    # spaces around ids and keys, as written by hand, are not part of either
    keyring = keyring_from_env(f" a : {k1} , b:{k2}")
    assert keyring is not None and keyring.primary == "a" and sorted(keyring.keys) == ["a", "b"]
