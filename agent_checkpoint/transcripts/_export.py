"""Turns handed back to any tool: ``export_turns(turns, to=FORMAT)``.

Each format is written by its own module: OpenAI chat messages and Responses input
(``_export_openai``), an Anthropic Messages request body and a Claude Code session log
(``_export_anthropic``), a Codex rollout (``_export_codex``), a Gemini CLI session
(``_export_gemini``), Aider's markdown history (``_export_aider``), and the canonical turn
JSONL itself. Reading what was written gives back the same turns (role, words, tool calls
and their results); what a format cannot hold is listed in ``Exported.report``, never
dropped silently. ``write_export`` writes one atomically, as ``write_turns`` does.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import BinaryIO, Literal, NoReturn, get_args

from .._model import Json
from .._model._struct import kind_of
from ..errors import InvalidArgumentError
from ._convert import ConversionReport, checked
from ._export_aider import aider_markdown
from ._export_anthropic import anthropic_body, claude_code_lines
from ._export_codex import codex_lines
from ._export_gemini import gemini_session
from ._export_openai import chat_body, responses_body
from ._jsonio import dump_line
from ._turns import Turn, atomic_write

__all__ = ["EXPORT_FORMATS", "ExportFormat", "Exported", "export_turns", "write_export"]

ExportFormat = Literal[
    "openai-chat",
    "openai-responses",
    "anthropic",
    "codex",
    "claude-code",
    "gemini-cli",
    "aider",
    "turns",
]
EXPORT_FORMATS: tuple[ExportFormat, ...] = get_args(ExportFormat)
"""Every format ``export_turns`` writes."""
SUFFIX: dict[ExportFormat, str] = {
    "openai-chat": ".json",
    "openai-responses": ".json",
    "anthropic": ".json",
    "codex": ".jsonl",
    "claude-code": ".jsonl",
    "gemini-cli": ".json",
    "aider": ".md",
    "turns": ".jsonl",
}
"""The file name ending each format's own files have."""


@dataclass(frozen=True)
class Exported:
    """A conversation written in one format: ``data`` the file's bytes, ``report`` what the
    format could not hold, ``session_id`` the session the file names (Claude Code, Codex and
    Gemini CLI files carry one; ``None`` for the others)."""

    format: ExportFormat
    data: bytes
    report: ConversionReport
    turns: int
    session_id: str | None = None

    @property
    def suffix(self) -> str:
        """The ending of the format's own file names (``.jsonl``, ``.json``, ``.md``)."""
        return SUFFIX[self.format]

    def notes(self) -> list[str]:
        """One line per kind of loss (empty when the format held everything)."""
        return self.report.lines(f"the {self.format} file")


def _document(value: Json) -> bytes:
    return dump_line(value)


def export_turns(
    turns: Iterable[Turn],
    *,
    to: ExportFormat,
    session_id: str | None = None,
    cwd: str | None = None,
) -> Exported:
    """``turns`` written in format ``to`` (one of ``EXPORT_FORMATS``).

    ``session_id`` names the session of a Claude Code, Codex or Gemini CLI file, a UUID
    (default: a new random one; the same id and turns write the same file); ``cwd`` the folder those
    files record (default: the current one; ``claude --resume`` and ``codex resume`` list the
    sessions of the folder they run in)."""
    if to not in EXPORT_FORMATS:
        raise InvalidArgumentError(
            f"unknown export format {to!r}; expected one of {', '.join(EXPORT_FORMATS)}"
        )
    listed = [turn for _, turn in checked(turns)]
    session = str(uuid.uuid4()) if session_id is None else _uuid(session_id)
    report = ConversionReport()
    named: str | None = session
    data: bytes
    if to == "openai-chat":
        body, report = chat_body(listed)
        data, named = _document(body), None
    elif to == "openai-responses":
        body, report = responses_body(listed)
        data, named = _document(body), None
    elif to == "anthropic":
        body, report = anthropic_body(listed)
        data, named = _document(body), None
    elif to == "gemini-cli":
        body, report = gemini_session(listed, session_id=session, cwd=cwd)
        data = _document(body)
    elif to == "aider":
        text, report = aider_markdown(listed)
        data, named = text.encode(), None
    elif to == "turns":
        data, named = b"".join(dump_line(t.to_json()) for t in listed), None
    else:
        write = codex_lines if to == "codex" else claude_code_lines
        data, report = write(listed, session_id=session, cwd=cwd)
    return Exported(to, data, report, len(listed), named)


def _uuid(session_id: object) -> str:
    """``session_id`` as a UUID's canonical text; refuses anything else, which the tools that
    name sessions (Claude Code, Codex, Gemini CLI) would not pick up."""
    try:
        return str(uuid.UUID(session_id)) if isinstance(session_id, str) else _no_uuid(session_id)
    except ValueError:
        return _no_uuid(session_id)


def _no_uuid(session_id: object) -> NoReturn:
    raise InvalidArgumentError(
        "session_id must be a UUID (Claude Code, Codex and Gemini CLI name sessions by one), "
        f"got {session_id!r}"
    )


def write_export(path: str | os.PathLike[str] | BinaryIO, exported: Exported) -> int:
    """Write ``exported`` to ``path`` atomically (or to a binary stream); the bytes written."""
    if not isinstance(exported, Exported):
        raise InvalidArgumentError(f"write_export takes an Exported, not {kind_of(exported)}")
    atomic_write(path, lambda f: f.write(exported.data))
    return len(exported.data)
