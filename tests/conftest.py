"""Session fixtures shared by the test modules (servers the suite starts itself)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.services import IN_CI, service_missing


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Start the long tests (marked ``slow``) first: with the parallel workers ``scripts/test``
    runs, they then overlap the many short ones instead of running alone at the end. The sort
    is stable and the same in every worker, as pytest-xdist requires."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A SeaweedFS S3 server for the whole session (moto only as a local fallback)."""
    from support.seaweed import S3Unavailable, start_s3_server

    try:
        server = start_s3_server(tmp_path_factory.mktemp("seaweedfs"), in_ci=IN_CI)
    except S3Unavailable as exc:
        service_missing("S3 (SeaweedFS)", str(exc))
    yield server
    server.stop()
