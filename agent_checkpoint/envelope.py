"""The envelope layer, for code that reads or writes stored JSON without a ``Store``.

A store keeps each record as an envelope ``{format, data, savedAt}``: a conversation
(``agent-run-checkpoint/v1``) or a paused run. ``to_envelope`` and ``to_paused_envelope`` wrap a
value, ``check_envelope`` reads any envelope (refusing an unknown format by name),
``read_envelope`` and ``read_paused_run`` read one kind and refuse the other; ``fnv1a`` is the
runtime's content fingerprint (32-bit FNV-1a over UTF-16 code units). Most programs never need
these: ``Store.put`` and ``Store.get`` do the wrapping.

These names were importable from ``agent_checkpoint`` itself up to 0.4; that spelling still
works until 0.6, with a ``DeprecationWarning`` naming this module.
"""

from __future__ import annotations

from ._envelope import (
    Envelope,
    PausedRun,
    check_envelope,
    read_envelope,
    read_paused_run,
    to_envelope,
    to_paused_envelope,
)
from ._model import fnv1a

__all__ = [
    "Envelope",
    "PausedRun",
    "check_envelope",
    "fnv1a",
    "read_envelope",
    "read_paused_run",
    "to_envelope",
    "to_paused_envelope",
]
