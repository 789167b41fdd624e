"""A process that uses stores on PostgreSQL and Redis the way an agent service does, and leaves
every one of them open when it ends: sync stores, async stores awaited from the main loop and
from ``asyncio.run`` in threads, and Agents SDK sessions made from a URL. Run as::

    python -m support.leave_open URL [URL...] [ROUNDS]

It prints ``done`` as its last act; the process must then exit, on its own.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Sequence

from agent_checkpoint import AsyncStore, Message, RunCheckpoint, open_async_store, open_store
from agent_checkpoint.integrations.openai_agents import AgentCheckpointSession


def item(n: int) -> RunCheckpoint:
    return RunCheckpoint.new("task", (Message("user", f"m{n}"),), run_id=f"leave-open-{n}")


def main(argv: Sequence[str]) -> int:
    urls, rounds = (argv[:-1], int(argv[-1])) if argv[-1].isdigit() else (argv, 20)
    kept: list[object] = []
    for url in urls:
        store = open_store(url)
        store.put(item(0))
        kept.append(store)
        shared = open_async_store(url)
        kept.append(shared)

        async def load(offset: int, url: str = url, shared: AsyncStore = shared) -> None:
            session = AgentCheckpointSession(f"leave-open-{offset}", url)
            kept.append(session)
            await asyncio.gather(
                *(shared.put(item(offset + n)) for n in range(rounds)),
                *(session.add_items([{"role": "user", "content": f"q{n}"}]) for n in range(3)),
            )
            # still running when the loop ends: asyncio.run cancels it
            kept.append(asyncio.ensure_future(shared.get(f"leave-open-{offset}")))

        threads = [
            threading.Thread(target=asyncio.run, args=(load(100 * (t + 1)),)) for t in range(3)
        ]
        for thread in threads:
            thread.start()
        asyncio.run(load(0))
        for thread in threads:
            thread.join()
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
