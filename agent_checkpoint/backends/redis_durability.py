"""The Redis backend's check, on a store's first operation, that the server keeps its data on
disk, and the warning it gives when the server does not.
"""

from __future__ import annotations

import threading
import warnings

import redis
from redis.exceptions import RedisError, ResponseError

__all__ = ["DurabilityCheck", "VolatileRedisWarning"]


class VolatileRedisWarning(RuntimeWarning):
    """The Redis server keeps no data on disk: a restart loses every checkpoint."""


class DurabilityCheck:
    """Called before each operation of a store; asks the server once it can answer."""

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self._client = client
        self._prefix = prefix
        self.checked = False
        self._lock = threading.Lock()

    def __call__(self) -> None:
        if self.checked:
            return
        with self._lock:
            if self.checked:
                return
            try:
                pipe = self._client.pipeline(transaction=False)  # one round trip
                pipe.config_get("appendonly")
                pipe.config_get("save")
                replies = pipe.execute()
                appendonly, save = replies[0].get("appendonly"), replies[1].get("save")
            except ResponseError:
                self.checked = True  # CONFIG renamed or denied (managed Redis): cannot tell
                return
            except RedisError:
                return  # unreachable now: the operation itself will report it
            self.checked = True
            if appendonly == "no" and save == "":
                warnings.warn(
                    f"the Redis server behind store prefix {self._prefix!r} keeps no data on disk "
                    "(appendonly no, save ''): a restart loses every checkpoint; enable AOF "
                    "(appendonly yes)",
                    VolatileRedisWarning,
                    stacklevel=3,
                )
