"""Everything the CLI prints about errors, warnings and logs passes here: one line each, with
every secret the command was given masked (URL passwords, secret query values, encryption keys),
driver messages included, and the detail behind ``--verbose``.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import traceback
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TextIO
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from .. import KEYS_ENV, STORE_ENV, UnreadableEnvelopeError
from ..backends import mask_url

__all__ = ["QUIET_ENV", "Boundary", "secrets_of_url"]

QUIET_ENV = "AGENT_CHECKPOINT_QUIET"
"""Set to 1 to silence warnings (as ``--quiet`` does)."""

MAX_LINE = 300
"""An error line longer than this is cut; ``--verbose`` prints all of it."""

_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"]+")
_SECRET_NAME = re.compile(r"pass|secret|token|key|sig|credential", re.I)
_USERINFO = re.compile(r"//([^/@\s]*)@")
_TOKEN = re.compile(r"[A-Za-z0-9+/=_%.~-]{8,}")


def secrets_of_url(url: str) -> set[str]:
    """The secret parts of a store URL: the password (as written and decoded) and the values
    of query parameters whose names look secret."""
    found: set[str] = set()
    for userinfo in _USERINFO.findall(url):  # also where urlsplit gives up
        _user, sep, password = userinfo.partition(":")
        if sep and password:
            found.update({password, unquote(password), quote(unquote(password), safe="")})
    try:
        query = urlsplit(url).query
    except ValueError:
        query = url.partition("?")[2]
    for name, value in parse_qsl(query, keep_blank_values=False):
        if _SECRET_NAME.search(name) and value:
            found.update({value, quote(value, safe="")})
    return found


def _key_material(value: str) -> set[str]:
    """The keys of an ``AGENT_CHECKPOINT_KEYS`` value (``id:base64``), and any entry without
    an id whole: ids are names, keys are secrets."""
    found: set[str] = set()
    for entry in value.split(","):
        _kid, sep, key = entry.strip().partition(":")
        found.add(key if sep else entry.strip())
    return {s for s in found if s}


DOING = {
    "scan": "listing the store",
    "load": "reading a record",
    "head": "reading a record's summary",
    "save": "writing a record",
    "drop": "deleting a record",
    "namespace": "opening the store",
    "open": "opening the store",
    "connect": "connecting",
    "setup": "setting the store up",
}
"""What a backend operation was doing, in the words of someone running a command."""


_INTERNAL = re.compile(r"(disk|memory|redis|postgres|s3|fsspec) (\w+) failed: ")


def in_words(text: str) -> str:
    """A backend error's message as a command's user reads it: what it was doing instead of
    the backend's operation name, and the command instead of the Python call to run."""
    found = _INTERNAL.match(text)
    if found and found.group(2) in DOING:
        text = f"{found.group(1)}: {DOING[found.group(2)]} failed: {text[found.end() :]}"
    return text.replace(
        "create it once with store.setup() (or `agent-checkpoint setup --store URL`)",
        "create it once with `agent-checkpoint setup --store URL`",
    )


VOLATILE_REDIS = (
    "Redis keeps nothing on disk: a restart loses every checkpoint; set appendonly yes (or -q)"
)
"""The CLI's line for ``VolatileRedisWarning`` (``--verbose`` prints the library's whole one)."""


class Boundary:
    """Masks the secrets of one command and prints its errors, warnings and logs."""

    def __init__(self, *, verbose: bool = False, quiet: bool = False) -> None:
        self.verbose = verbose
        self.quiet = quiet or os.environ.get(QUIET_ENV, "") not in ("", "0")
        self._secrets: set[str] = set()
        self._keys: set[str] = set()
        self._warned: set[str] = set()
        if os.environ.get(STORE_ENV):
            self.add_urls([os.environ[STORE_ENV]])
        if os.environ.get(KEYS_ENV):
            self._keys = _key_material(os.environ[KEYS_ENV])

    def add_urls(self, urls: Iterable[str | None]) -> None:
        for url in urls:
            if url:
                self._secrets |= secrets_of_url(url)

    def mask(self, text: str) -> str:
        """``text`` with every known secret, every URL password and any run of characters
        taken from an encryption key replaced by ``***``."""
        for secret in sorted(self._secrets, key=len, reverse=True):
            if len(secret) >= 3:
                text = text.replace(secret, "***")
        if self._keys:
            text = _TOKEN.sub(self._unless_key_material, text)
        return _URL.sub(lambda m: mask_url(m.group(0)), text)

    def _unless_key_material(self, found: re.Match[str]) -> str:
        token = found.group(0)
        return "***" if any(token in key or key in token for key in self._keys) else token

    # -- what is printed -------------------------------------------------------------------

    def error(self, exc: BaseException) -> None:
        """One line for ``exc``; with ``verbose``, its whole message, causes and traceback."""
        print(f"agent-checkpoint: error: {self.mask(self.one_line(exc))}", file=sys.stderr)
        if self.verbose:
            detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            print(self.mask(detail.rstrip()), file=sys.stderr)

    def one_line(self, exc: BaseException) -> str:
        if isinstance(exc, UnreadableEnvelopeError) and len(str(exc)) > MAX_LINE:
            return (
                f"record {exc.session_id!r} is stored, but this library cannot read it (not an "
                f"envelope); its bytes begin {exc.stored_preview}"
            )
        text = in_words(" ".join(str(exc).split()) or type(exc).__name__)
        if len(text) > MAX_LINE and not self.verbose:
            sentence = text.find(". ", 40, MAX_LINE)  # the first sentence says what happened
            cut = sentence + 1 if sentence > 0 else MAX_LINE - 1
            text = text[:cut] + " … (--verbose shows all of it)"
        return text

    def warn(self, message: str) -> None:
        """One warning line, once per command, unless quiet."""
        line = self.mask(" ".join(message.split()))
        if self.quiet or line in self._warned:
            return
        self._warned.add(line)
        print(f"agent-checkpoint: warning: {line}", file=sys.stderr)

    @contextmanager
    def installed(self) -> Iterator[None]:
        """Route Python warnings and log records here while the command runs: a warning is
        one clean line, and drivers' logs (a connection pool's retries) reach the terminal
        only with ``verbose``."""
        handler = _LogLines(self) if self.verbose else logging.NullHandler()
        root = logging.getLogger()
        root.addHandler(handler)
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            # as Python's own defaults: a socket or file left to the garbage collector is a
            # developer's diagnostic (-W default shows it), not a line of the command's output
            warnings.simplefilter("ignore", ResourceWarning)
            warnings.showwarning = self._show_warning
            try:
                yield
            finally:
                root.removeHandler(handler)

    def _show_warning(
        self,
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        del filename, lineno, file, line
        if category.__name__ == "VolatileRedisWarning" and not self.verbose:
            self.warn(VOLATILE_REDIS)  # on every command: two lines at 60 columns, not four
        else:
            self.warn(str(message))


class _LogLines(logging.Handler):
    def __init__(self, boundary: Boundary) -> None:
        super().__init__(logging.WARNING)
        self.boundary = boundary

    def emit(self, record: logging.LogRecord) -> None:
        text = self.boundary.mask(" ".join(record.getMessage().split()))
        print(f"agent-checkpoint: log: {record.name}: {text}", file=sys.stderr)
