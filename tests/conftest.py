"""Session fixtures shared by the test modules (servers the suite starts itself)."""

from __future__ import annotations

import pytest

# one S3 server for every xdist worker: its hooks and fixture, shared with the plugin that runs
# the frameworks' own suites
from support.shared_s3 import pytest_configure_node, pytest_unconfigure, s3_server

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


__all__ = ["pytest_configure_node", "pytest_unconfigure", "s3_server"]
