"""Operations commands: claims, copy, migrate, rekey, verify, resume-worker."""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import orjson
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..backends import mask_url
from ..claims import Claim
from ..container import KEYS_ENV
from ..maintenance import (
    copy_records,
    count_records,
    migrate_records,
    rekey_records,
    verify_store,
)
from ..migrations import Migrations
from ..model import RunCheckpoint
from ..resume import ResumeSeed, resume_failed_runs
from ._common import EXIT, CommandError, add_store_option, print_json, store_from
from .store_commands import format_time, table_console


@contextmanager
def progress(description: str, total: int | None) -> Iterator[Any]:
    """A progress bar on stderr (silent when stderr is not a terminal)."""
    console = Console(stderr=True)
    with Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    ) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n=1: bar.advance(task, n)


# -- claims ----------------------------------------------------------------------------------


def cmd_claims(args: argparse.Namespace) -> int:
    with store_from(args) as store:
        leases = store.claims()
        now = store.now()
    if args.json:
        print_json([{"key": c.key, "worker": c.worker, "expiresAt": c.expires_at} for c in leases])
        return EXIT["ok"]
    if not leases:
        print("no live claims")
        return EXIT["ok"]
    table = Table(box=None, pad_edge=False, header_style="bold")
    for name in ("KEY", "WORKER", "EXPIRES (UTC)", "IN"):
        table.add_column(name)
    for c in leases:
        table.add_row(
            c.key, c.worker, format_time(c.expires_at), f"{(c.expires_at - now) / 1000:.0f}s"
        )
    table_console().print(table)
    return EXIT["ok"]


# -- copy ------------------------------------------------------------------------------------


def cmd_copy(args: argparse.Namespace) -> int:
    with (
        store_from(args) as source,
        store_from(args, args.to) as target,
        progress("copying", count_records(source)) as tick,
    ):
        report = copy_records(source, target, overwrite=args.overwrite, on_record=tick)
    print(
        f"Copied {report.copied} record(s) to {mask_url(args.to)}; {report.already_there} "
        "already there; "
        "all verified"
    )
    return EXIT["ok"]


# -- migrate ---------------------------------------------------------------------------------


def load_migrations(spec: str | None) -> Migrations | None:
    if spec is None:
        return None
    module_name, _, attr = spec.partition(":")
    try:
        value = getattr(importlib.import_module(module_name), attr or "MIGRATIONS")
    except (ImportError, AttributeError) as exc:
        raise CommandError(f"cannot load migrations {spec!r}: {exc}") from exc
    if not isinstance(value, Migrations):
        raise CommandError(f"{spec!r} is not a Migrations object")
    return value


def _report_failures(failed: list[tuple[str, str]]) -> None:
    for key, why in failed:
        print(f"{key!r}: {why}", file=sys.stderr)


def cmd_migrate(args: argparse.Namespace) -> int:
    migrations = load_migrations(args.migrations)
    with store_from(args) as store:
        if migrations is not None:
            store.codec.migrations = migrations
        with progress("migrating", count_records(store)) as tick:
            report = migrate_records(store, dry_run=args.dry_run, on_record=tick)
    _report_failures(report.failed)
    verb = "would upgrade" if args.dry_run else "upgraded"
    print(
        f"{verb} {report.upgraded} record(s); {report.current} already at version "
        f"{store.codec.migrations.current}; {len(report.failed)} failed"
    )
    return EXIT["ok"] if not report.failed else EXIT["invalid"]


# -- rekey -----------------------------------------------------------------------------------


def cmd_rekey(args: argparse.Namespace) -> int:
    with store_from(args) as store:
        if store.codec.sealer.keyring is None:
            raise CommandError(
                f"rekey needs keys: set {KEYS_ENV} (the first key is the new primary)"
            )
        with progress("re-encrypting", count_records(store)) as tick:
            report = rekey_records(store, on_record=tick)
    _report_failures(report.failed)
    print(
        f"re-encrypted {report.rewritten} record(s); {report.current} already under the primary "
        f"key; {len(report.failed)} failed"
    )
    return EXIT["ok"] if not report.failed else EXIT["invalid"]


# -- verify ----------------------------------------------------------------------------------


def cmd_verify(args: argparse.Namespace) -> int:
    with store_from(args) as store, progress("verifying", count_records(store)) as tick:
        report = verify_store(store, repair=args.repair, on_record=tick)
    if args.json:
        print_json(
            {
                "checked": report.checked,
                "unreadable": report.unreadable,
                "staleIndexEntries": report.stale,
                "missingFromIndex": report.unlisted,
                "repaired": report.repaired is not None,
                "orphanedSegments": report.orphans,
            }
        )
    else:
        print(
            f"checked {report.checked} record(s): {len(report.unreadable)} unreadable, "
            f"{len(report.stale)} stale index entries, {len(report.unlisted)} missing from the index"
        )
        for key in report.unreadable:
            print(f"  unreadable: {key}")
        for key in report.stale:
            print(f"  stale index entry: {key}")
        for key in report.unlisted:
            print(f"  missing from index: {key}")
        if report.repaired is not None:
            print(f"index rebuilt: {report.repaired} record(s) listed")
        if report.orphans:
            done = "removed" if args.repair else "left (verify --repair removes them)"
            print(f"{report.orphans} orphaned history segment object(s) {done}")
    return EXIT["ok"] if report.ok else EXIT["invalid"]


# -- resume-worker ---------------------------------------------------------------------------


def _run_command(command: list[str], seed: ResumeSeed, claim: Claim) -> RunCheckpoint | None:
    start = seed.checkpoint()
    with tempfile.NamedTemporaryFile("wb", suffix=".json", delete=False) as f:
        f.write(orjson.dumps(start.to_json()))
        path = f.name
    try:
        env = {
            **os.environ,
            "AGENT_CHECKPOINT_SEED": path,
            "AGENT_CHECKPOINT_KEY": claim.key,
            "AGENT_CHECKPOINT_RUN_ID": seed.run_id,
        }
        result = subprocess.run(command, env=env, stdout=subprocess.PIPE, check=False)
    finally:
        os.unlink(path)
    if result.returncode != 0:
        code = result.returncode
        shown = f"signal {-code}" if code < 0 else f"exit code {code}"
        raise RuntimeError(f"command failed with {shown}")
    out = result.stdout.strip()
    if not out:
        return None
    try:
        return RunCheckpoint.from_json(orjson.loads(out))
    except (orjson.JSONDecodeError, TypeError, ValueError) as exc:
        raise RuntimeError(f"command printed something that is not a checkpoint: {exc}") from exc


def cmd_resume_worker(args: argparse.Namespace) -> int:
    if not args.command:
        raise CommandError("give the command to run for each resumed run after --")
    command = args.command[1:] if args.command[0] == "--" else args.command
    worker = args.worker or f"{socket.gethostname()}:{os.getpid()}"
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with store_from(args) as store:
        report = resume_failed_runs(
            store,
            lambda seed, claim: _run_command(command, seed, claim),
            worker=worker,
            ttl=args.ttl,
            agent_id=args.agent_id,
            owner=args.owner,
            agent_filter=args.agent,
            phase=args.phase,
            limit=args.limit,
        )
    for key in report.resumed:
        print(f"resumed {key}")
    for key, why in report.failed:
        print(f"failed {key}: {why}", file=sys.stderr)
    print(f"{len(report.resumed)} resumed, {len(report.failed)} failed, {report.skipped} skipped")
    return EXIT["ok"] if not report.failed else EXIT["backend"]


def register(sub: Any) -> None:
    p = sub.add_parser("claims", help="list live claims on runs")
    p.add_argument("--json", action="store_true")
    add_store_option(p)
    p.set_defaults(run=cmd_claims)

    p = sub.add_parser("copy", help="copy every record to another store, verifying each")
    p.add_argument("--to", required=True, metavar="URL", help="target store URL or path")
    p.add_argument(
        "--overwrite", action="store_true", help="replace differing records in the target"
    )
    add_store_option(p)
    p.set_defaults(run=cmd_copy)

    p = sub.add_parser("migrate", help="rewrite records stored in an older version (resumable)")
    p.add_argument("--dry-run", action="store_true", help="count what would be upgraded")
    p.add_argument("--migrations", metavar="MODULE:ATTR", help="a Migrations object to use")
    add_store_option(p)
    p.set_defaults(run=cmd_migrate)

    p = sub.add_parser("rekey", help="re-encrypt every record under the primary key")
    add_store_option(p)
    p.set_defaults(run=cmd_rekey)

    p = sub.add_parser("verify", help="decode every record and check the index")
    p.add_argument("--repair", action="store_true", help="rebuild the index if it disagrees")
    p.add_argument("--json", action="store_true")
    add_store_option(p)
    p.set_defaults(run=cmd_verify)

    p = sub.add_parser(
        "resume-worker",
        help="claim failed runs one at a time and run a command to resume each",
        description="For each failed run: claim it, write its resume seed (a checkpoint JSON) to "
        "a file named by $AGENT_CHECKPOINT_SEED, run COMMAND, and store the checkpoint it prints "
        "on stdout (or the seed itself if it prints nothing). A failing command leaves the run "
        "as it was and releases the claim.",
    )
    p.add_argument("--worker", help="worker name (default host:pid)")
    p.add_argument(
        "--ttl", type=float, default=300.0, help="claim lifetime in seconds (default 300)"
    )
    p.add_argument("--agent-id", help="the resuming agent's explicit id (agent-id rule)")
    p.add_argument("--owner", help="only this principal's runs")
    p.add_argument("--agent", help="only runs recorded by this agent id")
    p.add_argument("--phase", choices=["iteration", "tool", "llm", "unknown"])
    p.add_argument("--limit", type=int, help="stop after resuming N runs")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND ...")
    add_store_option(p)
    p.set_defaults(run=cmd_resume_worker)
