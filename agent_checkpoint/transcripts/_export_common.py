"""What every export writer shares: the turn being written, the calls it answers, and what
the target cannot hold (``Converter.lose``, reported, never dropped silently)."""

from __future__ import annotations

import io
import re
import uuid
from collections.abc import Iterable

from .._model import Json, ToolCall
from ._convert import Converter
from ._jsonio import dump_line
from ._turns import Turn, result_id

__all__ = ["DATA_URL", "Lines", "Result", "Writer", "image_source", "image_url", "stable_id"]

DATA_URL = re.compile(r"data:([^;,]+);base64,(.*)", re.DOTALL)
_NAMESPACE = uuid.UUID("6f0c3b53-8d3e-4bd5-9a7c-0e6f2a1c9b41")


def stable_id(session: str, n: int) -> str:
    """The ``n``-th id of an exported session: a UUID the same for the same session and n, so
    exporting one conversation twice under one session id writes the same file."""
    return str(uuid.uuid5(_NAMESPACE, f"{session}:{n}"))


class Lines:
    """A JSON Lines file being written: each record encoded as it comes, not kept."""

    def __init__(self) -> None:
        self.buffer = io.BytesIO()
        self.count = 0

    def append(self, record: Json) -> None:
        self.buffer.write(dump_line(record))
        self.count += 1

    def data(self) -> bytes:
        return self.buffer.getvalue()


class Result:
    """One tool result of a turn, as every target needs it."""

    __slots__ = ("content", "id", "is_error", "name")

    def __init__(self, id: str, name: str | None, content: Json, is_error: bool) -> None:
        self.id, self.name, self.content, self.is_error = id, name, content, is_error


class Writer(Converter):
    """A ``Converter`` that remembers the tool calls written so far (name and kind by id)."""

    def __init__(self) -> None:
        super().__init__()
        self.kinds: dict[str, str] = {}

    def tool_calls(self, turn: Turn) -> list[ToolCall]:
        return [self.call(c) for c in turn.tool_calls or ()]

    def results(self, turn: Turn) -> list[Result]:
        """The turn's tool results; the content of a result without its own is the turn's."""
        out = []
        for result in turn.tool_results or ():
            rid = result_id(result)
            name = result.get("name")
            name = name if isinstance(name, str) and name else self.names.get(rid)
            out.append(
                Result(
                    rid, name, result.get("content", turn.content), result.get("is_error") is True
                )
            )
        return out

    def leftover(self, turn: Turn) -> Json:
        """What a user turn carrying results says besides them (``None``: nothing)."""
        if turn.role == "tool" or not turn.is_result:
            return None
        text = turn.content
        return None if text in (None, "", []) else text

    def each(self, turns: Iterable[Turn]) -> Iterable[Turn]:
        """``turns``, keeping ``self.turn`` (the position reports name) up to date."""
        for i, turn in enumerate(turns):
            self.turn = i
            yield turn


def image_source(block: dict[str, Json]) -> tuple[str, str] | None:
    """``("url", url)`` or ``("media/type", base64)`` of an OpenAI, Responses or Anthropic
    image block; ``None`` if it has neither."""
    kind = block.get("type")
    url: Json = None
    if kind == "image_url":
        inner = block.get("image_url")
        url = inner.get("url") if isinstance(inner, dict) else inner
    elif kind == "input_image":
        url = block.get("image_url")
    elif kind == "image":
        source = block.get("source")
        if isinstance(source, dict) and source.get("type") == "url":
            url = source.get("url")
        elif isinstance(source, dict) and source.get("type") == "base64":
            media, data = source.get("media_type"), source.get("data")
            if isinstance(media, str) and isinstance(data, str):
                return media, data
    if not isinstance(url, str):
        return None
    inline = DATA_URL.fullmatch(url)
    return (inline.group(1), inline.group(2)) if inline else ("url", url)


def image_url(block: dict[str, Json]) -> str | None:
    """The URL of an image block (inline data as a ``data:`` URL); ``None`` if it has none."""
    source = image_source(block)
    if source is None:
        return None
    return source[1] if source[0] == "url" else f"data:{source[0]};base64,{source[1]}"
