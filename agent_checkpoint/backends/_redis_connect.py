"""How the Redis backend reaches its server (``_redis.py`` holds the backend): the client
``from_url`` builds, on one server or a Redis Cluster, which of redis-py's options a URL and
keywords may carry beside the store's own (``SCHEMES["redis"]``), and which of redis-py's
errors are transient.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import redis
import redis.asyncio
from redis._parsers.encoders import Encoder
from redis.asyncio.client import Pipeline as AsyncPipeline
from redis.asyncio.cluster import ClusterPipeline as AsyncClusterPipeline
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.commands.core import AsyncScript
from redis.connection import PythonRespSerializer
from redis.exceptions import (
    AskError,
    ClusterDownError,
    MovedError,
    ReadOnlyError,
    RedisClusterException,
    RedisError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from .._bridge import Awaiting, await_only
from ..errors import InvalidKeyError
from ._base import translate_errors
from ._url_options import DEFAULT_WAIT_TIMEOUT, SCHEMES, Given

__all__ = [
    "DEFAULT_WAIT_TIMEOUT",
    "FATAL",
    "TRANSIENT",
    "AsyncClient",
    "Client",
    "connect",
    "is_cluster",
    "node_client",
    "refresh_topology",
    "store_node",
]

Client = redis.Redis | RedisCluster

# A cluster that lost a node answers CLUSTERDOWN, or leaves slots uncovered, until a replica
# takes over: transient, like a refused connection.
# MOVED and ASK reach the backend only from a node it addressed itself (a write that
# waits for replicas runs on its slot's node): after ``refresh_topology`` a retry finds
# the new owner (tested by resharding a slot under an open store).
TRANSIENT = (
    RedisConnectionError,
    RedisTimeoutError,
    TryAgainError,
    ReadOnlyError,
    ClusterDownError,
    SlotNotCoveredError,
    MovedError,
    AskError,
)
FATAL = (RedisError, RedisClusterException)  # the cluster client's own errors are no RedisError


def misconfigured(exc: BaseException) -> bool:
    """Whether the server refused the URL's settings (a database number it does not have),
    which no retry mends."""
    return "DB index is out of range" in str(exc)


DEFAULT_SOCKET_TIMEOUT = 10.0
"""Seconds redis-py waits for a reply unless the URL or the caller sets ``socket_timeout``."""

ASYNC_MAX_CONNECTIONS = 20
"""Connections an ``AsyncStore``'s client opens at most (``max_connections`` sets it): the store
runs as many calls at once, and the others wait their turn."""

OPTIONS = SCHEMES["redis"]


def connect(
    url: str, options: dict[str, Any], *, client: Any = None, asynchronous: bool = False
) -> tuple[Any, Given]:
    """A new client for ``url`` (``from_url`` owns it), or the ready ``client``, and the
    options of the URL's query and ``options`` (``SCHEMES["redis"]``, then redis-py's
    connection options). ``asynchronous``: a ``redis.asyncio`` client, with the same options."""
    scheme = urlsplit(url).scheme

    def driver(ours: Mapping[str, Any]) -> frozenset[str]:
        return _query_options(scheme) | _client_options(ours["cluster"], asynchronous)

    given = OPTIONS.read(
        url, options, client=client, driver_url=_query_options(scheme), driver_keywords=driver
    )
    if client is not None:
        return client, given
    options = dict(given.keywords)
    read = _seconds(options.get("socket_timeout", dict(given.query).get("socket_timeout")))
    wait = given["wait_timeout"]
    if given["wait_replicas"] and read is not None and wait >= read:
        raise InvalidKeyError(
            f"redis option wait_timeout ({wait:g} s) must be below socket_timeout ({read:g} s): "
            "a longer wait for replicas would read as a lost connection"
        )
    return _client(given.driver_url(), options, given["cluster"], asynchronous), given


def _client(url: str, options: dict[str, Any], cluster: bool, asynchronous: bool) -> Any:
    """A redis-py client of ``url``, with ``options`` and the library's defaults."""
    # The Store's tenacity policy governs retries; redis-py's own would hide outages.
    options.setdefault("retry", (AsyncRetry if asynchronous else Retry)(NoBackoff(), 0))
    options.setdefault("retry_on_error", [])
    options.setdefault("socket_connect_timeout", 5.0)
    options.setdefault("socket_timeout", DEFAULT_SOCKET_TIMEOUT)
    options["decode_responses"] = False
    if not asynchronous:
        # hiredis parses replies fast, but its command packer copies every argument into one
        # buffer: 2 ms for a 1.3 MB segment, which redis-py's own packer sends as it is.
        options.setdefault(
            "command_packer",
            PythonRespSerializer(6000, Encoder("utf-8", "strict", False).encode),  # type: ignore[no-untyped-call]
        )
    with translate_errors(
        "redis", "connect", transient=TRANSIENT, fatal=FATAL, misconfigured=misconfigured
    ):
        # A cluster client finds every node from this one; all of a store's keys share the
        # {prefix} hash tag, so each operation still goes to one node, in one round trip.
        if asynchronous and cluster:
            return AsyncRedisCluster.from_url(url, **options)
        if asynchronous:
            # Tasks are not bounded as threads are: the AsyncStore runs at most this many
            # calls at once (each holds one connection at a time), and the others wait for
            # their turn before any work (redis-py's BlockingConnectionPool would make them
            # wait here too, at ~50 us a command of its own).
            options.setdefault("max_connections", ASYNC_MAX_CONNECTIONS)
            return redis.asyncio.Redis.from_url(url, **options)
        made = RedisCluster.from_url if cluster else redis.Redis.from_url
        return made(url, **options)


class AsyncClient(Awaiting):
    """A ``redis.asyncio`` client with the synchronous client's face, for a backend that
    ``AsyncStore`` runs (``_bridge.py``): each command is awaited on the store's event loop."""

    __slots__ = ("_nodes",)

    def __init__(self, client: Any) -> None:
        super().__init__(client, (AsyncPipeline, AsyncScript, AsyncClusterPipeline))
        object.__setattr__(self, "_nodes", {})

    def node(self, node: Any) -> AsyncClient:
        """A client of one cluster ``node`` alone (made once per node)."""
        found: AsyncClient | None = self._nodes.get(node.name)
        if found is None:
            pool = redis.asyncio.ConnectionPool(
                connection_class=node.connection_class, **node.connection_kwargs
            )
            found = self._nodes[node.name] = AsyncClient(redis.asyncio.Redis.from_pool(pool))
        return found

    def close(self) -> None:
        for client in self._nodes.values():
            client.close()
        await_only(self.target.aclose())


def _seconds(value: object) -> float | None:
    """A ``socket_timeout`` as given (unset: ours); ``None`` when it sets no limit, or is not a
    number (redis-py refuses that when it connects)."""
    if value is None:
        return DEFAULT_SOCKET_TIMEOUT
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def is_cluster(client: Any) -> bool:
    """Whether ``client`` talks to a Redis Cluster (a ``RedisCluster``, or an ``AsyncClient``
    over ``redis.asyncio``'s)."""
    return isinstance(client, RedisCluster) or isinstance(
        getattr(client, "target", None), AsyncRedisCluster
    )


def store_node(client: Any, prefix: str) -> Any:
    """The cluster node that holds a store's keys: they all share the ``{prefix}`` hash tag."""
    return client.get_node_from_key("{" + prefix + "}")


def node_client(client: Any, prefix: str) -> Any:
    """A client of the store's own node, on a cluster (whose pipelines refuse scripts); else
    ``client`` itself."""
    if isinstance(client, RedisCluster):
        return client.get_redis_connection(store_node(client, prefix))
    if isinstance(client, AsyncClient) and is_cluster(client):
        return client.node(store_node(client, prefix))
    return client


def load_topology(client: Any) -> None:
    """Load an asyncio cluster client's slot map before the store's first command (a no-op
    once loaded, and for any other client). redis-py routes a command sent before it knows
    the map by a default policy, to any node; that node's MOVED replies make it close every
    connection and load the map again, under the commands other tasks are sending. 32
    concurrent first puts on a new store failed 15-30 of 32 so."""
    if isinstance(client, AsyncClient) and is_cluster(client):
        await_only(client.target.initialize())  # under redis-py's own lock: tasks wait once


def refresh_topology(client: Any) -> None:
    """Ask a cluster for its slot map again. redis-py does so after a failed single command,
    but not after a failed pipeline, and its own retries are off (the Store's govern): without
    this, a store keeps sending to a dead primary after its replica took over. Best effort:
    a cluster that cannot answer now is asked again after the next failure."""
    if isinstance(client, RedisCluster):
        with contextlib.suppress(*TRANSIENT, *FATAL):
            client.nodes_manager.initialize()
    elif isinstance(client, AsyncClient) and is_cluster(client):
        with contextlib.suppress(*TRANSIENT, *FATAL):
            await_only(client.target.nodes_manager.initialize())


@functools.cache
def _client_options(cluster: bool, asynchronous: bool) -> frozenset[str]:
    """Keyword options redis-py's client takes beyond its connections' (``_query_options``):
    its connection pool's, and a cluster client's own."""
    pool = redis.asyncio.ConnectionPool if asynchronous else redis.ConnectionPool
    makers: list[Any] = [pool.__init__]
    if cluster:
        makers.append((AsyncRedisCluster if asynchronous else RedisCluster).__init__)
    names = {"single_connection_client"}
    for maker in makers:
        names.update(inspect.signature(maker).parameters)
    return frozenset(names - {"self", "kwargs", "connection_kwargs"})


@functools.cache
def _query_options(scheme: str) -> frozenset[str]:
    """What a redis URL's query may set beside ours: what redis-py passes on to the connection
    class of the scheme (an option it does not know fails only at the first command)."""
    kind = {
        "rediss": redis.connection.SSLConnection,
        "unix": redis.connection.UnixDomainSocketConnection,
    }
    names = set(redis.connection.URL_QUERY_ARGUMENT_PARSERS)
    for cls in kind.get(scheme, redis.connection.Connection).__mro__:
        if "__init__" in cls.__dict__:
            names.update(inspect.signature(cls.__dict__["__init__"]).parameters)
    return frozenset(names - {"self", "args", "kwargs"})
