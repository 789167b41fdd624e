"""Ordered upgrade steps for stored checkpoints, applied on read.

``STEPS[n]`` upgrades a version-``n`` document to version ``n + 1``. Each step is a pure function
of a plain dict (the decoded ``data`` of an envelope) and returns a new dict; it never touches a
store. Reads run the chain up to ``CHECKPOINT_VERSION`` automatically; ``agent-checkpoint
migrate`` rewrites a whole store. A document of a version the chain cannot reach (newer than the library, or older than its
first step) is refused by name, listing the versions it reads.

The real v1 format has no predecessor, so ``STEPS`` is empty; tests prove the mechanism with a
``Migrations`` of their own (a test-only format and step), which every reader accepts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from .._model import CHECKPOINT_VERSION
from ..errors import InvalidCheckpointError, MigrationError

__all__ = ["DEFAULT", "STEPS", "Migrations", "Step"]

Step = Callable[[dict[str, Any]], dict[str, Any]]

STEPS: Mapping[int, Step] = MappingProxyType({})


@dataclass(frozen=True)
class Migrations:
    """A chain of steps ending at ``current``, the version this reader's door accepts."""

    steps: Mapping[int, Step]
    current: int = CHECKPOINT_VERSION

    def __post_init__(self) -> None:
        for version in self.steps:
            if version >= self.current:
                raise MigrationError(
                    f"step {version} -> {version + 1} goes past version {self.current}"
                )

    @property
    def readable(self) -> tuple[int, ...]:
        """Every version this chain reads: ``current`` and each one with an unbroken path to it."""
        versions = [self.current]
        while versions[0] - 1 in self.steps:
            versions.insert(0, versions[0] - 1)
        return tuple(versions)

    def needs_upgrade(self, doc: Any) -> bool:
        version = doc.get("version") if isinstance(doc, dict) else None
        return isinstance(version, int) and not isinstance(version, bool) and version < self.current

    def upgrade(self, doc: Any) -> Any:
        """``doc`` at version ``current``. Anything without an integer version is returned as
        is, for the door to refuse with the runtime's own message."""
        version = doc.get("version") if isinstance(doc, dict) else None
        if not isinstance(version, int) or isinstance(version, bool) or version == self.current:
            return doc
        if version not in self.readable:
            raise InvalidCheckpointError(
                f"[resumeOnError] unsupported checkpoint version: {version}. This library reads "
                f"checkpoint versions {', '.join(map(str, self.readable))}; a checkpoint written "
                "by another version needs a reader with a migration path for it."
            )
        while version < self.current:
            step = self.steps[version]
            doc = step(dict(doc))
            new_version = doc.get("version")
            if new_version != version + 1:
                raise MigrationError(
                    f"migration step {version} -> {version + 1} produced version {new_version!r}"
                )
            version = new_version
        return doc


DEFAULT = Migrations(STEPS, CHECKPOINT_VERSION)
