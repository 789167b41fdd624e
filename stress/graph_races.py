"""Graph race campaign: two worker PROCESSES run a LangGraph graph on one EMPTY thread at once.

Each worker process holds one ``AgentCheckpointSaver`` on the store for the whole campaign (as a
service would), and each round uses a fresh thread. Both workers start the chat graph on it
(one reply per user message); the saver's first put of each run waits until both runs have
read the thread (empty), then:

- ``together``: both go on at once, one of them after a random pause of up to 20 ms, so the
  second's first put meets the first's anywhere from before it lands to after its run ended;
- ``after``: the second worker's first put waits until the first worker's run has finished
  (the interleaving of issue 40 item 10, made certain).

Judged after each round, from a fresh saver in the campaign's process: exactly one run
succeeded and the other raised ``ConflictError`` (anything else is ``foreign``; two successes
are ``wrongly_accepted``, none ``stalled``); the thread has one lineage (a second is
``wrongly_accepted``: the silent fork); its latest checkpoint holds the winner's message and
reply, and no checkpoint holds the loser's message (else ``lost``/``wrongly_accepted``).

    python -m stress.graph_races --backend disk,redis,postgres,s3 --rounds 100
"""

from __future__ import annotations

import contextlib
import random
import sys
import time
import warnings
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from .common import BACKENDS, Tally, Target, fork_context, main_for, open_target

KINDS = ("together", "after")
WORKERS = 2
JITTER = 0.02
"""Seconds: the longest pause of one worker after both read the thread (``together``)."""


@dataclass(frozen=True)
class Outcome:
    worker: int
    won: bool
    error: str = ""  # the exception's class, when it raised
    message: str = ""


def _graph(saver: Any) -> Any:
    from langchain_core.messages import AIMessage
    from langgraph.graph import START, MessagesState, StateGraph

    def reply(state: MessagesState) -> dict[str, Any]:
        last = state["messages"][-1]
        return {"messages": [AIMessage(f"echo: {last.text}", id=f"ai-{last.id}")]}

    graph = StateGraph(MessagesState)
    graph.add_node("reply", reply)
    graph.add_edge(START, "reply")
    return graph.compile(checkpointer=saver)


def graph_worker(target: Target, index: int, conn: Connection, barrier: Any, finished: Any) -> None:
    """One runner: for each round, run the graph on the round's thread, report."""
    warnings.simplefilter("ignore")
    from langchain_core.messages import HumanMessage

    from agent_checkpoint import ConflictError
    from agent_checkpoint.integrations.langgraph import AgentCheckpointSaver

    class Gated(AgentCheckpointSaver):
        """Runs ``gate`` before its next put (LangGraph may put from a thread of its own)."""

        gate: Any = None

        def put(self, *args: Any) -> Any:
            wait, self.gate = self.gate, None
            if wait is not None:
                wait()
            return super().put(*args)

    store = target.open()
    saver = Gated(store)
    graph = _graph(saver)
    rng = random.Random(index * 7919 + int(time.time()))
    conn.send("ready")
    try:
        while True:
            task = conn.recv()
            if task is None:
                return
            kind, thread, round_no = task

            def first_put(kind: str = kind, round_no: int = round_no) -> None:
                barrier.wait(30)  # both runs have read the empty thread
                if kind == "after" and index == 1:
                    finished.wait(30)
                elif kind == "together" and (round_no + index) % 2:
                    time.sleep(rng.uniform(0, JITTER))

            saver.gate = first_put
            config = {"configurable": {"thread_id": thread}}
            mine = f"w{index}"
            try:
                graph.invoke({"messages": [HumanMessage(f"from {mine}", id=mine)]}, config)
                outcome = Outcome(index, True)
            except ConflictError as exc:
                outcome = Outcome(index, False, type(exc).__name__, str(exc)[:300])
            except Exception as exc:  # reported to the campaign, which judges it
                outcome = Outcome(index, False, type(exc).__name__, str(exc)[:300])
            finally:
                saver.gate = None
                if index == 0:
                    finished.set()
            conn.send(outcome)
    finally:
        store.close()


class Campaign:
    def __init__(self, target: Target) -> None:
        self.target = target
        self.tally = Tally(target.backend)
        self.ctx = fork_context()

    def run(self, rounds: int) -> Tally:
        from agent_checkpoint.integrations.langgraph import AgentCheckpointSaver

        started = time.monotonic()
        barrier = self.ctx.Barrier(WORKERS)
        finished = self.ctx.Event()
        pipes: list[Connection] = []
        procs = []
        try:
            for index in range(WORKERS):
                mine, theirs = self.ctx.Pipe()
                proc = self.ctx.Process(
                    target=graph_worker,
                    args=(self.target, index, theirs, barrier, finished),
                    daemon=True,
                )
                proc.start()
                theirs.close()
                pipes.append(mine)
                procs.append(proc)
            for pipe in pipes:
                if not pipe.poll(120) or pipe.recv() != "ready":
                    raise RuntimeError("a graph worker did not start")
            with self.target.open() as store:
                for round_no in range(rounds):
                    kind = KINDS[round_no % len(KINDS)]
                    thread = f"race-{round_no}"
                    finished.clear()
                    barrier.reset()
                    for pipe in pipes:
                        pipe.send((kind, thread, round_no))
                    outcomes = []
                    for i, pipe in enumerate(pipes):
                        if not pipe.poll(120):
                            self.tally.violation("stalled", f"round {round_no}: w{i} no answer")
                            return self.tally
                        outcomes.append(pipe.recv())
                    self.judge(AgentCheckpointSaver(store), store, kind, thread, outcomes)
        finally:
            for pipe in pipes:
                with contextlib.suppress(OSError):
                    pipe.send(None)
            for proc in procs:
                proc.join(30)
                if proc.is_alive():
                    proc.kill()
                    proc.join(5)
        self.tally.seconds = time.monotonic() - started
        return self.tally

    def judge(
        self, saver: Any, store: Any, kind: str, thread: str, outcomes: list[Outcome]
    ) -> None:
        tally = self.tally
        tally.trials += 1
        tally.extra[f"{kind} rounds"] += 1
        where = f"{kind} {thread}"
        winners = [o for o in outcomes if o.won]
        for o in outcomes:
            if not o.won:
                tally.errors[o.error] += 1
                if o.error != "ConflictError":
                    tally.violation("foreign", f"{where}: w{o.worker} {o.error}: {o.message}")
        if len(winners) != 1:
            kind_of = "wrongly_accepted" if len(winners) > 1 else "stalled"
            tally.violation(kind_of, f"{where}: {len(winners)} runs succeeded")
            return
        tally.acknowledged += 1
        winner = f"w{winners[0].worker}"
        loser = f"w{1 - winners[0].worker}"
        tally.extra[f"won by {winner}"] += 1
        lineages = [s.key for s in store.iter_summaries(agent_id=f"langgraph:{thread}")]
        lineages = [key for key in lineages if "/m/" in key]
        if len(lineages) != 1:
            tally.violation("wrongly_accepted", f"{where}: {len(lineages)} lineages {lineages}")
        config = {"configurable": {"thread_id": thread}}
        latest = saver.get_tuple(config)
        ids = (
            []
            if latest is None
            else [m.id for m in latest.checkpoint["channel_values"]["messages"]]
        )
        if ids != [winner, f"ai-{winner}"]:
            tally.violation("lost", f"{where}: latest holds {ids}, not {winner}'s run")
        every = {
            m.id
            for t in saver.list(config)
            for m in t.checkpoint["channel_values"].get("messages", [])
        }
        if loser in every or f"ai-{loser}" in every:
            tally.violation("wrongly_accepted", f"{where}: {loser}'s message was stored")


def run_backend(backend: str, rounds: int, workdir: Path, s3: Any = None) -> Tally:
    """``rounds`` graph races (the kinds in rotation) on a fresh store of ``backend``."""
    with open_target(backend, workdir, s3=s3) as target:
        return Campaign(target).run(rounds)


EXTRAS = tuple((f"{kind} rounds", kind) for kind in KINDS)


def main(argv: list[str] | None = None) -> int:
    return main_for(
        "Graph race campaign: two processes run a graph on one empty thread; one may win",
        run_backend,
        size_flag="rounds",
        full=200,
        small=8,
        backends=BACKENDS,
        title=f"Graph race campaign: {WORKERS} worker processes per empty thread",
        trial_word="rounds",
        extras=EXTRAS,
        argv=argv,
    )


if __name__ == "__main__":
    sys.exit(main())
