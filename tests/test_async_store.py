"""``AsyncStore`` on every backend, each on its real server: the shipped suites run unchanged
through ``BlockingStore``, and what only an async store can get wrong (the event loop, tasks,
cancellation) is tested here with real tasks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.store_urls import store_url

from agent_checkpoint._async_store import open_async_store
from agent_checkpoint.testing import (
    BlockingStore,
    ClaimsConformance,
    EncryptionConformance,
    StoreConformance,
)

pytestmark = pytest.mark.filterwarnings("ignore::agent_checkpoint.backends.VolatileRedisWarning")

BACKENDS = ["memory", "disk", "redis", "postgres", "s3", "fsspec"]


@pytest.fixture(params=BACKENDS)
def backend_url(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[str, dict[str, Any]]]:
    with store_url(request.param, request, tmp_path) as found:
        yield found


class TestAsyncStore(StoreConformance, ClaimsConformance, EncryptionConformance):
    """The shipped suites against ``AsyncStore`` on each backend."""

    @pytest.fixture
    def store(self, backend_url: tuple[str, dict[str, Any]]) -> Iterator[Any]:
        url, options = backend_url
        with BlockingStore(open_async_store(url, **options)) as store:
            store.setup()
            yield store
