"""The store contract as tests, run against every backend (see the package docstring)."""

from __future__ import annotations

from ._samples import checkpoint, stamped
from .claims import ClaimsConformance
from .encryption import EncryptionConformance
from .growth import AppendingConformance, GrowingHistoryConformance
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


class StoreConformance(_StoreContract, _WriterContract, GrowingHistoryConformance):
    """The whole store contract. Subclass and provide a ``store`` fixture yielding an empty
    ``Store``; add ``ClaimsConformance`` and ``EncryptionConformance`` where supported."""
