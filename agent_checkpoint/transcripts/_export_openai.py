"""Turns to OpenAI request bodies: Chat Completions ``messages`` and Responses ``input``.

Chat messages are ``turns_to_chat_messages``'s (thinking, documents, server tool items and
error flags of results reported). Responses items: system and developer turns are messages of
their role in place; a user turn's text and images are ``input_text`` / ``input_image``
parts; an assistant turn that already is a list of Responses items (read from a Responses
body or a Codex rollout) is written as those items, reasoning and all; any other assistant
turn is an ``output_text`` message and one ``function_call`` item per call (a custom call
read as such is a ``custom_tool_call``); each result is a ``*_output`` item answering its
call. Thinking of another provider, images in results and error flags are reported.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import orjson

from .._model import Json, ThinkingBlock
from ._chat_messages import turns_to_chat_messages
from ._convert import ConversionReport
from ._export_common import Writer, image_url
from ._openai_responses import ITEM_TYPES, OUTPUT_TYPES
from ._turns import Turn

__all__ = ["ResponsesWriter", "chat_body", "responses_body"]

_OUTPUT_OF = {
    "function_call": "function_call_output",
    "custom_tool_call": "custom_tool_call_output",
    "local_shell_call": "local_shell_call_output",
    "computer_call": "computer_call_output",
}
_TEXT = frozenset({"text", "input_text", "output_text"})


def _model(turns: list[Turn]) -> dict[str, Json]:
    model = next((t.model for t in reversed(turns) if t.model), None)
    return {"model": model} if model else {}


def chat_body(turns: list[Turn]) -> tuple[dict[str, Json], ConversionReport]:
    messages, report = turns_to_chat_messages(turns)
    return _model(turns) | {"messages": list(messages)}, report


def _native(content: Json, *, short: bool) -> bool:
    """Whether an assistant turn's content is a list of Responses items as sent (``short``:
    messages in their short form, ``{role, content}``, count)."""
    if not isinstance(content, list) or not content:
        return False
    for item in content:
        kind = item.get("type") if isinstance(item, dict) else None
        if kind is None and short and isinstance(item, dict) and "role" in item:
            kind = "message"
        if kind not in ITEM_TYPES or kind in OUTPUT_TYPES:
            return False
    return True


class ResponsesWriter(Writer):
    """``strings``: a message whose content is a string keeps it (a request body may; a Codex
    rollout's messages hold lists of parts only)."""

    def __init__(self, *, strings: bool = True) -> None:
        super().__init__()
        self.strings = strings
        self.replied = False
        """Whether the last turn written was the model's."""

    def items(self, turn: Turn) -> Iterator[dict[str, Json]]:
        if turn.role == "assistant" and self.replied:
            self.lose("turn boundary between two replies (Responses items read back as one)")
        yield from self._items(turn)
        self.replied = turn.role == "assistant"

    def _items(self, turn: Turn) -> Iterator[dict[str, Json]]:
        said = isinstance(turn.content, str) and not turn.is_result and not turn.tool_calls
        if self.strings and said:  # a message of one string, as it was
            yield {"type": "message", "role": turn.role, "content": turn.content}
            return
        if turn.role in ("system", "developer"):
            yield self.message(turn.role, "input_text", self.text(turn.content))
        elif turn.role == "assistant":
            yield from self.assistant(turn)
        elif turn.is_result:
            for result in self.results(turn):
                if result.is_error:
                    self.lose("is_error flag of a tool result")
                kind = _OUTPUT_OF.get(self.kinds.get(result.id, ""), "function_call_output")
                output = (
                    self.text(result.content)
                    if not isinstance(result.content, str)
                    else result.content
                )
                yield {"type": kind, "call_id": result.id, "output": output}
            rest = self.leftover(turn)
            if rest is not None:
                yield {"type": "message", "role": "user", "content": self.parts(rest)}
        else:
            yield {"type": "message", "role": turn.role, "content": self.parts(turn.content)}

    def message(self, role: str, kind: str, text: str) -> dict[str, Json]:
        return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}

    def parts(self, content: Json) -> list[Json]:
        if not isinstance(content, list):
            return [{"type": "input_text", "text": self.text(content)}]
        parts: list[Json] = []
        for block in content:
            kind = block.get("type") if isinstance(block, dict) else None
            if isinstance(block, dict) and kind in ("image_url", "input_image", "image"):
                url = image_url(block)
                if url is None:
                    self.lose(f"{kind} block without a URL or inline data")
                    continue
                parts.append({"type": "input_image", "image_url": url})
            elif isinstance(block, dict) and kind in ("input_file", "input_audio"):
                parts.append(dict(block))
            else:
                text = self.text([block])
                if text or kind in _TEXT:
                    parts.append({"type": "input_text", "text": text})
        return parts

    def assistant(self, turn: Turn) -> Iterator[dict[str, Json]]:
        calls = self.tool_calls(turn)
        if _native(turn.content, short=self.strings):
            assert isinstance(turn.content, list)
            for item in turn.content:
                assert isinstance(item, dict)
                kind, cid = item.get("type"), item.get("call_id", item.get("id"))
                if isinstance(kind, str) and isinstance(cid, str) and kind in _OUTPUT_OF:
                    self.kinds[cid] = kind
                yield dict(item)
            return
        thinking: list[ThinkingBlock] = []
        text = self.text(turn.content, thinking)
        if thinking:
            self.lose("thinking block (a Responses input holds OpenAI reasoning items only)")
        if text or not calls:
            yield self.message("assistant", "output_text", text)
        raw = {str(c.get("id", "")): c for c in turn.tool_calls or ()}
        for call in calls:
            custom = raw.get(call.id, {}).get("custom") is True
            if custom and set(call.args) == {"input"}:
                self.kinds[call.id] = "custom_tool_call"
                yield {
                    "type": "custom_tool_call",
                    "call_id": call.id,
                    "name": call.name,
                    "input": call.args["input"],
                }
                continue
            self.kinds[call.id] = "function_call"
            arguments = orjson.dumps(call.args).decode()
            meta = call.provider_meta
            if isinstance(meta, dict) and isinstance(meta.get("arguments"), str):
                arguments = str(meta["arguments"])
            yield {
                "type": "function_call",
                "call_id": call.id,
                "name": call.name,
                "arguments": arguments,
            }


def response_items(
    turns: Iterable[Turn], writer: ResponsesWriter
) -> Iterator[tuple[Turn, dict[str, Json]]]:
    """Each Responses item, with the turn it comes from."""
    for turn in writer.each(turns):
        for item in writer.items(turn):
            yield turn, item


def responses_body(turns: list[Turn]) -> tuple[dict[str, Json], ConversionReport]:
    writer = ResponsesWriter()
    items = [item for _, item in response_items(turns, writer)]
    return _model(turns) | {"input": items}, ConversionReport(tuple(writer.lost))
