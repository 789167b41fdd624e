"""A local TCP port that refuses connections, for breaking a backend's connection."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def refused_port() -> Iterator[int]:
    """A port bound but not listening (so nothing else takes it meanwhile): connecting to it
    is refused at once."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]
