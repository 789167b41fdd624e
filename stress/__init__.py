"""Reliability campaigns: crash, faults, races, graph races, cancel, fuzz and exits (see
RELIABILITY.md).

Each campaign is a module that runs bounded from pytest (``tests/test_campaigns.py``) and at
full size by hand::

    python -m stress.crash  [--backend disk,redis,postgres,s3] [--trials N]
    python -m stress.faults [--backend redis,postgres,s3] [--cycles N]
    python -m stress.races  [--backend disk,redis,postgres,s3] [--rounds N]
    python -m stress.graph_races [--backend disk,redis,postgres,s3] [--rounds N]
    python -m stress.cancel [--backend disk,memory,redis,postgres,s3,fsspec] [--trials N]
    python -m stress.fuzz   [--inputs N]
    python -m stress.exits  [--backend disk,redis,postgres] [--trials N]

and prints a figures table. The server helpers come from ``tests/support``.
"""

import sys
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parents[1] / "tests")
if _TESTS not in sys.path:  # the server helpers (support.*) live in tests/support
    sys.path.insert(0, _TESTS)
