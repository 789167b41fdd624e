"""The LangGraph saver (``agent_checkpoint.integrations.langgraph``) on every backend's real
server: LangGraph's own conformance suite (``langgraph-checkpoint-conformance``) through the
async and the sync methods, a real graph interrupted by a failing tool and resumed in another
process, and what the official savers lack (appended messages, conflicts, claims)."""

from __future__ import annotations

import asyncio
import datetime
import itertools
import json
import os
import re
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
import redis
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, ToolMessage
from langgraph.checkpoint.base import CheckpointTuple, empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import StateUpdate
from support.langgraph_agent import EXPECTED, QUESTION, build, summary
from support.processes import run_module
from support.store_urls import url_for_processes

from agent_checkpoint import (
    MAX_KEY_LENGTH,
    ClaimedError,
    ConflictError,
    InvalidArgumentError,
    OwnershipConflictError,
    RunCheckpoint,
    open_store,
)
from agent_checkpoint.integrations.langgraph import AgentCheckpointSaver, server_checkpointer

BACKENDS = ["memory", "disk", "redis", "postgres", "s3"]


backend_url = url_for_processes


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with backend_url(request.param, request, tmp_path) as opened:
        yield opened


# -- LangGraph's conformance suite ------------------------------------------------------------


class SyncDriven(AgentCheckpointSaver):
    """The saver's synchronous methods under the (async) conformance suite: each async
    method calls its sync twin on a thread, as a sync graph would call it."""

    async def aget_tuple(self, config: Any) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(self, config: Any, **kwargs: Any) -> AsyncIterator[CheckpointTuple]:
        for item in await asyncio.to_thread(lambda: list(self.list(config, **kwargs))):
            yield item

    async def aput(self, *args: Any) -> Any:
        return await asyncio.to_thread(self.put, *args)

    async def aput_writes(self, *args: Any, **kwargs: Any) -> None:
        await asyncio.to_thread(self.put_writes, *args, **kwargs)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source: str, target: str) -> None:
        await asyncio.to_thread(self.copy_thread, source, target)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)


def conformance(url: str, cls: type[AgentCheckpointSaver]) -> dict[str, Any]:
    @checkpointer_test(name=cls.__name__)
    async def factory() -> AsyncIterator[AgentCheckpointSaver]:
        saver = cls(url)
        yield saver
        await saver.aclose()

    report = asyncio.run(validate(factory))
    return {
        cap: (result.detected, result.passed, result.tests_passed, result.failures)
        for cap, result in report.results.items()
    }


@pytest.mark.parametrize("cls", [AgentCheckpointSaver, SyncDriven], ids=["async", "sync"])
def test_langgraph_conformance_passes_every_capability(
    url: str, cls: type[AgentCheckpointSaver]
) -> None:
    results = conformance(url, cls)
    assert set(results) == {c.value for c in ALL_CAPABILITIES}
    for cap, (detected, passed, count, failures) in results.items():
        assert detected, f"{cap} is not implemented"
        assert passed and count > 0 and not failures, f"{cap}: {failures}"


# -- a real graph, interrupted and resumed in another process -----------------------------------


def agent_process(url: str, thread: str, mode: str, *flags: str, fail: bool) -> tuple[int, str]:
    done = run_module(
        "langgraph_agent",
        url,
        thread,
        mode,
        *flags,
        env={"AGENT_TOOL_FAILS": "1" if fail else "0"},
        ok=(0, 3),
    )
    return done.returncode, done.stdout


@pytest.mark.parametrize("resume_with", ["sync", "async"])
def test_a_graph_interrupted_by_a_tool_resumes_in_another_process(
    url: str, resume_with: str
) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    if url.startswith("memory:"):  # one process: two savers on one store stand for two
        store = open_store(url)
        first, second = AgentCheckpointSaver(store), AgentCheckpointSaver(store)
        os.environ["AGENT_TOOL_FAILS"] = "1"
        try:
            with pytest.raises(RuntimeError, match="weather service is down"):
                build(first).invoke(
                    {"messages": [HumanMessage(QUESTION, id="human-1")]},
                    {"configurable": {"thread_id": thread}},
                )
        finally:
            os.environ["AGENT_TOOL_FAILS"] = "0"
        config = {"configurable": {"thread_id": thread}}
        if resume_with == "async":
            result = asyncio.run(build(second).ainvoke(None, config))
        else:
            result = build(second).invoke(None, config)
        assert summary(result["messages"]) == EXPECTED
        return
    status, _ = agent_process(url, thread, "start", fail=True)
    assert status == 3  # the tool raised: the run stopped after checkpointing the step before
    with AgentCheckpointSaver(url) as saver:
        stopped = saver.get_tuple({"configurable": {"thread_id": thread}})
        assert stopped is not None
        assert [m.type for m in stopped.checkpoint["channel_values"]["messages"]] == [
            "human",
            "ai",
            "tool",
            "ai",
        ]
        assert any(channel == "__error__" for _, channel, _ in stopped.pending_writes or [])
    flags = ("async",) if resume_with == "async" else ()
    status, out = agent_process(url, thread, "resume", *flags, fail=False)
    assert status == 0
    assert [tuple(m) for m in json.loads(out)] == EXPECTED
    with AgentCheckpointSaver(url) as saver:
        final = saver.get_tuple({"configurable": {"thread_id": thread}})
        assert final is not None
        assert summary(final.checkpoint["channel_values"]["messages"]) == EXPECTED


# -- what the saver adds ----------------------------------------------------------------------


def chat_graph(saver: AgentCheckpointSaver, meanwhile: Any = None) -> Any:
    """One reply per user message: a conversation grows by two messages per turn.
    ``meanwhile()`` runs inside the step, before the reply."""

    def reply(state: MessagesState) -> dict[str, Any]:
        if meanwhile is not None:
            meanwhile()
        last = state["messages"][-1]
        return {"messages": [AIMessage(f"echo: {last.text}", id=f"ai-{last.id}")]}

    graph = StateGraph(MessagesState)
    graph.add_node("reply", reply)
    graph.add_edge(START, "reply")
    return graph.compile(checkpointer=saver)


def test_a_step_writes_only_the_messages_it_added(tmp_path: Path) -> None:
    """The messages and the checkpoints live in one appended history, the thread's lineage: no
    record per checkpoint, and each step grows it by what it added alone."""
    store = open_store(str(tmp_path / "store"))
    saver = AgentCheckpointSaver(store)
    graph = chat_graph(saver)
    config = {"configurable": {"thread_id": "long"}}
    sizes: list[int] = []
    for turn in range(40):
        graph.invoke(
            {"messages": [HumanMessage(f"message {turn} " + "x" * 200, id=f"h{turn}")]}, config
        )
        summaries = list(store.iter_summaries(agent_id="langgraph:long"))
        lineage = [s for s in summaries if "/m/" in s.key]
        assert len(lineage) == 1  # one history, appended to
        assert all("/w/" in s.key for s in summaries if s not in lineage)  # pending writes only
        sizes.append(lineage[0].size)
    growth = [b - a for a, b in itertools.pairwise(sizes)]
    assert max(growth[5:]) < 2 * min(growth[5:])  # each turn adds what it added, no more
    tup = saver.get_tuple(config)
    assert tup is not None
    messages = tup.checkpoint["channel_values"]["messages"]
    assert len(messages) == 80 and messages[-1].text == "echo: message 39 " + "x" * 200
    history = store.get(
        next(s.key for s in store.iter_summaries(agent_id="langgraph:long") if "/m/" in s.key)
    )
    assert history is not None
    said = [m for m in history.history if m.role != "checkpoint"]
    assert len(said) == 80 and lineage[0].message_count == 80  # entries are not messages
    assert said[0].role == "user" and said[1].role == "assistant"
    assert len(history.history) - len(said) == len(list(saver.list(config)))


def test_every_checkpoint_keeps_its_messages_across_a_removal(tmp_path: Path) -> None:
    """Removing a message starts a new lineage; older checkpoints read theirs unchanged."""
    saver = AgentCheckpointSaver(str(tmp_path / "store"))
    graph = chat_graph(saver)
    config = {"configurable": {"thread_id": "t"}}
    graph.invoke({"messages": [HumanMessage("one", id="h1")]}, config)
    graph.invoke({"messages": [HumanMessage("two", id="h2")]}, config)
    graph.update_state(config, {"messages": [RemoveMessage(id="h1")]})
    graph.invoke({"messages": [HumanMessage("three", id="h3")]}, config)
    history = [
        [m.id for m in t.checkpoint["channel_values"].get("messages", [])]
        for t in saver.list(config)
    ]
    assert history[0] == ["ai-h1", "h2", "ai-h2", "h3", "ai-h3"]
    assert ["h1", "ai-h1", "h2", "ai-h2"] in history  # before the removal, as it was
    assert ["h1", "ai-h1"] in history


def test_langchain_messages_round_trip_exactly(tmp_path: Path) -> None:
    messages = [
        HumanMessage("hi", id="1", additional_kwargs={"lang": "en"}),
        AIMessage(
            content=[{"type": "text", "text": "let me look"}],
            id="2",
            tool_calls=[{"name": "search", "args": {"q": "x"}, "id": "c1", "type": "tool_call"}],
            response_metadata={"model": "fake"},
            usage_metadata={"input_tokens": 3, "output_tokens": 4, "total_tokens": 7},
        ),
        ToolMessage("found", tool_call_id="c1", name="search", id="3", artifact={"n": 1}),
        AIMessage("done", id="4", name="helper"),
    ]
    saver = AgentCheckpointSaver(str(tmp_path / "store"))
    graph = StateGraph(MessagesState)
    graph.add_node("noop", lambda state: {})
    graph.add_edge(START, "noop")
    compiled = graph.compile(checkpointer=saver)
    compiled.invoke({"messages": messages}, {"configurable": {"thread_id": "rt"}})
    fresh = AgentCheckpointSaver(str(tmp_path / "store"))  # nothing cached: read back
    tup = fresh.get_tuple({"configurable": {"thread_id": "rt"}})
    assert tup is not None
    assert tup.checkpoint["channel_values"]["messages"] == messages
    history = open_store(str(tmp_path / "store")).get(
        next(s.key for s in fresh.store.iter_summaries(agent_id="langgraph:rt") if "/m/" in s.key)
    )
    assert history is not None
    said = [m for m in history.history if m.role != "checkpoint"]  # the checkpoints' entries
    assert [(m.role, m.content) for m in said] == [
        ("user", "hi"),
        ("assistant", "let me look"),
        ("tool", "found"),
        ("assistant", "done"),
    ]
    assert said[1].tool_calls is not None
    assert said[1].tool_calls[0].name == "search"


@pytest.mark.parametrize("name", ["redis", "postgres"])
def test_a_second_writer_on_a_thread_gets_a_conflict_not_a_fork(
    name: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Two workers read the thread; one runs a step; the other's step is refused with
    ConflictError (the graph's invoke raises it), and the thread is not forked."""
    with backend_url(name, request, tmp_path) as url:
        conflicted(url)


def conflicted(url: str) -> None:
    with AgentCheckpointSaver(url) as first, AgentCheckpointSaver(url) as second:
        race(first, second)


def race(first: AgentCheckpointSaver, second: AgentCheckpointSaver) -> None:
    config = {"configurable": {"thread_id": "shared"}}
    chat_graph(first).invoke({"messages": [HumanMessage("one", id="h1")]}, config)

    def first_worker_runs_a_step() -> None:
        step = {"messages": [HumanMessage("two", id="h2")]}
        chat_graph(first).invoke(step, config, durability="sync")

    # the second worker reads the thread and checkpoints its input; while its step runs,
    # the first worker runs a whole step; the second's reply is then refused (each put
    # lands before the graph goes on: durability="sync" makes the interleaving certain)
    racing = chat_graph(second, meanwhile=first_worker_runs_a_step)
    with pytest.raises(ConflictError, match="was written by another writer"):
        step = {"messages": [HumanMessage("three", id="h3")]}
        racing.invoke(step, config, durability="sync")
    latest = first.get_tuple(config)
    assert latest is not None
    ids = [m.id for m in latest.checkpoint["channel_values"]["messages"]]
    assert ids == ["h1", "ai-h1", "h3", "h2", "ai-h2"]  # the second's input, then the first's step
    every = {
        m.id for t in first.list(config) for m in t.checkpoint["channel_values"].get("messages", [])
    }
    assert "ai-h3" not in every  # the refused reply is nowhere: no fork
    # having read the thread again, the second worker continues it
    chat_graph(second).invoke({"messages": [HumanMessage("four", id="h4")]}, config)
    final = first.get_tuple(config)
    assert final is not None
    assert [m.id for m in final.checkpoint["channel_values"]["messages"]][-2:] == ["h4", "ai-h4"]


def test_one_worker_of_two_claims_an_interrupted_thread(tmp_path: Path) -> None:
    saver = AgentCheckpointSaver(str(tmp_path / "store"))
    other = AgentCheckpointSaver(str(tmp_path / "store"))
    chat_graph(saver).invoke(
        {"messages": [HumanMessage("hi", id="h1")]}, {"configurable": {"thread_id": "job"}}
    )
    with saver.claim("job", "worker-a", ttl=30), pytest.raises(ClaimedError):
        other.claim("job", "worker-b", ttl=30)
    with other.claim("job", "worker-b", ttl=30) as lease:  # released: the next worker's turn
        assert lease.worker == "worker-b"


def test_threads_list_newest_first_across_threads(tmp_path: Path) -> None:
    saver = AgentCheckpointSaver(str(tmp_path / "store"))
    graph = chat_graph(saver)
    for i in range(5):
        graph.invoke(
            {"messages": [HumanMessage(f"hi {i}", id=f"h{i}")]},
            {"configurable": {"thread_id": f"thread-{i}"}},
        )
    newest = list(saver.list(None, limit=3))
    assert [t.config["configurable"]["thread_id"] for t in newest] == [
        "thread-4",
        "thread-4",
        "thread-4",
    ]
    latest_per_thread = []
    for tup in saver.list(None):
        thread = tup.config["configurable"]["thread_id"]
        if thread not in latest_per_thread:
            latest_per_thread.append(thread)
    assert latest_per_thread == [f"thread-{i}" for i in reversed(range(5))]


def test_a_config_without_a_thread_is_refused_by_name(tmp_path: Path) -> None:
    saver = AgentCheckpointSaver(str(tmp_path / "store"))
    with pytest.raises(InvalidArgumentError, match="names no thread"):
        saver.get_tuple({"configurable": {}})


def test_a_checkpoint_reads_back_exactly_whatever_its_versions(tmp_path: Path) -> None:
    """Entries are stored packed (short names, versions without their padding, a version
    seen that is the channel's current one as a mark, defaults left out): what LangGraph put
    comes back equal, key for key, including values that look like those marks."""
    saver = AgentCheckpointSaver(str(tmp_path / "store"))
    config = {"configurable": {"thread_id": "odd", "checkpoint_ns": ""}}
    padded = saver.get_next_version(None, None)
    checkpoint = {
        "v": 4,
        "id": str(uuid6(clock_seq=1)),
        "ts": "2026-01-02T03:04:05.678901+00:00",  # not the id's time
        "channel_values": {"count": 3},
        "channel_versions": {"a": padded, "b": 7, "c": "=", "d": "~x"},
        "versions_seen": {"node": {"a": padded, "b": 6, "c": "=", "d": "~~"}},
        "updated_channels": ["a"],
        "pending_sends": [],
        "extra_field": {"kept": True},
    }
    stored = saver.put(config, checkpoint, {"source": "input", "step": -1}, {})  # type: ignore[arg-type]
    fresh = AgentCheckpointSaver(str(tmp_path / "store"))
    found = fresh.get_tuple(stored)
    assert found is not None
    assert found.checkpoint == checkpoint
    assert found.metadata == {"source": "input", "step": -1}


def test_equal_copies_extend_a_thread_and_a_list_of_other_things_stays_a_value(
    tmp_path: Path,
) -> None:
    """A step's messages extend the thread's lineage when they begin with its messages, the
    same objects or equal copies (a state read back in another process); a messages channel
    that holds something other than messages is kept as a plain value and reads back so."""
    saver = AgentCheckpointSaver(str(tmp_path / "store"))
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    first = [HumanMessage("hi", id="h1"), AIMessage("hello", id="a1")]
    copies = [m.model_copy() for m in first] + [HumanMessage("more", id="h2")]
    mixed = [HumanMessage("x", id="h3"), {"not": "a message"}]
    for step, messages in enumerate((first, copies, mixed)):
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"messages": messages}
        config = saver.put(config, checkpoint, {"step": step}, {})
        found = saver.get_tuple(config)
        assert found is not None and found.checkpoint["channel_values"]["messages"] == messages
        if step == 1:
            assert copies[0] is not first[0] and copies[0] == first[0]
            lineages = [s.key for s in saver.store.iter_summaries() if "/m/" in s.key]
            assert len(lineages) == 1  # extended, not a new lineage
    assert isinstance(found.checkpoint["channel_values"]["messages"][1], dict)


def test_deleting_a_run_keeps_the_parents_of_the_checkpoints_left(tmp_path: Path) -> None:
    saver = AgentCheckpointSaver(str(tmp_path / "store"))
    config: Any = {"configurable": {"thread_id": "runs", "checkpoint_ns": ""}}
    ids = []
    for run in ("r1", "r2", "r3"):
        checkpoint = empty_checkpoint()
        config = saver.put(config, checkpoint, {"run_id": run, "step": len(ids)}, {})
        ids.append(checkpoint["id"])
    saver.delete_for_runs(["r2"])
    thread = {"configurable": {"thread_id": "runs"}}
    left = {t.checkpoint["id"]: t for t in AgentCheckpointSaver(saver.store).list(thread)}
    assert sorted(left) == sorted([ids[0], ids[2]])
    parent = left[ids[2]].parent_config
    assert parent is not None and parent["configurable"]["checkpoint_id"] == ids[1]
    assert left[ids[0]].parent_config is None


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    from support.redis_server import RedisClusterServers, need_redis_server

    need_redis_server()
    servers = RedisClusterServers(3)
    servers.start()
    yield servers
    servers.cleanup()


@pytest.mark.parametrize("cls", [AgentCheckpointSaver, SyncDriven], ids=["async", "sync"])
def test_langgraph_conformance_on_redis_cluster(
    cluster: Any, cls: type[AgentCheckpointSaver]
) -> None:
    """Plain Redis Cluster, no modules: every key of a store shares its hash tag, so no
    command crosses slots (the official Redis saver's CROSSSLOT errors)."""
    url = f"{cluster.url}?cluster=true&prefix=lg-{uuid.uuid4().hex[:12]}"
    results = conformance(url, cls)
    for cap, (detected, passed, count, failures) in results.items():
        assert detected and passed and count > 0 and not failures, f"{cap}: {failures}"


def test_ttl_on_redis_expires_every_key_the_saver_writes(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    with backend_url("redis", request, tmp_path) as url:
        with AgentCheckpointSaver(url, ttl={"default_ttl": 30}) as saver:
            chat_graph(saver).invoke(
                {"messages": [HumanMessage("hi", id="h1")]}, {"configurable": {"thread_id": "ttl"}}
            )
        client = redis.Redis.from_url(url.split("?")[0])
        prefix = url.split("prefix=")[1]
        keys = list(client.scan_iter(match="{" + prefix + "}*", count=1000))
        records = [k for k in keys if b"langgraph" in k]
        assert records  # the thread's head, its checkpoints and its writes
        for key in records:
            assert 0 < client.pttl(key) <= 30 * 60 * 1000, key
        client.close()


def test_sweep_deletes_what_is_older_than_the_ttl(tmp_path: Path) -> None:
    saver = AgentCheckpointSaver(str(tmp_path / "store"), ttl={"default_ttl": 60})
    graph = chat_graph(saver)
    graph.invoke({"messages": [HumanMessage("old", id="h1")]}, {"configurable": {"thread_id": "a"}})
    time.sleep(0.05)
    between = time.time()
    time.sleep(0.05)
    graph.invoke({"messages": [HumanMessage("new", id="h2")]}, {"configurable": {"thread_id": "b"}})
    saver.ttl_seconds = time.time() - between  # the ttl that makes thread a, and only a, old
    assert saver.sweep() > 0
    assert saver.get_tuple({"configurable": {"thread_id": "a"}}) is None
    assert list(saver.store.iter_summaries(agent_id="langgraph:a")) == []
    kept = saver.get_tuple({"configurable": {"thread_id": "b"}})
    assert kept is not None and [m.id for m in kept.checkpoint["channel_values"]["messages"]] == [
        "h2",
        "ai-h2",
    ]
    with pytest.raises(InvalidArgumentError, match="default_ttl"):
        AgentCheckpointSaver(str(tmp_path / "store"), ttl={"default_ttl": -1})


@pytest.mark.parametrize(
    ("store", "options", "message"),
    [
        (None, {}, r"store must be a store URL, an AsyncStore or a Store, not None"),
        (5, {}, r"store must be a store URL, an AsyncStore or a Store, not 5"),
        (
            "memory://",
            {"cache_threads": -1},
            r"cache_threads must be a whole number from 0, got -1",
        ),
    ],
)
def test_a_saver_made_with_a_store_or_cache_it_cannot_use_is_refused_when_made(
    store: Any, options: dict[str, Any], message: str
) -> None:
    # they were accepted, and failed at the graph's first step
    with pytest.raises(InvalidArgumentError, match=message):
        AgentCheckpointSaver(store, **options)


def test_the_server_entry_point_opens_the_store_the_environment_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_CHECKPOINT_STORE", str(tmp_path / "server-store"))
    monkeypatch.setenv("AGENT_CHECKPOINT_TTL_MINUTES", "60")

    async def serve() -> list[str]:
        async with server_checkpointer() as saver:
            assert saver.ttl_seconds == 3600
            graph = chat_graph(saver)
            out = await graph.ainvoke(
                {"messages": [HumanMessage("hi", id="h1")]}, {"configurable": {"thread_id": "s"}}
            )
            return [m.id for m in out["messages"]]

    assert asyncio.run(serve()) == ["h1", "ai-h1"]
    stored = AgentCheckpointSaver(str(tmp_path / "server-store"))
    assert stored.get_tuple({"configurable": {"thread_id": "s"}}) is not None


def test_a_thread_can_be_claimed_after_its_first_lineage_was_swept(tmp_path: Path) -> None:
    saver = AgentCheckpointSaver(str(tmp_path / "store"))
    graph = chat_graph(saver)
    config = {"configurable": {"thread_id": "forked"}}
    graph.invoke({"messages": [HumanMessage("one", id="h1")]}, config)
    graph.update_state(config, {"messages": [RemoveMessage(id="h1")]})  # a new lineage
    saver.store.delete("langgraph/forked/-/m/0")
    with saver.claim("forked", "worker", ttl=10) as lease:
        assert lease.worker == "worker"
    latest = saver.get_tuple(config)
    assert latest is not None
    assert [m.id for m in latest.checkpoint["channel_values"]["messages"]] == ["ai-h1"]


def test_two_runs_of_one_thread_through_one_saver_conflict_too(tmp_path: Path) -> None:
    saver = AgentCheckpointSaver(str(tmp_path / "store"))
    config = {"configurable": {"thread_id": "busy"}}
    chat_graph(saver).invoke({"messages": [HumanMessage("one", id="h1")]}, config)

    def another_run() -> None:
        step = {"messages": [HumanMessage("two", id="h2")]}
        chat_graph(saver).invoke(step, config, durability="sync")

    racing = chat_graph(saver, meanwhile=another_run)
    with pytest.raises(ConflictError, match="the thread's latest is now"):
        racing.invoke({"messages": [HumanMessage("three", id="h3")]}, config, durability="sync")
    latest = saver.get_tuple(config)
    assert latest is not None
    ids = [m.id for m in latest.checkpoint["channel_values"]["messages"]]
    assert ids == ["h1", "ai-h1", "h3", "h2", "ai-h2"]


def test_time_travel_branches_from_a_checkpoint_named_by_id(tmp_path: Path) -> None:
    saver = AgentCheckpointSaver(str(tmp_path / "store"))
    graph = chat_graph(saver)
    config = {"configurable": {"thread_id": "tt"}}
    graph.invoke({"messages": [HumanMessage("one", id="h1")]}, config)
    graph.invoke({"messages": [HumanMessage("two", id="h2")]}, config)
    after_one = next(
        s.config
        for s in graph.get_state_history(config)
        if [m.id for m in s.values.get("messages", [])] == ["h1", "ai-h1"]
    )
    branched = graph.invoke({"messages": [HumanMessage("other", id="h9")]}, after_one)
    assert [m.id for m in branched["messages"]] == ["h1", "ai-h1", "h9", "ai-h9"]
    latest = saver.get_tuple(config)
    assert latest is not None
    assert [m.id for m in latest.checkpoint["channel_values"]["messages"]][-1] == "ai-h9"
    histories = [
        [m.id for m in s.values.get("messages", [])] for s in graph.get_state_history(config)
    ]
    assert ["h1", "ai-h1", "h2", "ai-h2"] in histories  # the first branch is still there


@pytest.mark.parametrize("durability", ["exit", "async", "sync"])
def test_every_durability_mode_continues_a_thread(tmp_path: Path, durability: str) -> None:
    saver = AgentCheckpointSaver(str(tmp_path / "store"))
    config = {"configurable": {"thread_id": "d"}}
    for i in range(3):
        out = chat_graph(saver).invoke(
            {"messages": [HumanMessage(f"m{i}", id=f"h{i}")]}, config, durability=durability
        )
    assert [m.id for m in out["messages"]] == ["h0", "ai-h0", "h1", "ai-h1", "h2", "ai-h2"]
    fresh = AgentCheckpointSaver(str(tmp_path / "store"))
    latest = fresh.get_tuple(config)
    assert latest is not None and len(latest.checkpoint["channel_values"]["messages"]) == 6


@pytest.mark.parametrize("name", ["disk", "redis", "postgres"])
def test_threads_lists_the_newest_threads_from_the_index(
    name: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Many threads written within one millisecond still come newest first, each once, with
    its latest checkpoint; a thread written again moves to the front."""
    with backend_url(name, request, tmp_path) as url:
        saver = AgentCheckpointSaver(url)
        graph = chat_graph(saver)
        for i in range(30):
            config = {"configurable": {"thread_id": f"t{i:02d}"}}
            graph.invoke({"messages": [HumanMessage(f"hi {i}", id=f"h{i}")]}, config)
        config = {"configurable": {"thread_id": "t05"}}
        graph.invoke({"messages": [HumanMessage("again", id="again")]}, config)
        threads = saver.threads(limit=10)
        assert [t.thread_id for t in threads] == ["t05", *(f"t{i:02d}" for i in range(29, 20, -1))]
        latest = saver.get_tuple(config)
        assert latest is not None
        assert threads[0].checkpoint_id == latest.config["configurable"]["checkpoint_id"]
        assert threads[0].message_count == 4
        newest = list(saver.list(None, limit=5))
        assert [t.config["configurable"]["thread_id"] for t in newest][:1] == ["t05"]
        ids = [t.checkpoint["id"] for t in saver.list(None, limit=40)]
        assert ids == sorted(ids, reverse=True)  # newest first by id, across threads

        async def newest() -> str:
            try:
                return (await saver.athreads(limit=3))[0].thread_id
            finally:
                await saver.aclose()

        assert asyncio.run(newest()) == "t05"


def test_a_thread_belongs_to_the_owner_that_started_it(tmp_path: Path) -> None:
    """Two tenants' savers on one store: a thread id one tenant started is refused to the
    other (the store's owner rule on the thread's head), and nothing of the refused step
    is stored."""
    store = open_store(str(tmp_path / "store"))
    alice = AgentCheckpointSaver(store, owner="alice")
    bob = AgentCheckpointSaver(store, owner="bob")
    config = {"configurable": {"thread_id": "shared-id"}}
    chat_graph(alice).invoke({"messages": [HumanMessage("mine", id="h1")]}, config)
    checkpoints = sorted(s.key for s in store.iter_summaries() if "/w/" not in s.key)
    seen = [t.checkpoint["id"] for t in alice.list(config)]
    with pytest.raises(OwnershipConflictError, match="belongs to another owner"):
        chat_graph(bob).invoke({"messages": [HumanMessage("also mine?", id="h2")]}, config)
    # no checkpoint of bob's was stored (the pending writes LangGraph sent meanwhile belong to
    # no stored checkpoint, and nobody reads them), and alice's thread is as she left it
    assert sorted(s.key for s in store.iter_summaries() if "/w/" not in s.key) == checkpoints
    assert [t.checkpoint["id"] for t in alice.list(config)] == seen
    assert bob.get_tuple(config) is None
    assert [t.thread_id for t in bob.threads()] == []
    assert [t.thread_id for t in alice.threads()] == ["shared-id"]
    assert list(bob.list(None)) == []


def test_another_owners_saver_cannot_delete_prune_copy_or_sweep_a_thread(url: str) -> None:
    """Two tenants on one store: bob's saver deleted, pruned and copied alice's thread of the
    same id, and its sweep deleted every old record in the store (alice's threads, a run
    checkpoint of another program). Each now stays within bob's own records."""
    store = open_store(url)
    alice = AgentCheckpointSaver(store, owner="alice")
    bob = AgentCheckpointSaver(store, owner="bob", ttl={"default_ttl": 60})
    config = {"configurable": {"thread_id": "shared-id"}}
    chat_graph(alice).invoke({"messages": [HumanMessage("one", id="h1")]}, config)
    chat_graph(alice).invoke({"messages": [HumanMessage("two", id="h2")]}, config)
    store.put(RunCheckpoint.new("another program's run"), key="run-1")
    before = sorted((s.key, s.revision) for s in store.iter_summaries())
    bob.delete_thread("shared-id")
    asyncio.run(bob.adelete_thread("shared-id"))
    bob.prune(["shared-id"])
    bob.prune(["shared-id"], strategy="delete")
    bob.copy_thread("shared-id", "bobs-copy")
    time.sleep(0.01)
    bob.ttl_seconds = 0.001  # everything above is older than that
    assert bob.sweep() == 0
    assert sorted((s.key, s.revision) for s in store.iter_summaries()) == before
    kept = alice.get_tuple(config)
    assert kept is not None
    assert [m.id for m in kept.checkpoint["channel_values"]["messages"]] == [
        "h1",
        "ai-h1",
        "h2",
        "ai-h2",
    ]
    assert bob.get_tuple({"configurable": {"thread_id": "bobs-copy"}}) is None
    alice.ttl_seconds = 0.001  # alice's own sweep still takes her records, and only them
    assert alice.sweep() > 0
    assert [s.key for s in store.iter_summaries()] == ["run-1"]
    store.close()


def test_a_thread_deleted_by_another_saver_starts_again_here(tmp_path: Path) -> None:
    # this saver remembered the thread's lineage at its last revision, and the graph's next
    # step, starting the thread anew, raised ConflictError "written by another writer"; the
    # same after a Redis TTL expired the thread while the process was up
    url = str(tmp_path / "store")
    saver = AgentCheckpointSaver(url)
    graph = chat_graph(saver)
    config = {"configurable": {"thread_id": "t"}}
    graph.invoke({"messages": [HumanMessage("one", id="h1")]}, config)
    AgentCheckpointSaver(url).delete_thread("t")
    assert graph.get_state(config).values == {}
    out = graph.invoke({"messages": [HumanMessage("two", id="h2")]}, config)
    assert [m.text for m in out["messages"]] == ["two", "echo: two"]
    fresh = chat_graph(AgentCheckpointSaver(url))
    assert [m.text for m in fresh.get_state(config).values["messages"]] == ["two", "echo: two"]


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"owner": 42}, "owner must be a non-empty string, got 42"),  # stored as no owner
        ({"ttl": 60}, "ttl is LangGraph's TTLConfig, {'default_ttl': minutes}, got 60"),
        ({"ttl": {"ttl": 5}}, "ttl is LangGraph's TTLConfig"),  # was ignored
    ],
)
def test_a_saver_option_of_the_wrong_kind_is_refused_when_made(
    tmp_path: Path, options: dict[str, Any], named: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=re.escape(named)):
        AgentCheckpointSaver(str(tmp_path / "store"), **options)


# -- what a thread id, a namespace and a checkpoint's values may be ----------------------------


def test_a_thread_id_too_long_for_the_store_keys_is_refused_before_anything_is_written(
    url: str,
) -> None:
    """The longest thread id runs a graph and reads back; one character more is refused at
    the first put, naming thread_id and the longest allowed, with nothing stored (it was
    accepted, and its writes' keys then failed the store's limit after its checkpoint)."""
    store = open_store(url)
    saver = AgentCheckpointSaver(store)
    # a root-namespace writes key: langgraph/<thread>/-/c/<checkpoint id>/w/<task id>
    longest = MAX_KEY_LENGTH - len("langgraph//-/c//w/") - 2 * len(str(uuid.uuid4()))
    too_long = {"configurable": {"thread_id": "t" * (longest + 1)}}
    with pytest.raises(InvalidArgumentError, match=rf"thread_id .*longest allowed is {longest}\b"):
        chat_graph(saver).invoke({"messages": [HumanMessage("hi", id="h1")]}, too_long)
    assert list(store.iter_summaries()) == []
    config = {"configurable": {"thread_id": "t" * longest}}
    graph = chat_graph(saver)
    graph.invoke({"messages": [HumanMessage("one", id="h1")]}, config)
    graph.invoke({"messages": [HumanMessage("two", id="h2")]}, config)
    fresh = AgentCheckpointSaver(store)
    latest = fresh.get_tuple(config)
    assert latest is not None
    assert [m.id for m in latest.checkpoint["channel_values"]["messages"]] == [
        "h1",
        "ai-h1",
        "h2",
        "ai-h2",
    ]
    listed = list(fresh.list(config))
    assert len(listed) == 6 and listed[0].checkpoint["id"] == latest.checkpoint["id"]
    # a subgraph's namespace takes room too: the bound is computed for it, not the root's
    ns = f"child:{uuid.uuid4()}"
    room = longest - len(f"+{ns}") + len("-")
    for size, fits in ((room, True), (room + 1, False)):
        sub: Any = {"configurable": {"thread_id": "n" * size, "checkpoint_ns": ns}}
        checkpoint = empty_checkpoint()
        if not fits:
            with pytest.raises(InvalidArgumentError, match=rf"longest allowed is {room}\b"):
                saver.put(sub, checkpoint, {"step": 0}, {})
            assert list(store.iter_summaries(agent_id=f"langgraph:{'n' * size}")) == []
            continue
        stored = saver.put(sub, checkpoint, {"step": 0}, {})
        saver.put_writes(stored, [("channel", "value")], str(uuid.uuid4()))
        found = AgentCheckpointSaver(store).get_tuple(stored)
        assert found is not None and [w[1:] for w in found.pending_writes or []] == [
            ("channel", "value")
        ]
    store.close()


def test_copying_onto_a_thread_that_has_checkpoints_is_refused_and_changes_neither(
    url: str,
) -> None:
    """LangGraph's savers leave a copy onto a thread in use undefined (none of the official
    ones implements copy_thread); it silently replaced the target's lineage here, keeping its
    pending writes. It is refused, naming the target, and both threads stay as they were."""
    store = open_store(url)
    saver = AgentCheckpointSaver(store)
    graph = chat_graph(saver)
    source = {"configurable": {"thread_id": "source"}}
    target = {"configurable": {"thread_id": "target"}}
    graph.invoke({"messages": [HumanMessage("copied", id="s1")]}, source)
    graph.invoke({"messages": [HumanMessage("kept", id="t1")]}, target)

    def state() -> list[Any]:
        fresh = AgentCheckpointSaver(store)
        return [
            (
                sorted((s.key, s.revision) for s in store.iter_summaries(agent_id=tag)),
                [
                    (
                        t.checkpoint["id"],
                        [m.id for m in t.checkpoint["channel_values"].get("messages", [])],
                    )
                    for t in fresh.list({"configurable": {"thread_id": tag.split(":")[1]}})
                ],
            )
            for tag in ("langgraph:source", "langgraph:target")
        ]

    before = state()
    with pytest.raises(ConflictError, match="thread 'target' already has checkpoints"):
        saver.copy_thread("source", "target")
    with pytest.raises(ConflictError, match="thread 'target' already has checkpoints"):
        asyncio.run(saver.acopy_thread("source", "target"))
    assert state() == before
    latest = graph.get_state(target)
    assert [m.id for m in latest.values["messages"]] == ["t1", "ai-t1"]
    saver.copy_thread("source", "copy")  # a thread with nothing stored takes the copy
    copied = AgentCheckpointSaver(store).get_tuple({"configurable": {"thread_id": "copy"}})
    assert copied is not None
    assert [m.id for m in copied.checkpoint["channel_values"]["messages"]] == ["s1", "ai-s1"]
    store.close()


def noop_graph(saver: AgentCheckpointSaver) -> Any:
    graph = StateGraph(MessagesState)
    graph.add_node("noop", lambda state: {})
    graph.add_edge(START, "noop")
    return graph.compile(checkpointer=saver)


def test_a_message_field_json_lacks_reads_back_typed_in_another_saver(url: str) -> None:
    """A datetime or a UUID in a message's fields came back typed from the saver that wrote
    it (from its memory) and as a string from any other: LangGraph's serializer keeps them,
    and a fresh saver on the store reads back the values written, of their types."""
    store = open_store(url)
    when = datetime.datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=datetime.timezone.utc)
    call = uuid.uuid4()
    written = [
        HumanMessage("hi", id="h1", additional_kwargs={"sent": when, "lang": "en"}),
        AIMessage(
            "hello",
            id="a1",
            additional_kwargs={"request": call, "at": [{"naive": when.replace(tzinfo=None)}]},
            response_metadata={"created": when.date(), "model": "fake"},
        ),
    ]
    config = {"configurable": {"thread_id": "typed"}}
    noop_graph(AgentCheckpointSaver(store)).invoke({"messages": written}, config)
    latest = AgentCheckpointSaver(store).get_tuple(config)
    assert latest is not None
    human, ai = latest.checkpoint["channel_values"]["messages"]
    assert [human, ai] == written
    assert type(human.additional_kwargs["sent"]) is datetime.datetime
    assert human.additional_kwargs["sent"] == when
    assert type(ai.additional_kwargs["request"]) is uuid.UUID
    assert type(ai.additional_kwargs["at"][0]["naive"]) is datetime.datetime
    assert type(ai.response_metadata["created"]) is datetime.date
    said = store.get(next(s.key for s in store.iter_summaries(agent_id="langgraph:typed")))
    assert said is not None
    assert [(m.role, m.content) for m in said.history if m.role != "checkpoint"] == [
        ("user", "hi"),
        ("assistant", "hello"),
    ]  # the role and text stay readable by any tool
    store.close()


def test_a_tuple_in_a_message_reads_back_as_the_list_langgraphs_savers_give(url: str) -> None:
    """LangGraph's serializer stores a tuple as a list and its savers give a list back: a
    tuple anywhere in a message (its additional_kwargs, a tool's artifact, provider metadata)
    does not stop the run, and the saver that wrote it and a fresh one both read back what
    InMemorySaver does. The next step appends to the same history."""
    when = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
    written = [
        HumanMessage("hi", id="h1"),
        AIMessage(
            "hello",
            id="a1",
            additional_kwargs={"span": (3, 9), "at": [(when, 1)]},
            response_metadata={"logprobs": ((0.5, -2.25),), "model": "fake"},
        ),
        ToolMessage("found", tool_call_id="c1", id="t1", artifact=("doc", {"pages": (1, 2)})),
    ]
    config = {"configurable": {"thread_id": "tuples"}}
    theirs = InMemorySaver()
    noop_graph(theirs).invoke({"messages": written}, config)
    official = theirs.get_tuple(config)
    assert official is not None
    expected = official.checkpoint["channel_values"]["messages"]
    assert expected[1].additional_kwargs["span"] == [3, 9]  # what a list-for-tuple rule means
    store = open_store(url)
    saver = AgentCheckpointSaver(store)
    noop_graph(saver).invoke({"messages": written}, config)
    for reader in (saver, AgentCheckpointSaver(store)):
        latest = reader.get_tuple(config)
        assert latest is not None
        messages = latest.checkpoint["channel_values"]["messages"]
        assert messages == expected
        assert (
            type(messages[2].artifact) is list
            and type(messages[1].additional_kwargs["span"]) is list
        )
        assert messages[1].additional_kwargs["at"][0][0] == when
    chat_graph(saver).invoke({"messages": [HumanMessage("more", id="h2")]}, config)
    lineages = [s for s in store.iter_summaries(agent_id="langgraph:tuples") if "/m/" in s.key]
    assert len(lineages) == 1  # the next step extended the history, no new lineage
    latest = AgentCheckpointSaver(store).get_tuple(config)
    assert latest is not None
    ids = [m.id for m in latest.checkpoint["channel_values"]["messages"]]
    assert ids == ["h1", "a1", "t1", "h2", "ai-h2"]
    store.close()


# -- branches and races at a thread's start ---------------------------------------------------


def named_graph(saver: AgentCheckpointSaver) -> Any:
    """``start -> one -> two``, each node appending its name to ``name``."""

    class Named(TypedDict):
        name: Annotated[str, lambda a, b: f"{a} > {b}" if a else b]

    graph = StateGraph(Named)
    graph.add_node("one", lambda state: {"name": "one"})
    graph.add_node("two", lambda state: {"name": "two"})
    graph.add_edge(START, "one")
    graph.add_edge("one", "two")
    return graph.compile(checkpointer=saver)


def test_a_copy_of_an_older_checkpoint_branches_the_thread(url: str) -> None:
    """``update_state(older config, ..., as_node="__copy__")`` puts a copy beside the older
    checkpoint (its parent is the older one's parent, not the thread's latest): with one
    writer that is a branch, as LangGraph's own savers make it, not a conflict. The graph
    runs on from the copy; the first branch stays in the history."""
    store = open_store(url)
    graph = named_graph(AgentCheckpointSaver(store))
    config = {"configurable": {"thread_id": "forked"}}
    graph.invoke({"name": "start"}, config)
    history = list(graph.get_state_history(config))
    before_one = next(s for s in history if s.values == {"name": "start"})
    copied = graph.update_state(
        before_one.config,
        [StateUpdate(values={"name": "one*"}, as_node="one")],  # node one's result, replaced
        as_node="__copy__",
    )
    graph.invoke(None, copied)
    assert graph.get_state(config).values == {"name": "start > one* > two"}
    again = AgentCheckpointSaver(store)  # read back, nothing cached
    finals = {t.checkpoint["channel_values"].get("name") for t in again.list(config)}
    assert {"start > one > two", "start > one* > two"} <= finals
    store.close()


class FirstPutWaits(AgentCheckpointSaver):
    """A saver whose first put runs ``meanwhile()`` first: the delay between a run's read of
    its thread and its first checkpoint, made certain."""

    meanwhile: Any = None

    def put(self, *args: Any) -> Any:
        meanwhile, self.meanwhile = self.meanwhile, None
        if meanwhile is not None:
            meanwhile()
        return super().put(*args)

    async def aput(self, *args: Any) -> Any:
        meanwhile, self.meanwhile = self.meanwhile, None
        if meanwhile is not None:
            await meanwhile()
        return await super().aput(*args)


@pytest.mark.parametrize("savers", ["two savers", "one saver"])
def test_a_run_that_read_an_empty_thread_conflicts_once_another_run_started_it(
    url: str, savers: str
) -> None:
    """Run B reads the empty thread; run A starts it; B's first checkpoint is refused with
    ConflictError: the thread keeps A's messages in one lineage, and B's are nowhere."""
    store = open_store(url)
    late = FirstPutWaits(store)
    first = late if savers == "one saver" else AgentCheckpointSaver(store)
    config = {"configurable": {"thread_id": "new"}}

    def run_a_starts_the_thread() -> None:
        chat_graph(first).invoke({"messages": [HumanMessage("from a", id="a")]}, config)

    late.meanwhile = run_a_starts_the_thread
    with pytest.raises(ConflictError, match="found the thread empty"):
        chat_graph(late).invoke({"messages": [HumanMessage("from b", id="b")]}, config)
    reader = AgentCheckpointSaver(store)
    latest = reader.get_tuple(config)
    assert latest is not None
    assert [m.id for m in latest.checkpoint["channel_values"]["messages"]] == ["a", "ai-a"]
    lineages = [s.key for s in store.iter_summaries(agent_id="langgraph:new") if "/m/" in s.key]
    assert lineages == ["langgraph/new/-/m/0"]
    every = {
        m.id
        for t in reader.list(config)
        for m in t.checkpoint["channel_values"].get("messages", [])
    }
    assert every == {"a", "ai-a"}
    # having read the thread again, B continues it
    chat_graph(late).invoke({"messages": [HumanMessage("b again", id="b2")]}, config)
    final = reader.get_tuple(config)
    assert final is not None
    ids = [m.id for m in final.checkpoint["channel_values"]["messages"]]
    assert ids == ["a", "ai-a", "b2", "ai-b2"]
    store.close()


def test_an_async_run_that_read_an_empty_thread_conflicts_too(url: str) -> None:
    """The same race through ``ainvoke`` (the async methods, as LangGraph's server runs them)."""
    store = open_store(url)
    late, first = FirstPutWaits(store), AgentCheckpointSaver(store)
    config = {"configurable": {"thread_id": "new"}}

    async def race() -> None:
        async def run_a_starts_the_thread() -> None:
            step = {"messages": [HumanMessage("from a", id="a")]}
            await chat_graph(first).ainvoke(step, config)

        late.meanwhile = run_a_starts_the_thread
        with pytest.raises(ConflictError, match="found the thread empty"):
            await chat_graph(late).ainvoke({"messages": [HumanMessage("from b", id="b")]}, config)
        latest = await AgentCheckpointSaver(store).aget_tuple(config)
        assert latest is not None
        assert [m.id for m in latest.checkpoint["channel_values"]["messages"]] == ["a", "ai-a"]

    asyncio.run(race())
    lineages = [s.key for s in store.iter_summaries(agent_id="langgraph:new") if "/m/" in s.key]
    assert lineages == ["langgraph/new/-/m/0"]
    store.close()
