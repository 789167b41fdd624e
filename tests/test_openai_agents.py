"""The OpenAI Agents SDK session (``agent_checkpoint.integrations.openai_agents``) on every
backend's real server: the SDK's own ``Runner`` (a scripted model, no network) continuing a
conversation in another process, concurrent writers that lose no item, the SDK's item types
kept exactly, sessions listed newest first, and bad input refused by name."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from agents.memory import Session, SessionSettings
from support.agents_sdk import one_turn
from support.processes import turn_in_a_process_of_its_own
from support.store_urls import url_for_processes as backend_url

from agent_checkpoint import (
    AsyncStore,
    DecryptionError,
    InvalidArgumentError,
    Keyring,
    Message,
    OwnershipConflictError,
    RunCheckpoint,
    Store,
    ToolCall,
    open_async_store,
    open_store,
)
from agent_checkpoint.integrations.openai_agents import (
    AgentCheckpointSession,
    list_sessions,
)

BACKENDS = ["memory", "disk", "redis", "postgres", "s3"]


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with backend_url(request.param, request, tmp_path) as opened:
        yield opened


def sid() -> str:
    return f"s-{uuid.uuid4().hex[:8]}"


# -- a conversation through the SDK's Runner, continued by another process ----------------------


def first_turn_in_a_process_of_its_own(url: str, session_id: str, question: str) -> str:
    return turn_in_a_process_of_its_own("agents_sdk", url, session_id, question)


def test_a_conversation_continues_after_the_process_that_began_it_ended(url: str) -> None:
    session_id = sid()
    if url.startswith("memory:"):  # one process: two sessions on one store stand for two
        store = open_store(url)
        first = asyncio.run(
            one_turn(AgentCheckpointSession(session_id, store), "What is the weather in Paris?")
        )["output"]
        session = AgentCheckpointSession(session_id, store)
    else:
        first = first_turn_in_a_process_of_its_own(url, session_id, "What is the weather in Paris?")
        session = AgentCheckpointSession(session_id, url)
    assert first == "Paris is sunny. You asked about Paris"

    async def second_turn() -> tuple[dict[str, Any], list[Any]]:
        try:
            turn = await one_turn(session, "And in Rome?")
            return turn, await session.get_items()
        finally:
            await session.close()

    turn, items = asyncio.run(second_turn())
    # the model was given the first turn, as the first process stored it, then the question
    assert [(i.get("type"), i.get("role")) for i in turn["input"]] == [
        (None, "user"),
        ("reasoning", None),
        ("function_call", None),
        ("function_call_output", None),
        ("message", "assistant"),
        (None, "user"),
    ]
    assert turn["input"][3]["output"] == "sunny"
    assert turn["output"] == "Rome is rainy. You asked about Paris, Rome"
    assert items[: len(turn["input"])] == turn["input"]
    assert len(items) == 10
    # and any tool of this library reads the conversation as messages
    with open_store(url) if not url.startswith("memory:") else store as reader:
        stored = reader.get(session.key)
        assert stored is not None
        assert [(m.role, m.content) for m in stored.history if m.content] == [
            ("user", "What is the weather in Paris?"),
            ("tool", "sunny"),
            ("assistant", "Paris is sunny. You asked about Paris"),
            ("user", "And in Rome?"),
            ("tool", "rainy"),
            ("assistant", "Rome is rainy. You asked about Paris, Rome"),
        ]
        call = stored.history[2].tool_calls
        assert call == (ToolCall("call-1", "weather", {"city": "Paris"}),)
        assert stored.history[3].tool_call_id == "call-1"
        thinking = stored.history[1].thinking_blocks
        assert thinking is not None and thinking[0].content == "the weather tool knows"


# -- concurrency ------------------------------------------------------------------------------


def writers(url: str, session_id: str) -> tuple[list[AgentCheckpointSession], list[Any]]:
    """Two session objects on one session, each on a store of its own, as two processes
    would have them (on memory://, where each opening is a store of its own, one ``Store``)."""
    if url.startswith("memory:"):
        store = open_store(url)
        stores: list[Any] = [store, store]
    else:
        stores = [open_async_store(url), open_async_store(url)]
    return [AgentCheckpointSession(session_id, store) for store in stores], stores


async def closing(stores: list[Any]) -> None:
    for store in stores:
        if isinstance(store, AsyncStore):
            await store.close()


def test_concurrent_add_items_lose_no_item(url: str) -> None:
    session_id = sid()

    async def run() -> list[Any]:
        sessions, stores = writers(url, session_id)
        try:
            await asyncio.gather(
                *(
                    sessions[i % 2].add_items([{"role": "user", "content": f"item {i}"}])
                    for i in range(100)
                )
            )
            return await AgentCheckpointSession(session_id, stores[0]).get_items()
        finally:
            await closing(stores)

    items = asyncio.run(run())
    numbers = [int(item["content"].split()[1]) for item in items]
    assert sorted(numbers) == list(range(100))  # each item once: none lost, none twice
    for writer in range(2):  # each object's calls in the order they were made
        mine = [n for n in numbers if n % 2 == writer]
        assert mine == sorted(mine)


def test_concurrent_pop_item_returns_each_item_once(url: str) -> None:
    session_id = sid()

    async def run() -> tuple[list[Any], list[Any], Any]:
        sessions, stores = writers(url, session_id)
        try:
            await sessions[0].add_items(
                [{"role": "user", "content": f"item {i}"} for i in range(100)]
            )
            popped = await asyncio.gather(*(sessions[i % 2].pop_item() for i in range(100)))
            left = await sessions[1].get_items()
            return popped, left, await sessions[0].pop_item()
        finally:
            await closing(stores)

    popped, left, after = asyncio.run(run())
    assert all(item is not None for item in popped)
    assert sorted(int(item["content"].split()[1]) for item in popped) == list(range(100))
    assert left == [] and after is None


# -- what is stored ---------------------------------------------------------------------------

ITEMS: list[Any] = [
    {"role": "system", "content": "You forecast the weather."},
    {"content": "Weather in Zürich? ☂", "role": "user"},
    {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_text", "text": "and this map"},
            {"type": "input_image", "image_url": "https://example.com/m.png", "detail": "auto"},
        ],
    },
    {
        "id": "rs_1",
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "look it up"}],
        "encrypted_content": "gAAAAB...",
    },
    {
        "arguments": '{"city": "Zürich", "days": [1, 2.5]}',
        "call_id": "call_1",
        "name": "weather",
        "type": "function_call",
        "id": "fc_1",
        "status": "completed",
    },
    {"type": "function_call", "call_id": "call_2", "name": "raw", "arguments": "not json"},
    {"call_id": "call_1", "output": "rain", "type": "function_call_output"},
    {
        "type": "function_call_output",
        "call_id": "call_2",
        "output": [{"type": "input_text", "text": "a list"}],
    },
    {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search"}},
    {"type": "custom_tool_call", "call_id": "ct_1", "name": "patch", "input": "*** Begin"},
    {"type": "custom_tool_call_output", "call_id": "ct_1", "output": "done"},
    {"type": "item_reference", "id": "msg_0"},
    {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Rain.", "annotations": [], "logprobs": []}],
    },
    {"role": "user", "content": "", "extra": {"n": None, "big": 2**63, "f": -0.5, "t": True}},
]


def test_the_sdks_items_come_back_exactly_as_they_were_added(url: str) -> None:
    session_id = sid()

    # memory://: one Store given to both (each opening of the URL is a store of its own)
    store: Store | str = open_store(url) if url.startswith("memory:") else url

    async def run() -> tuple[list[Any], list[Any], list[Any]]:
        writer = AgentCheckpointSession(session_id, store)
        await writer.add_items(ITEMS[:5])
        await writer.add_items(ITEMS[5:])
        await writer.close()
        reader = AgentCheckpointSession(session_id, store)  # nothing cached: read back
        try:
            # limited first: a session object that has read nothing reads only the newest
            # messages (Store.get_json(last=)); then the whole history, kept by the object
            latest, none = await reader.get_items(limit=3), await reader.get_items(limit=0)
            everything = await reader.get_items()
            assert await reader.get_items(limit=3) == latest  # from what the object holds
            return everything, latest, none
        finally:
            await reader.close()

    everything, latest, none = asyncio.run(run())
    assert json.dumps(everything) == json.dumps(ITEMS)  # the same values, keys in their order
    assert latest == ITEMS[-3:] and none == []


def test_the_history_reads_as_messages_with_tool_calls(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "store"))
    asyncio.run(AgentCheckpointSession("s", store).add_items(ITEMS))
    stored = store.get("openai-agents/s")
    assert stored is not None
    assert [m.role for m in stored.history] == [
        "system",
        "user",
        "user",
        "assistant",
        "assistant",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "assistant",
        "tool",
        "assistant",
        "assistant",
        "user",
    ]
    assert stored.history[2].content == "and this map"
    assert stored.history[4].tool_calls == (
        ToolCall("call_1", "weather", {"city": "Zürich", "days": [1, 2.5]}),
    )
    raw = stored.history[5].tool_calls
    assert (
        raw is not None and raw[0].args == {} and raw[0].provider_meta == {"arguments": "not json"}
    )
    assert [m.tool_call_id for m in stored.history[6:8]] == ["call_1", "call_2"]
    assert stored.history[7].content == "a list"
    assert stored.history[12].content == "Rain."
    assert stored.original_input.message == ""  # the last user message's text
    assert stored.identity is not None and stored.identity.principal == "openai-agents"


def test_a_call_writes_only_its_items(monkeypatch: pytest.MonkeyPatch) -> None:
    """The items live in one appended history: a call writes what it adds (and the store's
    segment layer at most ``INLINE_BYTES`` of recent history with it), however long the
    session grows; and each item's text is stored once."""
    from agent_checkpoint._segments import INLINE_BYTES
    from agent_checkpoint.backends._memory import MemoryBackend

    written: list[int] = []
    save = MemoryBackend.save

    def counting(self: MemoryBackend, record: Any, **kwargs: Any) -> Any:
        written.append(len(record.body))
        return save(self, record, **kwargs)

    monkeypatch.setattr(MemoryBackend, "save", counting)
    store = open_store("memory://")
    session = AgentCheckpointSession("long", store)
    steps: list[int] = []

    async def run() -> None:
        for step in range(60):
            before = sum(written)
            await session.add_items(
                [
                    {"role": "user", "content": f"question {step} " + "x" * 1000},
                    {"call_id": f"c{step}", "output": "y" * 1000, "type": "function_call_output"},
                ]
            )
            steps.append(sum(written) - before)

    asyncio.run(run())
    summary = store.head("openai-agents/long")
    assert summary is not None and 60 * 2000 < summary.size < 60 * 2400  # each text once
    assert max(steps) < INLINE_BYTES + 3 * 2400  # not the whole history: 140 KB at the end
    assert asyncio.run(session.get_items(limit=1))[0]["output"] == "y" * 1000


def test_a_history_another_tool_wrote_reads_as_items(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "store"))
    calls = (ToolCall("c1", "search", {"q": "x"}), ToolCall("c2", "open", {"n": 1}))
    history = (
        Message("user", "find x"),
        Message("assistant", "looking", tool_calls=calls),
        Message("tool", "found", tool_call_id="c1", tool_name="search"),
    )
    store.put(RunCheckpoint.new("find x", history), key="openai-agents/imported")
    session = AgentCheckpointSession("imported", store)

    async def run() -> tuple[list[Any], Any, list[Any]]:
        items = await session.get_items()
        await session.pop_item()  # the tool result
        return items, await session.pop_item(), await session.get_items()

    # read cold, with a limit that ends inside the message that stands for three items
    fresh = [
        asyncio.run(AgentCheckpointSession("imported", store).get_items(limit=n)) for n in (2, 4)
    ]
    items, popped, left = asyncio.run(run())
    assert fresh == [items[-2:], items[-4:]]
    assert items == [
        {"role": "user", "content": "find x"},
        {"role": "assistant", "content": "looking"},
        {"type": "function_call", "call_id": "c1", "name": "search", "arguments": '{"q":"x"}'},
        {"type": "function_call", "call_id": "c2", "name": "open", "arguments": '{"n":1}'},
        {"type": "function_call_output", "call_id": "c1", "output": "found"},
    ]
    assert popped == items[3]  # one item of the message that held three: the others stay
    assert left == items[:3]


# -- listing ----------------------------------------------------------------------------------


def test_sessions_list_newest_first_a_page_at_a_time(url: str) -> None:
    async def run() -> tuple[list[list[str]], list[str], list[str]]:
        store = open_store(url) if url.startswith("memory:") else open_async_store(url)
        try:
            for n in range(5):
                session = AgentCheckpointSession(f"chat-{n}", store, owner="team-a")
                await session.add_items([{"role": "user", "content": f"hello {n}"}])
                await asyncio.sleep(0.003)  # each written in a millisecond of its own
            other = AgentCheckpointSession("chat-x", store, owner="team-b")
            await other.add_items([{"role": "user", "content": "not team a's"}])
            pages, cursor = [], None
            while True:
                page = await session.list_sessions(limit=2, cursor=cursor)
                pages.append([s.session_id for s in page.sessions])
                cursor = page.cursor
                if cursor is None:
                    break
            await AgentCheckpointSession("chat-1", store, owner="team-a").add_items(
                [{"role": "assistant", "content": "hi"}]
            )
            after = await session.list_sessions()
            theirs = await other.list_sessions()
            return (
                pages,
                [s.session_id for s in after.sessions],
                [s.session_id for s in theirs.sessions],
            )
        finally:
            if isinstance(store, AsyncStore):
                await store.close()

    pages, after, theirs = asyncio.run(run())
    assert pages == [["chat-4", "chat-3"], ["chat-2", "chat-1"], ["chat-0"]]
    assert after == ["chat-1", "chat-4", "chat-3", "chat-2", "chat-0"]  # by last write
    assert theirs == ["chat-x"]


def test_list_sessions_reads_a_store_or_a_url(tmp_path: Path) -> None:
    path = str(tmp_path / "store")
    with open_store(path) as store:
        asyncio.run(
            AgentCheckpointSession("a", store).add_items([{"role": "user", "content": "1"}])
        )
        store.put(RunCheckpoint.new("not a session", run_id="run-1"), key="other/run-1")
        (info,) = list_sessions(store).sessions
    assert info.session_id == "a" and info.message_count == 1 and info.size > 0
    assert [s.session_id for s in list_sessions(path).sessions] == ["a"]
    assert list_sessions(path, owner="nobody").sessions == []


# -- owners, TTL and encryption ----------------------------------------------------------------


def test_a_session_owned_by_another_principal_is_refused(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "store"))
    alice = AgentCheckpointSession("s", store, owner="alice")
    asyncio.run(alice.add_items([{"role": "user", "content": "mine"}]))
    bob = AgentCheckpointSession("s", store, owner="bob")
    calls: list[Callable[[], Coroutine[Any, Any, Any]]] = [
        lambda: AgentCheckpointSession("s", store, owner="bob").get_items(limit=1),
        bob.get_items,
        lambda: bob.add_items([{"role": "user", "content": "x"}]),
        bob.pop_item,
        bob.clear_session,
    ]
    for call in calls:
        with pytest.raises(OwnershipConflictError, match="owned by 'alice'"):
            asyncio.run(call())
    stored = store.get("openai-agents/s")
    assert stored is not None and [m.content for m in stored.history] == ["mine"]


def test_items_are_encrypted_at_rest_with_a_keyring(tmp_path: Path) -> None:
    path = str(tmp_path / "store")
    keyring = Keyring({"k1": Keyring.generate_key()}, "k1")

    async def run() -> list[Any]:
        async with AgentCheckpointSession("secret", path, keyring=keyring) as session:
            await session.add_items([{"role": "user", "content": "my password is hunter2"}])
            await session.add_items([{"role": "assistant", "content": "noted"}])
        async with AgentCheckpointSession("secret", path, keyring=keyring) as session:
            return await session.get_items()

    assert [i["content"] for i in asyncio.run(run())] == ["my password is hunter2", "noted"]
    stored = b"".join(p.read_bytes() for p in Path(path).rglob("*") if p.is_file())
    assert b"hunter2" not in stored
    with pytest.raises(DecryptionError):
        open_store(path).get("openai-agents/secret")


def test_a_session_on_redis_with_a_ttl_expires_when_idle(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    with backend_url("redis", request, tmp_path) as url:

        async def run() -> tuple[list[Any], list[Any]]:
            async with AgentCheckpointSession("brief", url, ttl=1) as session:
                await session.add_items([{"role": "user", "content": "soon gone"}])
                kept = await session.get_items()
                await asyncio.sleep(1.3)
                return kept, await session.get_items()

        kept, expired = asyncio.run(run())
        assert kept == [{"role": "user", "content": "soon gone"}] and expired == []
        client = redis.Redis.from_url(url.split("?")[0])
        prefix = url.split("prefix=")[1]
        left = [k for k in client.scan_iter(match="{" + prefix + "}*") if b"openai-agents" in k]
        assert left == []  # the record, its index entries and its pieces all expired
        client.close()


# -- the protocol, and bad input -------------------------------------------------------------------


def test_it_is_a_session_of_the_sdk_and_clears(tmp_path: Path) -> None:
    session = AgentCheckpointSession("c", str(tmp_path / "store"))
    assert isinstance(session, Session)

    async def run() -> tuple[list[Any], list[Any], Any]:
        await session.add_items(
            [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
        )
        before = await session.get_items()
        await session.clear_session()
        await session.clear_session()  # idempotent
        return before, await session.get_items(), await session.pop_item()

    before, after, popped = asyncio.run(run())
    assert len(before) == 2 and after == [] and popped is None
    assert list_sessions(str(tmp_path / "store")).sessions == []


def test_session_settings_limit_the_items_get_items_returns(tmp_path: Path) -> None:
    session = AgentCheckpointSession(
        "l", str(tmp_path / "store"), session_settings=SessionSettings(limit=2)
    )

    async def run() -> tuple[list[Any], list[Any]]:
        await session.add_items([{"role": "user", "content": str(n)} for n in range(5)])
        return await session.get_items(), await session.get_items(limit=4)

    default, asked = asyncio.run(run())
    assert [i["content"] for i in default] == ["3", "4"]
    assert [i["content"] for i in asked] == ["1", "2", "3", "4"]


@pytest.mark.parametrize(
    ("items", "message"),
    [
        ("hello", "takes a list of items"),
        ([{"role": "user", "content": "ok"}, "hello"], r"items\[1\] is a str, not a dict"),
        ([{"content": "no role"}], r"items\[0\] has neither a 'type' nor a 'role'"),
        ([{"role": "user", "content": float("nan")}], r"items\[0\]\['content'\] is nan"),
        (
            [{"role": "user", "content": [{"x": {1, 2}}]}],
            r"items\[0\]\['content'\]\[0\]\['x'\] is a set",
        ),
        ([{"role": "user", "content": "x", 3: "y"}], r"items\[0\] has the key 3"),
        ([{"role": "user", "content": "x", "n": 2**70}], r"items\[0\]\['n'\] is the integer"),
    ],
)
def test_items_json_cannot_hold_are_refused_by_name_and_nothing_is_stored(
    tmp_path: Path, items: Any, message: str
) -> None:
    session = AgentCheckpointSession("bad", str(tmp_path / "store"))
    asyncio.run(session.add_items([{"role": "user", "content": "kept"}]))
    with pytest.raises(InvalidArgumentError, match=message):
        asyncio.run(session.add_items(items))
    fresh = AgentCheckpointSession("bad", str(tmp_path / "store"))
    assert asyncio.run(fresh.get_items()) == [{"role": "user", "content": "kept"}]


def test_bad_arguments_are_refused_by_name(tmp_path: Path) -> None:
    path = str(tmp_path / "store")
    with pytest.raises(InvalidArgumentError, match="session_id must be a non-empty string"):
        AgentCheckpointSession("", path)
    with pytest.raises(InvalidArgumentError, match="session_id must be a non-empty string"):
        AgentCheckpointSession(42, path)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="control or non-printable"):
        AgentCheckpointSession("a\nb", path)
    with pytest.raises(InvalidArgumentError, match="owner must be"):
        AgentCheckpointSession("s", path, owner="")
    with pytest.raises(InvalidArgumentError, match="store must be"):
        AgentCheckpointSession("s", 3.5)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="store options go with a store URL"):
        AgentCheckpointSession("s", open_store(path), ttl=5)
    session = AgentCheckpointSession("s", path)
    for limit in (-1, 1.5, True):
        with pytest.raises(InvalidArgumentError, match="limit must be a whole number"):
            asyncio.run(session.get_items(limit=limit))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="limit must be a positive whole number"):
        list_sessions(path, limit=0)


def test_a_session_id_and_store_given_in_the_wrong_order_are_refused_and_nothing_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``AgentCheckpointSession(store, session_id)`` would open a new disk store named after
    the session, beside the real one; it is refused, naming the order."""
    monkeypatch.chdir(tmp_path)
    store = tmp_path / "store"
    asyncio.run(
        AgentCheckpointSession("user-1", str(store)).add_items([{"role": "user", "content": "hi"}])
    )
    for swapped in (str(store), "redis://127.0.0.1:6379/0"):
        with pytest.raises(InvalidArgumentError, match="the session id comes first"):
            AgentCheckpointSession(swapped, "user-1")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]
    # an id that merely holds a slash, or a store folder that exists, is not a swap
    session = AgentCheckpointSession("team/user-1", "store")
    asyncio.run(session.add_items([{"role": "user", "content": "ok"}]))
    assert asyncio.run(session.get_items()) == [{"role": "user", "content": "ok"}]


def test_a_conversation_written_before_a_restart_is_not_cached_stale(tmp_path: Path) -> None:
    """Two processes' sessions on one conversation (here two objects on one store): each
    sees what the other wrote, and pops what is stored now, not what it last saw."""
    store = open_store(str(tmp_path / "store"))
    one, two = AgentCheckpointSession("x", store), AgentCheckpointSession("x", store)

    async def run() -> tuple[list[Any], Any, list[Any]]:
        await one.add_items([{"role": "user", "content": "1"}])
        await two.add_items([{"role": "user", "content": "2"}])
        seen = await one.get_items()
        await two.clear_session()
        await two.add_items([{"role": "user", "content": "3"}])
        return seen, await one.pop_item(), await one.get_items()

    seen, popped, left = asyncio.run(run())
    assert [i["content"] for i in seen] == ["1", "2"]
    assert popped == {"role": "user", "content": "3"} and left == []


def test_session_settings_may_be_a_dict_of_its_fields_as_the_sdks_sessions_take(
    tmp_path: Path,
) -> None:
    from agents.memory import SQLiteSession

    session = AgentCheckpointSession("d", str(tmp_path / "store"), session_settings={"limit": 2})
    assert (
        session.session_settings
        == SQLiteSession("d", session_settings={"limit": 2}).session_settings
    )

    async def run() -> list[Any]:
        await session.add_items([{"role": "user", "content": str(n)} for n in range(5)])
        return await session.get_items()

    assert [i["content"] for i in asyncio.run(run())] == ["3", "4"]
    with pytest.raises(TypeError, match="Unknown session settings: lmit"):
        AgentCheckpointSession("d", str(tmp_path / "store"), session_settings={"lmit": 2})
    with pytest.raises(TypeError, match="SessionSettings or a dict"):
        AgentCheckpointSession("d", str(tmp_path / "store"), session_settings=[("limit", 2)])
