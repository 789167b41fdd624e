"""Turns to a Gemini CLI session (``~/.gemini/tmp/<project hash>/chats/session-*.json``),
written from the format's public description (the CLI's ``ConversationRecord``).

One JSON object: ``sessionId``, ``projectHash`` (SHA-256 of the folder), ``startTime``,
``lastUpdated`` and ``messages``. A user turn is a ``user`` message of its text; an
assistant turn a ``gemini`` message with its text, its thinking as ``thoughts``
(``{subject, description, timestamp}``) and its calls as ``toolCalls``, each call holding
its own result (``[{"functionResponse": {id, name, response: {output}}}]``, status
``success`` or ``error``; ``cancelled`` and no result for a call never answered). What a
session cannot hold is reported: system and developer turns (the CLI keeps its system prompt
out of the session), images and other non-text parts, thinking signatures, and results
answering no call of the conversation.
"""

from __future__ import annotations

import hashlib
import os

from .._model import Json, ThinkingBlock
from ._convert import ConversionReport
from ._export_common import Writer, stable_id
from ._turns import Turn, now_iso

__all__ = ["gemini_session"]


def gemini_session(
    turns: list[Turn], *, session_id: str, cwd: str | None = None
) -> tuple[dict[str, Json], ConversionReport]:
    writer = Writer()
    folder = cwd if cwd is not None else os.getcwd()
    start = next((t.ts for t in turns if t.ts), None) or now_iso()
    messages: list[dict[str, Json]] = []
    calls: dict[str, dict[str, Json]] = {}
    batch: list[str] = []  # the ids of the newest reply's calls not answered yet, in order
    last = start
    for turn in writer.each(turns):
        ts = last = turn.ts or last
        record: dict[str, Json] = {"id": stable_id(session_id, len(messages) + 1), "timestamp": ts}
        if turn.role in ("system", "developer"):
            writer.lose(f"{turn.role} turn (a Gemini CLI session holds none)")
        elif turn.role == "assistant":
            thinking: list[ThinkingBlock] = []
            record |= {"type": "gemini", "content": writer.text(turn.content, thinking)}
            if thinking:
                record["thoughts"] = [
                    {"subject": "", "description": b.content, "timestamp": ts} for b in thinking
                ]
                if any(b.signature or b.type == "redacted_thinking" for b in thinking):
                    writer.lose("thinking signature (a Gemini CLI session keeps the text only)")
            records = []
            batch = []
            for call in writer.tool_calls(turn):
                entry: dict[str, Json] = {
                    "id": call.id,
                    "name": call.name,
                    "args": dict(call.args),
                    "result": None,
                    "status": "cancelled",
                    "timestamp": ts,
                }
                calls[call.id] = entry
                batch.append(call.id)
                records.append(entry)
            if records:
                record["toolCalls"] = list(records)
            if turn.model:
                record["model"] = turn.model
            messages.append(record)
        elif turn.is_result:
            for result in writer.results(turn):
                answered = calls.pop(result.id, None) if result.id else None
                if answered is None:
                    writer.lose(
                        "tool result answering no call (a Gemini CLI call holds its result)"
                    )
                    continue
                if result.id in batch:
                    if batch[0] != result.id:
                        writer.lose(
                            "order of tool results given out of their calls' order (a Gemini "
                            "CLI call holds its result, read back in call order)"
                        )
                    batch.remove(result.id)
                output = writer.text(result.content)
                answered["result"] = [
                    {
                        "functionResponse": {
                            "id": result.id,
                            "name": answered["name"],
                            "response": {"error" if result.is_error else "output": output},
                        }
                    }
                ]
                answered["status"] = "error" if result.is_error else "success"
            rest = writer.leftover(turn)
            if rest is not None:
                messages.append(record | {"type": "user", "content": writer.text(rest)})
        else:
            messages.append(record | {"type": "user", "content": writer.text(turn.content)})
    session: dict[str, Json] = {
        "sessionId": session_id,
        "projectHash": hashlib.sha256(folder.encode()).hexdigest(),
        "startTime": start,
        "lastUpdated": last,
        "messages": list(messages),
    }
    return session, ConversionReport(tuple(writer.lost))
