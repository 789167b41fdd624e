"""Aider chat histories (``.aider.chat.history.md``) to canonical turns.

Aider appends every session to one Markdown file: ``# aider chat started at <local time>``
heads a session, ``#### `` starts a line the user typed (consecutive ``#### `` lines are one
message), ``>`` starts a line of Aider's own output (command output, "Applied edit to ...",
warnings; consecutive ``>`` lines, blank lines between them included, are one block) and
the other lines are the model's reply. Each session is one conversation: the last one that
holds a user message by default, or the one ``session`` numbers (from 1, in file order).

A user message becomes a ``user`` turn; a reply an ``assistant`` turn (its model the one
the session's start-up output names); an output block after the first user message a
``user`` turn marked ``_meta.injectedBy`` (flavor ``tool-result``), since what Aider ran is
what the conversation goes on from. The start-up output before the first user message is
left out. Every turn carries the session's start time (Aider writes no zone: read as UTC).

The file is read line by line, twice (once to find the sessions, once to read one), and no
turn's text may exceed ``max_record_bytes``.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .._model import Json
from ._errors import EmptyTranscriptError, MalformedTranscriptError
from ._jsonio import BOM
from ._turns import Turn, iso_utc

__all__ = ["HEAD", "PROVIDER", "USER", "AiderHistory"]

HEAD = "# aider chat started at "
USER = "####"
OUTPUT = ">"
PROVIDER = "aider"
OUTPUT_REASON = "Aider's output (> lines)"
_MODEL_KEYS = ("> Main model: ", "> Model: ")


@dataclass(slots=True)
class Session:
    number: int
    first_line: int
    """The line after the session's head (1 for text before any head)."""
    started: str | None
    users: int = 0


def _text_lines(path: Path) -> Iterator[tuple[int, str]]:
    """Each line's number and text (without its line ending), decoded as UTF-8."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    with path.open("rb") as f:
        first = True
        for number, raw in enumerate(f, 1):
            if first and raw.startswith(BOM):
                raw = raw[3:]
            first = False
            try:
                text = decoder.decode(raw)
            except UnicodeDecodeError:
                raise MalformedTranscriptError(f"{path}: line {number} is not UTF-8") from None
            yield number, text.rstrip("\r\n")


def _kind(line: str) -> str:
    if line.startswith(USER) and (len(line) == 4 or line[4] in " \t"):
        return "user"
    if line.startswith(OUTPUT):
        return "output"
    return "blank" if not line.strip() else "text"


class AiderHistory:
    """An Aider chat history as a re-iterable source of the turns of one session."""

    def __init__(
        self, path: Path, *, ts: str, session: int | None = None, max_record_bytes: int
    ) -> None:
        self.path = path
        self.default_ts = ts
        self.asked = session
        self.session = session
        self.max_record_bytes = max_record_bytes
        self.notes: list[str] = []

    def sessions(self) -> list[Session]:
        """Every session of the file, in order; text before the first head is a session too."""
        found: list[Session] = []
        for number, line in _text_lines(self.path):
            if line.startswith(HEAD):
                started = iso_utc(line[len(HEAD) :].strip())
                found.append(Session(len(found) + 1, number + 1, started))
            elif _kind(line) == "user":
                if not found:
                    found.append(Session(1, 1, None))
                found[-1].users += 1
            elif not found and line.strip():
                found.append(Session(1, 1, None))
        return found

    def _pick(self, sessions: list[Session]) -> tuple[Session, Session | None]:
        """The session to read, and the one after it (where reading stops)."""
        count = len(sessions)
        if self.asked is not None:
            if not 1 <= self.asked <= count:
                held = f"sessions 1 to {count}" if count > 1 else "1 session"
                raise EmptyTranscriptError(
                    f"{self.path}: no session {self.asked} in this Aider history (it holds "
                    f"{held}; --session picks one)"
                )
            chosen = sessions[self.asked - 1]
        else:
            talked = [s for s in sessions if s.users]
            if not talked:
                raise EmptyTranscriptError(
                    f"{self.path}: none of the {count} Aider session(s) holds a user message"
                )
            chosen = talked[-1]
            self.notes.append(
                f"read session {chosen.number} of {count} (the last one holding a user "
                "message; --session picks another)"
                if chosen.number != count
                else f"read session {count} of {count} (--session picks another)"
                if count > 1
                else "read the file's only session"
            )
        later = sessions[chosen.number] if chosen.number < count else None
        return chosen, later

    def __iter__(self) -> Iterator[Turn]:
        self.notes = []
        chosen, later = self._pick(self.sessions())
        self.session = chosen.number
        stop = later.first_line - 1 if later else None
        ts = chosen.started or self.default_ts
        model: str | None = None
        kind = ""  # the kind of the block being gathered
        lines: list[str] = []
        size = 0
        pending = 0  # blank lines seen since the block's last line
        talked = False
        banner = 0
        outputs = 0

        def turn() -> Turn:
            nonlocal outputs
            text = "\n".join(lines)
            if kind == "user":
                return Turn("user", text, provider=PROVIDER, ts=ts)
            if kind == "text":
                return Turn("assistant", text, provider=PROVIDER, model=model, ts=ts)
            outputs += 1
            marker: dict[str, Json] = {
                "injectionId": f"aider-output-{outputs}",
                "flavor": "tool-result",
                "reason": OUTPUT_REASON,
                "iteration": outputs,
            }
            return Turn(
                "user", text, provider=PROVIDER, ts=ts, extra={"_meta": {"injectedBy": marker}}
            )

        for number, line in _text_lines(self.path):
            if number < chosen.first_line:
                continue
            if stop is not None and number >= stop:
                break
            now = _kind(line)
            if now == "blank":
                pending += 1
                continue
            joins = now == kind and (pending == 0 or now != "user")
            if not joins and lines:
                if kind == "output" and not talked:
                    banner += 1
                else:
                    yield turn()
                lines, size = [], 0
            if now == "user":
                talked = True
                piece = line[len(USER) + 1 :].rstrip()
            elif now == "output":
                piece = line[len(OUTPUT) :].removeprefix(" ").rstrip()
                for key in _MODEL_KEYS:
                    if line.startswith(key):
                        model = line[len(key) :].split(" with ", 1)[0].strip() or model
            else:
                piece = line
            if joins and now == "text":
                lines.extend([""] * pending)
            pending = 0
            kind = now
            lines.append(piece)
            size += len(piece) + 1
            if size > self.max_record_bytes:
                raise MalformedTranscriptError(
                    f"{self.path}: the block ending on line {number} is longer than "
                    f"{self.max_record_bytes} bytes"
                )
        if lines and (kind != "output" or talked):
            yield turn()
        elif lines:
            banner += 1
        if banner:
            self.notes.append(
                "left out Aider's start-up output (the > lines before the first message)"
            )
