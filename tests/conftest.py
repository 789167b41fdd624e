"""Session fixtures shared by the test modules (servers the suite starts itself)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from support.services import IN_CI, service_missing

LONGEST = [
    # the tests that take minutes on 2 cores (see --durations), in pairs of about equal length:
    # scripts/test hands each worker two tests to start with (--maxschedchunk 1), then one
    # at a time, so each pair starts at once on a worker of its own
    "test_resume_race.py::test_eight_workers_resume_every_failed_run_exactly_once[s3]",
    "test_resume_race.py::test_eight_workers_resume_every_failed_run_exactly_once[redis]",
    "test_s3_backend.py::test_newest_100_of_3000_and_paging_all_while_a_writer_adds_newer",
    "test_resume_race.py::test_eight_workers_resume_every_failed_run_exactly_once[postgres]",
    "test_copy_between_backends.py::test_copy_to_a_network_backend_and_back_is_lossless[redis]",
    "test_resume_race.py::test_eight_workers_resume_every_failed_run_exactly_once[disk]",
    "test_copy_between_backends.py::test_copy_to_a_network_backend_and_back_is_lossless[postgres]",
    "test_copy_between_backends.py::test_copy_to_a_network_backend_and_back_is_lossless[s3]",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Start the long tests first (``LONGEST``, then the rest marked ``slow``): with the
    parallel workers ``scripts/test`` runs, they then overlap the many short ones instead of
    running alone at the end. The sort is stable and the same in every worker, as
    pytest-xdist requires."""
    order = {name: n for n, name in enumerate(LONGEST)}

    def rank(item: pytest.Item) -> tuple[int, bool]:
        test_id = item.nodeid.rpartition("/")[2]
        return order.get(test_id, len(order)), item.get_closest_marker("slow") is None

    items.sort(key=rank)


# -- one S3 server for every worker ----------------------------------------------------------
# A SeaweedFS server (`weed mini`: master, volume, filer and S3 in one process) per xdist worker
# loaded the 2 cores enough to triple the S3 tests' times. Under xdist the controller starts one
# when the first worker starts, hands its address to every worker, and stops it at the end;
# tests keep apart by unique buckets and prefixes, as they always did.


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
