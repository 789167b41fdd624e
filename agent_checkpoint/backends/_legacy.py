"""Records that version 0.4 stored in segments: a head (the record's bytes less its history)
and history segments beside it, in each backend's own layout. The backends still read them
(a store upgraded from 0.4 keeps access to its records before ``agent-checkpoint migrate``
rewrites them whole), assembled here, by one rule.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._codec import join_parts

__all__ = ["assemble"]


def assemble(head: bytes, segments: Sequence[bytes] | None, tail: bytes = b"") -> bytes:
    """The bytes of a record stored as ``head`` and history ``segments`` (``tail``: newest
    history the head held apart). ``None`` for a lost segment: the head alone, which does not
    decode, so the record reads as unreadable rather than as a shorter history."""
    if segments is None:
        return head
    return join_parts(head, b",".join(part for part in (*segments, tail) if part))
