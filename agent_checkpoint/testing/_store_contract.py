"""The record-level store contract: round trips, revisions, ownership, delete, listing,
retention, keys and concurrent writers."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import orjson
import pytest

from .._envelope import PausedRun, to_paused_envelope
from .._model import Message, RunCheckpoint
from .._store import MAX_KEY_LENGTH, Store
from .._store_types import MOMENT_LIMIT_MS
from ..backends._base import Backend, Query, Record, Summary
from ..errors import (
    ConflictError,
    InvalidArgumentError,
    InvalidCheckpointError,
    InvalidKeyError,
    OwnershipConflictError,
    StoreClosedError,
    UnreadableEnvelopeError,
    WrongEnvelopeKindError,
)
from ._samples import AWKWARD_KEYS, checkpoint, stamped


def _bare_summary(key: str, size: int) -> Summary:
    return Summary(key, "run-x", 1, None, None, None, None, 0, size, 0)


class _RaceBeforeDrop:
    """A backend that runs ``before`` on a key once, just before its first ``drop`` of that key
    reaches the backend it wraps (everything else is passed through)."""

    def __init__(self, inner: Backend, before: Callable[[str], None]) -> None:
        self._inner = inner
        self._before = before
        self._raced: set[str] = set()
        self.name = inner.name

    def load(self, key: str) -> Record | None:
        return self._inner.load(key)

    def head(self, key: str) -> Summary | None:
        return self._inner.head(key)

    def save(
        self, record: Record, *, expect_revision: int | None = None, create_only: bool = False
    ) -> Summary:
        return self._inner.save(record, expect_revision=expect_revision, create_only=create_only)

    def drop(self, key: str, *, expect_revision: int | None = None) -> bool:
        if key not in self._raced:
            self._raced.add(key)
            self._before(key)
        return self._inner.drop(key, expect_revision=expect_revision)

    def scan(self, query: Query) -> list[Summary]:
        return self._inner.scan(query)

    def close(self) -> None:
        pass


PREFIXED = (
    "a%b/1", "a_b/1", "axb/1", "ab/1", "a*b/1", "a?b/1", "a[b]/1", "a\\b/1", "a%",
    "A%b", "%a", "é%/1", "e%/1", "a.b/1", "a^b$/1", "a(b|c)/1", "a\\%b",
)  # fmt: skip
"""Keys that a prefix written as a LIKE, GLOB, Lua or regular-expression pattern (or with
LIKE's escape character) would match wrongly."""


class _StoreContract:
    """Subclass and provide a ``store`` fixture yielding an empty ``Store``."""

    # -- absent, round trip --------------------------------------------------------------

    def test_absent_key_reads_as_none(self, store: Store) -> None:
        assert store.get("never-written") is None
        assert store.head("never-written") is None
        assert store.owner("never-written") is None
        assert "never-written" not in store

    def test_put_then_get_round_trips_value_and_key_order(self, store: Store) -> None:
        ckpt = checkpoint(principal="alice", agent="billing", failed="tool")
        summary = store.put(ckpt, key="k1")
        got = store.get("k1")
        assert got is not None
        assert orjson.dumps(got.to_json()) == orjson.dumps(ckpt.to_json())
        assert summary.key == "k1" and summary.revision >= 1

    def test_unknown_fields_survive_the_store(self, store: Store) -> None:
        doc = checkpoint().to_json()
        doc["futureField"] = {"z": 1, "a": [1, 2]}
        doc["history"][0]["futureMessageField"] = True
        store.put(doc, key="future")
        got = store.get_json("future")
        assert got is not None
        assert list(got["data"]) == list(doc)
        assert got["data"]["futureField"] == {"z": 1, "a": [1, 2]}
        assert got["data"]["history"][0]["futureMessageField"] is True

    def test_default_key_is_conversation_id_else_run_id(self, store: Store) -> None:
        assert store.put(checkpoint("run-a")).key == "run-a"
        assert store.put(checkpoint("run-b", conversation_id="conv-b")).key == "conv-b"
        assert store.get("conv-b") is not None

    def test_summary_describes_the_record(self, store: Store) -> None:
        ckpt = checkpoint("run-s", principal="p", agent="billing", failed="llm", messages=5)
        summary = store.put(ckpt, key="s")
        head = store.head("s")
        assert head == summary
        assert (summary.run_id, summary.owner, summary.agent_id) == ("run-s", "p", "billing")
        assert (summary.failure_phase, summary.failure_iteration) == ("llm", 2)
        assert summary.message_count == 5
        record = store.get_record("s")
        assert record is not None and summary.size == len(record.body)

    def test_get_records_reads_several_keys_as_get_record_reads_each(self, store: Store) -> None:
        long = tuple(Message("user", f"message {i} " + "x" * 300) for i in range(400))
        store.put(checkpoint(text="short"), key="a")
        store.put(RunCheckpoint.new("go", long, run_id="r"), key="b")  # a long history
        store.put(
            RunCheckpoint.new("go", (*long, Message("user", "one more")), run_id="r"), key="b"
        )
        keys = ["b", "missing", "a", "b"]
        many = store.get_records(keys)
        one = [store.get_record(key) for key in keys]
        assert [r is None for r in many] == [False, True, False, False]
        for got, each in zip(many, one, strict=True):
            if got is not None and each is not None:
                assert got.summary == each.summary
                assert store.decode(got).to_json() == store.decode(each).to_json()
                assert store.decode_json(got) == store.get_json(got.key)
        assert store.get_records([]) == []

    def test_get_json_last_reads_the_newest_entries_of_a_growing_history(
        self, store: Store
    ) -> None:
        history: tuple[Message, ...] = ()
        for i in range(60):  # one put per message: the history grows as an agent's does
            history = (*history, Message("user" if i % 2 else "assistant", f"{i} " + "x" * 600))
            store.put(RunCheckpoint.new("go", history, run_id="r"), key="g")
        whole = store.get_json("g")
        assert whole is not None
        stored = whole["data"]["history"]
        assert len(stored) == 60
        for last in (0, 1, 7, 59, 60, 500):
            got = store.get_json("g", last=last)
            assert got is not None
            assert got["data"]["history"] == stored[60 - min(last, 60) :]
            rest = {k: v for k, v in got["data"].items() if k != "history"}
            assert rest == {k: v for k, v in whole["data"].items() if k != "history"}
            assert {k: v for k, v in got.items() if k != "data"} == {
                k: v for k, v in whole.items() if k != "data"
            }
        paused = PausedRun(
            checkpoint={"pausedStageId": "s", "sharedState": {}, "subflowPath": []},
            conversation=RunCheckpoint.new("go", history[:5], run_id="p"),
            pending={"question": "ok?", "pauseData": None},
        )
        store.put(to_paused_envelope(paused), key="p")
        got = store.get_json("p", last=2)
        assert got is not None and got["format"] == "flowchart-v1"
        assert got["data"]["conversation"]["history"] == [m.to_json() for m in history[3:5]]
        assert store.get_json("missing", last=3) is None
        for bad in (-1, True, 1.5, "3"):
            with pytest.raises(InvalidArgumentError, match="last must be a whole number"):
                store.get_json("g", last=bad)  # type: ignore[arg-type]

    def test_get_json_many_reads_several_keys_as_get_json_reads_each(self, store: Store) -> None:
        history: tuple[Message, ...] = ()
        for i in range(40):  # grown one put at a time: the history is kept in pieces
            history = (*history, Message("user", f"{i} " + "y" * 600))
            store.put(RunCheckpoint.new("go", history, run_id="r"), key="long")
        store.put(checkpoint(text="short"), key="short")
        keys = ["long", "missing", "short", "long"]
        for last in (None, 0, 3, 100):
            many = store.get_json_many(keys, last=last)
            assert many == [store.get_json(key, last=last) for key in keys]
            assert many[1] is None and many[0] is not None
            assert len(many[0]["data"]["history"]) == (40 if last is None else min(last, 40))
        assert store.get_json_many([]) == []
        with pytest.raises(InvalidArgumentError, match="not the one key"):
            store.get_json_many("long")
        with pytest.raises(InvalidArgumentError, match="last must be a whole number"):
            store.get_json_many(["long"], last=-1)

    def test_iter_json_lists_each_record_with_what_get_json_reads(self, store: Store) -> None:
        history: tuple[Message, ...] = ()
        long = checkpoint("r", principal="al")
        for i in range(30):  # grown one put at a time: the history is kept in pieces
            history = (*history, Message("user", f"{i} " + "y" * 600))
            store.put(replace(long, history=history), key="long")
        for i in range(7):
            store.put(checkpoint(f"run-{i}", principal="al" if i % 2 else "bo"), key=f"k{i}")
            store.put(checkpoint(f"run-{i}", principal="al" if i % 2 else "bo"), key=f"k{i}")
        store.delete("k5")
        for last in (None, 0, 3):
            choices: tuple[dict[str, Any], ...] = ({}, {"owner": "al"})
            for filters in choices:
                listed = [s.key for s in store.iter_summaries(**filters)]
                pairs = list(store.iter_json(last=last, page_size=2, **filters))
                assert [s.key for s, _ in pairs] == listed  # each once, newest first
                assert [j for _, j in pairs] == [store.get_json(k, last=last) for k in listed]
        assert sorted(s.key for s, _ in store.iter_json(owner="al")) == ["k1", "k3", "long"]
        assert list(store.iter_json(owner="nobody")) == []
        with pytest.raises(InvalidArgumentError, match="last must be a whole number"):
            list(store.iter_json(last=-1))
        with pytest.raises(InvalidKeyError, match="limit must be between"):
            list(store.iter_json(page_size=0))
        with pytest.raises(InvalidArgumentError, match="unknown listing filter 'owners'"):
            list(store.iter_json(owners="al"))

    def test_invalid_checkpoint_is_refused_and_nothing_is_stored(self, store: Store) -> None:
        doc = checkpoint().to_json()
        doc["history"].append({"role": "user"})
        with pytest.raises(InvalidCheckpointError, match=r"history\[2\] is missing text"):
            store.put(doc, key="bad")
        assert store.head("bad") is None
        assert store.list().items == []

    def test_unreadable_record_is_not_reported_absent(self, store: Store) -> None:
        store.backend.save(Record(_bare_summary("garbled", 20), b"{format=conversation-v1"))
        with pytest.raises(UnreadableEnvelopeError) as caught:
            store.get("garbled")
        assert caught.value.code == "ERR_UNREADABLE_ENVELOPE"
        assert "garbled" in str(caught.value)

    def test_paused_run_round_trips_and_is_not_read_as_a_conversation(self, store: Store) -> None:
        paused = PausedRun(
            checkpoint={"pausedStageId": "s", "sharedState": {}, "subflowPath": []},
            conversation=checkpoint("run-p", principal="pat"),
            pending={"question": "ok?", "pauseData": None},
        )
        summary = store.put(to_paused_envelope(paused))
        assert summary.key == "run-p" and summary.owner == "pat"
        envelope = store.get_envelope("run-p")
        assert envelope is not None and envelope.format == "flowchart-v1"
        assert envelope.data == paused
        with pytest.raises(WrongEnvelopeKindError):
            store.get("run-p")

    def test_large_record_round_trips(self, store: Store) -> None:
        ckpt = checkpoint(messages=10, text="x" * (1024 * 1024))
        store.put(ckpt, key="big")
        got = store.get("big")
        assert got is not None and got.history == ckpt.history

    # -- revisions -----------------------------------------------------------------------

    def test_each_write_of_a_live_record_adds_one_to_its_revision(self, store: Store) -> None:
        revisions = [store.put(checkpoint(), key="r").revision for _ in range(3)]
        first = revisions[0]
        assert first >= 1 and revisions == [first, first + 1, first + 2]
        assert store.head("r").revision == first + 2  # type: ignore[union-attr]

    def test_a_key_never_repeats_a_revision_across_deletes(self, store: Store) -> None:
        """No ABA: a key deleted and written again continues past every revision it had, so
        a check made against an older revision can never pass by coincidence."""
        seen: list[int] = []
        for round_ in range(3):
            seen += [store.put(checkpoint(text=f"{round_}"), key="again").revision for _ in "ab"]
            assert store.delete("again", if_revision=seen[-1]) is True
        seen.append(store.put(checkpoint(), key="again", create_only=True).revision)
        assert seen == sorted(set(seen)), seen

    def test_a_stale_revision_cannot_touch_a_recreated_key(self, store: Store) -> None:
        first = store.put(checkpoint(text="old"), key="k")
        store.delete("k")
        recreated = store.put(checkpoint(text="new"), key="k")
        assert recreated.revision != first.revision
        with pytest.raises(ConflictError):
            store.put(checkpoint(text="stale"), key="k", if_revision=first.revision)
        with pytest.raises(ConflictError):
            store.delete("k", if_revision=first.revision)
        got = store.get("k")
        assert got is not None and got.history[0].content == "new 0"
        assert store.head("k") == recreated

    def test_if_revision_writes_only_over_that_revision(self, store: Store) -> None:
        first = store.put(checkpoint(text="one"), key="cas")
        second = store.put(checkpoint(text="two"), key="cas", if_revision=first.revision)
        assert second.revision > first.revision
        with pytest.raises(ConflictError):
            store.put(checkpoint(text="three"), key="cas", if_revision=first.revision)
        got = store.get("cas")
        assert got is not None and got.history[0].content == "two 0"
        assert store.head("cas") == second

    def test_if_revision_on_a_missing_key_conflicts(self, store: Store) -> None:
        with pytest.raises(ConflictError):
            store.put(checkpoint(), key="ghost", if_revision=1)
        assert store.head("ghost") is None

    def test_create_only_refuses_an_existing_key(self, store: Store) -> None:
        store.put(checkpoint(text="first"), key="once", create_only=True)
        with pytest.raises(ConflictError):
            store.put(checkpoint(text="second"), key="once", create_only=True)
        got = store.get("once")
        assert got is not None and got.history[0].content == "first 0"

    def test_racing_compare_and_swap_has_one_winner_per_revision(self, store: Store) -> None:
        base = store.put(checkpoint(), key="race").revision
        wins: list[int] = []
        losses: list[int] = []
        barrier = threading.Barrier(8)

        def contender(i: int) -> None:
            barrier.wait()
            try:
                store.put(checkpoint(text=f"w{i}"), key="race", if_revision=base)
                wins.append(i)
            except ConflictError:
                losses.append(i)

        threads = [threading.Thread(target=contender, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(wins) == 1 and len(losses) == 7
        got = store.get("race")
        assert got is not None and got.history[0].content == f"w{wins[0]} 0"
        assert store.head("race").revision > base  # type: ignore[union-attr]

    # -- ownership (spec §6) -------------------------------------------------------------

    def test_owner_is_derived_from_the_envelope(self, store: Store) -> None:
        store.put(checkpoint(principal="alice"), key="o")
        assert store.owner("o") == "alice"

    def test_owner_fills_in_on_a_later_signed_turn(self, store: Store) -> None:
        store.put(checkpoint(), key="o")
        assert store.owner("o") is None
        store.put(checkpoint(principal="alice"), key="o")
        assert store.owner("o") == "alice"

    def test_owner_survives_a_leaner_turn(self, store: Store) -> None:
        store.put(checkpoint(principal="alice"), key="o")
        store.put(checkpoint(), key="o")
        assert store.owner("o") == "alice"
        assert [s.key for s in store.list(owner="alice")] == ["o"]

    def test_owner_is_not_taken_by_a_different_signer(self, store: Store) -> None:
        mine = store.put(checkpoint(principal="alice", text="mine"), key="o")
        with pytest.raises(OwnershipConflictError):
            store.put(checkpoint(principal="mallory", text="theirs"), key="o")
        got = store.get("o")
        assert got is not None and got.history[0].content == "mine 0"
        assert store.owner("o") == "alice"
        assert [s.key for s in store.list(owner="alice")] == ["o"]
        assert store.list(owner="mallory").items == []
        assert store.head("o") == mine

    # -- delete --------------------------------------------------------------------------

    def test_delete_removes_record_and_index_entries(self, store: Store) -> None:
        store.put(checkpoint(principal="alice", agent="a", failed="tool"), key="gone")
        assert store.delete("gone") is True
        assert store.get("gone") is None
        assert store.list().items == []
        assert store.list(owner="alice").items == []
        assert store.list(failed=True).items == []
        assert store.delete("gone") is False

    def test_delete_with_a_stale_revision_conflicts(self, store: Store) -> None:
        first = store.put(checkpoint(), key="d")
        second = store.put(checkpoint(), key="d")
        with pytest.raises(ConflictError):
            store.delete("d", if_revision=first.revision)
        assert store.get("d") is not None
        assert store.delete("d", if_revision=second.revision) is True

    def test_a_deleted_key_starts_over_with_a_new_owner(self, store: Store) -> None:
        first = store.put(checkpoint(principal="alice"), key="again")
        store.delete("again")
        summary = store.put(checkpoint(principal="bob"), key="again")
        assert summary.revision > first.revision and summary.owner == "bob"

    # -- listing -------------------------------------------------------------------------

    def test_list_is_newest_first_with_ties_broken_by_key(self, store: Store) -> None:
        for key, saved in [("b", 200), ("a", 200), ("c", 100), ("d", 300)]:
            store.put(stamped(checkpoint(key), saved), key=key)
        assert [s.key for s in store.list()] == ["d", "a", "b", "c"]

    def test_list_pages_with_a_stable_cursor(self, store: Store) -> None:
        for i in range(23):
            store.put(stamped(checkpoint(f"r{i}"), 1000 + i // 3), key=f"k{i:02d}")
        seen: list[str] = []
        cursor = None
        while True:
            page = store.list(limit=5, cursor=cursor)
            assert len(page.items) <= 5
            seen.extend(s.key for s in page)
            cursor = page.cursor
            if cursor is None:
                break
        expected = [
            s.key for s in sorted(store.iter_summaries(), key=lambda s: (-s.saved_at, s.key))
        ]
        assert seen == expected and len(seen) == 23 and len(set(seen)) == 23

    def test_paging_sees_no_repeats_while_writers_add_newer_records(self, store: Store) -> None:
        for i in range(10):
            store.put(stamped(checkpoint(f"r{i}"), 1000 + i), key=f"old{i}")
        first = store.list(limit=4)
        store.put(stamped(checkpoint("new"), 5000), key="newer")
        rest = store.list(limit=100, cursor=first.cursor)
        keys = [s.key for s in first] + [s.key for s in rest]
        assert keys == [f"old{i}" for i in range(9, -1, -1)]

    def test_list_filters_combine(self, store: Store) -> None:
        store.put(
            stamped(checkpoint("1", principal="al", agent="billing", failed="llm"), 10), key="1"
        )
        store.put(stamped(checkpoint("2", principal="al", agent="support"), 20), key="2")
        store.put(
            stamped(checkpoint("3", principal="bo", agent="billing", failed="tool"), 30), key="3"
        )
        store.put(
            stamped(checkpoint("4", principal="al", agent="billing", failed="tool"), 40), key="4"
        )

        def keys(**filters: Any) -> list[str]:
            return [s.key for s in store.list(**filters)]

        assert keys(owner="al") == ["4", "2", "1"]
        assert keys(agent_id="billing") == ["4", "3", "1"]
        assert keys(failed=True) == ["4", "3", "1"]
        assert keys(failed=False) == ["2"]
        assert keys(phase="tool") == ["4", "3"]
        assert keys(owner="al", failed=True) == ["4", "1"]
        assert keys(owner="al", agent_id="billing", phase="llm") == ["1"]
        assert keys(before=30) == ["2", "1"]
        assert keys(since=20, before=40) == ["3", "2"]

    @pytest.mark.parametrize("value", ["\udc80", "al\ud800", "al\x00"])
    @pytest.mark.parametrize("name", ["owner", "agent_id", "phase", "prefix"])
    def test_a_filter_no_record_can_hold_matches_nothing(
        self, store: Store, name: str, value: str
    ) -> None:
        """NUL and lone surrogates: the writer refuses them, so no record matches (PostgreSQL
        and Redis raised a bare UnicodeEncodeError for a surrogate)."""
        store.put(checkpoint("1", principal="al", agent="billing", failed="llm"), key="1")
        assert store.list(**{name: value}).items == []  # type: ignore[arg-type]
        assert list(store.iter_summaries(**{name: value})) == []  # type: ignore[arg-type]
        with pytest.raises(InvalidKeyError, match=f"the {name} filter must be a string"):
            store.list(**{name: 7})  # type: ignore[arg-type]
        with pytest.raises(InvalidKeyError):  # the other arguments are still checked
            store.list(cursor="not-a-cursor", **{name: value})  # type: ignore[arg-type]
        assert [s.key for s in store.list()] == ["1"]

    @pytest.mark.parametrize(
        "start",
        ["a%", "a_", "a*", "a?", "a[", "a[b]", "a\\", "a\\%", "%", "é", "e", "a.", "a^b$",
         "a(b|c)", "ab/1", "ab/1/", "A", "a", "", "zz"],
        ids=lambda p: "".join(c if c.isalnum() else f"-{ord(c):x}" for c in p) or "empty",
    )  # fmt: skip
    def test_list_prefix_keeps_the_keys_that_begin_with_it_every_character_literal(
        self, store: Store, start: str
    ) -> None:
        for i, key in enumerate(PREFIXED):
            store.put(stamped(checkpoint(f"r{i}"), 1000 + i % 5), key=key)
        expected = [
            s.key for s in store.iter_summaries() if s.key.startswith(start)
        ]  # every key, newest first, ties by key: the order the prefix must keep
        assert [s.key for s in store.list(prefix=start, limit=100)] == expected
        assert [s.key for s in store.iter_summaries(prefix=start, page_size=2)] == expected
        assert len(expected) == sum(key.startswith(start) for key in PREFIXED)

    def test_list_prefix_pages_and_combines_with_the_other_filters(self, store: Store) -> None:
        for i in range(24):
            key = f"{'t/' if i % 3 else 'u/'}{i:02d}"
            ckpt = checkpoint(f"r{i}", principal="al" if i % 2 else "bo", failed="llm")
            store.put(stamped(ckpt, 1000 + i // 4), key=key)
        wanted = [s.key for s in store.iter_summaries() if s.key.startswith("t/")]
        seen: list[str] = []
        cursor = None
        while True:
            page = store.list(prefix="t/", limit=3, cursor=cursor)
            assert 0 < len(page.items) <= 3
            seen.extend(s.key for s in page)
            if (cursor := page.cursor) is None:
                break
        assert seen == wanted and len(seen) == 16
        mine = store.list(prefix="t/", owner="al", failed=True, before=1005, limit=100)
        assert [s.key for s in mine] == [
            k for k in wanted if int(k[2:]) % 2 and 1000 + int(k[2:]) // 4 < 1005
        ]
        assert store.list(prefix="t/", failed=False).items == []

    def test_list_prefix_reaches_past_the_start_of_long_keys(self, store: Store) -> None:
        """Keys of 300 characters that first differ at the 250th, and keys whose prefix ends
        inside a character's UTF-8 bytes: a backend that reads a prefix from a shortened or
        encoded name must still tell them apart."""
        stem = "x" * 249
        keys = [stem + "a" + "1" * 50, stem + "b" + "1" * 50, "ñ" * 40 + "a", "ñ" * 40 + "b"]
        for i, key in enumerate(keys):
            store.put(stamped(checkpoint(f"r{i}"), 1000 + i), key=key)
        assert [s.key for s in store.list(prefix=stem + "b")] == [keys[1]]
        assert [s.key for s in store.list(prefix=stem)] == [keys[1], keys[0]]
        assert [s.key for s in store.list(prefix="ñ" * 40 + "a")] == [keys[2]]
        assert [s.key for s in store.list(prefix="ñ" * 41)] == []
        assert [s.key for s in store.list(prefix="x" * 250)] == []

    def test_list_rejects_a_malformed_cursor_and_limit(self, store: Store) -> None:
        with pytest.raises(InvalidKeyError):
            store.list(cursor="not-a-cursor")
        with pytest.raises(InvalidKeyError):
            store.list(limit=0)

    @pytest.mark.parametrize(
        "query",
        [
            {"since": -(10**22)},
            {"before": 10**20},
            {"since": float("inf")},
            {"cursor": f"{10**20}:k"},
            {"before": MOMENT_LIMIT_MS + 1},
        ],
    )
    def test_times_out_of_range_are_refused_alike(
        self, store: Store, query: dict[str, Any]
    ) -> None:
        store.put(stamped(checkpoint("r", principal="p"), 1_000), key="k")
        with pytest.raises(InvalidKeyError, match=r"out of range|not a number"):
            store.list(**query)
        with pytest.raises(InvalidKeyError, match="out of range"):
            store.forget_older_than(10**20)
        assert [s.key for s in store.list()] == ["k"]
        assert [s.key for s in store.list(before=MOMENT_LIMIT_MS)] == ["k"]

    # -- retention -----------------------------------------------------------------------

    def test_forget_older_than_deletes_only_strictly_older_oldest_first(self, store: Store) -> None:
        for i, saved in enumerate([100, 200, 300, 400, 500]):
            store.put(stamped(checkpoint(f"r{i}", principal="p"), saved), key=f"k{i}")
        result = store.forget_older_than(400, limit=2)
        assert (result.forgotten, result.more) == (2, True)
        assert [s.key for s in store.list()] == ["k4", "k3", "k2"]
        result = store.forget_older_than(400, limit=10)
        assert (result.forgotten, result.more) == (1, False)
        assert [s.key for s in store.list()] == ["k4", "k3"]
        assert [s.key for s in store.list(owner="p")] == ["k4", "k3"]

    def test_retention_never_deletes_a_record_recreated_after_its_scan(self, store: Store) -> None:
        """The prune's scan finds an old record; before its delete, another writer deletes the
        key and saves it again, newer. The prune must leave the new record alone."""
        store.put(stamped(checkpoint("old"), 100), key="k")
        store.put(stamped(checkpoint("keep"), 150), key="other")

        def recreate(key: str) -> None:
            if key == "k":
                store.delete(key)
                store.put(stamped(checkpoint("new"), 10_000), key=key)

        pruning = Store(_RaceBeforeDrop(store.backend, recreate))
        result = pruning.forget_older_than(200)
        assert result.forgotten == 1  # "other"; "k" was rewritten since the scan
        got = store.get("k")
        assert got is not None and got.run_id == "new"
        assert [s.key for s in store.list()] == ["k"]

    # -- keys ----------------------------------------------------------------------------

    @pytest.mark.parametrize("key", AWKWARD_KEYS)
    def test_awkward_keys_round_trip_as_plain_keys(self, store: Store, key: str) -> None:
        store.put(checkpoint("neighbour"), key="neighbour")
        store.put(checkpoint("awkward", text=key), key=key)
        got = store.get(key)
        assert got is not None and got.history[0].content == f"{key} 0"
        assert sorted(s.key for s in store.list()) == sorted({key, "neighbour"})
        assert store.get("neighbour") is not None
        assert store.delete(key) is True
        assert [s.key for s in store.list()] == ["neighbour"]

    def test_keys_that_look_alike_are_distinct(self, store: Store) -> None:
        keys = ["Case", "case", "a/b", "a%2Fb", "a_b", "a b", "x.", "x"]
        for k in keys:
            store.put(checkpoint(text=k), key=k)
        for k in keys:
            got = store.get(k)
            assert got is not None and got.history[0].content == f"{k} 0"
        assert sorted(s.key for s in store.list()) == sorted(keys)

    @pytest.mark.parametrize(
        "key", ["", "tab\there", "new\nline", "nul\x00", "k" * (MAX_KEY_LENGTH + 1)]
    )
    def test_unusable_keys_are_refused_with_a_clear_error(self, store: Store, key: str) -> None:
        with pytest.raises(InvalidKeyError):
            store.put(checkpoint(), key=key)
        assert store.list().items == []

    def test_a_key_the_store_hands_back_is_the_same_address(self, store: Store) -> None:
        store.put(checkpoint(text="x"), key="weird/../key")
        listed = store.list().items[0].key
        assert listed == "weird/../key"
        assert store.get(listed) is not None

    # -- concurrency ---------------------------------------------------------------------

    def test_concurrent_writers_on_distinct_keys_all_land(self, store: Store) -> None:
        errors: list[BaseException] = []

        def writer(n: int) -> None:
            try:
                for i in range(10):
                    store.put(checkpoint(f"w{n}-{i}"), key=f"w{n}-{i}")
            except BaseException as exc:  # surfaced below
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        keys = {s.key for s in store.iter_summaries()}
        assert keys == {f"w{n}-{i}" for n in range(6) for i in range(10)}
        for key in keys:
            got = store.get(key)
            assert got is not None and got.run_id == key

    # -- lifecycle -----------------------------------------------------------------------

    def test_every_operation_after_close_raises_store_closed(self, store: Store) -> None:
        """A closed store refuses, on every backend alike, rather than working on (some
        drivers reconnect silently, leaking what ``close()`` released) or failing with a
        driver's error; closing again is harmless."""
        store.put(checkpoint(), key="k")
        store.close()
        store.close()
        assert store.closed
        operations = {
            "get": lambda: store.get("k"),
            "get_json": lambda: store.get_json("k"),
            "head": lambda: store.head("k"),
            "contains": lambda: "k" in store,
            "put": lambda: store.put(checkpoint(), key="k2"),
            "delete": lambda: store.delete("k"),
            "list": lambda: store.list(limit=5),
            "iter_summaries": lambda: list(store.iter_summaries()),
            "forget_older_than": lambda: store.forget_older_than(10**15),
            "setup": store.setup,
        }
        for name, operation in operations.items():
            with pytest.raises(StoreClosedError, match="closed store"):
                operation()
                pytest.fail(f"{name} worked on a closed store")

    def test_a_store_over_a_backend_another_store_closed_refuses_too(self, store: Store) -> None:
        other = Store(store.backend)
        store.close()
        assert other.closed
        with pytest.raises(StoreClosedError) as caught:
            other.get("k")
        assert caught.value.code == "ERR_STORE_CLOSED"
        assert caught.value.backend == store.backend.name
