"""Canonical turns to OpenAI Chat Completions messages: what an adapter sends to resume.

System and developer turns keep their role and place. A user turn keeps its images: OpenAI
``image_url`` parts pass through, and Responses ``input_image`` and Anthropic ``image``
blocks (base64 or URL) become ``image_url`` parts; ``input_audio`` and ``file`` parts pass
through; a user turn of text only is sent as one string. Assistant turns, tool calls and
tool results convert as for a history (``_convert``): string content, calls with JSON
arguments, one ``tool`` message per result. Whatever a chat message cannot hold (thinking,
documents, server tool items, error flags of results) is listed in the report, never
dropped silently.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import orjson

from .._model import Json
from ._convert import ConversionReport, Converter
from ._export_common import image_url
from ._turns import Turn

__all__ = ["turns_to_chat_messages"]

_PASSED = frozenset({"image_url", "input_audio", "file"})


class _ChatConverter(Converter):
    def chat(self, turn: Turn) -> Iterator[dict[str, Json]]:
        if turn.role in ("system", "developer"):
            yield {"role": turn.role, "content": self.text(turn.content)}
            return
        if turn.role == "user" and not turn.is_result:
            yield {"role": "user", "content": self.parts(turn.content)}
            return
        for message in self.messages(turn):
            out: dict[str, Json] = {"role": message.role, "content": message.content}
            if message.thinking_blocks:
                self.lose("thinking block (a chat message holds none)")
            if message.tool_calls:
                out["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {
                            "name": call.name,
                            "arguments": _arguments(call.args, call.provider_meta),
                        },
                    }
                    for call in message.tool_calls
                ]
            if message.role == "tool":
                out["tool_call_id"] = message.tool_call_id
            yield out

    def parts(self, content: Json) -> Json:
        """User content as chat parts; a string when every part is text."""
        if not isinstance(content, list):
            return self.text(content)
        parts: list[Json] = []
        for block in content:
            part: Json = None
            if isinstance(block, dict) and block.get("type") in _PASSED:
                part = dict(block)
            elif isinstance(block, dict) and block.get("type") in ("input_image", "image"):
                part = self.image(block)
            else:
                text = self.text([block])  # text kinds; anything else is reported
                part = {"type": "text", "text": text} if text else None
            if part is not None:
                parts.append(part)
        if all(isinstance(p, dict) and p.get("type") == "text" for p in parts):
            return "\n".join(str(p["text"]) for p in parts if isinstance(p, dict))
        return parts

    def image(self, block: dict[str, Json]) -> Json:
        url = image_url(block)
        if url is None:
            self.lose(f"{block.get('type')} block without a URL or inline data")
            return None
        image: dict[str, Json] = {"url": url}
        detail = block.get("detail")
        if isinstance(detail, str):
            image["detail"] = detail
        return {"type": "image_url", "image_url": image}


def _arguments(args: Json, meta: Json) -> str:
    """The call's arguments as sent: as written when they were not a JSON object."""
    if isinstance(meta, dict) and isinstance(meta.get("arguments"), str):
        return str(meta["arguments"])
    return orjson.dumps(args).decode()


def turns_to_chat_messages(
    turns: Iterable[Turn],
) -> tuple[list[dict[str, Json]], ConversionReport]:
    """OpenAI chat messages for ``turns``, and what they could not carry."""
    converter = _ChatConverter()
    out: list[dict[str, Json]] = []
    for i, turn in enumerate(turns):
        converter.turn = i
        out.extend(converter.chat(turn))
    return out, ConversionReport(tuple(converter.lost))
