from collections.abc import Iterator

import pytest

from agent_checkpoint import Store, open_store
from agent_checkpoint.testing import ClaimsConformance, EncryptionConformance, StoreConformance


class TestMemoryStore(StoreConformance, ClaimsConformance, EncryptionConformance):
    @pytest.fixture
    def store(self) -> Iterator[Store]:
        with open_store("memory://") as store:
            yield store
