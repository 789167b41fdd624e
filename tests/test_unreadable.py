"""How an unreadable stored record is refused and described: the preview is right (its length
counted over every byte) and bounded (a quoted prefix), and refusing costs no copy of it."""

from __future__ import annotations

import tracemalloc
import zlib
from collections.abc import Iterator

import pytest

from agent_checkpoint import open_store
from agent_checkpoint._container import MAGIC
from agent_checkpoint._envelope import STORED_PREVIEW_LIMIT, preview_pieces, preview_stored
from agent_checkpoint.backends import Record, Summary
from agent_checkpoint.errors import UnreadableEnvelopeError


def _reference(data: bytes) -> str:
    """The preview of the whole bytes decoded at once (what the chunked count must equal)."""
    return preview_stored(data.decode("utf-8", "replace"))


SAMPLES = [
    b"",
    b"x" * (4 * STORED_PREVIEW_LIMIT),
    b"x" * (4 * STORED_PREVIEW_LIMIT + 1),
    "😀".encode() * 200,
    "ü日x😀".encode() * 300 + b"\xff\xfe" + "é".encode()[:1],
    b"<" + "€".encode() * 1000,
    b"\xed\xa0\x80" * 100,  # an encoded surrogate: invalid UTF-8
]


@pytest.mark.parametrize("data", SAMPLES, ids=range(len(SAMPLES)))
def test_the_preview_of_bytes_counts_every_unit_a_chunk_at_a_time(
    data: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("agent_checkpoint._envelope._COUNT_CHUNK", 7)  # characters straddle
    expected = _reference(data)
    assert preview_pieces([data]) == expected
    pieces = [data[i : i + 5] for i in range(0, len(data), 5)]
    assert preview_pieces(pieces) == expected


def _compressed(plain: bytes) -> bytes:
    head = b'{"c":"zlib"}'
    return MAGIC + len(head).to_bytes(2, "big") + head + zlib.compress(plain, 9)


def _refused(body: bytes) -> tuple[UnreadableEnvelopeError, int]:
    """The error a compressed store gives for ``body``, and the memory refusing it took."""
    store = open_store("memory://", compress="zlib")
    store.backend.save(Record(Summary("k", "r", 1, None, None, None, None, 0, 1, 0), body))
    tracemalloc.start()
    try:
        with pytest.raises(UnreadableEnvelopeError) as caught:
            store.get("k")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return caught.value, peak


def test_refusing_a_record_that_inflates_to_no_object_holds_only_a_piece_of_it() -> None:
    size = 64 * 1024 * 1024
    error, peak = _refused(_compressed(b"y" * size))
    assert error.stored_preview == f'"{"y" * STORED_PREVIEW_LIMIT}…" ({size} chars)'
    assert peak < 8 * 1024 * 1024, peak


def test_a_broken_object_is_still_described_whole() -> None:
    plain = b'{"format": "conversation-v1", "data": ' + "ü".encode() * 10_000
    error, _ = _refused(_compressed(plain))
    assert error.stored_preview == _reference(plain)
    assert error.stored_preview.endswith(f'…" ({len(plain.decode())} chars)')


def _chunks(data: bytes, size: int) -> Iterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


def test_the_preview_quotes_at_most_the_limit() -> None:
    data = "😀".encode() * 1000
    preview = preview_pieces(_chunks(data, 3))
    quoted = preview[1 : preview.index("…")]
    assert len(quoted.encode("utf-16-le")) // 2 == STORED_PREVIEW_LIMIT
    assert preview.endswith('…" (2000 chars)')
