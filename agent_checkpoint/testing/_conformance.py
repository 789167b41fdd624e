"""The store contract as tests, run against every backend (see the package docstring)."""

from __future__ import annotations

from ._claims import ClaimsConformance
from ._encryption import EncryptionConformance
from ._growth import AppendingConformance, GrowingHistoryConformance
from ._record_contract import _RecordContract
from ._samples import checkpoint, stamped
from ._store_contract import _StoreContract
from ._writer_contract import _WriterContract

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
