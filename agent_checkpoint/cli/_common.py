"""What every command module shares: exit codes, the store option, output helpers."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import orjson

from ..container import keyring_from_env
from ..store import DEFAULT_STORE_PATH, STORE_ENV, Store, open_store

EXIT = {
    "ok": 0,
    "differ": 1,  # diff: the checkpoints differ
    "usage": 2,  # bad arguments or bad input (also argparse's own code)
    "not_found": 3,
    "conflict": 4,  # a conditional write or ownership check lost; nothing changed
    "invalid": 5,  # a record or file that is present but unreadable or refused by the door
    "backend": 6,  # the store's server failed or stayed unreachable after retries
    "dependency": 7,  # the store URL needs an extra that is not installed
    "internal": 70,
    "cannot_execute": 126,  # resume: the command exists but cannot run
    "command_not_found": 127,  # resume: the command was not found
}
"""Exit codes of every command, documented in README "Exit codes"."""


class CommandError(Exception):
    """A one-line failure with its exit code."""

    def __init__(self, message: str, exit_code: int = EXIT["usage"]) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def add_store_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        metavar="URL",
        default=None,
        help=f"store URL or path (default: ${STORE_ENV}, else ./{DEFAULT_STORE_PATH})",
    )


def store_from(args: argparse.Namespace, url: str | None = None) -> Store:
    """The store named by ``--store`` (or ``url``), with keys from ``$AGENT_CHECKPOINT_KEYS``."""
    try:
        keyring = keyring_from_env()
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    target = url or args.store or os.environ.get(STORE_ENV) or DEFAULT_STORE_PATH
    return open_store(target, keyring=keyring)


def print_json(value: Any) -> None:
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode() + "\n")
