"""The optional suites skip, saying why, where a backend lacks a capability or an extra is not
installed, and leave the other tests of the class they are mixed into to run."""

from __future__ import annotations

from typing import NamedTuple

import pytest

from agent_checkpoint.testing import ClaimsConformance

pytest_plugins = ["pytester"]

SUITE = """
import sys

import pytest

if {block_cryptography}:
    sys.modules["cryptography"] = None  # as if not installed: importing it fails

from agent_checkpoint import Store
from agent_checkpoint.backends._memory import MemoryBackend
from agent_checkpoint.testing import ClaimsConformance, EncryptionConformance, checkpoint


class FiveOperations:
    # the record operations alone: no namespace(name)
    name = "five"

    def __init__(self):
        self.inner = MemoryBackend()

    def __getattr__(self, name):
        if name in ("load", "head", "save", "drop", "scan", "close"):
            return getattr(self.inner, name)
        raise AttributeError(name)


class TestBackend({suite}):
    @pytest.fixture
    def store(self):
        with Store({backend}()) as store:
            yield store

    def test_of_the_backends_own(self, store):
        assert store.put(checkpoint(), key="k").revision >= 1
"""


class Outcome(NamedTuple):
    lines: pytest.LineMatcher
    passed: int
    skipped: int


CLAIMS_REASON = (
    "*SKIPPED [[]*[]] *: the five backend has no namespace(name) (the Namespaced capability): "
    "claims keep their leases in a namespace"
)
ENCRYPTION_REASON = (
    "*SKIPPED [[]*[]] *: encryption needs the 'cryptography' package, which is not installed "
    "(pip install 'localab-checkpoint[[]encryption[]]')"
)


CLAIMS_TESTS = sum(name.startswith("test_") for name in vars(ClaimsConformance))
ENCRYPTION_TESTS = 15  # one of them parametrized nine ways


def run_suite(
    pytester: pytest.Pytester, suite: str, backend: str, *, block_cryptography: bool
) -> Outcome:
    test = SUITE.format(suite=suite, backend=backend, block_cryptography=block_cryptography)
    pytester.makepyfile(test)
    result = pytester.runpytest_inprocess("-v", "-rs", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*::TestBackend::test_of_the_backends_own PASSED*"])
    found = result.parseoutcomes()
    assert found.get("failed", 0) == found.get("errors", 0) == 0, result.stdout.str()
    return Outcome(result.stdout, found.get("passed", 0), found.get("skipped", 0))


def test_claims_skip_on_a_backend_without_namespaces(pytester: pytest.Pytester) -> None:
    ran = run_suite(pytester, "ClaimsConformance", "FiveOperations", block_cryptography=False)
    ran.lines.fnmatch_lines([CLAIMS_REASON])
    assert (ran.passed, ran.skipped) == (1, CLAIMS_TESTS)


def test_encryption_skips_without_the_cryptography_package(pytester: pytest.Pytester) -> None:
    ran = run_suite(pytester, "EncryptionConformance", "MemoryBackend", block_cryptography=True)
    ran.lines.fnmatch_lines([ENCRYPTION_REASON])
    assert ran.passed == 1 and ran.skipped == ENCRYPTION_TESTS
