"""Optional suites skip, saying why, where a backend lacks what they test."""

from __future__ import annotations

import pytest

from .._store import Store
from ..backends._base import Namespaced


def declared_by(request: pytest.FixtureRequest, suite: type) -> bool:
    """Whether the running test is one of ``suite``'s own: an autouse fixture of a mixin
    runs for every test of the class it is mixed into."""
    return str(request.function.__qualname__).startswith(f"{suite.__qualname__}.")


def skip_without_namespaces(store: Store) -> None:
    backend = store.backend
    if not isinstance(backend, Namespaced):
        pytest.skip(
            f"the {backend.name} backend has no namespace(name) (the Namespaced capability): "
            "claims keep their leases in a namespace"
        )


def skip_without_cryptography() -> None:
    pytest.importorskip(
        "cryptography",
        reason="encryption needs the 'cryptography' package, which is not installed "
        "(pip install 'localab-checkpoint[encryption]')",
    )
