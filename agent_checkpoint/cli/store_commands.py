"""Store commands (filled in next)."""

from __future__ import annotations

from typing import Any


def register(sub: Any) -> None:
    del sub
