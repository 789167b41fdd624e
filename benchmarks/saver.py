"""Our LangGraph saver (``agent_checkpoint.integrations.langgraph.AgentCheckpointSaver``) on our
store, one target per backend (``saver-memory``, ``saver-disk``, ``saver-redis``,
``saver-postgres``, ``saver-s3``), driven exactly as the LangGraph peers are (the same
``_LangGraphInstance``: the same checkpoints, chained per thread, put the same way).

Each instance works in the namespace our store's target uses on that backend (a Redis key
prefix, a PostgreSQL schema, a bucket, a folder), opened and removed by that target's code
(``ours.OursInstance``), and the saver is given that open ``Store``. Bytes stored are measured
as for our store. Reads go through a second saver on a second store opened on the same URL,
with nothing of the thread in its cache, as a resume or a listing in another process would
read: a get (a) and each listing (c) start cold. The listing also reports, in a note, the
time of the same listing repeated on one saver (its messages cache warm).

The bulk load of (c) uses the peers' loader (their own ``put`` on threads) over the bulk store
our target loads through (no fsync on disk, no WAL flush at commit on PostgreSQL), with as many
writer threads as our store's load uses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ours
import workload
from peers import _LangGraphInstance
from servers import Context
from targets import Unavailable
from workload import Turn

SAVER_BACKENDS = ("memory", "disk", "redis", "postgres", "s3")


class Saver:
    family = "saver"

    def __init__(self, backend: str, ctx: Context) -> None:
        self.backend = backend
        self.name = f"saver-{backend}"
        self.ctx = ctx
        try:
            import langchain_core.messages  # noqa: F401

            from agent_checkpoint.integrations.langgraph import AgentCheckpointSaver  # noqa: F401
        except ImportError as exc:
            raise Unavailable(f"agent_checkpoint.integrations.langgraph: {exc}") from exc
        self._ours = ours.Ours(backend, ctx)  # Unavailable when the backend cannot run here
        self.version = self._ours.version

    def convert(self, turns: tuple[Turn, ...]) -> list[Any]:
        return workload.langchain(turns)

    def open(self) -> SaverInstance:
        return SaverInstance(self.backend, self.ctx)


class SaverInstance(_LangGraphInstance):
    def __init__(self, backend: str, ctx: Context) -> None:
        from agent_checkpoint.integrations.langgraph import AgentCheckpointSaver

        super().__init__()
        self.backend = backend
        self.space = ours.OursInstance(backend, ctx)  # registers its own cleanup
        try:
            self.saver = AgentCheckpointSaver(self.space.store)
            if backend == "postgres":
                self.saver.setup()  # as a user would, once (the store made its tables already)
            # gets: each key of (a) is new to this saver, so every get reads it from the store
            self.reader = self._reader()
        except BaseException:
            self.space.close()
            raise

    def _reader(self) -> Any:
        """A new saver (nothing in its cache) on the target's second store (the same URL); a
        new one costs ~8 us."""
        from agent_checkpoint.integrations.langgraph import AgentCheckpointSaver

        return AgentCheckpointSaver(self.space.reader)

    def get(self, key: str) -> int:
        found = self.reader.get_tuple({"configurable": {"thread_id": key, "checkpoint_ns": ""}})
        assert found is not None, key
        return len(found.checkpoint["channel_values"]["messages"])

    def stored_bytes(self) -> int | None:
        return self.space.stored_bytes()

    def load_runs(self, count: int, progress: Callable[[int], None]) -> list[str]:
        from agent_checkpoint.integrations.langgraph import AgentCheckpointSaver

        store = self.space.bulk_store()
        try:
            savers = [AgentCheckpointSaver(store) for _ in range(self.space.load_threads())]
            return self._load(savers, count, progress)
        finally:
            if store is not self.space.store:
                store.close()

    def list_newest(self, limit: int) -> list[str]:
        return _thread_ids(self._reader(), limit)

    def warm_lister(self, limit: int) -> Callable[[], list[str]]:
        """The same listing, repeated on one saver: its messages cache warm after the first."""
        reader = self._reader()
        return lambda: _thread_ids(reader, limit)

    def threads_lister(self, limit: int) -> Callable[[], list[str]]:
        """``saver.threads(limit=...)``: the newest threads from the store's index alone (thread
        id, latest checkpoint id, time, message count), on a new saver each call."""
        return lambda: [t.thread_id for t in self._reader().threads(limit=limit)]

    def close(self) -> None:
        try:
            self.saver.close()  # a Store given to it stays open: the namespace's close shuts it
        finally:
            self.space.close()


def _thread_ids(saver: Any, limit: int) -> list[str]:
    return [t.config["configurable"]["thread_id"] for t in saver.list(None, limit=limit)]
