"""The ``agent-checkpoint`` command: parse, call the public API, print, map errors to exit codes.

Each command group lives in its own module with a ``register(subparsers)`` function. Every
failure ends as one line on stderr and one of the documented exit codes (``EXIT``), never a
traceback.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence

from ..backends import mask_url
from ..errors import (
    BackendError,
    CheckpointError,
    ConflictError,
    ConversationMismatchError,
    DivergedError,
    EnvelopeError,
    InvalidCheckpointError,
    MissingDependencyError,
    NotFoundError,
    StoreError,
    TranscriptError,
    TranscriptNotFoundError,
)
from . import interchange as interchange_commands
from . import ops as ops_commands
from . import store_commands as store_commands
from ._common import EXIT, CommandError

__all__ = ["EXIT", "CommandError", "build_parser", "main"]

_GROUPS = (store_commands, ops_commands, interchange_commands)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agent-checkpoint",
        description="Save, store, inspect and resume AI-agent run checkpoints.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for group in _GROUPS:
        group.register(sub)
    return parser


def _version() -> str:
    from .. import __version__

    return __version__


def exit_code_for(exc: BaseException) -> int:
    """The documented exit code for an error (README, "Exit codes"), for every command."""
    if isinstance(exc, CommandError):
        return exc.exit_code
    if isinstance(exc, DivergedError):
        return EXIT["conflict"]
    if isinstance(exc, TranscriptNotFoundError):
        return EXIT["not_found"]
    if isinstance(exc, TranscriptError):
        return EXIT["invalid"]
    if isinstance(exc, NotFoundError):
        return EXIT["not_found"]
    if isinstance(exc, ConflictError):
        return EXIT["conflict"]
    if isinstance(exc, (InvalidCheckpointError, EnvelopeError, ConversationMismatchError)):
        return EXIT["invalid"]
    if isinstance(exc, MissingDependencyError):
        return EXIT["dependency"]
    if isinstance(exc, BackendError):
        return EXIT["backend"]
    if isinstance(exc, (StoreError, CheckpointError, ValueError, OSError)):
        return EXIT["usage"]
    return EXIT["internal"]


_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"]+")


def _masked(message: str) -> str:
    """Error text with every URL's password masked: credentials are never printed."""
    return _URL.sub(lambda m: mask_url(m.group(0)), message)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.run(args)
    except KeyboardInterrupt:
        print("agent-checkpoint: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # every error is one line, never a traceback
        message = _masked(" ".join(str(exc).split()) or type(exc).__name__)
        print(f"agent-checkpoint: error: {message}", file=sys.stderr)
        return exit_code_for(exc)
    return code
