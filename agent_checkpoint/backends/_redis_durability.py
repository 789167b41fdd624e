"""The Redis backend's check, on a store's first operation, that the server keeps its data on
disk, and the warning it gives when the server does not.
"""

from __future__ import annotations

import threading
from typing import Any

from redis.exceptions import ClusterDownError, RedisClusterException, RedisError, ResponseError

from .._caller import warn_caller
from ._redis_connect import Client, is_cluster, store_node

__all__ = ["DurabilityCheck", "VolatileRedisWarning"]


class VolatileRedisWarning(RuntimeWarning):
    """The Redis server keeps no data on disk: a restart loses every checkpoint."""


class DurabilityCheck:
    """Called before each operation of a store; asks the server once it can answer."""

    def __init__(self, client: Client, prefix: str) -> None:
        self._client = client
        self._prefix = prefix
        self.checked = False
        self._lock = threading.Lock()

    def __call__(self) -> None:
        # Not a blocking lock: under ``AsyncStore`` tasks share one thread, and one that
        # waited here for another asking the server would stop the event loop.
        if self.checked or not self._lock.acquire(blocking=False):
            return
        try:
            if not self.checked:
                self._check()
        finally:
            self._lock.release()

    def _check(self) -> None:
        try:
            appendonly, save = self._settings()
        except ClusterDownError:
            return  # a cluster between failovers: ask again on the next operation
        except ResponseError:
            self.checked = True  # CONFIG renamed or denied (managed Redis): cannot tell
            return
        except (RedisError, RedisClusterException):
            return  # unreachable now: the operation itself will report it
        self.checked = True
        if appendonly == "no" and save == "":
            warn_caller(
                f"the Redis server behind store prefix {self._prefix!r} keeps no data on disk "
                "(appendonly no, save ''): a restart loses every checkpoint; enable AOF "
                "(appendonly yes)",
                VolatileRedisWarning,
            )

    def _settings(self) -> tuple[str | None, str | None]:
        """``appendonly`` and ``save`` of the server that holds the store's keys."""
        client: Any = self._client
        if is_cluster(client):  # the primary that owns the prefix's slot
            node = store_node(client, self._prefix)
            replies = [
                client.config_get(name, target_nodes=node) for name in ("appendonly", "save")
            ]
        else:
            pipe = client.pipeline(transaction=False)  # one round trip
            pipe.config_get("appendonly")
            pipe.config_get("save")
            replies = pipe.execute()
        return replies[0].get("appendonly"), replies[1].get("save")
