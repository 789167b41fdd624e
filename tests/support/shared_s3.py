"""One S3 server for every pytest-xdist worker: the hooks and the ``s3_server`` fixture, for
tests/conftest.py and for the plugin that runs the frameworks' own suites
(support/framework_suites.py).

A SeaweedFS server (`weed mini`: master, volume, filer and S3 in one process) per xdist worker
loaded the 2 cores enough to triple the S3 tests' times. Under xdist the controller starts one
when the first worker starts, hands its address to every worker, and stops it at the end;
tests keep apart by unique buckets and prefixes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from support.services import IN_CI, service_missing


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    config = node.config
    if not hasattr(config, "_shared_s3"):
        from support.seaweed import S3Unavailable, start_s3_server

        try:
            config._shared_s3 = start_s3_server(
                config._tmp_path_factory.mktemp("seaweedfs-shared"), in_ci=IN_CI
            )
        except S3Unavailable as exc:
            config._shared_s3 = str(exc)
    shared = config._shared_s3
    node.workerinput["s3_server"] = (
        shared if isinstance(shared, str) else [shared.endpoint_url, shared.port, shared.kind]
    )


def pytest_unconfigure(config: pytest.Config) -> None:
    shared = getattr(config, "_shared_s3", None)
    if shared is not None and not isinstance(shared, str):
        shared.stop()


@pytest.fixture(scope="session")
def s3_server(
    tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[object]:
    """A SeaweedFS S3 server for the whole session (moto only as a local fallback): the
    controller's under xdist, else one started here."""
    from support.seaweed import S3Server, S3Unavailable, start_s3_server

    shared = getattr(pytestconfig, "workerinput", {}).get("s3_server")
    if isinstance(shared, str):
        service_missing("S3 (SeaweedFS)", shared)
    if shared is not None:
        endpoint_url, port, kind = shared
        yield S3Server(endpoint_url, port, kind)  # the controller stops it
        return
    try:
        server = start_s3_server(tmp_path_factory.mktemp("seaweedfs"), in_ci=IN_CI)
    except S3Unavailable as exc:
        service_missing("S3 (SeaweedFS)", str(exc))
    yield server
    server.stop()
