"""What the store's segment layer keeps on a backend, read past the layer: the pieces stored in
its ``segments`` namespace, and the pieces the layout records of some keys name."""

from __future__ import annotations

from typing import Any

from agent_checkpoint._segment_format import Layout
from agent_checkpoint._segments import PIECES
from agent_checkpoint.backends import Query


def live_pieces(backend: Any) -> set[str]:
    return {s.key for s in backend.namespace(PIECES).scan(Query(limit=10_000))}


def referenced(backend: Any, *keys: str) -> set[str]:
    """The pieces the layout records of ``keys`` name."""
    out: set[str] = set()
    for key in keys:
        record = backend.load(key)
        layout = Layout.unpack(record.body) if record else None
        out |= {f"{key}#{piece}" for piece, _ in (layout.pieces if layout else ())}
    return out
