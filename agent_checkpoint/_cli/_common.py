"""What every command module shares: exit codes, the store option, reading inputs, progress,
JSON and time/size output."""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console

from .. import DEFAULT_STORE_PATH, STORE_ENV, Migrations, Store, keyring_from_env, open_store

EXIT = {
    "ok": 0,
    "differ": 1,  # diff: the checkpoints differ
    "usage": 2,  # a bad argument, or a store URL that is wrong (also argparse's own code)
    "not_found": 3,  # a key, an input file or a store that does not exist
    "conflict": 4,  # a conditional write, ownership check or claim lost; nothing changed
    "invalid": 5,  # a record or file present but unreadable, or refused by the door or writer
    "backend": 6,  # the store's server failed or stayed unreachable after retries
    "dependency": 7,  # the store URL needs an extra that is not installed
    "interrupted": 130,  # Ctrl-C (128 + SIGINT)
    "internal": 70,
    "cannot_execute": 126,  # resume: the command exists but cannot run
    "command_not_found": 127,  # resume: the command was not found
}
"""Exit codes of every command, documented once in README "Exit codes"."""

Tick = Callable[..., None]
Count = Callable[[threading.Event], "int | None"]
"""How to count a progress bar's total: ``None`` once the event asks it to stop."""


class CommandError(Exception):
    """A one-line failure with its exit code."""

    def __init__(self, message: str, exit_code: int = EXIT["usage"]) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class ReaderLeftError(BrokenPipeError):
    """stdout's reader left (``| head``) while a command printed an answer it already had:
    the command still exits with ``exit_code`` (``diff``: 1, different), not 0."""

    def __init__(self, exit_code: int) -> None:
        super().__init__(f"stdout was closed; the answer was exit code {exit_code}")
        self.exit_code = exit_code


@contextmanager
def answered(exit_code: int) -> Iterator[None]:
    """Printing the output of a command whose exit code is settled: a closed stdout keeps it."""
    try:
        yield
    except BrokenPipeError as exc:
        raise ReaderLeftError(exit_code) from exc


def add_store_option(parser: argparse.ArgumentParser, help: str | None = None) -> None:
    """``--store`` after the command; the same option before it sets the default (so a value
    given here must not be overwritten by an absent one: ``SUPPRESS``)."""
    parser.add_argument(
        "--store",
        metavar="URL",
        default=argparse.SUPPRESS,
        help=help or f"store URL or path (default: ${STORE_ENV}, else ./{DEFAULT_STORE_PATH})",
    )


def store_url(args: argparse.Namespace) -> str:
    return getattr(args, "store", None) or os.environ.get(STORE_ENV) or DEFAULT_STORE_PATH


def same_store(a: str, b: str) -> bool:
    """Whether two store URLs or paths name one store: the same folder (however written), or
    the same URL but for a trailing slash."""

    def folder(url: str) -> str | None:
        if url.startswith("file://"):
            url = url.removeprefix("file://")
        elif "://" in url:
            return None
        return os.path.realpath(url)

    if folder(a) is not None and folder(b) is not None:
        return folder(a) == folder(b)
    return a.rstrip("/") == b.rstrip("/")


def store_from(
    args: argparse.Namespace,
    url: str | None = None,
    *,
    create: bool = False,
    migrations: Migrations | None = None,
) -> Store:
    """The store named by ``--store`` (or ``url``), with keys from ``$AGENT_CHECKPOINT_KEYS``
    (and ``migrations``, else the library's chain).

    Only commands that write open with ``create``: a reading command on a store that does not
    exist (a mistyped folder) is an error, and leaves nothing behind."""
    try:
        keyring = keyring_from_env()
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    return open_store(url or store_url(args), keyring=keyring, create=create, migrations=migrations)


def count_records(store: Store) -> Count:
    """How to count the records ``store`` lists, for ``progress`` to run in the background
    (a listing of the whole store: on S3, a HEAD per record)."""

    def count(stop: threading.Event) -> int | None:
        n = 0
        for _ in store.iter_summaries(page_size=250):  # a page's wait, at most, to stop
            if stop.is_set():
                return None
            n += 1
        return n

    return count


def now_ms() -> int:
    return int(time.time() * 1000)


def read_input(path: str) -> bytes:
    """The bytes of an input file (``-``: stdin); a missing file is "not found" (3), one that
    cannot be read "unreadable" (5), as for every command."""
    try:
        return sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except FileNotFoundError as exc:
        raise CommandError(f"{path}: no such file", EXIT["not_found"]) from exc
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror or exc}", EXIT["invalid"]) from exc


def print_json(value: Any) -> None:
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode() + "\n")


def format_time(ms: int) -> str:
    """``YYYY-MM-DD HH:MM:SS`` in UTC; epoch milliseconds beyond what a date can show."""
    try:
        moment = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    except (OverflowError, ValueError, OSError):
        return f"{ms} ms"
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def format_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(n)  # pragma: no cover


@contextmanager
def progress(
    description: str, total: int | Count | None, *, unit: str = "record(s)"
) -> Iterator[Tick]:
    """A progress bar on stderr while the block runs (none when stderr is not a terminal).

    A ``total`` to count (``Count``) is counted in a thread of its own while the block runs,
    and only where the bar shows it: the work starts at once, the bar's total appears when
    known, and a command whose stderr is not a terminal lists its store once, not twice.

    Ctrl-C ends the command saying how far it got (and of how many, once known), bar or not:
    the tick count travels in the ``KeyboardInterrupt`` that ``main`` reports."""
    from rich.progress import (  # only for the commands that show one
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    console = Console(stderr=True)
    done = 0
    known = total if isinstance(total, int) else None
    lock = threading.Lock()
    stop = threading.Event()
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    ) as bar:
        task = bar.add_task(description, total=known)

        def tick(n: int = 1) -> None:
            nonlocal done
            with lock:
                done += n
            bar.advance(task, n)

        def count(how: Count) -> None:
            nonlocal known
            with suppress(Exception):  # a total is for the eye: it never fails the command
                counted = how(stop)
                if counted is not None:
                    with lock:
                        known = counted
                    bar.update(task, total=counted)

        counter = None
        if callable(total) and console.is_terminal:
            counter = threading.Thread(target=count, args=(total,), name="count", daemon=True)
            counter.start()
        try:
            yield tick
        except KeyboardInterrupt:
            with lock:
                of = "" if known is None else f" of {known}"
            raise KeyboardInterrupt(
                f"{description} stopped after {done}{of} {unit}; running the same command "
                "again carries on"
            ) from None
        finally:
            stop.set()
            if counter is not None:
                counter.join()
