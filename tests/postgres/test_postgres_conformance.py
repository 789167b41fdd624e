"""The PostgreSQL backend against the shipped conformance suites: the store, claims and
encryption contracts, and the same through a segment layer that keeps every history in pieces."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager

import pytest
from support.postgres_store import (
    in_pieces,
    open_pg,
    refusing,
)

from agent_checkpoint import Store
from agent_checkpoint.testing import (
    AppendingConformance,
    ClaimsConformance,
    EncryptionConformance,
    StoreConformance,
)


class TestPostgresStore(StoreConformance, ClaimsConformance, EncryptionConformance):
    """The backend as a Store opens it: growing histories go through the segment layer."""

    @pytest.fixture
    def store(self, schema: str) -> Iterator[Store]:
        with open_pg(schema) as store:
            store.setup()
            yield store

    def break_connection(self, store: Store) -> AbstractContextManager[None]:
        return refusing(store)


class TestPostgresStoreInPieces(StoreConformance, AppendingConformance):
    """The segment layer at its lowest thresholds: every put past the first moves history
    into pieces on the server, and merges them."""

    @pytest.fixture
    def store(self, schema: str) -> Iterator[Store]:
        with open_pg(schema) as store:
            store.setup()
            with in_pieces(store) as pieces:
                yield pieces

    def break_connection(self, store: Store) -> AbstractContextManager[None]:
        return refusing(store)
