"""Shared fixtures: reaching real services, and failing (not skipping) in CI when one is missing."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
POSTGRES_URL = os.environ.get("TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def port_open(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def service_missing(name: str, reason: str) -> None:
    """Skip locally with the reason; fail in CI, where every service must be there."""
    message = f"{name} is not reachable: {reason}"
    if IN_CI:
        pytest.fail(f"{message} (CI=true: a missing service is a failure; run scripts/services.sh)")
    pytest.skip(message)


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
