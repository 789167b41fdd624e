"""The encryption-at-rest contract: sealed records, missing or wrong keys, rotation."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from .._container import MAGIC, Compression, DecryptionError, Keyring
from .._store import Store
from ..backends._base import Record
from ..errors import UnreadableEnvelopeError
from ._capabilities import declared_by, skip_without_cryptography
from ._samples import checkpoint


def _keyed(store: Store, keyring: Keyring | None, compress: Compression | None = None) -> Store:
    """The same backend seen through another codec (other keys or compression)."""
    return Store(store.backend, keyring=keyring, compress=compress)


K1, K2 = b"\x01" * 32, b"\x02" * 32


def _with_header(body: bytes, **changes: Any) -> bytes:
    """``body``, a container, with its header's fields changed (``None``: removed)."""
    start = len(MAGIC) + 2
    end = start + int.from_bytes(body[len(MAGIC) : start], "big")
    header = {**orjson.loads(body[start:end]), **changes}
    head = orjson.dumps({k: v for k, v in header.items() if v is not _REMOVED})
    return MAGIC + len(head).to_bytes(2, "big") + head + body[end:]


_REMOVED = object()


class EncryptionConformance:
    """Records encrypted at rest (AES-256-GCM) on any backend; its tests skip, saying why,
    where the ``cryptography`` package is not installed."""

    @pytest.fixture(autouse=True)
    def _encryption_needs_cryptography(self, request: pytest.FixtureRequest) -> None:
        if declared_by(request, EncryptionConformance):
            skip_without_cryptography()

    def test_encrypted_records_round_trip_and_hide_their_content(self, store: Store) -> None:
        secure = _keyed(store, Keyring({"k1": K1}, "k1"))
        ckpt = checkpoint("r", principal="alice", text="the launch code is 0000")
        secure.put(ckpt, key="r")
        raw = store.get_record("r")
        assert raw is not None and b"launch code" not in raw.body
        got = secure.get("r")
        assert got is not None and got.history == ckpt.history
        assert [(s.key, s.owner) for s in secure.list()] == [("r", "alice")]

    def test_a_store_without_the_key_says_so_instead_of_reporting_absent(
        self, store: Store
    ) -> None:
        _keyed(store, Keyring({"k1": K1}, "k1")).put(checkpoint("r"), key="r")
        with pytest.raises(DecryptionError, match="opened without keys") as caught:
            _keyed(store, None).get("r")
        assert isinstance(caught.value, UnreadableEnvelopeError)
        with pytest.raises(DecryptionError, match="key id 'k1', which this store's keyring"):
            _keyed(store, Keyring({"k2": K2}, "k2")).get("r")
        with pytest.raises(DecryptionError, match="failed authentication"):
            _keyed(store, Keyring({"k1": K2}, "k1")).get("r")  # same id, wrong key

    def test_ciphertext_moved_to_another_key_is_refused(self, store: Store) -> None:
        secure = _keyed(store, Keyring({"k1": K1}, "k1"))
        secure.put(checkpoint("a", text="alice's"), key="a")
        secure.put(checkpoint("b", text="bob's"), key="b")
        a = store.get_record("a")
        b = store.get_record("b")
        assert a is not None and b is not None
        store.backend.save(Record(b.summary, a.body), expect_revision=b.summary.revision)
        with pytest.raises(DecryptionError, match="belong to another record"):
            secure.get("b")

    def test_rotation_reads_old_keys_and_rekey_moves_everything_to_the_primary(
        self, store: Store
    ) -> None:
        from .._maintenance import rekey_records

        old = _keyed(store, Keyring({"k1": K1}, "k1"))
        for i in range(3):
            old.put(checkpoint(f"r{i}"), key=f"r{i}")
        rotated = _keyed(store, Keyring({"k2": K2, "k1": K1}, "k2"))
        rotated.put(checkpoint("new"), key="new")
        assert all(rotated.get(k) is not None for k in ("r0", "r1", "r2", "new"))
        report = rekey_records(rotated)
        assert (report.rewritten, report.current, report.failed) == (3, 1, [])
        only_new = _keyed(store, Keyring({"k2": K2}, "k2"))
        assert [only_new.get(k).run_id for k in ("r0", "r1", "r2")] == ["r0", "r1", "r2"]  # type: ignore[union-attr]

    def test_plain_compressed_and_encrypted_records_coexist(self, store: Store) -> None:
        store.put(checkpoint("plain"), key="plain")
        _keyed(store, None, "zlib").put(checkpoint("zipped", text="z" * 5000), key="zipped")
        _keyed(store, Keyring({"k1": K1}, "k1"), "zlib").put(checkpoint("both"), key="both")
        reader = _keyed(store, Keyring({"k1": K1}, "k1"))
        assert {k: reader.get(k).run_id for k in ("plain", "zipped", "both")} == {  # type: ignore[union-attr]
            "plain": "plain",
            "zipped": "zipped",
            "both": "both",
        }
        zipped = store.get_record("zipped")
        assert zipped is not None and zipped.summary.size < 1000

    @pytest.mark.parametrize(
        ("field", "value"),
        [
            ("n", 12),
            ("n", None),
            ("n", ["AAAA"]),
            ("n", _REMOVED),
            ("kid", 1),
            ("kid", _REMOVED),
            ("e", None),
            ("e", {"name": "aes-256-gcm"}),
            ("c", 0),
        ],
    )
    def test_an_encrypted_header_of_the_wrong_shape_is_undecryptable_not_absent(
        self, store: Store, field: str, value: Any
    ) -> None:
        secure = _keyed(store, Keyring({"k1": K1}, "k1"), "zlib")
        secure.put(checkpoint("r"), key="r")
        record = store.get_record("r")
        assert record is not None
        damaged = _with_header(record.body, **{field: value})
        store.backend.save(Record(record.summary, damaged), expect_revision=1)
        with pytest.raises(DecryptionError, match=f"'{field}' is"):
            secure.get("r")

    def test_a_compressed_header_of_the_wrong_shape_is_unreadable_not_absent(
        self, store: Store
    ) -> None:
        zipped = _keyed(store, None, "zlib")
        zipped.put(checkpoint("r"), key="r")
        record = store.get_record("r")
        assert record is not None
        for value in (1, None, ["zlib"], {"c": "zlib"}):
            store.backend.save(Record(record.summary, _with_header(record.body, c=value)))
            with pytest.raises(UnreadableEnvelopeError, match="present but unreadable"):
                zipped.get("r")
