"""Turns to Aider's chat history (``.aider.chat.history.md``), written from its public form.

``# aider chat started at YYYY-MM-DD HH:MM:SS`` heads the session; every line of a user
turn starts with ``#### ``; the assistant's words follow as plain markdown; tool output is
quoted with ``> ``, as Aider quotes the output of the commands it runs. Aider's history
holds words only: tool calls (their results are written as quoted output), system and
developer turns, thinking, images and other non-text blocks are reported.
"""

from __future__ import annotations

from datetime import datetime

from .._model import ThinkingBlock
from ._convert import ConversionReport
from ._export_common import Writer
from ._turns import Turn, now_iso

__all__ = ["aider_markdown"]


def _started(ts: str) -> str:
    moment = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def aider_markdown(turns: list[Turn]) -> tuple[str, ConversionReport]:
    writer = Writer()
    start = next((t.ts for t in turns if t.ts), None) or now_iso()
    out = [f"\n# aider chat started at {_started(start)}\n"]
    for turn in writer.each(turns):
        if turn.role in ("system", "developer"):
            writer.lose(f"{turn.role} turn (Aider's history holds none)")
        elif turn.role == "assistant":
            thinking: list[ThinkingBlock] = []
            text = writer.text(turn.content, thinking)
            if thinking:
                writer.lose("thinking block (Aider's history holds none)")
            if turn.tool_calls:
                writer.lose("tool call (Aider's history holds none; results are quoted output)")
                writer.tool_calls(turn)
            if text:
                out.append(f"{text}\n")
        elif turn.is_result:
            for result in writer.results(turn):
                body = _trimmed(writer, writer.text(result.content))
                out.append("".join(f"> {line}".rstrip() + "\n" for line in body.split("\n")))
            rest = writer.leftover(turn)
            if rest is not None:
                out.append(_user(_trimmed(writer, writer.text(rest))))
        else:
            out.append(_user(_trimmed(writer, writer.text(turn.content))))
    return "\n".join(out), ConversionReport(tuple(writer.lost))


def _user(text: str) -> str:
    return "".join(f"#### {line}".rstrip() + "  \n" for line in text.split("\n"))


def _trimmed(writer: Writer, text: str) -> str:
    """``text``, reporting the spaces at its lines' ends that Aider's history does not keep
    (it ends a user line with a markdown break and trims quoted output)."""
    if any(line != line.rstrip() for line in text.split("\n")):
        writer.lose("spaces at the end of a line (Aider's history trims them)")
    return text
