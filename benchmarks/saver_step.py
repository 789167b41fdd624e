"""The LangGraph saver's write latency per graph step, per backend (issue 40 item 8).

    python benchmarks/saver_step.py                          # every backend, 60 turns
    python benchmarks/saver_step.py --backends disk,redis --turns 200

A real graph (``MessagesState``, one reply node) runs ``--turns`` turns on one thread with
``durability="sync"``, through the sync methods (``invoke``) and then the async ones
(``ainvoke``, on a second thread), on a saver given the backend's store; every ``put`` and
``put_writes`` (``aput``, ``aput_writes``) the graph makes is timed where the graph calls it.
A turn is two supersteps (the input, the reply): the "step" column is one superstep's writes,
its checkpoint's put plus the put_writes of its tasks, which is what a graph waits for between
steps with ``durability="sync"``. Medians and 90th percentiles in milliseconds, after
``WARMUP`` turns; the first turn (the thread's creation) is left out.

Redis and PostgreSQL are the machine's (``servers.py``), each run in a key prefix or schema of
its own, removed afterwards; S3 is a SeaweedFS server started here. Times are wall clock on a
shared machine: compare figures from one run.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import servers
from servers import Cleanup, log

BACKENDS = ("memory", "disk", "redis", "postgres", "s3")
WARMUP = 3


@contextmanager
def store_for(backend: str, cleanup: Cleanup, s3: list[Any]) -> Iterator[Any]:
    from agent_checkpoint import open_store

    if backend == "memory":
        url, options = "memory://", {}
    elif backend == "disk":
        url, options = str(servers.temp_dir(cleanup, "step") / "store"), {}
    elif backend == "redis":
        prefix = servers.unique("step-")
        client = servers.redis_client()
        cleanup.add(f"redis {prefix}", lambda: servers.redis_delete(client, "{" + prefix + "}*"))
        url, options = f"{servers.REDIS_URL}?prefix={prefix}", {}
    elif backend == "postgres":
        schema = servers.pg_schema(cleanup, "step_")
        url, options = f"{servers.PG_URL}?schema={schema}", {}
    elif backend == "s3":
        if not s3:
            s3.append(servers.start_s3(cleanup))
        client = s3[0].client()
        bucket = servers.unique("step-")
        client.create_bucket(Bucket=bucket)
        cleanup.add(f"bucket {bucket}", lambda: servers.s3_drop_bucket(client, bucket))
        url, options = f"s3://{bucket}/threads", {"client": client}
    else:
        raise SystemExit(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")
    store = open_store(url, **options)
    store.setup()
    try:
        yield store
    finally:
        store.close()


def timed_saver(store: Any, times: dict[str, list[float]]) -> Any:
    from agent_checkpoint.integrations.langgraph import AgentCheckpointSaver

    class Timed(AgentCheckpointSaver):
        def put(self, *args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return super().put(*args, **kwargs)
            finally:
                times["put"].append(time.perf_counter() - started)

        def put_writes(self, *args: Any, **kwargs: Any) -> None:
            started = time.perf_counter()
            try:
                super().put_writes(*args, **kwargs)
            finally:
                times["put_writes"].append(time.perf_counter() - started)

        async def aput(self, *args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await super().aput(*args, **kwargs)
            finally:
                times["aput"].append(time.perf_counter() - started)

        async def aput_writes(self, *args: Any, **kwargs: Any) -> None:
            started = time.perf_counter()
            try:
                await super().aput_writes(*args, **kwargs)
            finally:
                times["aput_writes"].append(time.perf_counter() - started)

    return Timed(store)


def chat_graph(saver: Any) -> Any:
    from langchain_core.messages import AIMessage
    from langgraph.graph import START, MessagesState, StateGraph

    def reply(state: MessagesState) -> dict[str, Any]:
        last = state["messages"][-1]
        return {"messages": [AIMessage(f"echo: {last.text}", id=f"ai-{last.id}")]}

    graph = StateGraph(MessagesState)
    graph.add_node("reply", reply)
    graph.add_edge(START, "reply")
    return graph.compile(checkpointer=saver)


def measure(store: Any, turns: int) -> dict[str, tuple[float, float]]:
    from langchain_core.messages import HumanMessage

    times: dict[str, list[float]] = defaultdict(list)
    saver = timed_saver(store, times)
    graph = chat_graph(saver)
    steps: dict[str, list[float]] = defaultdict(list)
    for mode in ("sync", "async"):
        put, writes = ("put", "put_writes") if mode == "sync" else ("aput", "aput_writes")
        config = {"configurable": {"thread_id": f"bench-{mode}"}}
        for turn in range(turns + WARMUP + 1):
            mark = {name: len(times[name]) for name in (put, writes)}
            message = {"messages": [HumanMessage(f"question {turn} " + "x" * 300, id=f"h{turn}")]}
            if mode == "sync":
                graph.invoke(message, config, durability="sync")
            else:
                asyncio.run(graph.ainvoke(message, config, durability="sync"))
            if turn <= WARMUP:  # the thread's creation and the warm-up: not counted
                for name in (put, writes):
                    del times[name][mark[name] :]
                continue
            puts = times[put][mark[put] :]
            written = times[writes][mark[writes] :]
            # a turn: the input's checkpoint, then per superstep its one task's writes and the
            # checkpoint after them
            assert len(puts) == len(written) + 1, (len(puts), len(written))
            for task, spent in enumerate(written):
                steps[f"{mode} step"].append(spent + puts[task + 1])
    found = {name: values for name, values in times.items() if values}
    found.update(steps)
    return {name: (_ms(statistics.median(v)), _ms(_p90(v))) for name, v in found.items()}


def _p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


COLUMNS = ("put_writes", "put", "sync step", "aput_writes", "aput", "async step")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--turns", type=int, default=60)
    args = parser.parse_args(argv)
    import warnings

    warnings.filterwarnings("ignore", message=".*keeps no data on disk")
    rows = []
    cleanup = Cleanup()
    s3: list[Any] = []
    try:
        for backend in args.backends.split(","):
            log(f"{backend}: {args.turns} turns, sync then async")
            with store_for(backend, cleanup, s3) as store:
                rows.append((backend, measure(store, args.turns)))
    finally:
        cleanup.run()
    print(
        f"\nPer-step write latency, ms, median / p90 ({args.turns} turns; {time.strftime('%F %H:%M')})"
    )
    print("| backend | " + " | ".join(COLUMNS) + " |")
    print("|---" * (len(COLUMNS) + 1) + "|")
    for backend, found in rows:
        cells = [f"{found[c][0]} / {found[c][1]}" if c in found else "-" for c in COLUMNS]
        print(f"| {backend} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
