"""The store an integration's async methods run on, for what its user gave it: a store URL,
a ``Store`` or an ``AsyncStore``. Shared by the integrations; public API only."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from agent_checkpoint import (
    AsyncStore,
    InvalidArgumentError,
    Store,
    open_async_store,
    open_store,
)

T = TypeVar("T")
S = TypeVar("S", bound="OnStore")

THREADS = 4
"""Threads an integration runs a ``Store`` it was given (or memory://) on."""


def async_store_of(
    store: str | Store | AsyncStore, options: Mapping[str, Any], sync: Callable[[], Store]
) -> AsyncStore:
    """``store`` itself when it is an ``AsyncStore``; for a URL, ``open_async_store`` (the
    asyncio drivers where the backend has them); for a ``Store``, or for memory:// (each
    opening of which is a new, empty store, so the two sides must share one), ``sync()`` on
    threads of its own. A given store is never closed by an integration."""
    if isinstance(store, AsyncStore):
        return store
    if isinstance(store, str) and not store.startswith("memory:"):
        return open_async_store(store, **options)
    if isinstance(store, (str, Store)):
        return AsyncStore.over(sync(), threads=THREADS)
    raise InvalidArgumentError(
        f"store must be a store URL, an AsyncStore or a Store, not {store!r}"
    )


def check_options(store: object, options: Mapping[str, Any]) -> None:
    """``store`` is a URL or a store, and store options go with a URL only: a store given is
    already open."""
    if not isinstance(store, (str, Store, AsyncStore)):
        raise InvalidArgumentError(
            f"store must be a store URL, an AsyncStore or a Store, not {store!r}"
        )
    if not isinstance(store, str) and options:
        raise InvalidArgumentError("store options go with a store URL, not a store")


async def settled(awaitable: Awaitable[T]) -> T:
    """The outcome of a write, awaited to its end even when the caller is cancelled (then
    ``CancelledError`` is raised after it): the integration then knows what is stored."""
    task = asyncio.ensure_future(awaitable)
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError as exc:
            cancelled = cancelled or exc
    if cancelled is not None:
        if not task.cancelled():
            task.exception()  # retrieved: not logged as never retrieved
        raise cancelled
    return task.result()


class OnStore:
    """An integration object's store, from what its user gave it (``async_store_of``): a
    store URL (then opened here, with ``store_options``, and closed by ``close``), a ``Store``
    or an ``AsyncStore`` (never closed here: it is the caller's)."""

    def __init__(self, store: str | Store | AsyncStore, store_options: Mapping[str, Any]) -> None:
        check_options(store, store_options)
        self._owns = isinstance(store, str)
        self._store = async_store_of(
            store,
            store_options,
            lambda: store if isinstance(store, Store) else open_store(str(store), **store_options),
        )

    @property
    def store(self) -> AsyncStore:
        """The store this object runs on."""
        return self._store

    async def close(self) -> None:
        """Close the store this object opened from a URL (a store given to it stays open)."""
        if self._owns:
            await self._store.close()

    async def __aenter__(self: S) -> S:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
