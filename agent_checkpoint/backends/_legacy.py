"""Records that version 0.4 stored in segments: a head (the record's bytes less its history)
and history segments beside it, in each backend's own layout. The backends still read them
(a store upgraded from 0.4 keeps access to its records before ``agent-checkpoint migrate``
rewrites them whole), assembled here, by one rule. A backend that may hold them says which
records are stored so (``OldLayouts``): ``migrate`` rewrites those whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from .._codec import join_parts

__all__ = ["OldLayouts", "assemble", "whole_body", "with_inline"]


@runtime_checkable
class OldLayouts(Protocol):
    """Optional: a backend whose store may hold records as version 0.4 stored them."""

    def in_old_layout(self, key: str) -> bool:
        """Whether ``key``'s record is stored as version 0.4 stored it (in segments)."""
        ...


def assemble(head: bytes, segments: Sequence[bytes] | None, tail: bytes = b"") -> bytes:
    """The bytes of a record stored as ``head`` and history ``segments`` (``tail``: newest
    history the head held apart). ``None`` for a lost segment: the head alone, which does not
    decode, so the record reads as unreadable rather than as a shorter history."""
    if segments is None:
        return head
    return join_parts(head, b",".join(part for part in (*segments, tail) if part))


def whole_body(body: Any, head: Any, count: Any, segments: Sequence[bytes] | None) -> Any:
    """A record's stored bytes: ``body``, or for one version 0.4 stored in segments (no
    ``body``, a ``head``), its head with ``segments`` assembled, if there are as many as the
    ``count`` it had (else one is lost: the head alone)."""
    if body or head is None:
        return body
    whole = segments is not None and count is not None and len(segments) == int(count)
    return assemble(head, segments if whole else None)


def with_inline(fields: dict[str, Any], body: bytes, segments: Sequence[bytes]) -> bytes:
    """The bytes of a record the object stores (S3, fsspec) kept in ``segments``: its head
    (``body`` less the ``inl`` bytes of newest history it held inline) with the history
    joined in."""
    inline = fields.get("inl")
    cut = inline if isinstance(inline, int) and 0 < inline <= len(body) else 0
    return assemble(body[: len(body) - cut], segments, body[len(body) - cut :])
