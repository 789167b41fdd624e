"""A tool-calling Google ADK agent driven by a scripted fake model (no network), for the ADK
session service's tests. Run as a process of its own::

    python -m support.adk_agent URL SESSION QUESTION

runs one turn of the conversation kept in session ``SESSION`` (app ``forecast``, user
``alice``) of the store at ``URL`` and prints, as JSON, the conversation the model was given
on the turn's first call (role and text or call of each content) and the final answer.

The model answers from what it is given, so a process that continues a session is answered
as the stored history stands: a question about a city gets a call of the weather tool, the
tool's response gets the answer, and the answer names every city asked about so far.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import AsyncGenerator, Sequence
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions.base_session_service import BaseSessionService
from google.genai import types
from pydantic import Field

from agent_checkpoint.integrations.adk import AgentCheckpointSessionService

APP, USER = "forecast", "alice"
WEATHER = {"Paris": "sunny", "Rome": "rainy", "Oslo": "snowy"}
_CITY = re.compile(r"\b(" + "|".join(WEATHER) + r")\b")


def weather(city: str) -> str:
    """The weather in a city."""
    return WEATHER[city]


def _seen(content: types.Content) -> list[Any]:
    """What the model was given of one content: (role, text, call name, response)."""
    return [
        [
            content.role,
            part.text,
            part.function_call.name if part.function_call else None,
            part.function_response.response if part.function_response else None,
        ]
        for part in content.parts or ()
    ]


class ScriptedModel(BaseLlm):
    """Answers from the contents it is given (see the module docstring); records them."""

    model: str = "scripted"
    inputs: list[list[Any]] = Field(default_factory=list)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        contents = llm_request.contents
        self.inputs.append([seen for c in contents for seen in _seen(c)])
        last = contents[-1].parts[-1] if contents and contents[-1].parts else None
        if last is not None and last.function_response is not None:
            asked = [
                city
                for c in contents
                if c.role == "user"
                for p in c.parts or ()
                if p.text
                for city in _CITY.findall(p.text)
            ]
            result = (last.function_response.response or {}).get("result")
            text = f"{asked[-1]} is {result}. You asked about " + ", ".join(asked)
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))
            return
        city = _CITY.search(last.text or "") if last is not None else None
        call = types.FunctionCall(
            id=f"call-{len(contents)}",
            name="weather",
            args={"city": city.group(1) if city else "Paris"},
        )
        yield LlmResponse(
            content=types.Content(role="model", parts=[types.Part(function_call=call)])
        )


async def one_turn(service: BaseSessionService, session_id: str, question: str) -> dict[str, Any]:
    """One turn through ADK's Runner: what the model was first given, and the final answer."""
    model = ScriptedModel()
    agent = LlmAgent(
        name="forecaster", model=model, instruction="Answer about the weather.", tools=[weather]
    )
    runner = Runner(agent=agent, app_name=APP, session_service=service, auto_create_session=True)
    answer = ""
    message = types.Content(role="user", parts=[types.Part(text=question)])
    async for event in runner.run_async(user_id=USER, session_id=session_id, new_message=message):
        if event.is_final_response() and event.content and event.content.parts:
            answer = "".join(p.text or "" for p in event.content.parts)
    return {"input": model.inputs[0], "output": answer}


def main(argv: Sequence[str]) -> int:
    url, session_id, question = argv

    async def run() -> dict[str, Any]:
        async with AgentCheckpointSessionService(url) as service:
            return await one_turn(service, session_id, question)

    print(json.dumps(asyncio.run(run())))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
