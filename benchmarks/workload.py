"""The synthetic agent conversation every target stores, and its shape in each API.

A conversation is a repeating turn of four messages: a user request, an assistant message
that calls a tool (empty text, the call's arguments carry the payload), the tool's result and
the assistant's answer. Every text is 0.5-2 KB of varied words drawn from a seeded RNG, so two
runs build the same bytes and no two messages are equal (nothing compresses or dedupes by
accident). ``Turn`` is neutral; ``ours``, ``langchain`` and ``agents_items`` convert it to what
each API takes, outside every timed section.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

SEED = 20261129
MIN_TEXT = 512
MAX_TEXT = 2048
TOOLS = ("search_orders", "read_file", "run_query", "fetch_invoice", "lookup_customer")
_VOCABULARY = (
    "order invoice refund customer shipment parcel warehouse carrier delay status ticket "
    "account balance payment card charge dispute credit ledger entry batch export report "
    "query table column index row filter range window total average count region quarter "
    "the a of to and in for on with by from at as is was be has have not but or which that "
    "agent tool result error retry timeout stage iteration plan step check verify confirm "
    "open close read write update create delete list find match sort group join merge split"
)
_WORDS = _VOCABULARY.split()


@dataclass(frozen=True)
class Turn:
    """One message, API-neutral. ``tool_call`` is ``(id, name, args)`` on a calling turn."""

    role: str
    content: str
    tool_call: tuple[str, str, dict[str, Any]] | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None


def _text(rng: random.Random, low: int = MIN_TEXT, high: int = MAX_TEXT) -> str:
    target = rng.randint(low, high)
    parts: list[str] = []
    size = 0
    while size < target:
        if rng.random() < 0.08:
            word = f"{rng.choice(_WORDS)}-{rng.randint(100, 99999)}"
        elif rng.random() < 0.04:
            word = f"{rng.uniform(0, 10000):.2f}"
        else:
            word = rng.choice(_WORDS)
        if rng.random() < 0.07:
            word += "."
        parts.append(word)
        size += len(word) + 1
    return " ".join(parts)[:target]


@lru_cache(maxsize=4)
def conversation(n: int, seed: int = SEED) -> tuple[Turn, ...]:
    """``n`` messages: user / assistant calling a tool / tool / assistant, repeated."""
    rng = random.Random(seed)
    turns: list[Turn] = []
    call = 0
    while len(turns) < n:
        phase = len(turns) % 4
        if phase == 0:
            turns.append(Turn("user", _text(rng)))
        elif phase == 1:
            call += 1
            name = rng.choice(TOOLS)
            args = {"query": _text(rng, MIN_TEXT - 64, MAX_TEXT - 64), "limit": rng.randint(1, 50)}
            turns.append(Turn("assistant", "", tool_call=(f"call_{call:06d}", name, args)))
        elif phase == 2:
            previous = turns[-1].tool_call
            assert previous is not None
            result = json.dumps({"rows": rng.randint(0, 500), "text": _text(rng)})
            turns.append(Turn("tool", result, tool_call_id=previous[0], tool_name=previous[1]))
        else:
            turns.append(Turn("assistant", _text(rng)))
    return tuple(turns)


def payload_bytes(turns: tuple[Turn, ...]) -> int:
    """The conversation's text and arguments as compact JSON: the information it carries."""
    return sum(len(json.dumps(message_json(t), separators=(",", ":"))) for t in turns)


# -- each API's shape --------------------------------------------------------------------


def message_json(turn: Turn) -> dict[str, Any]:
    """The message as our record writes it (spec §2.2, camelCase, absent optionals omitted)."""
    out: dict[str, Any] = {"role": turn.role, "content": turn.content}
    if turn.tool_call is not None:
        call_id, name, args = turn.tool_call
        out["toolCalls"] = [{"id": call_id, "name": name, "args": args}]
    if turn.tool_call_id is not None:
        out["toolCallId"] = turn.tool_call_id
    if turn.tool_name is not None:
        out["toolName"] = turn.tool_name
    return out


def ours(turns: tuple[Turn, ...]) -> list[Any]:
    """``agent_checkpoint.Message`` values."""
    from agent_checkpoint import Message
    from agent_checkpoint._model import ToolCall

    out = []
    for t in turns:
        calls = None
        if t.tool_call is not None:
            calls = (ToolCall(t.tool_call[0], t.tool_call[1], t.tool_call[2]),)
        out.append(
            Message(
                t.role,
                t.content,
                tool_calls=calls,
                tool_call_id=t.tool_call_id,
                tool_name=t.tool_name,
            )
        )
    return out


def langchain(turns: tuple[Turn, ...]) -> list[Any]:
    """LangChain message objects, as a LangGraph agent keeps them in its ``messages`` channel."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    out: list[Any] = []
    for i, t in enumerate(turns):
        mid = f"msg-{i:06d}"
        if t.role == "user":
            out.append(HumanMessage(t.content, id=mid))
        elif t.role == "tool":
            out.append(ToolMessage(t.content, tool_call_id=t.tool_call_id or "", id=mid))
        elif t.tool_call is not None:
            call_id, name, args = t.tool_call
            call = {"id": call_id, "name": name, "args": args, "type": "tool_call"}
            out.append(AIMessage(t.content, tool_calls=[call], id=mid))
        else:
            out.append(AIMessage(t.content, id=mid))
    return out


def agents_items(turns: tuple[Turn, ...]) -> list[dict[str, Any]]:
    """OpenAI Agents SDK session items (Responses API input items)."""
    out: list[dict[str, Any]] = []
    for t in turns:
        if t.tool_call is not None:
            call_id, name, args = t.tool_call
            out.append(
                {
                    "type": "function_call",
                    "call_id": call_id,
                    "name": name,
                    "arguments": json.dumps(args),
                }
            )
        elif t.role == "tool":
            out.append(
                {"type": "function_call_output", "call_id": t.tool_call_id, "output": t.content}
            )
        else:
            out.append({"role": t.role, "content": t.content})
    return out
