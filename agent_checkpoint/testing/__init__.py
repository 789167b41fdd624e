"""Reusable tests for backends: ``StoreConformance`` runs the whole store contract against any
backend. A third-party backend's test module subclasses it and supplies a ``store`` fixture::

    from agent_checkpoint.testing import StoreConformance

    class TestMyBackend(StoreConformance):
        @pytest.fixture
        def store(self):
            with Store(MyBackend(...)) as store:   # empty, isolated namespace
                yield store

``ClaimsConformance`` and ``EncryptionConformance`` add to it, and skip, saying why, on a
backend without namespaces or without the ``cryptography`` package; a ``break_connection(store)``
method lets the suite check that driver faults are translated. docs/backends.md walks through a
whole backend and its test module. Requires pytest (the ``test`` extra).

The same suites run unchanged against an ``AsyncStore`` (of a built-in backend, or of a backend
of yours with an asyncio driver: ``from_url_async``) through ``BlockingStore``, which gives it
the ``Store``'s synchronous face::

    with BlockingStore(open_async_store("myscheme://...")) as store:
        yield store
"""

from ._async import BlockingStore
from ._conformance import (
    AppendingConformance,
    ClaimsConformance,
    EncryptionConformance,
    GrowingHistoryConformance,
    StoreConformance,
    checkpoint,
    stamped,
)

__all__ = [
    "AppendingConformance",
    "BlockingStore",
    "ClaimsConformance",
    "EncryptionConformance",
    "GrowingHistoryConformance",
    "StoreConformance",
    "checkpoint",
    "stamped",
]
