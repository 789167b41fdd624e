"""Where the test suite finds its servers, and what it does when one is missing."""

from __future__ import annotations

import os
import socket

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
