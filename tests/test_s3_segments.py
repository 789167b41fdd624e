"""Growing histories on S3 against a real SeaweedFS server, through the store's segment layer
(``_segments.py``): a put that extends the previous revision uploads only the new messages and
a small head, reads stay byte-exact, a get reads a record's pieces in one parallel wave, no
piece outlives its record, and stores an earlier version kept in segment objects still read,
and lose those objects when written over or dropped."""

from __future__ import annotations

import base64
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from support.pieces import live_pieces, referenced
from support.seaweed import S3Server, ensure_bucket, purge

from agent_checkpoint import Store, migrate_records
from agent_checkpoint._maintenance import verify_store
from agent_checkpoint._model import Message, RunCheckpoint, now_ms
from agent_checkpoint._segments import PIECES, Segmented
from agent_checkpoint._store import summary_for
from agent_checkpoint.backends import Record, Summary
from agent_checkpoint.backends._objects import Layout as Objects
from agent_checkpoint.backends._objects import fields_of, key_name
from agent_checkpoint.backends._s3 import S3Backend
from agent_checkpoint.errors import (
    ConflictError,
    OwnershipConflictError,
    StoreClosedError,
    UnreadableEnvelopeError,
)
from agent_checkpoint.testing import checkpoint
from agent_checkpoint.testing._growth import read_while_growing

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
    """The boto3 client, recording every call: (operation, Key, bytes sent, thread name)."""

    def __init__(self, client: Any) -> None:
        self.inner = client
        self.calls: list[tuple[str, str, int, str]] = []
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)
        if name not in ("put_object", "get_object", "head_object", "delete_object",
                        "delete_objects", "list_objects_v2"):  # fmt: skip
            return method

        def call(**kwargs: Any) -> Any:
            with self._lock:
                self.calls.append((name, kwargs.get("Key", ""), len(kwargs.get("Body", b"")),
                                   threading.current_thread().name))  # fmt: skip
            return method(**kwargs)

        return call


def in_pieces(backend: S3Backend, max_segments: int = 4) -> Store:
    """The segment layer with its inline threshold at 0: every put past the first moves its
    new history into a piece."""
    return Store(Segmented(backend, inline_bytes=0, max_segments=max_segments))


def plain(ckpt: RunCheckpoint, saved_at: int) -> bytes:
    """What a full write stores."""
    return orjson.dumps({"format": "conversation-v1", "data": ckpt.to_json(), "savedAt": saved_at})


def grow(n: int) -> list[tuple[Message, ...]]:
    out: list[tuple[Message, ...]] = []
    history: tuple[Message, ...] = ()
    for i in range(n):
        history = (
            *history,
            Message(("user", "assistant")[i % 2], f"message {i} " + "x" * (i % 50)),
        )
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


def piece_path(prefix: str, piece: str) -> str:
    return f"{prefix}/_{PIECES}/records/{key_name(piece)}"


def reads(recording: Recording) -> list[str]:
    """The reads among the recorded calls (the rest are PUTs and background DELETEs)."""
    return [op for op, *_ in recording.calls if op in ("get_object", "head_object",
                                                       "list_objects_v2")]  # fmt: skip


# -- growth ----------------------------------------------------------------------------------


def test_growth_in_pieces_reads_back_exactly_what_a_full_write_stores(
    client: Any, prefix: str
) -> None:
    backend = S3Backend(client, BUCKET, prefix)
    store = in_pieces(backend)
    base = checkpoint("grow", principal="p", agent="a")
    for i, history in enumerate(grow(30)):
        ckpt = base.evolve(history=history, last_completed_iteration=i)
        summary = store.put(ckpt, key="g")
        # the same bytes written whole by the plain save, under another key
        whole = summary_for(
            "w", store._codec.digest(orjson.loads(plain(ckpt, summary.saved_at))), 0
        )
        backend.save(Record(whole, plain(ckpt, summary.saved_at)))
        grown, written = store.get_record("g"), backend.load("w")
        assert grown is not None and written is not None
        assert grown.body == written.body == plain(ckpt, summary.saved_at)
        assert grown.summary.size == summary.size == len(grown.body)
        assert store.head("g") == summary
    assert 1 < len(referenced(backend, "g")) <= 4
    backend.flush()  # replaced pieces' index entries go in the background
    assert live_pieces(backend) == referenced(backend, "g")
    # another process (no remembered state) reads it the same
    assert Store(S3Backend(client, BUCKET, prefix)).get_record("g") == store.get_record("g")


def test_an_append_uploads_only_the_new_message_and_a_small_head(client: Any, prefix: str) -> None:
    """With every put in pieces, an append writes one piece (the new message, or the newest
    pieces merged with it) and a layout record of the head alone. The pieces a merge joins
    are ones this writer wrote: remembered (immutable), so nothing is read."""
    recording = Recording(client)
    backend = S3Backend(recording, BUCKET, prefix)
    store = in_pieces(backend)
    base = checkpoint("grow")
    histories = grow(40)
    store.put(base.evolve(history=histories[0]), key="g")
    head_size = len(plain(base.evolve(history=()), 0))
    plain_appends = 0
    for history in histories[1:]:
        before = referenced(backend, "g")
        recording.calls.clear()
        store.put(base.evolve(history=history), key="g")
        calls, recording.calls = recording.calls, []
        after = referenced(backend, "g")
        [new], replaced = after - before, before - after
        new_message = len(orjson.dumps(history[-1].to_json()))
        puts = [(key, size) for op, key, size, _ in calls if op == "put_object"]
        [piece] = [size for key, size in puts if key == piece_path(prefix, new)]
        [record_put] = [size for key, size in puts if key.startswith(f"{prefix}/records/")]
        assert record_put < head_size + 1000
        piece_reads = [key for op, key, *_ in calls if op in ("get_object", "head_object")]
        if not replaced:  # the new message alone, and no read
            assert piece < new_message + 400 and piece_reads == []
            plain_appends += 1
        else:  # a merge of the newest pieces, which the writer remembers
            assert piece_reads == [] and piece > new_message
    assert plain_appends >= 10


def test_with_the_default_threshold_an_append_is_one_conditional_put_of_the_record(
    client: Any, prefix: str
) -> None:
    """The newest history stays in the layout record up to the layer's inline threshold: an
    append PUTs its index entry and the record (``If-Match``), reads nothing, and a piece is
    written only when the inline history outgrows the threshold. A short history is read back
    in one GET by anyone."""
    recording = Recording(client)
    backend = S3Backend(recording, BUCKET, prefix)
    store = Store(backend)
    inline = store._records.inline_bytes  # type: ignore[attr-defined]
    base = checkpoint("inline")
    store.put(base, key="warm")  # the bucket check, once per backend
    head_size = len(plain(base.evolve(history=()), 0))
    store.put(base.evolve(history=grow(1)[0]), key="g")
    spills = 0
    for history in grow(400)[1:]:
        recording.calls.clear()
        ckpt = base.evolve(history=history)
        summary = store.put(ckpt, key="g")
        puts = [(key, size) for op, key, size, _ in recording.calls if op == "put_object"]
        [record_put] = [size for key, size in puts if key.startswith(f"{prefix}/records/")]
        assert record_put < head_size + 1000 + inline
        assert len([key for key, _ in puts if key.startswith(f"{prefix}/index/")]) == 1
        pieces = [size for key, size in puts if key.startswith(f"{prefix}/_{PIECES}/records/")]
        if pieces:  # the inline history, with the new message, outgrew the threshold
            [size] = pieces
            assert inline < size <= inline + 600
            spills += 1
        else:
            assert len(puts) == 2 and reads(recording) == []
    history_bytes = len(orjson.dumps([m.to_json() for m in history])) - 2
    assert 1 <= spills <= history_bytes // inline
    expected = plain(ckpt, summary.saved_at)
    assert store.get_record("g").body == expected  # type: ignore[union-attr]
    assert Store(S3Backend(client, BUCKET, prefix)).get_record("g").body == expected  # type: ignore[union-attr]

    short = base.evolve(history=grow(10)[-1])
    summary = store.put(short, key="short")
    cold = Recording(client)
    got = Store(S3Backend(cold, BUCKET, prefix)).get_record("short")
    assert [op for op, *_ in cold.calls] == ["list_objects_v2", "get_object"]  # check, record
    assert got is not None and got.body == plain(short, summary.saved_at)


def test_a_get_of_a_record_in_pieces_is_one_get_and_one_parallel_wave(
    client: Any, prefix: str
) -> None:
    """The record first, then every piece at once on the backend's own threads (``load_many``),
    not one after another on the caller's."""
    store = in_pieces(S3Backend(client, BUCKET, prefix))
    for history in grow(12):
        ckpt = checkpoint("g").evolve(history=history)
        store.put(ckpt, key="g")
    cold = Recording(client)
    reader = S3Backend(cold, BUCKET, prefix)
    pieces = referenced(reader, "g")
    assert len(pieces) >= 3
    reader.load("warm")  # the bucket checks of the store and of its pieces' namespace, once
    reader.namespace(PIECES).load("warm")
    cold.calls.clear()
    got = Store(reader).get("g")
    assert got == ckpt
    [first, *rest] = [(key, thread) for op, key, _, thread in cold.calls]
    assert first[0] == f"{prefix}/records/{key_name('g')}" and [op for op, *_ in cold.calls] == [
        "get_object"
    ] * (1 + len(pieces))
    assert {key for key, _ in rest} == {piece_path(prefix, p) for p in pieces}
    assert all(thread.startswith("agent-checkpoint-s3") for _, thread in rest)


@pytest.mark.parametrize("limit", [2, 3, 5])
def test_merging_at_the_limit_stays_exact_and_leaves_nothing_behind(
    client: Any, prefix: str, limit: int
) -> None:
    backend = S3Backend(client, BUCKET, prefix)
    store = in_pieces(backend, max_segments=limit)
    base = checkpoint("grow")
    for history in grow(16):
        ckpt = base.evolve(history=history)
        summary = store.put(ckpt, key="g")
        assert store.get_record("g").body == plain(ckpt, summary.saved_at)  # type: ignore[union-attr]
        assert len(referenced(backend, "g")) <= limit
    backend.flush()
    assert live_pieces(backend) == referenced(backend, "g")


def test_an_empty_history_and_empty_extensions_store_no_piece(client: Any, prefix: str) -> None:
    backend = S3Backend(client, BUCKET, prefix)
    store = in_pieces(backend)
    base = checkpoint("empty").evolve(history=())
    for ckpt in (base, base.evolve(last_completed_iteration=3)):
        summary = store.put(ckpt, key="e")
        assert store.get_record("e").body == plain(ckpt, summary.saved_at)  # type: ignore[union-attr]
    assert live_pieces(backend) == set()


# -- stores an earlier version wrote -----------------------------------------------------------


def test_a_record_written_whole_by_the_previous_version_reads_and_grows(
    client: Any, prefix: str
) -> None:
    base = checkpoint("old", principal="p")
    histories = grow(5)
    body = plain(base.evolve(history=histories[0]), 1000)
    # exactly what the previous version wrote: header line, body, no segments
    backend = S3Backend(client, BUCKET, prefix)
    summary = summary_for("k", Store(backend)._codec.digest(orjson.loads(body)), len(body))
    backend.save(Record(summary, body))
    store = Store(S3Backend(client, BUCKET, prefix))
    got = store.get_record("k")
    assert got is not None and got.body == body
    for history in histories[1:]:
        grown = base.evolve(history=history)
        summary = store.put(grown, key="k")
        assert store.get_record("k").body == plain(grown, summary.saved_at)  # type: ignore[union-attr]
    assert summary.revision == 5


def lay_out_as_the_previous_version(
    client: Any, prefix: str, ckpt: RunCheckpoint, *, revision: int, inline: int
) -> tuple[Summary, bytes, list[str]]:
    """Objects as the previous version wrote a grown history: an index entry, a record object
    whose header lists ``segs`` and whose body is the head and then the newest ``inline``
    messages (``inl``), and one segment object per older message. Returns the summary, the
    bytes a full write stores, and the segment objects."""
    whole = plain(ckpt, 1000)
    start = whole.index(b'"history":[') + len(b'"history":[')
    end = start + len(b",".join(orjson.dumps(m.to_json()) for m in ckpt.history))
    messages = [orjson.dumps(m.to_json()) for m in ckpt.history]
    held = b",".join(messages[len(messages) - inline :]) if inline else b""
    parts = messages[: len(messages) - inline]
    summary = Summary("k", ckpt.run_id, 1000, "p", None, None, None, len(messages), len(whole),
                      revision)  # fmt: skip
    name, token = key_name("k"), "0123456789abcdef"
    sids = [f"{i:016x}" for i in range(1, len(parts) + 1)]
    paths = [f"{prefix}/segments/{name}/{sid}" for sid in sids]
    for path, part in zip(paths, parts, strict=True):
        client.put_object(Bucket=BUCKET, Key=path, Body=part)
    layout = Objects.under("s3", prefix + "/")
    client.put_object(Bucket=BUCKET, Key=layout.entry_path(summary, name, token), Body=b"")
    fields = {"key": "k", **fields_of(summary, token), "dig": "d", "inl": len(held),
              "segs": [[sid, len(part)] for sid, part in zip(sids, parts, strict=True)]}  # fmt: skip
    head = whole[:start] + b"\x00" + whole[end:]
    client.put_object(Bucket=BUCKET, Key=f"{prefix}/records/{name}",
                      Body=orjson.dumps(fields) + b"\n" + head + held,
                      Metadata={"ac": base64.urlsafe_b64encode(orjson.dumps(
                          fields_of(summary, token) | {"seg": len(parts)})).decode()})  # fmt: skip
    return summary, whole, paths


@pytest.mark.parametrize("inline", [0, 2], ids=["segments", "inline"])
def test_a_record_the_previous_version_kept_in_segments_reads_and_loses_them_when_replaced(
    client: Any, prefix: str, inline: int
) -> None:
    ckpt = checkpoint("old-split", principal="p").evolve(history=grow(5)[-1])
    summary, whole, paths = lay_out_as_the_previous_version(
        client, prefix, ckpt, revision=3, inline=inline
    )
    backend = S3Backend(client, BUCKET, prefix)
    store = Store(backend)
    got = store.get_record("k")
    assert got is not None and got.body == whole and got.summary == summary
    assert store.get("k") == ckpt and store.list().items == [summary]
    assert backend.load_many(["k", "none"]) == [got, None]
    # a write over it (here an append of one message) takes its segment objects along
    grown = ckpt.evolve(history=grow(6)[-1])
    landed = store.put(grown, key="k")
    assert landed.revision == 4 and landed.owner == "p"
    assert Store(S3Backend(client, BUCKET, prefix)).get("k") == grown
    backend.flush()
    assert objects(client, prefix, "segments") == {}
    assert store.list().items == [landed]

    # again, and dropped
    summary, whole, paths = lay_out_as_the_previous_version(
        client, prefix, ckpt, revision=7, inline=inline
    )
    assert set(objects(client, prefix, "segments")) == set(paths)
    assert store.get_record("k").body == whole  # type: ignore[union-attr]
    assert store.delete("k") is True and store.get("k") is None
    backend.flush()
    assert objects(client, prefix, "segments") == {}


def test_a_lost_segment_of_the_previous_version_reads_as_unreadable(
    client: Any, prefix: str
) -> None:
    ckpt = checkpoint("old-split", principal="p").evolve(history=grow(3)[-1])
    _, _, paths = lay_out_as_the_previous_version(client, prefix, ckpt, revision=3, inline=0)
    client.delete_object(Bucket=BUCKET, Key=paths[0])
    with pytest.raises(UnreadableEnvelopeError):
        Store(S3Backend(client, BUCKET, prefix)).get("k")


# -- requests per operation ----------------------------------------------------------------


def test_migrate_rewrites_the_records_the_previous_version_kept_in_segments_whole(
    client: Any, prefix: str
) -> None:
    ckpt = checkpoint("old-split", principal="p").evolve(history=grow(5)[-1])
    _, whole, _ = lay_out_as_the_previous_version(client, prefix, ckpt, revision=3, inline=2)
    backend = S3Backend(client, BUCKET, prefix)
    store = Store(backend)
    assert backend.in_old_layout("k")
    report = migrate_records(store)
    assert (report.upgraded, report.current, report.failed) == (1, 0, [])
    backend.flush()
    assert objects(client, prefix, "segments") == {}
    got = store.get_record("k")
    assert got is not None and got.body == whole
    assert (got.summary.revision, got.summary.owner) == (4, "p")
    assert not backend.in_old_layout("k") and migrate_records(store).current == 1


def test_a_first_put_and_the_writers_later_puts_and_delete_read_nothing_but_the_layout(
    client: Any, prefix: str
) -> None:
    """An append and a conditional put write over the remembered ETag (``If-Match``) without
    a read, and a create-only put writes as new (``If-None-Match``). A first put with no
    stated revision reads the record once: the segment layer must know which pieces the
    record it replaces holds (a key this backend does not know is then written as new); after
    that, a put or a delete with no stated revision replaces the layout the layer committed
    last, without a read."""
    recording = Recording(client)
    backend = S3Backend(recording, BUCKET, prefix)
    store = Store(backend)
    store.put(checkpoint("warm"), key="warm")  # the bucket check, once per backend
    base = checkpoint("count")
    for put, expected in (
        (lambda: store.put(base.evolve(history=grow(10)[-1]), key="k"), ["get_object"]),
        (lambda: store.put(base.evolve(history=grow(11)[-1]), key="k"), []),  # an append
        (lambda: store.put(base.evolve(history=grow(4)[-1]), key="k"), []),  # remembered
        (lambda: store.put(base.evolve(history=grow(5)[-1]), key="k", if_revision=3), []),
        (lambda: store.put(base, key="c", create_only=True), []),
    ):
        recording.calls.clear()
        put()
        assert reads(recording) == expected
        assert [op for op, *_ in recording.calls if op == "put_object"] == ["put_object"] * 2
    recording.calls.clear()
    assert store.delete("k") is True
    assert reads(recording) == []
    assert [op for op, *_ in recording.calls if op == "put_object"] == ["put_object"]
    assert store.head("k") is None and store.get("c") == base


def test_a_read_then_a_write_on_the_revision_read_reads_once(client: Any, prefix: str) -> None:
    """Optimistic concurrency from another process (a store that never wrote the key): the
    get remembers the record's header and ETag, so the put on the revision it read, and a
    claim's rewrite of the run it just read, need no read of their own."""
    base = checkpoint("read-write")
    Store(S3Backend(client, BUCKET, prefix)).put(base, key="k")
    recording = Recording(client)
    store = Store(S3Backend(recording, BUCKET, prefix))
    store.put(checkpoint("warm"), key="warm")  # the bucket check, once per backend
    recording.calls.clear()
    read = store.get_record("k")
    assert read is not None and reads(recording) == ["get_object"]
    recording.calls.clear()
    again = base.evolve(last_completed_iteration=4)
    assert store.put(again, key="k", if_revision=read.summary.revision).revision == 2
    assert reads(recording) == []
    assert [op for op, *_ in recording.calls if op == "put_object"] == ["put_object"] * 2
    recording.calls.clear()
    with store.claim("k", "w1", ttl=60) as claim:  # the lease's GET, the run's GET: no more
        got = [key for op, key, *_ in recording.calls if op == "get_object"]
        name = key_name("k")
        assert got == [f"{prefix}/_leases/records/{name}", f"{prefix}/records/{name}"]
        assert claim.get() == again
    # What a read remembers may be stale: another writer's update is never lost to it.
    stale = store.get_record("k")
    assert stale is not None
    theirs = base.evolve(last_completed_iteration=9)
    other = Store(S3Backend(client, BUCKET, prefix))
    assert other.put(theirs, key="k").revision == stale.summary.revision + 1
    with pytest.raises(ConflictError):
        store.put(again, key="k", if_revision=stale.summary.revision)
    assert other.get("k") == theirs
    with pytest.raises(ConflictError):
        store.delete("k", if_revision=stale.summary.revision)
    assert store.put(again, key="k").revision == stale.summary.revision + 2
    assert other.get("k") == again


def test_a_claim_rewrites_the_run_in_one_put_and_keeps_its_index_entry(
    client: Any, prefix: str
) -> None:
    """A claim's fence rewrites the run unchanged: the record lists under the same index
    entry, so the rewrite is one PUT of the record (no entry uploaded first, none deleted
    after). The run still lists once, at its new revision, and a writer holding the revision
    before the claim is refused."""
    recording = Recording(client)
    backend = S3Backend(recording, BUCKET, prefix)
    store = Store(backend)
    base = checkpoint("fence")
    store.put(base, key="k")
    backend.flush()
    entries = objects(client, prefix, "index")
    record = f"{prefix}/records/{key_name('k')}"
    recording.calls.clear()
    with store.claim("k", "w1", ttl=60) as claim:
        backend.flush()
        run = [(op, key) for op, key, *_ in recording.calls if "/_leases/" not in key]
        assert run == [("get_object", record), ("put_object", record)]
        assert objects(client, prefix, "index") == entries
        listed = store.list()
        assert [(s.key, s.revision) for s in listed] == [("k", 2)] and claim.fence == 2
        with pytest.raises(ConflictError):
            Store(S3Backend(client, BUCKET, prefix)).put(base, key="k", if_revision=1)
        claim.put(base.evolve(last_completed_iteration=3))
    backend.flush()
    moved = objects(client, prefix, "index")  # the claim's put of new state moved the entry
    assert len(moved) == 1 and moved.keys() != entries.keys()
    assert [(s.key, s.revision) for s in store.list()] == [("k", 3)]
    assert store.get("k") == base.evolve(last_completed_iteration=3)
    assert backend.verify(grace=0) == {"records": 1, "missing": 0, "stale": 0}


def test_writes_over_a_key_changed_by_another_writer_never_lose_its_update(
    client: Any, prefix: str
) -> None:
    """What a backend remembers of its last write may be stale: its next write then fails
    its condition, reads, and plans again, so revisions, owners and refusals stay right."""
    mine = Store(S3Backend(client, BUCKET, prefix))
    theirs = Store(S3Backend(client, BUCKET, prefix))
    base = checkpoint("stale", principal="alice")
    assert mine.put(base, key="k").revision == 1
    assert theirs.put(base.evolve(last_completed_iteration=5), key="k").revision == 2
    # a guess that "k" is new, by a backend that never saw it
    fresh = Store(S3Backend(client, BUCKET, prefix))
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


@pytest.mark.parametrize("inline", [0, 60], ids=["pieces", "inline"])
def test_two_racing_appenders_from_one_base_have_exactly_one_winner(
    client: Any, prefix: str, inline: int
) -> None:
    """Two stores extend the same revision at once (``if_revision``): one put lands, the
    other is refused, and the loser's piece, if it wrote one, does not stay behind."""
    backends = [S3Backend(client, BUCKET, prefix) for _ in range(2)]
    stores = [Store(Segmented(b, inline_bytes=inline, max_segments=2)) for b in backends]
    base = checkpoint("race", principal="p")
    history = grow(3)[-1]
    stores[0].put(base.evolve(history=history), key="r")
    stores[1].get("r")
    barrier = threading.Barrier(2)  # reusable: one for every round
    for round_ in range(4):
        for s in stores:  # both know the current revision
            s.get("r")
        results: list[Any] = [None, None]
        contenders = [
            base.evolve(history=(*history, Message("user", f"round {round_} w{w}"))) for w in (0, 1)
        ]

        def contend(w: int, ckpt: RunCheckpoint, revision: int, results: list[Any]) -> None:
            barrier.wait()
            try:
                results[w] = stores[w].put(ckpt, key="r", if_revision=revision)
            except ConflictError as exc:
                results[w] = exc

        threads = [
            threading.Thread(target=contend, args=(w, contenders[w], round_ + 1, results))
            for w in (0, 1)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        winners = [w for w in (0, 1) if not isinstance(results[w], ConflictError)]
        assert len(winners) == 1, results
        got = stores[1 - winners[0]].get("r")
        assert got is not None and got.history[-1].content == f"round {round_} w{winners[0]}"
        history = got.history
        for backend in backends:
            backend.flush()
        assert live_pieces(backends[0]) == referenced(backends[0], "r")


def test_readers_never_see_a_torn_history_while_merges_drop_pieces(
    client: Any, prefix: str
) -> None:
    writer = in_pieces(S3Backend(client, BUCKET, prefix), max_segments=2)
    reader = Store(S3Backend(client, BUCKET, prefix))
    assert read_while_growing(writer, reader) > 3


# -- deletion, retention, whole writes, repair ----------------------------------------------


def test_delete_retention_and_whole_writes_remove_the_pieces(client: Any, prefix: str) -> None:
    clock = [0]
    backend = S3Backend(client, BUCKET, prefix)
    store = Store(Segmented(backend, inline_bytes=0, max_segments=4), clock=lambda: clock[0])
    base = checkpoint("g")
    for key, saved_at in (("a", 1000), ("b", 2000), ("c", 3000), ("d", 4000)):
        for i, history in enumerate(grow(6)):
            clock[0] = saved_at + i
            store.put(base.evolve(history=history), key=key)
    assert all(referenced(backend, key) for key in "abcd")
    assert live_pieces(backend) == referenced(backend, *"abcd")
    assert store.delete("a") is True
    assert store.forget_older_than(2500).forgotten == 1  # "b"
    assert live_pieces(backend) == referenced(backend, "c", "d")
    # a whole write over a record in pieces (what copy and migrate do) drops its pieces
    record = store.get_record("c")
    assert record is not None
    store.put_record(record)
    assert referenced(backend, "c") == set()
    assert store.get_record("c").body == record.body  # type: ignore[union-attr]
    assert live_pieces(backend) == referenced(backend, "d")
    store.delete("c")
    store.delete("d")
    backend.flush()
    assert live_pieces(backend) == set()
    assert objects(client, prefix, "index") == {}
    assert objects(client, prefix, f"_{PIECES}/index") == {}
    # a replaced piece goes whole (its key is never used again): no tombstone is left
    assert objects(client, prefix, f"_{PIECES}/records") == {}


def test_verify_store_counts_orphaned_pieces_and_repair_removes_them(
    client: Any, prefix: str
) -> None:
    backend = S3Backend(client, BUCKET, prefix)
    store = in_pieces(backend)
    for history in grow(6):
        store.put(checkpoint("g").evolve(history=history), key="g")
    kept = referenced(backend, "g")
    # as if a writer had died a second ago between its piece's PUT and its record's
    orphan = "g#00000000deadbeef"
    summary = Summary(orphan, orphan, now_ms() - 1000, None, None, None, None, 0, 0, 0)
    backend.namespace(PIECES).save(Record(summary, b'{"role":"user","content":"x"}'))
    assert verify_store(store).orphans == 0  # within the grace period: maybe a write in flight
    report = verify_store(store, grace=0)
    assert report.orphans == 1 and report.ok  # garbage, not lost data
    assert verify_store(store, repair=True, grace=0).orphans == 1
    assert live_pieces(backend) == kept
    assert verify_store(store, grace=0).orphans == 0
    assert store.get("g") is not None


def test_a_lost_piece_reads_as_unreadable_not_as_absent(client: Any, prefix: str) -> None:
    backend = S3Backend(client, BUCKET, prefix)
    store = in_pieces(backend)
    for history in grow(3):
        store.put(checkpoint("g").evolve(history=history), key="g")
    backend.namespace(PIECES).drop(sorted(referenced(backend, "g"))[0])
    with pytest.raises(UnreadableEnvelopeError):
        Store(S3Backend(client, BUCKET, prefix)).get("g")


def test_a_closed_store_of_many_pieces_refuses_and_loses_nothing(client: Any, prefix: str) -> None:
    """``close()`` stops the backend's threads (its pieces' namespace's too); a call after it
    raises ``StoreClosedError``, and what was stored reads back whole through a new backend."""
    backend = S3Backend(client, BUCKET, prefix)
    store = in_pieces(backend)
    base = checkpoint("closed")
    histories = grow(12)
    for history in histories[:8]:
        store.put(base.evolve(history=history), key="k")
    assert len(referenced(backend, "k")) > 1
    store.close()
    with pytest.raises(StoreClosedError):
        store.put(base.evolve(history=histories[8]), key="k")
    with pytest.raises(StoreClosedError):
        Store(backend).get("k")
    got = Store(S3Backend(client, BUCKET, prefix)).get("k")
    assert got is not None and got.history == histories[7]
