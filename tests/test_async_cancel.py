"""A cancelled ``AsyncStore`` call on every backend: what it may leave, and what it must never
do (land over a put acknowledged after it). The asyncio drivers' cancellations at each await
are in ``test_async_tasks.py``; the campaign at random instants is ``stress/cancel.py``."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.store_urls import store_url

from agent_checkpoint import Store
from agent_checkpoint._async_store import open_async_store
from agent_checkpoint.testing import checkpoint

THREADED = ["memory", "disk", "s3", "fsspec"]  # the backends AsyncStore runs on its threads


@pytest.fixture(params=THREADED)
def threaded(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[str, dict[str, Any]]]:
    with store_url(request.param, request, tmp_path) as found:
        yield found


def test_a_put_cancelled_on_the_store_threads_never_lands_over_the_next_acknowledged_put(
    threaded: tuple[str, dict[str, Any]],
) -> None:
    """The caller of a put gives up (a timeout, a closed request) while the put runs on a
    thread, which cannot be stopped; it then puts again and is told that put landed. The
    abandoned put used to finish afterwards and replace the acknowledged one (3 of 60 trials
    on disk): its caller must not hear of the cancellation before it has finished."""
    url, options = threaded
    started, go_on, finished = threading.Event(), threading.Event(), threading.Event()

    def abandoned_put(store: Store) -> None:
        started.set()
        go_on.wait(30)
        try:
            store.put(checkpoint("abandoned"), key="k")
        finally:
            finished.set()

    async def scenario() -> str:
        loop = asyncio.get_running_loop()
        async with open_async_store(url, **options) as store:
            await store.put(checkpoint("first"), key="k")
            task = asyncio.create_task(store.call(abandoned_put))
            await loop.run_in_executor(None, started.wait, 30)
            task.cancel()
            # the abandoned put goes on a moment later: after the next put, unless the
            # cancellation waits for it
            loop.call_later(0.2, go_on.set)
            with pytest.raises(asyncio.CancelledError):
                await task
            await store.put(checkpoint("acknowledged"), key="k")
            go_on.set()
            await loop.run_in_executor(None, finished.wait, 30)
            got = await store.get("k")
            assert got is not None
            return got.run_id

    assert asyncio.run(scenario()) == "acknowledged"
