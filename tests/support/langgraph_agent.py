"""A tool-calling LangGraph agent driven by a scripted fake chat model (no network), for the
saver's tests. Run as a process of its own::

    python -m support.langgraph_agent URL THREAD start|resume [async]

``start`` asks the question, ``resume`` continues the thread from its latest checkpoint
(``graph.invoke(None, ...)``). With ``AGENT_TOOL_FAILS=1`` the weather tool raises for Rome,
which interrupts the run (exit status 3). On success it prints the final messages as JSON.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from agent_checkpoint.integrations.langgraph import AgentCheckpointSaver

QUESTION = "What is the weather in Paris and in Rome?"
ANSWER = "Paris is sunny; Rome is rainy."
SCRIPT = [
    AIMessage(
        content="",
        id="ai-1",
        tool_calls=[{"name": "weather", "args": {"city": "Paris"}, "id": "call-1"}],
    ),
    AIMessage(
        content="",
        id="ai-2",
        tool_calls=[{"name": "weather", "args": {"city": "Rome"}, "id": "call-2"}],
    ),
    AIMessage(content=ANSWER, id="ai-3"),
]
EXPECTED = [
    ("human", QUESTION),
    ("ai", ""),
    ("tool", "sunny"),
    ("ai", ""),
    ("tool", "rainy"),
    ("ai", ANSWER),
]


@tool
def weather(city: str) -> str:
    """The weather in a city."""
    if city == "Rome" and os.environ.get("AGENT_TOOL_FAILS") == "1":
        raise RuntimeError("the weather service is down")
    return {"Paris": "sunny", "Rome": "rainy"}[city]


def agent(state: MessagesState) -> dict[str, Any]:
    # the model's next scripted reply: one per assistant turn already taken, so that a
    # process resuming the thread continues the script where the stored history stands
    turns = sum(isinstance(m, AIMessage) for m in state["messages"])
    model = FakeMessagesListChatModel(responses=SCRIPT[turns:])
    return {"messages": [model.invoke(state["messages"])]}


def build(checkpointer: Any) -> Any:
    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([weather], handle_tool_errors=False))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=checkpointer)


def summary(messages: list[BaseMessage]) -> list[tuple[str, str]]:
    return [(m.type, m.text) for m in messages]


def main(argv: list[str]) -> int:
    url, thread, mode, *flags = argv
    saver = AgentCheckpointSaver(url)
    graph = build(saver)
    config = {"configurable": {"thread_id": thread}}
    inputs = {"messages": [HumanMessage(QUESTION, id="human-1")]} if mode == "start" else None
    try:
        if "async" in flags:

            async def run() -> Any:
                try:
                    return await graph.ainvoke(inputs, config)
                finally:
                    await saver.aclose()

            result = asyncio.run(run())
        else:
            with saver:
                result = graph.invoke(inputs, config)
    except RuntimeError as exc:
        print(f"interrupted: {exc}", file=sys.stderr)
        return 3
    print(json.dumps(summary(result["messages"])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
