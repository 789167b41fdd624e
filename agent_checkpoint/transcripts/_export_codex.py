"""Turns to a Codex CLI rollout (``rollout-*.jsonl``), the file ``codex resume`` reads.

A ``session_meta`` line (the session id, the time and folder), then every turn's Responses
items (``_export_openai``) as ``response_item`` lines stamped with the turn's time; a
``turn_context`` line names the model before the first reply of each model, and
``event_msg`` lines repeat the user's and the model's words, as Codex writes them for its
own history view. The reader skips those; what Responses items cannot hold is reported. A
conversation that starts with a compaction's summary starts with a ``compacted`` line.
"""

from __future__ import annotations

import os

from .._model import Json
from ._convert import ConversionReport
from ._export_common import Lines
from ._export_openai import ResponsesWriter, response_items
from ._turns import Turn, now_iso

__all__ = ["CODEX_CLI_VERSION", "codex_lines"]

CODEX_CLI_VERSION = "0.46.0"
"""The Codex CLI version whose rollout shape the export writes (``session_meta`` needs one)."""


def _said(item: dict[str, Json]) -> str:
    parts = item.get("content")
    if not isinstance(parts, list):
        return ""
    return "\n".join(
        str(p["text"]) for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)
    )


def codex_lines(
    turns: list[Turn], *, session_id: str, cwd: str | None = None
) -> tuple[bytes, ConversionReport]:
    folder = cwd if cwd is not None else os.getcwd()
    start = next((t.ts for t in turns if t.ts), None) or now_iso()
    lines = Lines()
    lines.append(
        {
            "timestamp": start,
            "type": "session_meta",
            "payload": {
                "id": session_id,
                "timestamp": start,
                "cwd": folder,
                "originator": "agent-checkpoint",
                "cli_version": CODEX_CLI_VERSION,
                "instructions": None,
                "source": "cli",
            },
        }
    )
    writer = ResponsesWriter(strings=False)
    model: str | None = None
    ts = start
    for turn, item in response_items(turns, writer):
        ts = turn.ts or ts  # a turn without a time: the one before it
        if turn.role == "assistant" and turn.model and turn.model != model:
            model = turn.model
            context = {"cwd": folder, "model": model}
            lines.append({"timestamp": ts, "type": "turn_context", "payload": context})
        if turn.is_compaction_summary and turn is turns[0] and item.get("role") == "user":
            # a rollout that starts at a compaction: Codex's own line for it, read back as one
            summary = {"message": _said(item)}
            lines.append({"timestamp": ts, "type": "compacted", "payload": summary})
            continue
        lines.append({"timestamp": ts, "type": "response_item", "payload": item})
        role = item.get("role")
        if item.get("type") == "message" and role in ("user", "assistant"):
            event: dict[str, Json] = (
                {"type": "user_message", "message": _said(item), "kind": "plain"}
                if role == "user"
                else {"type": "agent_message", "message": _said(item)}
            )
            lines.append({"timestamp": ts, "type": "event_msg", "payload": event})
    return lines.data(), ConversionReport(tuple(writer.lost))
