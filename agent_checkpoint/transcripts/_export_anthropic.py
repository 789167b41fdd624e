"""Turns to Anthropic Messages: a request body, and a Claude Code session log.

Content becomes Anthropic blocks: Anthropic blocks pass through as read (thinking with its
signature, images, documents, server tool blocks); OpenAI and Responses text parts become
``text`` blocks and their images ``image`` blocks (base64 for a data URL); an assistant's tool
calls are ``tool_use`` blocks with their arguments as objects, in place when the turn already
held them. The results that follow an assistant message go back in one user message of
``tool_result`` blocks (``is_error`` kept), as the API requires. A leading system turn is the
request's ``system``; later system turns are ``role: "system"`` messages in place; a developer
turn becomes one (reported). OpenAI reasoning items, which Anthropic cannot take, are reported,
and so is a tool-call id Anthropic would refuse (``[A-Za-z0-9_-]+`` only), written with ``_``
for its other characters, the same for its call and its result.

The Claude Code log is the same content written as Claude Code 2.1 writes a session: one
line per assistant content block sharing the message id, one user line per tool result naming
the line of its call (``sourceToolAssistantUUID``), every line chained to the one before by
``parentUuid``, ``uuid`` line ids and one ``sessionId``. A log holds no system prompt
(reported); later system and developer turns, and turns marked ``_meta.injectedBy``, are meta
user lines (``isMeta``), as Claude Code writes what it adds to a conversation.
"""

from __future__ import annotations

import os
import re

from .._model import Json
from ._convert import ConversionReport
from ._export_common import Lines, Writer, image_source, stable_id
from ._openai_responses import CALL_TYPES
from ._turns import Turn, now_iso

__all__ = ["CLAUDE_CODE_VERSION", "anthropic_body", "claude_code_lines"]

CLAUDE_CODE_VERSION = "2.1.39"
"""The Claude Code version whose log shape the export writes (as its own logs say)."""
_KEPT = frozenset(
    {
        "text",
        "image",
        "document",
        "thinking",
        "redacted_thinking",
        "tool_use",
        "server_tool_use",
        "web_search_tool_result",
        "web_fetch_tool_result",
        "code_execution_tool_result",
        "search_result",
        "tool_addition",
        "tool_removal",
    }
)
_TEXT = frozenset({"input_text", "output_text"})


_TOOL_ID = re.compile(r"[A-Za-z0-9_-]+")
_NOT_ID = re.compile(r"[^A-Za-z0-9_-]")


class AnthropicWriter(Writer):
    def __init__(self) -> None:
        super().__init__()
        self.fixed_ids: dict[str, str] = {}

    def blocks(self, content: Json) -> list[Json]:
        """``content`` as Anthropic blocks (without tool calls of other shapes)."""
        if content is None or content == "":
            return []
        if not isinstance(content, list):
            return [{"type": "text", "text": self.text(content)}]
        out: list[Json] = []
        for block in content:
            kind = block.get("type") if isinstance(block, dict) else None
            if isinstance(block, dict) and kind in _KEPT:
                out.append(dict(block))
            elif isinstance(block, dict) and kind in ("image_url", "input_image"):
                source = image_source(block)
                if source is None:
                    self.lose(f"{kind} block without a URL or inline data")
                elif source[0] == "url":
                    out.append({"type": "image", "source": {"type": "url", "url": source[1]}})
                else:
                    media, data = source
                    out.append(
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": media, "data": data},
                        }
                    )
            elif isinstance(block, dict) and kind == "message":
                out.extend(self.blocks(block.get("content")))
            elif isinstance(block, dict) and kind == "reasoning":
                self.lose("reasoning item (OpenAI's; Anthropic takes its own thinking only)")
            elif isinstance(block, dict) and (kind in CALL_TYPES or kind == "tool_result"):
                continue  # written from the turn's calls and results
            else:
                text = self.text([block])
                if text or kind in _TEXT:
                    out.append({"type": "text", "text": text})
        return out

    def assistant(self, turn: Turn) -> list[Json]:
        blocks = self.blocks(turn.content)
        held = {b.get("id") for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"}
        for call in self.tool_calls(turn):
            if call.id in held:
                continue
            blocks.append(
                {"type": "tool_use", "id": call.id, "name": call.name, "input": dict(call.args)}
            )
        for block in blocks:
            if isinstance(block, dict) and block.get("type") == "tool_use":
                name, raw = block.get("name"), str(block.get("id", ""))
                self.names[raw] = name if isinstance(name, str) else ""
                block["id"] = self.tool_id(raw)
        return blocks

    def tool_id(self, raw: str) -> str:
        """``raw``, or, if Anthropic would refuse it (its ids match ``[A-Za-z0-9_-]+``), the
        same id for its call and its result with the other characters as ``_`` (reported)."""
        if _TOOL_ID.fullmatch(raw):
            return raw
        fixed = self.fixed_ids.get(raw)
        if fixed is None:
            fixed = f"{_NOT_ID.sub('_', raw) or 'toolu'}_{len(self.fixed_ids) + 1}"
            self.fixed_ids[raw] = fixed
            self.lose("tool-call id Anthropic would refuse (written with _ for other characters)")
        return fixed

    def result_blocks(self, turn: Turn) -> list[Json]:
        out: list[Json] = []
        for result in self.results(turn):
            content = result.content
            body: Json = content if isinstance(content, str) else self.blocks(content)
            block: dict[str, Json] = {
                "type": "tool_result",
                "tool_use_id": self.tool_id(result.id),
                "content": body,
            }
            if result.is_error:
                block["is_error"] = True
            out.append(block)
        rest = self.leftover(turn)
        if rest is not None:
            out.extend(self.blocks(rest))
        return out

    def user(self, content: Json) -> Json:
        """A user message's content: a string stays one."""
        return content if isinstance(content, str) else self.blocks(content)


def anthropic_body(turns: list[Turn]) -> tuple[dict[str, Json], ConversionReport]:
    writer = AnthropicWriter()
    system: Json = None
    messages: list[dict[str, Json]] = []
    for turn in writer.each(turns):
        if turn.role in ("system", "developer"):
            if turn.role == "developer":
                writer.lose("developer turn (an Anthropic request has system messages only)")
            if not messages and system is None:
                system = (
                    turn.content if isinstance(turn.content, str) else writer.blocks(turn.content)
                )
            else:
                messages.append({"role": "system", "content": writer.user(turn.content)})
        elif turn.role == "assistant" and isinstance(turn.content, str) and not turn.tool_calls:
            messages.append({"role": "assistant", "content": turn.content})  # as it was
        elif turn.role == "assistant":
            messages.append({"role": "assistant", "content": writer.assistant(turn)})
        elif turn.is_result:
            blocks = writer.result_blocks(turn)
            last = messages[-1] if messages else None
            joins = (
                last is not None
                and last["role"] == "user"
                and isinstance(last["content"], list)
                and all(
                    isinstance(b, dict) and b.get("type") == "tool_result" for b in last["content"]
                )
            )
            if joins:
                assert last is not None and isinstance(last["content"], list)
                last["content"].extend(blocks)
            else:
                messages.append({"role": "user", "content": blocks})
        else:
            messages.append({"role": "user", "content": writer.user(turn.content)})
    model = next((t.model for t in reversed(turns) if t.model), None)
    body: dict[str, Json] = {"model": model} if model else {}
    if system is not None:
        body["system"] = system
    body["messages"] = list(messages)
    return body, ConversionReport(tuple(writer.lost))


class _Chain:
    """The lines of a Claude Code log as they are written: each one the child of the last."""

    def __init__(self, session: str, cwd: str) -> None:
        self.session, self.cwd = session, cwd
        self.parent: str | None = None
        self.count = 0
        self.lines = Lines()
        self.line_of_call: dict[str, str] = {}

    def add(self, kind: str, message: dict[str, Json], ts: str, **extra: Json) -> str:
        self.count += 1
        uuid = stable_id(self.session, self.count)
        self.lines.append(
            {
                "parentUuid": self.parent,
                "isSidechain": False,
                "userType": "external",
                "cwd": self.cwd,
                "sessionId": self.session,
                "version": CLAUDE_CODE_VERSION,
                "type": kind,
                "message": message,
            }
            | extra
            | {"uuid": uuid, "timestamp": ts}
        )
        self.parent = uuid
        return uuid


def claude_code_lines(
    turns: list[Turn], *, session_id: str, cwd: str | None = None
) -> tuple[bytes, ConversionReport]:
    writer = AnthropicWriter()
    chain = _Chain(session_id, cwd if cwd is not None else os.getcwd())
    ts = next((t.ts for t in turns if t.ts), None) or now_iso()
    replies = 0
    for turn in writer.each(turns):
        ts = turn.ts or ts  # a turn without a time: the one before it
        meta = turn.extra.get("_meta")
        injected = isinstance(meta, dict) and isinstance(meta.get("injectedBy"), dict)
        if turn.role in ("system", "developer") and not chain.lines.count:
            writer.lose(f"leading {turn.role} turn (a Claude Code log holds no system prompt)")
        elif turn.role in ("system", "developer"):
            writer.lose(f"{turn.role} turn (written as a meta user line, read back as a user turn)")
            message = {"role": "user", "content": writer.user(turn.content)}
            chain.add("user", message, ts, isMeta=True)
        elif turn.role == "assistant":
            replies += 1
            message_id = "msg_" + stable_id(session_id, -replies).replace("-", "")[:24]
            blocks = writer.assistant(turn) or [{"type": "text", "text": ""}]
            for block in blocks:
                message = {
                    "model": turn.model or "<synthetic>",
                    "id": message_id,
                    "type": "message",
                    "role": "assistant",
                    "content": [block],
                    "stop_reason": None,
                    "stop_sequence": None,
                }
                line = chain.add("assistant", message, ts)
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    chain.line_of_call[str(block.get("id"))] = line
        elif turn.is_result:
            for block in writer.result_blocks(turn):
                extra: dict[str, Json] = {}
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    source = chain.line_of_call.get(str(block.get("tool_use_id")))
                    content = block.get("content")
                    extra["toolUseResult"] = content if isinstance(content, str) else ""
                    if source is not None:
                        extra["sourceToolAssistantUUID"] = source
                chain.add("user", {"role": "user", "content": [block]}, ts, **extra)
        else:
            extra = {}
            if injected:
                extra["isMeta"] = True
            if turn.is_compaction_summary:
                extra |= {"isCompactSummary": True, "isVisibleInTranscriptOnly": True}
            chain.add("user", {"role": "user", "content": writer.user(turn.content)}, ts, **extra)
    return chain.lines.data(), ConversionReport(tuple(writer.lost))
