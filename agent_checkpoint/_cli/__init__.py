"""The ``agent-checkpoint`` command: parse, call the public API, print, map errors to exit codes.

Each command group lives in its own module with a ``register(subparsers)`` function. Every
failure ends as one line on stderr and one of the documented exit codes (``EXIT``, the same
table for every command), never a traceback; ``--verbose`` adds the detail. Everything printed
about an error, a warning or a log record passes through ``Boundary``, which masks the
secrets the command was given.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Sequence
from typing import Any

from .. import (
    DEFAULT_STORE_PATH,
    KEYS_ENV,
    STORE_ENV,
    BackendError,
    CheckpointError,
    ConflictError,
    ConversationMismatchError,
    DivergedError,
    EnvelopeError,
    InvalidCheckpointError,
    MissingDependencyError,
    NotFoundError,
    StoreConfigurationError,
    StoreError,
    TranscriptError,
    TranscriptNotFoundError,
    UnsafeStageError,
)
from . import interchange as interchange_commands
from . import ops as ops_commands
from . import store_commands as store_commands
from ._boundary import QUIET_ENV, Boundary
from ._common import EXIT, CommandError, ReaderLeftError

__all__ = ["EXIT", "CommandError", "build_parser", "exit_code_for", "main"]

_GROUPS = (store_commands, ops_commands, interchange_commands)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agent-checkpoint",
        description="Save, store, inspect and resume AI-agent run checkpoints.",
        epilog=f"environment: {STORE_ENV} (the store when --store is not given); {KEYS_ENV}="
        "ID:BASE64[,ID:BASE64...] (keys that encrypt new records and open old ones, the first "
        f"is primary; needs pip install 'localab-checkpoint[encryption]'); {QUIET_ENV}=1 (as -q). "
        "Exit codes: "
        + ", ".join(f"{code} {name.replace('_', ' ')}" for name, code in EXIT.items())
        + " (README.md, 'Exit codes').",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    parser.add_argument(
        "--store",
        metavar="URL",
        default=None,
        help=f"store URL or path for the command (default: ${STORE_ENV}, else "
        f"./{DEFAULT_STORE_PATH}); also accepted after the command",
    )
    _add_output_options(parser, default=False)
    sub = parser.add_subparsers(dest="command_name", metavar="COMMAND", required=True)
    for group in _GROUPS:
        group.register(sub)
    for name, command in sub.choices.items():
        _add_output_options(command, default=argparse.SUPPRESS)
        _describe(name, command, sub)
    return parser


_EXAMPLES = {
    "put": ["put run.json", "put run.json --key conv-7 --if-revision 3"],
    "get": ["get conv-7 > run.json", "get conv-7 --envelope"],
    "show": ["show conv-7", "show conv-7 --messages 20"],
    "ls": ["ls --failed --since 1d", "ls --owner alice@acme.test --json"],
    "rm": ["rm conv-7", "rm conv-7 --if-revision 4"],
    "prune": ["prune --older-than 30d --dry-run", "prune --older-than 30d"],
    "setup": ["--store postgresql://localhost/agents setup"],
    "claims": ["claims", "claims --json"],
    "copy": ["copy --to redis://localhost:6379/0", "--store ./old copy --to ./new --overwrite"],
    "migrate": ["migrate --dry-run", "migrate"],
    "rekey": [f"rekey   ({KEYS_ENV} holds the new primary key first)"],
    "verify": ["verify", "verify --repair"],
    "resume-worker": ["resume-worker --worker w1 -- my-agent --resume"],
    "save": ["save session.jsonl -o ckpt.json", "save session.jsonl --store ./runs"],
    "resume": ["resume ckpt.json -- my-agent", "resume conv-7 --store ./runs -- my-agent"],
    "export": [
        "export ckpt.jsonl --to claude-code -o session.jsonl",
        "export conv-7 --store ./runs --to anthropic > body.json",
    ],
    "diff": ["diff a.jsonl b.jsonl", "diff --store ./runs conv-7 conv-8"],
    "merge": ["merge a.json b.json -o merged.json"],
}
"""One or two typical command lines per command, shown under its ``--help``."""

_OWN_CODES = {"diff": "1 differ, ", "resume": "the command's own code, 126/127 if it cannot run, "}


def _describe(name: str, command: argparse.ArgumentParser, sub: Any) -> None:
    """A command's ``--help``: a description (its one-line help where it has none), examples
    and the exit codes."""
    summary = next((a.help for a in sub._choices_actions if a.dest == name), None)
    if command.description is None and summary:
        command.description = summary[0].upper() + summary[1:] + "."
    examples = "".join(f"\n  agent-checkpoint {line}" for line in _EXAMPLES.get(name, []))
    codes = textwrap.fill(
        f"exit codes: 0 ok, {_OWN_CODES.get(name, '')}2 usage, 3 not found, 4 conflict, "
        "5 invalid, 6 store or server failure, 7 missing extra (README.md, 'Exit codes')",
        78,
    )
    command.epilog = (f"examples:{examples}\n\n" if examples else "") + codes
    command.formatter_class = argparse.RawDescriptionHelpFormatter


def _add_output_options(parser: argparse.ArgumentParser, default: object) -> None:
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=default,
        help="on an error, its whole message, causes and traceback; drivers' log warnings",
    )
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=default,
        help=f"no warnings (such as Redis keeping nothing on disk); also ${QUIET_ENV}=1",
    )


def _version() -> str:
    from .. import __version__

    return __version__


def exit_code_for(exc: BaseException) -> int:
    """The documented exit code for an error (README, "Exit codes"), for every command."""
    if isinstance(exc, CommandError):
        return exc.exit_code
    if isinstance(exc, DivergedError):
        return EXIT["conflict"]
    if isinstance(exc, (TranscriptNotFoundError, NotFoundError, FileNotFoundError)):
        return EXIT["not_found"]
    if isinstance(exc, TranscriptError):
        return EXIT["invalid"]
    if isinstance(exc, ConflictError):
        return EXIT["conflict"]
    if isinstance(
        exc, (InvalidCheckpointError, UnsafeStageError, EnvelopeError, ConversationMismatchError)
    ):
        return EXIT["invalid"]
    if isinstance(exc, MissingDependencyError):
        return EXIT["dependency"]
    if isinstance(exc, StoreConfigurationError):
        return EXIT["usage"]
    if isinstance(exc, BackendError):
        return EXIT["backend"]
    if isinstance(exc, (StoreError, CheckpointError, ValueError, OSError)):
        return EXIT["usage"]
    return EXIT["internal"]


_TAKES_A_COMMAND = {
    "resume": "resume CKPT [OPTIONS] -- COMMAND [ARG...]",
    "resume-worker": "resume-worker [OPTIONS] -- COMMAND [ARG...]",
}
"""The commands that run a command of the user's, given after ``--``, and their usage."""


def _split_command(argv: Sequence[str]) -> tuple[list[str], list[str] | None]:
    """``argv`` before the ``--`` that starts the command ``resume`` or ``resume-worker``
    runs, and the command after it (``None`` without one): options of ours may come anywhere
    before the ``--``, and nothing after it is ours."""
    argv = list(argv)
    if "--" in argv:
        at = argv.index("--")
        if not _TAKES_A_COMMAND.keys().isdisjoint(argv[:at]):
            return argv[:at], argv[at + 1 :]
    return argv, None


def _refuse_unknown(parser: argparse.ArgumentParser, name: str | None, unknown: list[str]) -> None:
    """argparse's error for options no command takes, from the command's own parser (its
    usage, not the top level's), with the nearest option it has where one is close."""
    import difflib  # only on this error

    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    command = sub.choices.get(name or "", parser)
    known = [o for action in command._actions for o in action.option_strings]
    hints = [
        f"{word}: did you mean {close[0]}?"
        for word in unknown
        if word.startswith("--")
        and (close := difflib.get_close_matches(word.split("=")[0], known, n=1, cutoff=0.7))
    ]
    message = f"unrecognized arguments: {' '.join(unknown)}"
    command.error("; ".join([message, *hints]))


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    ours, command = _split_command(sys.argv[1:] if argv is None else argv)
    args, unknown = parser.parse_known_args(ours)
    if unknown and command is None and isinstance(getattr(args, "command", None), list):
        name = next(word for word in ours if word in _TAKES_A_COMMAND)
        parser.error(
            f"{' '.join(unknown)}: the options of the command to run go after -- "
            f"({_TAKES_A_COMMAND[name]})"
        )
    if unknown:
        _refuse_unknown(parser, getattr(args, "command_name", None), unknown)
    if command is not None:
        args.command = [*args.command, *command]
    boundary = Boundary(verbose=args.verbose, quiet=args.quiet)
    boundary.add_urls([getattr(args, "store", None), getattr(args, "to", None)])
    try:
        with boundary.installed():
            code: int = args.run(args)
    except KeyboardInterrupt as exc:
        detail = f": {boundary.mask(str(exc))}" if str(exc) else ""
        print(f"agent-checkpoint: interrupted{detail}", file=sys.stderr)
        return EXIT["interrupted"]
    except BrokenPipeError as exc:  # stdout's reader left (| head): nothing more to say
        return exc.exit_code if isinstance(exc, ReaderLeftError) else EXIT["ok"]
    except Exception as exc:  # every error is one line, never a traceback
        boundary.error(exc)
        return exit_code_for(exc)
    return code
