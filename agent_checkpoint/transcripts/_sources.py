"""A transcript file opened for reading: detected format, and its turns on demand.

``open_transcript(path)`` checks the file and detects its format once; iterating the
returned ``Transcript`` reads the file again each time (streaming, bounded memory), so a
caller can make one pass to plan (tool-call integrity, diff alignment) and a second to
write. ``notes`` says what the last pass left out or tolerated.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from itertools import chain, islice
from pathlib import Path

from .._model import Json
from ..errors import InvalidArgumentError
from ._aider import AiderHistory
from ._anthropic import turns_from_messages as anthropic_turns
from ._claude_code import ClaudeCodeLog
from ._claude_code_web import LoglinesLines
from ._codex import read_rollout
from ._detect import FORMATS, WRAPPER_KEYS, Detected, Format, detect
from ._errors import (
    EmptyTranscriptError,
    MalformedTranscriptError,
    UnrecognizedFormatError,
)
from ._gemini import read_document as gemini_document
from ._gemini import read_lines as gemini_lines
from ._jsonio import MAX_RECORD_BYTES, JsonDocument, JsonLines, Tolerance
from ._openai_chat import turns_from_messages as chat_turns
from ._openai_responses import turns_from_items
from ._turns import Turn, now_iso, turn_from_json

__all__ = ["Transcript", "open_transcript"]

SESSION_ID_LINES = 64
"""How many lines from the top are searched for a session id."""


class Transcript:
    """The turns of one transcript file, re-read on every iteration.

    Missing timestamps are filled with the time the transcript was opened, the same for
    every turn of one ``Transcript``. ``subagent`` is the sub-agent whose conversation is read:
    the one asked for, or, once read, the one a Claude Code sub-agent's own log holds.
    ``server_history``, once read, names where the conversation before the file's records is
    kept when the file does not hold it (a Responses request that continues a stored
    response or conversation: ``"previous_response_id resp_..."``), else ``None``.
    ``session`` is the Aider session asked for (from 1) or, once read, the one read.
    """

    def __init__(
        self,
        path: Path,
        detected: Detected,
        *,
        max_record_bytes: int = MAX_RECORD_BYTES,
        subagent: str | None = None,
        session: int | None = None,
    ) -> None:
        self.path = path
        self.subagent = subagent
        self.session = session
        self.format: Format = detected.format
        self.container = detected.container
        self.max_record_bytes = max_record_bytes
        self.opened_at = now_iso()
        self.notes: list[str] = []
        self.server_history: str | None = None
        self._log: ClaudeCodeLog | None = None
        self._aider: AiderHistory | None = None

    def __repr__(self) -> str:
        return f"Transcript({str(self.path)!r}, format={self.format!r})"

    def session_id(self) -> str | None:
        """The id of the session the transcript records, where its format carries one (a
        Claude Code log's ``sessionId``, a Codex rollout's ``session_meta`` id), from the
        first ``SESSION_ID_LINES`` lines; a Gemini CLI session's ``sessionId``); ``None``
        otherwise."""
        if self.format == "gemini-cli" and self.container == "object":
            members, _ = JsonDocument(self.path, max_record_bytes=self.max_record_bytes).members(
                ["messages"]
            )
            found = members.get("sessionId")
            return found if isinstance(found, str) and found else None
        if self.format not in ("claude-code", "codex", "gemini-cli"):
            return None
        if self.container != "jsonl":
            lines: JsonLines = LoglinesLines(self.path, max_record_bytes=self.max_record_bytes)
        else:
            lines = self._lines("any")
        for line in islice(lines, SESSION_ID_LINES):
            record = line.value
            if not isinstance(record, dict):
                continue
            found = record.get("sessionId")
            if self.format == "codex":
                payload = record.get("payload")
                meta = record.get("type") == "session_meta" and isinstance(payload, dict)
                found = payload.get("id") if meta else None  # type: ignore[union-attr]
            if isinstance(found, str) and found:
                return found
        return None

    def __iter__(self) -> Iterator[Turn]:
        notes: list[str] = []
        count = 0
        for turn in self._turns(notes):
            count += 1
            yield turn
        if count == 0:
            raise EmptyTranscriptError(
                f"{self.path}: no conversation turns in this {self.format} file"
            )
        self.notes = notes  # only a complete pass says what the file holds

    def _lines(self, tolerate: Tolerance) -> JsonLines:
        return JsonLines(self.path, max_record_bytes=self.max_record_bytes, tolerate=tolerate)

    def _records(self, notes: list[str]) -> tuple[Iterator[Json], dict[str, Json]]:
        if self.container == "jsonl":
            lines = self._lines("torn")

            def values() -> Iterator[Json]:
                yield from (line.value for line in lines)
                notes.extend(lines.notes)

            return values(), {}
        doc = JsonDocument(self.path, max_record_bytes=self.max_record_bytes)
        if self.container == "array":
            return doc.items(), {}
        members, arrays = doc.members(WRAPPER_KEYS)
        if self.format == "openai-responses":
            streamed = [k for k in arrays if k in ("input", "output")]
            text = members.get("input")
            if isinstance(text, str):  # the short form of one user message
                said: Json = {"role": "user", "content": text}
                return chain([said], doc.items(streamed)), members
        else:
            streamed = [k for k in arrays if k == "messages"]
        if not streamed:
            raise MalformedTranscriptError(f"{self.path}: no records for the {self.format} format")
        return doc.items(streamed), members

    def _turns(self, notes: list[str]) -> Iterator[Turn]:
        ts = self.opened_at
        if self.format == "turns":
            lines = self._lines("none")
            for line in lines:
                yield turn_from_json(line.value, f"{self.path}: line {line.number}")
            return
        if self.format == "aider":
            if self._aider is None:
                self._aider = AiderHistory(
                    self.path, ts=ts, session=self.session, max_record_bytes=self.max_record_bytes
                )
            yield from self._aider
            self.session = self._aider.session  # the session read
            notes.extend(self._aider.notes)
            return
        if self.format == "claude-code":
            if self._log is None:
                lines = (
                    self._lines("any")
                    if self.container == "jsonl"
                    else LoglinesLines(self.path, max_record_bytes=self.max_record_bytes)
                )
                self._log = ClaudeCodeLog(lines, ts=ts, subagent=self.subagent)
            yield from self._log
            self.subagent = self._log.subagent  # a sub-agent's own log names its sub-agent
            notes.extend(self._log.notes)
            return
        try:
            yield from self._parsed(notes, ts)
        except MalformedTranscriptError as exc:
            # The readers name a record; the file layer's errors already name the file.
            message = str(exc)
            if not message.startswith(f"{self.path}: "):
                raise MalformedTranscriptError(f"{self.path}: {message}") from None
            raise

    def _parsed(self, notes: list[str], ts: str) -> Iterator[Turn]:
        if self.format == "codex":
            yield from read_rollout(self._lines("any"), ts=ts, notes=notes)
            return
        if self.format == "gemini-cli":
            if self.container == "jsonl":
                yield from gemini_lines(self._lines("any"), ts=ts, notes=notes)
            else:
                doc = JsonDocument(self.path, max_record_bytes=self.max_record_bytes)
                yield from gemini_document(doc, ts=ts, notes=notes)
            return
        records, members = self._records(notes)
        model = members.get("model")
        model = model if isinstance(model, str) else None
        if self.format == "openai-chat":
            yield from chat_turns(records, model=model, ts=ts)
        elif self.format == "anthropic":
            yield from anthropic_turns(records, system=members.get("system"), model=model, ts=ts)
        else:
            self.server_history = _server_history(members)
            if self.server_history:
                notes.append(
                    f"this request continues a conversation stored on OpenAI's servers "
                    f"({self.server_history}): the file holds only the items it added, and "
                    "only those are read"
                )
            yield from turns_from_items(
                records,
                instructions=members.get("instructions"),
                model=model,
                ts=ts,
                notes=notes,
            )


def _server_history(members: dict[str, Json]) -> str | None:
    """Where a Responses body's earlier conversation lives, if on the server."""
    previous = members.get("previous_response_id")
    if isinstance(previous, str) and previous:
        return f"previous_response_id {previous}"
    conversation = members.get("conversation")
    if isinstance(conversation, dict):  # {"id": "conv_..."} or the id alone
        conversation = conversation.get("id")
    if isinstance(conversation, str) and conversation:
        return f"conversation {conversation}"
    return None


def open_transcript(
    path: str | os.PathLike[str],
    *,
    format: Format | None = None,
    max_record_bytes: int = MAX_RECORD_BYTES,
    subagent: str | None = None,
    session: int | None = None,
) -> Transcript:
    """Open a transcript of any supported format; ``format`` overrides detection.

    ``subagent`` reads the conversation of that sub-agent (its ``agentId``) from a Claude
    Code log instead of the main one; ``session`` reads that session (from 1) of an Aider
    chat history instead of the last one. Raises ``TranscriptError`` subclasses for a missing,
    empty, binary, non-JSON or unrecognised file, and for ``subagent`` on another format.
    Errors in later records surface while iterating.
    """
    if format is not None and format not in FORMATS:
        raise InvalidArgumentError(
            f"unknown format {format!r}; expected one of {', '.join(FORMATS)}"
        )
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidArgumentError(f"open_transcript takes a file's path, got {path!r}")
    source = Path(path)
    detected = detect(source, max_record_bytes=max_record_bytes, forced=format)
    if subagent is not None and detected.format != "claude-code":
        raise UnrecognizedFormatError(
            f"{source}: this {detected.format} file has no sub-agents; --subagent reads "
            "Claude Code logs"
        )
    if session is not None:
        if isinstance(session, bool) or not isinstance(session, int) or session < 1:
            raise InvalidArgumentError(f"session is a number from 1, got {session!r}")
        if detected.format != "aider":
            raise UnrecognizedFormatError(
                f"{source}: this {detected.format} file holds one session; --session picks "
                "one of an Aider chat history's sessions"
            )
    return Transcript(
        source,
        detected,
        max_record_bytes=max_record_bytes,
        subagent=subagent,
        session=session,
    )
