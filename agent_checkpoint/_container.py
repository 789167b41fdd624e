"""The self-describing container for compressed or encrypted records.

By default a record's stored bytes are the JSON envelope itself, readable by any runtime. When a
store is given a ``Keyring`` or ``compress="zlib"``, the envelope is wrapped::

    MAGIC (b"\\x00ACK1") | header length (2 bytes, big endian) | header JSON | payload

The header names the compression (``"c"``), the cipher (``"e"``: ``"aes-256-gcm"``), the key id
(``"kid"``) and the nonce (``"n"``). Because a JSON envelope never starts with a NUL byte,
containers and plain envelopes coexist in one store and each record says how to open it, so
records written under different settings (or keys) stay readable.

Encryption is AES-256-GCM with a fresh 96-bit nonce per record. The associated data binds the
header and the record's store key, so a ciphertext moved to another key (or given another
header) fails authentication instead of decrypting as someone else's conversation.
"""

from __future__ import annotations

import base64
import os
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from .errors import (
    CheckpointError,
    DecryptionError,
    InvalidArgumentError,
    MissingDependencyError,
    UnreadableEnvelopeError,
)

__all__ = [
    "MAGIC",
    "DecryptionError",
    "Keyring",
    "Sealer",
    "is_container",
    "keyring_from_env",
]

MAGIC = b"\x00ACK1"
Compression = Literal["zlib"]
KEYS_ENV = "AGENT_CHECKPOINT_KEYS"
MAX_PLAIN_BYTES = 256 * 1024 * 1024
"""The largest envelope a compressed container may inflate to."""
_INFLATE_CHUNK = 1 << 20


@dataclass(frozen=True)
class Keyring:
    """AES-256 keys by id. New records use ``primary``; any listed key opens old records, so
    keys rotate by adding a new primary and running ``agent-checkpoint rekey``."""

    keys: Mapping[str, bytes]
    primary: str

    def __post_init__(self) -> None:
        if self.primary not in self.keys:
            raise InvalidArgumentError(f"primary key id {self.primary!r} is not in the keyring")
        for kid, key in self.keys.items():
            if not kid or not isinstance(key, bytes) or len(key) != 32:
                raise InvalidArgumentError(f"key {kid!r} must be 32 bytes (AES-256)")

    @staticmethod
    def generate_key() -> bytes:
        return os.urandom(32)


def keyring_from_env(value: str | None = None) -> Keyring | None:
    """A keyring from ``$AGENT_CHECKPOINT_KEYS``: ``id:base64key[,id:base64key...]``, the first
    one primary. ``None`` when unset."""
    text = os.environ.get(KEYS_ENV) if value is None else value
    if not text:
        return None
    keys: dict[str, bytes] = {}
    order: list[str] = []
    for item in text.split(","):
        kid, sep, encoded = item.partition(":")
        kid, encoded = kid.strip(), encoded.strip()  # "a : K, b:K2" as written by hand
        if not sep or not kid:
            # never quote the entry: without its id, it is key material
            raise InvalidArgumentError(
                f"{KEYS_ENV} entry {len(order) + 1} is not id:base64key (its id is missing)"
            )
        if kid in keys:  # which key is the primary would be a guess
            raise InvalidArgumentError(f"{KEYS_ENV}: key id {kid!r} is given twice")
        try:
            keys[kid] = base64.b64decode(encoded, validate=True)
        except ValueError:
            raise InvalidArgumentError(f"{KEYS_ENV}: key {kid!r} is not valid base64") from None
        order.append(kid)
    return Keyring(keys, order[0])


def is_container(body: bytes) -> bool:
    return body[: len(MAGIC)] == MAGIC


def _aead() -> Any:
    """The AES-GCM class of the ``cryptography`` package, or the error naming the extra."""
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ModuleNotFoundError as exc:
        raise MissingDependencyError(
            "encrypted stores need the 'cryptography' package; install it with: "
            "pip install 'localab-checkpoint[encryption]'"
        ) from exc
    return AESGCM


def _aesgcm(key: bytes) -> Any:
    return _aead()(key)


@dataclass(frozen=True)
class Sealer:
    """Wraps envelope bytes into a container and back."""

    keyring: Keyring | None = None
    compress: Compression | None = None
    max_plain_bytes: int = MAX_PLAIN_BYTES
    _ciphers: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.keyring is not None and not isinstance(self.keyring, Keyring):
            raise InvalidArgumentError(
                f"keyring must be a Keyring (or None), not {type(self.keyring).__name__}: "
                "Keyring({key_id: key}, key_id), or keyring_from_env()"
            )
        if self.compress not in (None, "zlib"):
            raise InvalidArgumentError(f"compress must be 'zlib' or None, not {self.compress!r}")
        if self.keyring is not None:
            _aead()  # refused once, at open: not at each record a command reads or rewrites

    @property
    def active(self) -> bool:
        return self.keyring is not None or self.compress is not None

    def _cipher(self, kid: str) -> Any:
        cipher = self._ciphers.get(kid)
        if cipher is None:
            assert self.keyring is not None
            cipher = self._ciphers[kid] = _aesgcm(self.keyring.keys[kid])
        return cipher

    def seal(self, plain: bytes, key: str) -> bytes:
        """The container for ``plain`` stored under ``key`` (plain bytes when inactive)."""
        if not self.active:
            return plain
        header: dict[str, str] = {}
        payload = plain
        if self.compress == "zlib":
            header["c"] = "zlib"
            payload = zlib.compress(payload, 6)
        if self.keyring is not None:
            nonce = os.urandom(12)
            header.update(
                e="aes-256-gcm", kid=self.keyring.primary, n=base64.b64encode(nonce).decode()
            )
            head = orjson.dumps(header)
            payload = self._cipher(self.keyring.primary).encrypt(nonce, payload, _aad(head, key))
        else:
            head = orjson.dumps(header)
        return MAGIC + len(head).to_bytes(2, "big") + head + payload

    def settled(self, body: bytes) -> bool:
        """Whether ``body`` is already sealed the way this sealer seals new records."""
        header = _header(body) if is_container(body) else None
        if header is None:
            return not self.active
        kid = header.get("kid") if "e" in header else None
        wanted_kid = self.keyring.primary if self.keyring is not None else None
        return kid == wanted_kid and header.get("c") == self.compress

    def can_open(self, body: bytes) -> bool:
        """Whether this sealer has what ``body`` needs: always for a plain or compressed
        record (or a damaged one, which opening reports), the key id of an encrypted one."""
        header = _header(body) if is_container(body) else None
        if header is None or "e" not in header:
            return True
        return self.keyring is not None and str(header.get("kid")) in self.keyring.keys

    def open(self, body: bytes, key: str | None) -> bytes:
        """The envelope bytes inside ``body`` (``body`` itself if it is no container)."""
        pieces = list(self.pieces(body, key))
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def pieces(self, body: bytes, key: str | None) -> Iterator[bytes]:
        """``open``'s bytes, a piece at a time as they inflate (one piece unless compressed):
        a reader that can refuse them from the first piece holds no more than that."""
        if not is_container(body):
            yield body
            return
        header, head, payload = _parts(body, key)
        if "e" in header:
            payload = self._decrypt(header, head, payload, key)
        if header.get("c") == "zlib":
            yield from self._inflate(payload, key)
        elif "c" in header:
            raise _broken(key, f"it uses compression {header['c']!r}, which this library lacks")
        else:
            yield payload

    def _inflate(self, payload: bytes, key: str | None) -> Iterator[bytes]:
        """Decompress in bounded chunks: a small bomb can take neither unbounded memory nor
        more than ``max_plain_bytes``."""
        total = 0
        try:
            for chunk in _inflating(payload):
                total += len(chunk)
                if total > self.max_plain_bytes:
                    raise _broken(key, f"it inflates past {self.max_plain_bytes} bytes")
                if chunk:
                    yield chunk
        except zlib.error:
            raise _broken(key, "its compressed payload is damaged") from None

    def _decrypt(
        self, header: Mapping[str, str], head: bytes, payload: bytes, key: str | None
    ) -> bytes:
        kid = header.get("kid")
        if kid is None or "n" not in header:
            raise _damaged(key, "kid" if kid is None else "n", "missing")
        if header["e"] != "aes-256-gcm":
            raise _broken(key, f"it uses cipher {header.get('e')!r}, which this library lacks")
        if self.keyring is None:
            raise DecryptionError(
                f"record {key!r} is encrypted (key id {kid!r}) and this store was opened without "
                f"keys; pass a Keyring or set {KEYS_ENV}. The record exists: it is not absent.",
                session_id=key,
                stored_preview="an encrypted record",
            )
        if kid not in self.keyring.keys:
            raise DecryptionError(
                f"record {key!r} is encrypted with key id {kid!r}, which this store's keyring "
                f"({', '.join(sorted(self.keyring.keys))}) does not hold",
                session_id=key,
                stored_preview="an encrypted record",
            )
        from cryptography.exceptions import InvalidTag

        try:
            nonce = base64.b64decode(header["n"])
            plain: bytes = self._cipher(kid).decrypt(nonce, payload, _aad(head, key or ""))
        except (InvalidTag, ValueError):
            raise DecryptionError(
                f"record {key!r} failed authentication with key id {kid!r}: the bytes were "
                "altered, or they belong to another record",
                session_id=key,
                stored_preview="an encrypted record",
            ) from None
        return plain


def _inflating(payload: bytes) -> Iterator[bytes]:
    inflate = zlib.decompressobj()
    while payload:
        yield inflate.decompress(payload, _INFLATE_CHUNK)
        payload = inflate.unconsumed_tail
    yield inflate.flush()


def _header(body: bytes) -> dict[str, str] | None:
    try:
        return _parts(body, None)[0]
    except UnreadableEnvelopeError:
        return None


def _parts(body: bytes, key: str | None) -> tuple[dict[str, str], bytes, bytes]:
    """A container's header, the header's bytes (bound into the cipher's associated data)
    and the payload. Every header field is a string; anything else is refused by name, as
    ``DecryptionError`` when the container says it is encrypted."""
    start = len(MAGIC) + 2
    size = int.from_bytes(body[len(MAGIC) : start], "big")
    head = body[start : start + size]
    try:
        header = orjson.loads(head)
    except orjson.JSONDecodeError:
        header = None
    if not isinstance(header, dict) or len(head) != size:
        raise _broken(key, "its container header is damaged")
    for name, value in header.items():
        if not isinstance(value, str):
            what = f"{_json_kind(value)}, not a string"
            if "e" in header:
                raise _damaged(key, name, what)
            raise _broken(key, f"its container header is damaged ({name!r} is {what})")
    return header, head, body[start + size :]


def _damaged(key: str | None, field: str, what: str) -> DecryptionError:
    return DecryptionError(
        f"record {key!r} is encrypted, but its container header is damaged: {field!r} is "
        f"{what}. The record exists: it is not absent.",
        session_id=key,
        stored_preview="an encrypted record",
    )


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return "an array" if isinstance(value, list) else "an object"


def _aad(head: bytes, key: str) -> bytes:
    return head + b"\x00" + key.encode("utf-8", "surrogatepass")


def _broken(key: str | None, why: str) -> CheckpointError:
    return UnreadableEnvelopeError(
        f"record {key!r} is present but unreadable: {why}",
        session_id=key,
        stored_preview="a container",
    )
