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

import pytest

# Before the suites are imported: their plain asserts then report the values compared (a
# list of the errors writers met, say), as a test module's do, not a bare AssertionError.
_SUITES = (
    "_claims",
    "_encryption",
    "_growth",
    "_record_contract",
    "_store_contract",
    "_writer_contract",
)
pytest.register_assert_rewrite(*(f"{__name__}.{name}" for name in _SUITES))

from ._async import BlockingStore  # noqa: E402
from ._conformance import (  # noqa: E402
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
