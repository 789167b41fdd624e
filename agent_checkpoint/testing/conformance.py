"""The store contract as tests, run against every backend (see the package docstring)."""

from __future__ import annotations

from ._samples import checkpoint, stamped
from .claims import ClaimsConformance
from .encryption import EncryptionConformance
from .growth import AppendingConformance, GrowingHistoryConformance
from .record_contract import _RecordContract
from .store_contract import _StoreContract
from .writer_contract import _WriterContract

__all__ = [
    "AppendingConformance",
    "ClaimsConformance",
    "EncryptionConformance",
    "GrowingHistoryConformance",
    "StoreConformance",
    "checkpoint",
    "stamped",
]


class StoreConformance(_StoreContract, _RecordContract, _WriterContract, GrowingHistoryConformance):
    """The whole store contract. Subclass and provide a ``store`` fixture yielding an empty
    ``Store``, and ``break_connection(store)`` to check that driver faults are translated (the
    test skips without it); add ``ClaimsConformance`` and ``EncryptionConformance``: they skip,
    saying why, on a backend without namespaces or without the ``cryptography`` package."""
