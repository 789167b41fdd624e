"""The S3 backend's growing histories (``Appending``) against a real SeaweedFS server: a put
that extends the previous revision uploads only the new messages and a small head, reads stay
byte-exact, racing appenders have one winner, and no segment object outlives its record."""

from __future__ import annotations

import base64
import threading
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import orjson
import pytest
from support.seaweed import S3Server, ensure_bucket, purge

from agent_checkpoint import Store
from agent_checkpoint.appender import Appender, Encoded, Tail
from agent_checkpoint.backends.base import Record
from agent_checkpoint.backends.objects import Layout, RecentSegments, fields_of, key_name
from agent_checkpoint.backends.s3 import S3Backend
from agent_checkpoint.backends.segments import merge_start
from agent_checkpoint.errors import (
    ConflictError,
    OwnershipConflictError,
    StoreClosedError,
    UnreadableEnvelopeError,
)
from agent_checkpoint.model import Message, OriginalInput, RunCheckpoint
from agent_checkpoint.store import summary_for
from agent_checkpoint.testing import checkpoint
from agent_checkpoint.testing.growth import read_while_growing

BUCKET = "agent-checkpoint-segments"


@pytest.fixture(scope="module")
def client(s3_server: S3Server) -> Iterator[Any]:
    made = s3_server.client()
    ensure_bucket(made, BUCKET)
    yield made
    made.close()


@pytest.fixture
def prefix(client: Any) -> Iterator[str]:
    name = f"g-{uuid.uuid4().hex[:12]}"
    yield name
    purge(client, BUCKET, name + "/")


class Recording:
    """The boto3 client, recording every call: (operation, Key, bytes sent)."""

    def __init__(self, client: Any) -> None:
        self.inner = client
        self.calls: list[tuple[str, str, int]] = []
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)
        if name not in ("put_object", "get_object", "head_object", "delete_object",
                        "delete_objects", "list_objects_v2"):  # fmt: skip
            return method

        def call(**kwargs: Any) -> Any:
            with self._lock:
                self.calls.append((name, kwargs.get("Key", ""), len(kwargs.get("Body", b""))))
            return method(**kwargs)

        return call


def backend_on(
    client: Any,
    prefix: str,
    max_segments: int | None = None,
    *,
    recent: bool = True,
    inline: int = 0,
) -> S3Backend:
    """A backend on ``prefix``; ``inline`` (bytes of the newest history its record objects
    hold themselves) is 0 unless given, so that every append writes a segment object."""
    backend = (S3Backend if recent else Forgetful)(client, BUCKET, prefix)
    backend.inline_bytes = inline
    if max_segments is not None:
        backend.max_segments = max_segments
    return backend


class Forgetful(S3Backend):
    """As a process that did not write the segments: merges read them back."""

    recent_segment_bytes = 0


def plain(ckpt: RunCheckpoint, saved_at: int) -> bytes:
    """What a full write stores."""
    return orjson.dumps({"format": "conversation-v1", "data": ckpt.to_json(), "savedAt": saved_at})


def grow(n: int, start: int = 0) -> list[tuple[Message, ...]]:
    out: list[tuple[Message, ...]] = []
    history: tuple[Message, ...] = ()
    for i in range(start + n):
        history = (
            *history,
            Message(("user", "assistant")[i % 2], f"message {i} " + "x" * (i % 50)),
        )
        if i >= start:
            out.append(history)
    return out


def objects(client: Any, prefix: str, under: str) -> dict[str, int]:
    found: dict[str, int] = {}
    pages = client.get_paginator("list_objects_v2").paginate(
        Bucket=BUCKET, Prefix=f"{prefix}/{under}/"
    )
    for page in pages:
        found.update((item["Key"], item["Size"]) for item in page.get("Contents", []))
    return found


def header(client: Any, prefix: str, key: str) -> dict[str, Any]:
    data = client.get_object(Bucket=BUCKET, Key=f"{prefix}/records/{key_name(key)}")["Body"].read()
    fields: dict[str, Any] = orjson.loads(data.partition(b"\n")[0])
    return fields


def referenced(client: Any, prefix: str, keys: list[str]) -> set[str]:
    """The segment objects the records of ``keys`` refer to."""
    out: set[str] = set()
    for key in keys:
        for sid, _ in header(client, prefix, key).get("segs", []):
            out.add(f"{prefix}/segments/{key_name(key)}/{sid}")
    return out


# -- growth ----------------------------------------------------------------------------------


def test_growth_reads_back_exactly_what_a_full_write_stores(client: Any, prefix: str) -> None:
    backend = backend_on(client, prefix)
    store = Store(backend)
    base = checkpoint("grow", principal="p", agent="a")
    for i, history in enumerate(grow(70)):
        ckpt = base.evolve(history=history, last_completed_iteration=i)
        summary = store.put(ckpt, key="g")
        # the same bytes written whole by the plain save, under another key
        whole = summary_for(
            "w", store._codec.digest(orjson.loads(plain(ckpt, summary.saved_at))), 0
        )
        backend.save(Record(whole, plain(ckpt, summary.saved_at)))
        grown, written = backend.load("g"), backend.load("w")
        assert grown is not None and written is not None
        assert grown.body == written.body == plain(ckpt, summary.saved_at)
        assert grown.summary.size == summary.size == len(grown.body)
        assert grown.summary.message_count == written.summary.message_count
        assert store.head("g") == summary
    fields = header(client, prefix, "g")
    assert 1 < len(fields["segs"]) <= backend.max_segments
    backend.flush()  # superseded segments are deleted in the background
    assert set(objects(client, prefix, "segments")) == referenced(client, prefix, ["g"])
    # another process (no remembered state) reads it the same
    fresh = S3Backend(client, BUCKET, prefix)
    assert fresh.load("g") == backend.load("g")


@pytest.mark.parametrize("recent", [True, False], ids=["kept", "read-back"])
def test_a_put_that_extends_uploads_only_the_new_message_and_a_small_head(
    client: Any, prefix: str, recent: bool
) -> None:
    recording = Recording(client)
    store = Store(backend_on(recording, prefix, recent=recent))
    base = checkpoint("grow")
    histories = grow(340)
    for history in histories[:300]:
        store.put(base.evolve(history=history), key="g")
    head_size = len(plain(base.evolve(history=()), 0))
    small = head_size + 1500  # the head, and a header listing at most 32 segments
    plain_appends = 0
    for history in histories[300:]:
        recording.calls.clear()
        store.put(base.evolve(history=history), key="g")
        new_message = len(orjson.dumps(history[-1].to_json()))
        puts = [(key, size) for op, key, size in recording.calls if op == "put_object"]
        segment_puts = sorted(size for key, size in puts if "/segments/" in key)
        [record_put] = [size for key, size in puts if "/records/" in key]
        assert record_put < small
        reads = [op for op, _, _ in recording.calls if op in ("get_object", "head_object")]
        if segment_puts == [new_message]:  # no read: the new message alone
            assert reads == []
            assert sum(size for _, size in puts) < new_message + small
            plain_appends += 1
        else:  # a merge of the newest segments, written as one
            assert len(segment_puts) == 2 and new_message in segment_puts
            if recent:  # the backend that wrote them still holds their bytes
                assert reads == []
            else:
                assert reads and all(op == "get_object" for op in reads)
    assert plain_appends >= 35
    history_bytes = len(orjson.dumps([m.to_json() for m in histories[-1]]))
    assert history_bytes > 10 * small


def test_a_get_after_its_own_puts_reads_only_the_record_object(client: Any, prefix: str) -> None:
    """The segments a backend wrote last are still in its memory (immutable ids): reading the
    record back costs one GET. Another backend reads every segment, and both read the same."""
    recording = Recording(client)
    store = Store(backend_on(recording, prefix))
    for history in grow(40):
        store.put(checkpoint("g").evolve(history=history), key="g")
    store.backend.flush()  # type: ignore[attr-defined]  # the puts' background deletes
    recording.calls.clear()
    mine = store.get_record("g")
    assert [op for op, _, _ in recording.calls] == ["get_object"]
    assert "/records/" in recording.calls[0][1]

    cold = Recording(client)
    theirs = Store(backend_on(cold, prefix)).get_record("g")
    segments = [key for op, key, _ in cold.calls if op == "get_object" and "/segments/" in key]
    assert segments and set(segments) == referenced(client, prefix, ["g"])
    assert mine is not None and theirs is not None and mine.body == theirs.body
    store.delete("g")


def test_a_record_written_whole_by_the_previous_version_reads_and_grows(
    client: Any, prefix: str
) -> None:
    base = checkpoint("old", principal="p")
    histories = grow(5)
    ckpt = base.evolve(history=histories[0])
    body = plain(ckpt, 1000)
    # exactly what the previous version wrote: header line, body, no segments
    old = Store(S3Backend(client, BUCKET, prefix))
    summary = summary_for("k", old._codec.digest(orjson.loads(body)), len(body))
    old.backend.save(Record(summary, body))
    assert "segs" not in header(client, prefix, "k")

    recording = Recording(client)
    store = Store(backend_on(recording, prefix))
    got = store.get_record("k")
    assert got is not None and got.body == body
    for i, history in enumerate(histories[1:], start=1):
        recording.calls.clear()
        grown = base.evolve(history=history)
        summary = store.put(grown, key="k")
        assert store.get_record("k").body == plain(grown, summary.saved_at)  # type: ignore[union-attr]
        segments = [size for op, key, size in recording.calls
                    if op == "put_object" and "/segments/" in key]  # fmt: skip
        if i == 1:  # a full write, now in segments
            assert segments == [len(orjson.dumps([m.to_json() for m in history])) - 2]
        else:
            assert segments == [len(orjson.dumps(history[-1].to_json()))]
    assert summary.revision == 5


def test_with_the_newest_messages_inline_an_append_uploads_no_segment_until_they_fill_up(
    client: Any, prefix: str
) -> None:
    """With the default ``inline_bytes``, an append rewrites the record with the newest
    messages in it (one index entry and one record PUT); a segment object is written only when
    those outgrow the limit, and a short history is read back in one GET by anyone."""
    recording = Recording(client)
    backend = S3Backend(recording, BUCKET, prefix)
    store = Store(backend)
    base = checkpoint("inline")
    store.put(base, key="warm")  # the bucket check, once per backend
    head_size = len(plain(base.evolve(history=()), 0))
    spills = 0
    for history in grow(400):
        recording.calls.clear()
        ckpt = base.evolve(history=history)
        summary = store.put(ckpt, key="g")
        assert reads(recording) == []
        puts = [(key, size) for op, key, size in recording.calls if op == "put_object"]
        assert len([key for key, _ in puts if "/index/" in key]) == 1
        [record_put] = [size for key, size in puts if "/records/" in key]
        assert record_put < head_size + 1500 + backend.inline_bytes
        segment_puts = [size for key, size in puts if "/segments/" in key]
        if segment_puts:  # the inline messages, with the new one, outgrew the limit
            [size] = segment_puts
            assert backend.inline_bytes < size <= backend.inline_bytes + 200
            spills += 1
    history_bytes = len(orjson.dumps([m.to_json() for m in history])) - 2
    assert 2 <= history_bytes // (backend.inline_bytes + 200) <= spills
    assert spills <= history_bytes // backend.inline_bytes
    expected = plain(ckpt, summary.saved_at)
    assert store.get_record("g").body == expected  # type: ignore[union-attr]
    assert Store(S3Backend(client, BUCKET, prefix)).get_record("g").body == expected  # type: ignore[union-attr]
    backend.flush()
    assert set(objects(client, prefix, "segments")) == referenced(client, prefix, ["g"])

    short = base.evolve(history=grow(10)[-1])
    summary = store.put(short, key="short")
    cold = Recording(client)
    got = Store(S3Backend(cold, BUCKET, prefix)).get_record("short")
    assert [op for op, _, _ in cold.calls] == ["list_objects_v2", "get_object"]  # check, record
    assert got is not None and got.body == plain(short, summary.saved_at)


def test_a_record_in_segments_by_the_previous_version_reads_grows_and_upgrades(
    client: Any, prefix: str
) -> None:
    """Objects laid out by hand as the previous version wrote a grown history (a head, one
    segment object per put, no inline content) read back exactly, list, and take an append,
    which keeps the old segments and holds the new message inline."""
    appender, base = Appender(), checkpoint("old-split", principal="p")
    histories = grow(4)
    encoded = []
    for i, history in enumerate(histories[:3]):
        ckpt = base.evolve(history=history)
        enc = appender.encode(ckpt, 1000 + i, appender.tail("k"))
        encoded.append(enc)
        appender.landed("k", ckpt, enc, replace(summary_for("k", enc.digest, enc.size),
                                                revision=i + 1))  # fmt: skip
    summary = replace(summary_for("k", encoded[-1].digest, encoded[-1].size), revision=3, owner="p")
    name, token = key_name("k"), "0123456789abcdef"
    sids = [f"{i:016x}" for i in range(1, 4)]
    for sid, enc in zip(sids, encoded, strict=True):
        client.put_object(
            Bucket=BUCKET, Key=f"{prefix}/segments/{name}/{sid}", Body=enc.split.segment
        )
    layout = Layout.under("s3", prefix + "/")
    client.put_object(Bucket=BUCKET, Key=layout.entry_path(summary, name, token), Body=b"")
    fields = {"key": "k", **fields_of(summary, token), "dig": encoded[-1].split.digest,
              "segs": [[sid, len(enc.split.segment)] for sid, enc in zip(sids, encoded, strict=True)]}  # fmt: skip
    client.put_object(Bucket=BUCKET, Key=f"{prefix}/records/{name}",
                      Body=orjson.dumps(fields) + b"\n" + encoded[-1].split.head,
                      Metadata={"ac": base64.urlsafe_b64encode(orjson.dumps(
                          fields_of(summary, token) | {"seg": 3})).decode()})  # fmt: skip

    backend = S3Backend(client, BUCKET, prefix)
    store = Store(backend)
    third = base.evolve(history=histories[2])
    assert store.get_record("k").body == plain(third, 1002)  # type: ignore[union-attr]
    assert store.head("k") == summary and store.list().items == [summary]

    fourth = base.evolve(history=histories[3])
    enc = appender.encode(fourth, 1003, appender.tail("k"))
    landed = backend.append(summary_for("k", enc.digest, enc.size), enc.split, base_revision=3,
                            base_digest=encoded[-1].split.digest)  # fmt: skip
    assert landed is not None and landed.revision == 4 and landed.owner == "p"
    assert backend.load("k").body == plain(fourth, 1003)  # type: ignore[union-attr]
    assert Store(S3Backend(client, BUCKET, prefix)).get("k") == fourth
    upgraded = header(client, prefix, "k")
    assert [sid for sid, _ in upgraded["segs"]] == sids and upgraded["inl"] == len(
        enc.split.segment
    )
    backend.flush()
    assert set(objects(client, prefix, "segments")) == referenced(client, prefix, ["k"])
    assert store.list().items == [landed]


@pytest.mark.parametrize("inline", [0, 8192], ids=["segments", "inline"])
def test_another_backend_appends_to_a_record_whose_head_is_longer_than_one_read(
    client: Any, prefix: str, inline: int
) -> None:
    """A backend that did not write the record reads its header (and inline content) before
    appending; a head past the first ranged read takes a second, whole read, not a refusal."""
    appender = Appender()
    base = checkpoint("long-head").evolve(original_input=OriginalInput("i" * 40_000))
    first = base.evolve(history=grow(3)[-1])
    enc = appender.encode(first, 1000, None)
    writer = backend_on(client, prefix, inline=inline)
    landed = writer.save_split(Record(summary_for("k", enc.digest, enc.size), b""), enc.split)
    appender.landed("k", first, enc, landed)
    tail = appender.tail("k")
    assert tail is not None
    second = base.evolve(history=grow(4)[-1])
    enc = appender.encode(second, 1001, tail)
    other = backend_on(client, prefix, inline=inline)
    done = other.append(summary_for("k", enc.digest, enc.size), enc.split,
                        base_revision=tail.revision, base_digest=tail.digest)  # fmt: skip
    assert done is not None and done.revision == 2
    assert writer.load("k").body == plain(second, 1001)  # type: ignore[union-attr]


@pytest.mark.parametrize("inline", [0, 200], ids=["segments", "inline"])
@pytest.mark.parametrize("recent", [True, False], ids=["kept", "read-back"])
@pytest.mark.parametrize("limit", [2, 3, 5])
def test_merging_at_the_limit_stays_exact_and_leaves_nothing_behind(
    client: Any, prefix: str, limit: int, recent: bool, inline: int
) -> None:
    store = Store(backend_on(client, prefix, max_segments=limit, recent=recent, inline=inline))
    base = checkpoint("grow")
    for history in grow(40):
        ckpt = base.evolve(history=history)
        summary = store.put(ckpt, key="g")
        assert store.get_record("g").body == plain(ckpt, summary.saved_at)  # type: ignore[union-attr]
        segs = header(client, prefix, "g")["segs"]
        assert len(segs) <= limit
        store.backend.flush()  # type: ignore[attr-defined]
        assert set(objects(client, prefix, "segments")) == referenced(client, prefix, ["g"])


def test_the_merge_policy_keeps_rewrites_rare() -> None:
    for n, bound in ((1000, 2.0), (10_000, 3.0)):
        segs: list[int] = []
        rewritten = 0
        for _ in range(n):
            if len(segs) + 1 > 32:
                start = merge_start(segs, 32)
                assert start <= 30 and len(segs) - start >= 2
                rewritten += sum(segs[start:])
                segs = [*segs[:start], sum(segs[start:])]
            segs.append(1)
            assert len(segs) <= 32
        assert rewritten < bound * n  # merging everything at the limit rewrites ~16x (n=1000)


def test_the_kept_segments_stay_within_their_byte_limit() -> None:
    recent = RecentSegments(100)
    recent.add("a", b"x" * 60)
    recent.add("b", b"y" * 30)
    assert recent.get("a") == b"x" * 60 and recent.get("b") == b"y" * 30
    recent.add("c", b"z" * 30)  # 120 bytes: the oldest leaves
    assert recent.get("a") is None and recent.get("b") == b"y" * 30
    recent.add("huge", b"h" * 101)  # larger than the limit: never kept, evicts nothing
    assert recent.get("huge") is None and recent.get("c") == b"z" * 30
    recent.discard(["b", "missing"])
    assert recent.get("b") is None
    recent.add("d", b"d" * 70)  # 30 + 70 fits exactly
    assert recent.get("c") == b"z" * 30 and recent.get("d") == b"d" * 70


def test_an_empty_history_and_empty_extensions_store_no_segment(client: Any, prefix: str) -> None:
    store = Store(backend_on(client, prefix))
    base = checkpoint("empty").evolve(history=())
    for ckpt in (base, base.evolve(last_completed_iteration=3)):
        summary = store.put(ckpt, key="e")
        assert store.get_record("e").body == plain(ckpt, summary.saved_at)  # type: ignore[union-attr]
    assert objects(client, prefix, "segments") == {}


# -- requests per operation ----------------------------------------------------------------


def reads(recording: Recording) -> list[str]:
    """The reads among the recorded calls (the rest are PUTs and background DELETEs)."""
    return [op for op, _, _ in recording.calls if op in ("get_object", "head_object",
                                                         "list_objects_v2")]  # fmt: skip


def test_a_first_put_and_the_writers_later_puts_and_delete_read_nothing_first(
    client: Any, prefix: str
) -> None:
    """A new key is written as new (``If-None-Match``) without a read; a key this backend
    wrote last is written over its remembered ETag (``If-Match``) without a read."""
    recording = Recording(client)
    backend = backend_on(recording, prefix)
    store = Store(backend)
    store.put(checkpoint("warm"), key="warm")  # the bucket check, once per backend
    base = checkpoint("count")
    for put in (
        lambda: store.put(base.evolve(history=grow(10)[-1]), key="k"),  # new key
        lambda: store.put(base.evolve(history=grow(11)[-1]), key="k"),  # an append
        lambda: store.put(base.evolve(history=grow(4)[-1]), key="k"),  # a full rewrite
        lambda: store.put(base.evolve(history=grow(5)[-1]), key="k", if_revision=3),
        lambda: store.put(base, key="c", create_only=True),
    ):
        recording.calls.clear()
        put()
        assert reads(recording) == []
    recording.calls.clear()
    assert store.delete("k") is True
    assert reads(recording) == []
    assert [op for op, _, _ in recording.calls if op == "put_object"] == ["put_object"]
    assert store.head("k") is None and store.get("c") == base


def test_writes_over_a_key_changed_by_another_writer_never_lose_its_update(
    client: Any, prefix: str
) -> None:
    """What a backend remembers of its last write may be stale: its next write then fails
    its condition, reads, and plans again, so revisions, owners and refusals stay right."""
    mine, theirs = Store(backend_on(client, prefix)), Store(backend_on(client, prefix))
    base = checkpoint("stale", principal="alice")
    assert mine.put(base, key="k").revision == 1
    assert theirs.put(base.evolve(last_completed_iteration=5), key="k").revision == 2
    # a guess that "k" is new, by a backend that never saw it
    fresh = Store(backend_on(client, prefix))
    assert fresh.put(base.evolve(last_completed_iteration=6), key="k").revision == 3
    assert mine.put(base.evolve(last_completed_iteration=7), key="k").revision == 4
    with pytest.raises(ConflictError):
        theirs.put(base, key="k", if_revision=2)  # stored is 4: its memory says 2
    assert theirs.put(base.evolve(last_completed_iteration=8), key="k", if_revision=4).revision == 5
    with pytest.raises(OwnershipConflictError):
        mine.put(checkpoint("stale", principal="mallory"), key="k")
    with pytest.raises(ConflictError):
        mine.put(base, key="k", create_only=True)
    assert mine.get("k") == base.evolve(last_completed_iteration=8)
    # a delete over a stale memory removes the current record, at its revision
    with pytest.raises(ConflictError):
        mine.delete("k", if_revision=4)
    assert mine.delete("k", if_revision=5) is True
    assert theirs.delete("k") is False
    assert theirs.put(base, key="k").revision == 6  # past every revision the key had


# -- races -------------------------------------------------------------------------------------


@pytest.mark.parametrize("inline", [0, 60], ids=["segments", "inline"])
@pytest.mark.parametrize("limit", [32, 2])
def test_two_racing_appenders_from_one_base_have_exactly_one_winner(
    client: Any, prefix: str, limit: int, inline: int
) -> None:
    writers = [backend_on(client, prefix, limit, inline=inline) for _ in range(2)]
    appender = Appender()
    base = checkpoint("race", principal="p")
    first = base.evolve(history=grow(3)[-1])
    encoded = appender.encode(first, 1000, None)
    body = encoded.body()
    landed = writers[0].save_split(
        Record(summary_for("r", encoded.digest, len(body)), body), encoded.split
    )
    appender.landed("r", first, encoded, landed)
    expected = body
    for round_ in range(6):
        tail = appender.tail("r")
        assert tail is not None
        contenders = []
        for w in range(2):
            extra = Message("user", f"round {round_} writer {w}")
            ckpt = base.evolve(history=(*tail.history, extra))
            contenders.append((ckpt, appender.encode(ckpt, 2000 + round_, tail)))
        results: list[Any] = [None, None]
        barrier = threading.Barrier(2)

        def contend(
            w: int, enc: Encoded, tail: Tail, barrier: threading.Barrier, results: list[Any]
        ) -> None:
            summary = summary_for("r", enc.digest, enc.size)
            barrier.wait()
            results[w] = writers[w].append(
                summary, enc.split, base_revision=tail.revision, base_digest=tail.digest
            )

        threads = [
            threading.Thread(target=contend, args=(w, contenders[w][1], tail, barrier, results))
            for w in range(2)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        winners = [w for w in range(2) if results[w] is not None]
        assert len(winners) == 1, results
        ckpt, enc = contenders[winners[0]]
        appender.landed("r", ckpt, enc, results[winners[0]])
        stored = writers[1 - winners[0]].load("r")
        assert stored is not None and stored.body == plain(ckpt, 2000 + round_)
        assert stored.body != expected
        expected = stored.body
        assert stored.summary.revision == round_ + 2
        # no segment of the loser is left, referenced or not
        for writer in writers:
            writer.flush()
        assert set(objects(client, prefix, "segments")) == referenced(client, prefix, ["r"])
        assert len(header(client, prefix, "r")["segs"]) <= limit


def test_an_append_over_a_changed_record_changes_nothing(client: Any, prefix: str) -> None:
    backend = backend_on(client, prefix)
    store = Store(backend)
    base = checkpoint("g")
    histories = grow(4)
    store.put(base.evolve(history=histories[0]), key="g")
    store.put(base.evolve(history=histories[1]), key="g")
    tail = store._appender.tail("g")
    assert tail is not None
    other = Store(S3Backend(client, BUCKET, prefix))
    other.put(base.evolve(history=histories[2]), key="g")  # a full write by someone else
    other.backend.flush()  # type: ignore[attr-defined]
    before = (backend.load("g"), objects(client, prefix, "segments"))
    enc = Appender().encode(base.evolve(history=histories[3]), 5, tail)
    summary = summary_for("g", enc.digest, enc.size)
    assert backend.append(summary, enc.split, base_revision=tail.revision,
                          base_digest=tail.digest) is None  # fmt: skip
    backend.flush()  # the refused append deletes what it uploaded
    assert (backend.load("g"), objects(client, prefix, "segments")) == before
    assert backend.append(summary, enc.split, base_revision=3, base_digest=tail.digest) is None
    backend.flush()
    assert (backend.load("g"), objects(client, prefix, "segments")) == before


def test_readers_never_see_a_torn_history_while_merges_delete_segments(
    client: Any, prefix: str
) -> None:
    writer = Store(backend_on(client, prefix, max_segments=2))
    reader = Store(S3Backend(client, BUCKET, prefix))
    assert read_while_growing(writer, reader) > 3


# -- deletion, retention, whole writes, repair ----------------------------------------------


def test_delete_retention_and_whole_writes_remove_the_segments(client: Any, prefix: str) -> None:
    clock = [0]
    backend = backend_on(client, prefix, max_segments=4)
    store = Store(backend, clock=lambda: clock[0])
    base = checkpoint("g")
    for key, saved_at in (("a", 1000), ("b", 2000), ("c", 3000), ("d", 4000)):
        for i, history in enumerate(grow(6)):
            clock[0] = saved_at + i
            store.put(base.evolve(history=history), key=key)
    assert len(objects(client, prefix, "segments")) > 8
    assert store.delete("a") is True
    assert store.forget_older_than(2500).forgotten == 1  # "b"
    backend.flush()  # what a delete leaves is removed in the background
    assert set(objects(client, prefix, "segments")) == referenced(client, prefix, ["c", "d"])
    # a whole write over a split record (what copy and migrate do) removes its old segments
    record = store.get_record("c")
    assert record is not None
    store.put_record(record)
    assert "segs" not in header(client, prefix, "c")
    assert store.get_record("c").body == record.body  # type: ignore[union-attr]
    backend.flush()
    assert set(objects(client, prefix, "segments")) == referenced(client, prefix, ["d"])
    store.delete("c")
    store.delete("d")
    backend.flush()
    assert objects(client, prefix, "segments") == {}
    assert objects(client, prefix, "index") == {}
    # each deleted key leaves a small tombstone, which keeps its revisions from repeating
    for name in objects(client, prefix, "records"):
        body = client.get_object(Bucket=BUCKET, Key=name)["Body"].read()
        assert orjson.loads(body)["dead"] is True and len(body) < 100


def test_repair_deletes_orphaned_segments_and_never_a_referenced_one(
    client: Any, prefix: str
) -> None:
    backend = backend_on(client, prefix, max_segments=4)
    store = Store(backend)
    base = checkpoint("g")
    for history in grow(9):
        ckpt = base.evolve(history=history)
        summary = store.put(ckpt, key="g")
    kept = referenced(client, prefix, ["g"])
    # as if writers had died between their segment's PUT and their record's
    orphans = {f"{prefix}/segments/{key_name('g')}/0123456789abcdef",
               f"{prefix}/segments/{key_name('gone')}/fedcba9876543210"}  # fmt: skip
    for path in orphans:
        client.put_object(Bucket=BUCKET, Key=path, Body=b'{"role":"user","content":"x"}')
    young = backend.verify(repair=True)  # within grace: possibly writes in flight
    assert young["orphans"] == 0
    assert set(objects(client, prefix, "segments")) == kept | orphans
    report = backend.verify(repair=True, grace=0)
    assert report == {"records": 1, "missing": 0, "stale": 0, "orphans": 2}
    assert set(objects(client, prefix, "segments")) == kept
    assert store.get_record("g").body == plain(ckpt, summary.saved_at)  # type: ignore[union-attr]
    assert backend.verify(grace=0)["orphans"] == 0


def test_a_lost_segment_reads_as_unreadable_not_as_absent(client: Any, prefix: str) -> None:
    store = Store(backend_on(client, prefix))
    for history in grow(3):
        store.put(checkpoint("g").evolve(history=history), key="g")
    lost = sorted(referenced(client, prefix, ["g"]))[0]
    client.delete_object(Bucket=BUCKET, Key=lost)
    with pytest.raises(UnreadableEnvelopeError):
        Store(S3Backend(client, BUCKET, prefix)).get("g")


def test_verify_store_counts_orphaned_segments_and_repair_removes_them(
    client: Any, prefix: str
) -> None:
    from agent_checkpoint.maintenance import verify_store

    backend = backend_on(client, prefix, max_segments=4)
    store = Store(backend)
    for history in grow(6):
        store.put(checkpoint("g").evolve(history=history), key="g")
    kept = referenced(client, prefix, ["g"])
    orphan = f"{prefix}/segments/{key_name('g')}/00000000deadbeef"
    client.put_object(Bucket=BUCKET, Key=orphan, Body=b'{"role":"user","content":"x"}')
    assert verify_store(store).orphans == 0  # within the grace period: maybe a write in flight
    report = verify_store(store, grace=0)
    assert report.orphans == 1 and report.ok  # garbage, not lost data
    assert orphan in objects(client, prefix, "segments")
    assert verify_store(store, repair=True, grace=0).orphans == 1
    assert set(objects(client, prefix, "segments")) == kept
    assert verify_store(store, grace=0).orphans == 0
    assert store.get("g") is not None


def test_a_closed_store_of_many_segments_refuses_and_loses_nothing(
    client: Any, prefix: str
) -> None:
    """``close()`` stops the backend's threads; a call after it raises ``StoreClosedError``
    (it once raised Python's "cannot schedule new futures after shutdown"), and what was
    stored reads back whole through a new backend."""
    backend = backend_on(client, prefix, max_segments=4)
    store = Store(backend)
    base = checkpoint("closed")
    histories = grow(12)
    for history in histories[:8]:
        store.put(base.evolve(history=history), key="k")
    assert len(header(client, prefix, "k")["segs"]) > 1
    store.close()
    with pytest.raises(StoreClosedError):
        store.put(base.evolve(history=histories[8]), key="k")
    with pytest.raises(StoreClosedError):
        Store(backend).get("k")
    got = Store(backend_on(client, prefix)).get("k")
    assert got is not None and got.history == histories[7]
