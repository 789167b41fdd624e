"""Encryption and compression are options of the store: ``open_store(url, keyring=...,
compress=...)``, the same on ``open_async_store`` and ``Store(backend, ...)``. What they do is
read on the disk itself: the bytes a record leaves there. The 0.4 spelling,
``Store(backend, codec=Codec(sealer=Sealer(...)))``, still works with a warning saying the new one."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agent_checkpoint import (
    Codec,
    InvalidArgumentError,
    Keyring,
    Migrations,
    Sealer,
    Store,
    open_async_store,
    open_store,
)
from agent_checkpoint.testing import checkpoint

SECRET = "the launch code is 0000"
KEYRING = Keyring({"k1": bytes(range(32))}, "k1")


def _stored_bytes(folder: Path) -> bytes:
    """Every byte the records of a disk store left in its record files."""
    files = sorted((folder / "records").iterdir())
    assert files, f"no record file in {folder}"
    return b"".join(path.read_bytes() for path in files)


def test_a_record_put_with_a_keyring_is_encrypted_at_rest_and_reads_back(tmp_path: Path) -> None:
    pytest.importorskip("cryptography")
    plain, sealed = tmp_path / "plain", tmp_path / "sealed"
    with open_store(plain) as store:
        store.put(checkpoint(text=SECRET), key="k")
    assert SECRET.encode() in _stored_bytes(plain)  # the control: a plain record shows it
    with open_store(sealed, keyring=KEYRING) as store:
        store.put(checkpoint(text=SECRET), key="k")
        got = store.get("k")
    assert got is not None and got.history[0].content == f"{SECRET} 0"
    assert SECRET.encode() not in _stored_bytes(sealed)
    # what listing shows (key, runId, counts) stays readable by design; the conversation does not
    assert b"runId" in _stored_bytes(sealed)


def test_open_async_store_takes_the_keyring_too(tmp_path: Path) -> None:
    pytest.importorskip("cryptography")

    async def run() -> str:
        async with open_async_store(tmp_path, keyring=KEYRING) as store:
            await store.put(checkpoint(text=SECRET), key="k")
            got = await store.get("k")
        assert got is not None
        return str(got.history[0].content)

    assert asyncio.run(run()) == f"{SECRET} 0"
    assert SECRET.encode() not in _stored_bytes(tmp_path)


def test_compress_shrinks_what_a_record_leaves_on_disk(tmp_path: Path) -> None:
    text = "the same sentence, said again and again. " * 200
    sizes = {}
    for compress in (None, "zlib"):
        folder = tmp_path / str(compress)
        with open_store(folder, compress=compress) as store:
            store.put(checkpoint(text=text, messages=4), key="k")
            got = store.get("k")
        assert got is not None and got.history[0].content == f"{text} 0"
        sizes[compress] = len(_stored_bytes(folder))
    assert sizes["zlib"] * 5 < sizes[None], sizes


def test_store_on_a_backend_takes_the_same_options(tmp_path: Path) -> None:
    pytest.importorskip("cryptography")
    with open_store(tmp_path) as plain:
        sealed = Store(plain.backend, keyring=KEYRING, compress="zlib")
        sealed.put(checkpoint(text=SECRET), key="k")
        assert SECRET.encode() not in _stored_bytes(tmp_path)
        got = sealed.get("k")
        assert got is not None and got.history[0].content == f"{SECRET} 0"


def test_the_old_codec_spelling_works_with_a_warning_saying_the_new_one(tmp_path: Path) -> None:
    pytest.importorskip("cryptography")
    with open_store(tmp_path) as plain:
        with pytest.warns(DeprecationWarning, match=r"Store\(backend, keyring=\.\.\."):
            old = Store(plain.backend, codec=Codec(sealer=Sealer(keyring=KEYRING)))
        old.put(checkpoint(text=SECRET), key="k")
        assert SECRET.encode() not in _stored_bytes(tmp_path)
        got = Store(plain.backend, keyring=KEYRING).get("k")  # the same record, new spelling
        assert got is not None and got.history[0].content == f"{SECRET} 0"


def test_codec_beside_the_options_it_replaces_is_refused_naming_them(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        store.put(checkpoint(text="kept"), key="k")
        before = _stored_bytes(tmp_path)
        with pytest.raises(
            InvalidArgumentError, match=r"codec= or compress=/migrations=, not both"
        ):
            Store(store.backend, codec=Codec(), compress="zlib", migrations=Migrations({}))
        with pytest.raises(InvalidArgumentError, match="codec must be a Codec"):
            Store(store.backend, codec="zlib")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="keyring must be a Keyring"):
            Store(store.backend, keyring="k1")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="compress must be 'zlib' or None"):
            open_store(tmp_path, compress="gzip")  # type: ignore[arg-type]
        assert _stored_bytes(tmp_path) == before
        got = store.get("k")
        assert got is not None and got.history[0].content == "kept 0"
