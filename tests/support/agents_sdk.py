"""A tool-calling OpenAI Agents SDK agent driven by a scripted fake model (no network), for
the session's tests. Run as a process of its own::

    python -m support.agents_sdk URL SESSION QUESTION

runs one turn of the conversation kept in session ``SESSION`` of the store at ``URL`` and
prints, as JSON, the input the model was given on the turn's first call and the final output.

The model answers from what it is given, so a process that continues a session is answered
as the stored history stands: a question about a city gets a reasoning item and a call of the
weather tool, the tool's output gets the answer, and the answer names every city asked about
so far in the conversation.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import AsyncIterator, Sequence
from typing import Any

from agents import Agent, ModelSettings, Runner, function_tool, set_tracing_disabled
from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
from agents.models.interface import Model, ModelTracing
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
)
from openai.types.responses.response_reasoning_item import Summary

from agent_checkpoint.integrations.openai_agents import AgentCheckpointSession

set_tracing_disabled(True)  # no trace export: no network, no API key

WEATHER = {"Paris": "sunny", "Rome": "rainy", "Oslo": "snowy"}
_CITY = re.compile(r"\b(" + "|".join(WEATHER) + r")\b")


@function_tool
def weather(city: str) -> str:
    """The weather in a city."""
    return WEATHER[city]


def _text(item: Any) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or () if isinstance(p, dict))


class ScriptedModel(Model):
    """Answers from the input it is given (see the module docstring); records every input."""

    def __init__(self) -> None:
        self.inputs: list[list[TResponseInputItem]] = []

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> ModelResponse:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        self.inputs.append(json.loads(json.dumps(items)))
        n = len(self.inputs)
        last = items[-1]
        output: list[Any]
        if last.get("type") == "function_call_output":
            asked = [c for i in items if i.get("role") == "user" for c in _CITY.findall(_text(i))]
            output = [
                ResponseOutputMessage(
                    id=f"msg-{n}",
                    type="message",
                    role="assistant",
                    status="completed",
                    content=[
                        ResponseOutputText(
                            type="output_text",
                            text=f"{asked[-1]} is {last['output']}. You asked about "
                            + ", ".join(asked),
                            annotations=[],
                        )
                    ],
                )
            ]
        else:
            city = _CITY.search(_text(last))
            output = [
                ResponseReasoningItem(
                    id=f"rs-{n}",
                    type="reasoning",
                    summary=[Summary(type="summary_text", text="the weather tool knows")],
                ),
                ResponseFunctionToolCall(
                    id=f"fc-{n}",
                    type="function_call",
                    call_id=f"call-{n}",
                    name="weather",
                    arguments=json.dumps({"city": city.group(1) if city else "Paris"}),
                ),
            ]
        return ModelResponse(output=output, usage=Usage(), response_id=f"resp-{n}")

    def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError("the tests run the agent without streaming")


def agent(model: ScriptedModel) -> Agent[Any]:
    return Agent(
        name="forecaster", instructions="Answer about the weather.", model=model, tools=[weather]
    )


async def one_turn(session: AgentCheckpointSession, question: str) -> dict[str, Any]:
    """One turn through the SDK's Runner: the model's first input, and the final output."""
    model = ScriptedModel()
    result = await Runner.run(agent(model), question, session=session)
    return {"input": model.inputs[0], "output": result.final_output}


# -- stores --------------------------------------------------------------------------------------


def main(argv: Sequence[str]) -> int:
    url, session_id, question = argv

    async def run() -> dict[str, Any]:
        session = AgentCheckpointSession(session_id, url)
        try:
            return await one_turn(session, question)
        finally:
            await session.close()

    print(json.dumps(asyncio.run(run())))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
