"""Which transcript format a file holds, judged by its content.

First the container: JSON Lines, one JSON array, or one JSON object wrapping arrays
(``messages``, ``input``, ``output``). Empty files, binary data, text that is not UTF-8 and
text that is not JSON are refused here with one line. Then up to ``SAMPLE_RECORDS`` records
vote: each says which formats it is compatible with and which it plainly belongs to. Strict
formats must be compatible with every sampled record; log formats (Claude Code, Codex)
tolerate unknown lines and need a plain vote. The most plainly voted format wins (ties in
the order of ``FORMATS``); with no plain vote at all (plain text messages), OpenAI chat, as
in the seed. Mistral's chat messages count as OpenAI chat: their ``document_url`` and
``reference`` parts and an assistant's ``prefix`` vote for it plainly.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Literal, get_args

from .._model import Json
from ._aider import HEAD as AIDER_HEAD
from ._aider import USER as AIDER_USER
from ._claude_code import LINE_TYPES
from ._claude_code_web import LOGLINES
from ._codex import ROLLOUT_TYPES
from ._errors import (
    EmptyTranscriptError,
    MalformedTranscriptError,
    TranscriptNotFoundError,
    UnrecognizedFormatError,
)
from ._gemini import is_gemini_record
from ._jsonio import BOM, JsonDocument, JsonLines, loads
from ._openai_chat import ROLES
from ._openai_responses import ITEM_TYPES

__all__ = ["FORMATS", "SAMPLE_RECORDS", "WRAPPER_KEYS", "Container", "Detected", "Format", "detect"]

Format = Literal[
    "claude-code",
    "codex",
    "turns",
    "openai-responses",
    "anthropic",
    "openai-chat",
    "gemini-cli",
    "aider",
]
FORMATS: tuple[Format, ...] = get_args(Format)
"""Every format, in the order that breaks ties."""
Container = Literal["jsonl", "array", "object", "markdown"]
SAMPLE_RECORDS = 64
WRAPPER_KEYS = ("messages", "input", "output", LOGLINES)
"""Members of a top-level object that hold the records."""

_LOGS: frozenset[Format] = frozenset({"claude-code", "codex", "gemini-cli"})
_LINES_ONLY: frozenset[Format] = frozenset({"codex", "turns"})
_NOT_IN_ARRAYS: frozenset[Format] = _LOGS | _LINES_ONLY | {"aider"}
_OBJECTS: frozenset[Format] = frozenset({"claude-code", "gemini-cli"})
"""Log formats that also come as one JSON object (a web export's ``loglines``, a Gemini CLI
session's ``messages``)."""
_FALLBACK: tuple[Format, ...] = ("openai-chat", "anthropic", "openai-responses", "turns")
"""With no plain vote (plain text messages), the seed's reading: OpenAI chat."""
_HEAD = 64 * 1024
_MISTRAL_ONLY = frozenset({"document_url", "reference"})
"""Parts of Mistral's chat messages, which are OpenAI chat messages otherwise."""
_OPENAI_PARTS = frozenset({"text", "image_url", "input_audio", "file", "refusal"}) | _MISTRAL_ONLY
_OPENAI_ONLY = frozenset({"image_url", "input_audio", "file", "refusal"}) | _MISTRAL_ONLY
_CHAT_KEYS = frozenset({"tool_calls", "tool_call_id", "function_call", "prefix"})
"""Keys only a chat message has (``prefix``: a Mistral assistant message the reply continues)."""
_RESPONSES_PARTS = frozenset(
    {"input_text", "output_text", "input_image", "input_file", "input_audio", "refusal"}
)
_ANTHROPIC_ONLY = frozenset(
    {
        "tool_use",
        "tool_result",
        "thinking",
        "redacted_thinking",
        "document",
        "server_tool_use",
        "tool_addition",
        "tool_removal",
    }
)


@dataclass(frozen=True, slots=True)
class Detected:
    format: Format
    container: Container


_NOT_TEXT = "\x00not-a-string"


def _parts(content: Json) -> set[str] | None:
    """The block types of a content list; ``None`` if it is not a list of typed objects."""
    if not isinstance(content, list):
        return None
    types: set[str] = set()
    for block in content:
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            return None
        types.add(block["type"])
    return types


def _votes(record: Json) -> dict[Format, int]:
    """For each format: 2 if ``record`` plainly belongs to it, 1 if merely compatible."""
    votes: dict[Format, int] = {}
    if not isinstance(record, dict):
        return votes
    kind, role, content = record.get("type"), record.get("role"), record.get("content")
    # A type or role of another JSON type votes for nothing (and is unhashable if a container).
    kind = kind if kind is None or isinstance(kind, str) else _NOT_TEXT
    role = role if role is None or isinstance(role, str) else _NOT_TEXT
    votes["claude-code"] = 1
    if kind in LINE_TYPES and ("uuid" in record or "sessionId" in record or "leafUuid" in record):
        votes["claude-code"] = 2
    votes["codex"] = 1
    if kind in ROLLOUT_TYPES and "payload" in record:
        votes["codex"] = 2
    votes["gemini-cli"] = 2 if is_gemini_record(record) else 1
    parts = _parts(content)
    text_like = isinstance(content, str) or content is None
    if isinstance(role, str):
        calls, results = record.get("tool_calls"), record.get("tool_results")
        if (calls is None or isinstance(calls, list)) and (
            results is None or isinstance(results, list)
        ):
            votes["turns"] = 2 if "ts" in record or "tool_results" in record else 1
    if kind in ITEM_TYPES and kind != "message":
        votes["openai-responses"] = 2
    elif (kind == "message" or kind is None) and isinstance(role, str):
        if parts is not None and parts & _RESPONSES_PARTS and parts <= _RESPONSES_PARTS:
            votes["openai-responses"] = 2
        elif text_like:
            votes["openai-responses"] = 1
    if (role in ("user", "assistant") and kind in (None, "message")) or (
        role == "system" and kind is None  # mid-conversation: a typed one is Responses
    ):
        if parts is not None and not parts & (_OPENAI_ONLY | _RESPONSES_PARTS):
            votes["anthropic"] = 2 if parts & _ANTHROPIC_ONLY or kind == "message" else 1
        elif text_like:
            votes["anthropic"] = 1
    if role in ROLES and kind is None:
        plain = bool(_CHAT_KEYS & record.keys())
        if parts is not None and parts <= _OPENAI_PARTS:
            votes["openai-chat"] = 2 if plain or parts & _OPENAI_ONLY else 1
        elif text_like:
            votes["openai-chat"] = 2 if plain or role not in ("user", "assistant") else 1
    return votes


def choose(records: Iterable[Json], *, among: Iterable[Format] = FORMATS) -> Format | None:
    """The format of ``among`` a sample of records belongs to, or ``None`` if none fits."""
    candidates = tuple(f for f in FORMATS if f in set(among))
    total = 0
    compatible: dict[Format, int] = dict.fromkeys(FORMATS, 0)
    plain: dict[Format, int] = dict.fromkeys(FORMATS, 0)
    for record in records:
        total += 1
        for fmt, vote in _votes(record).items():
            compatible[fmt] += 1
            plain[fmt] += vote == 2
    eligible = [
        f
        for f in candidates
        if (plain[f] > 0 if f in _LOGS else total > 0 and compatible[f] == total)
    ]
    if not eligible:
        return None
    best = max(eligible, key=lambda f: (plain[f], -FORMATS.index(f)))
    if plain[best] == 0:
        return next(f for f in _FALLBACK if f in eligible)
    return best


def _head(path: Path) -> bytes:
    """The first bytes after any BOM and leading whitespace; refuses empty and binary files."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    with path.open("rb") as f:
        head = f.read(_HEAD)
        if head.startswith(BOM):
            head = head[3:]
        while True:
            if b"\x00" in head:
                raise MalformedTranscriptError(f"{path}: binary data, not a text transcript")
            try:
                decoder.decode(head)
            except UnicodeDecodeError:
                raise MalformedTranscriptError(f"{path}: not UTF-8 text (binary data?)") from None
            stripped = head.lstrip()
            if stripped:
                return stripped
            head = f.read(_HEAD)
            if not head:
                raise EmptyTranscriptError(f"{path}: the file is empty")


def is_aider(head: bytes) -> bool:
    """Whether a file's first bytes (after whitespace) open an Aider chat history."""
    first = head.split(b"\n", 1)[0].rstrip().decode("utf-8", "replace")
    return first.startswith(AIDER_HEAD) or first == AIDER_USER or first.startswith(AIDER_USER + " ")


def sniff_container(path: Path, *, max_record_bytes: int) -> Container:
    """Whether ``path`` holds JSON Lines, one array, one object, or an Aider history's
    Markdown; refuses anything else."""
    head = _head(path)
    if is_aider(head):
        return "markdown"
    if head[:1] == b"[":
        return "array"
    if head[:1] != b"{":
        preview = head[:40].decode("utf-8", "replace").split("\n", 1)[0]
        raise MalformedTranscriptError(f"{path}: not JSON or JSON Lines (starts with {preview!r})")
    with path.open("rb") as f:
        if f.read(3) != BOM:
            f.seek(0)
        line = b""
        while not line:  # the first line that is not blank
            raw = f.readline(max_record_bytes + 1)
            if not raw:
                break
            line = raw.strip()
    try:
        value = loads(line)
    except (ValueError, UnicodeDecodeError):
        return "object"  # a pretty-printed document, or one torn line
    if not isinstance(value, dict):
        return "object"
    if not {"role", "type"} & value.keys() and (
        any(isinstance(value.get(k), list) for k in WRAPPER_KEYS)
        or isinstance(value.get("input"), str)  # a Responses request of one user message
    ):
        return "object"
    return "jsonl"


def _object_format(doc: JsonDocument) -> Format | None:
    """A wrapper object says much: ``input``/``output`` (an ``input`` string too) are
    Responses, a top-level ``system`` beside ``messages`` is Anthropic; plain ``messages``
    are voted on."""
    others, arrays = doc.members(WRAPPER_KEYS)
    if isinstance(others.get("input"), str):
        return "openai-responses"
    if not arrays:
        raise UnrecognizedFormatError(
            f"{doc.path}: a JSON object without a {', '.join(WRAPPER_KEYS)} array"
        )
    if "input" in arrays or "output" in arrays:
        return "openai-responses"
    if LOGLINES in arrays:
        return "claude-code"
    if "system" in others:
        return "anthropic"
    sample = list(islice(doc.items(["messages"]), SAMPLE_RECORDS))
    if "projectHash" in others or any(is_gemini_record(r) for r in sample):
        return "gemini-cli"
    return choose(sample, among=("openai-chat", "anthropic"))


def detect(path: str | Path, *, max_record_bytes: int, forced: Format | None = None) -> Detected:
    """The format and container of ``path``; ``forced`` skips the vote, not the checks."""
    source = Path(path)
    if not source.exists():
        raise TranscriptNotFoundError(f"{source}: no such file")
    if not source.is_file():
        raise MalformedTranscriptError(f"{source}: not a regular file")
    container = sniff_container(source, max_record_bytes=max_record_bytes)
    if forced is not None:
        if (forced == "aider") != (container == "markdown"):
            what = "an Aider chat history" if container == "markdown" else "JSON"
            raise MalformedTranscriptError(f"{source}: {what}, not a file of the {forced} format")
        lines_only = forced in _LINES_ONLY or (forced in _LOGS and container == "array")
        if container != "jsonl" and lines_only:
            raise MalformedTranscriptError(
                f"{source}: {forced} files are JSON Lines, not one JSON document"
            )
        return Detected(forced, container)
    fmt: Format | None
    if container == "markdown":
        fmt = "aider"
    elif container == "jsonl":
        lines = JsonLines(source, max_record_bytes=max_record_bytes, tolerate="any")
        fmt = choose(line.value for line in islice(lines, SAMPLE_RECORDS))
    elif container == "array":
        doc = JsonDocument(source, max_record_bytes=max_record_bytes)
        sample = islice(doc.items(), SAMPLE_RECORDS)
        fmt = choose(sample, among=[f for f in FORMATS if f not in _NOT_IN_ARRAYS])
    else:
        fmt = _object_format(JsonDocument(source, max_record_bytes=max_record_bytes))
    if fmt is None:
        raise UnrecognizedFormatError(
            f"{source}: not a transcript format this tool reads ({', '.join(FORMATS)}); "
            "pass --format to force one"
        )
    return Detected(fmt, container)
