"""Operations commands: claims, copy, migrate, rekey, verify, resume-worker."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import TYPE_CHECKING, Any

import orjson

from .. import KEYS_ENV, Claim, Migrations, RunCheckpoint, Store

if TYPE_CHECKING:
    from .. import CopyReport, ResumeSeed
from ..backends import mask_url
from ._common import (
    EXIT,
    CommandError,
    add_store_option,
    count_records,
    format_time,
    now_ms,
    print_json,
    progress,
    same_store,
    store_from,
    store_url,
)
from ._records import record_problem, stored_problem
from ._table import Column, print_table
from .store_commands import add_json_option

CLAIM_COLUMNS = (
    Column("KEY"),
    Column("WORKER", shrink_to=8, drop=2),
    Column("EXPIRES (UTC)", drop=3),
    Column("IN", right=True, drop=1),
)


# -- claims ----------------------------------------------------------------------------------


def cmd_claims(args: argparse.Namespace) -> int:
    with store_from(args) as store:
        leases = store.claims()
    now = now_ms()
    if args.json:
        items = [{"key": c.key, "worker": c.worker, "expiresAt": c.expires_at} for c in leases]
        print_json({"items": items})  # the shape of ls --json
        return EXIT["ok"]
    if not leases:
        print("no live claims")
        return EXIT["ok"]
    rows = [
        [c.key, c.worker, format_time(c.expires_at), f"{(c.expires_at - now) / 1000:.0f}s"]
        for c in leases
    ]
    print_table(CLAIM_COLUMNS, rows)
    return EXIT["ok"]


# -- copy ------------------------------------------------------------------------------------


def cmd_copy(args: argparse.Namespace) -> int:
    from .. import CopyReport, copy_records  # only this command's

    if same_store(store_url(args), args.to):
        raise CommandError(
            f"copy --to {mask_url(args.to)!r} names the store it copies from; give another store"
        )
    report = CopyReport()
    with (
        store_from(args) as source,
        store_from(args, args.to, create=True) as target,
        progress("copying", count_records(source)) as tick,
    ):
        copy_records(
            source,
            target,
            overwrite=args.overwrite,
            include_unreadable=args.include_unreadable,
            on_record=tick,
            report=report,
        )
    to = mask_url(args.to)
    if args.json:
        print_json(
            {
                "copied": report.copied,
                "alreadyThere": report.already_there,
                "conflicts": report.conflicts,
                "unreadable": report.unreadable,
                "unreadableCopied": args.include_unreadable,
                "unchecked": report.unchecked,
            }
        )
    else:
        for key in report.unreadable:
            done = "copied as it is" if args.include_unreadable else "not copied"
            print(f"unreadable: {key!r} ({done})", file=sys.stderr)
        for key in report.conflicts:
            print(
                f"left as it is: {key!r} holds other content in {to} (--overwrite replaces it)",
                file=sys.stderr,
            )
        print(_copy_summary(report, to, args.include_unreadable))
        if report.copied and os.environ.get("AGENT_CHECKPOINT_KEYS"):
            print(
                "note: records are copied as stored, so plain ones stay plain; `agent-checkpoint "
                f"rekey --store {to}` encrypts them under the primary key",
                file=sys.stderr,
            )
    if report.conflicts:
        return EXIT["conflict"]
    return EXIT["invalid"] if report.unreadable and not args.include_unreadable else EXIT["ok"]


def _copy_summary(report: CopyReport, to: str, include_unreadable: bool) -> str:
    parts = [f"Copied {report.copied} record(s) to {to}", f"{report.already_there} already there"]
    if report.conflicts:
        parts.append(f"{len(report.conflicts)} left as they are (other content in the target)")
    if report.unreadable:
        done = "copied as they are" if include_unreadable else "not copied"
        parts.append(f"{len(report.unreadable)} unreadable ({done})")
    if report.unchecked:
        parts.append(f"{report.unchecked} encrypted under a key not given (copied unchecked)")
    the = "the rest" if report.unreadable or report.unchecked else "all"
    parts.append(f"{the} decoded and verified")
    return "; ".join(parts)


# -- migrate ---------------------------------------------------------------------------------


def load_migrations(spec: str | None) -> Migrations | None:
    if spec is None:
        return None
    module_name, _, attr = spec.partition(":")
    try:
        value = getattr(importlib.import_module(module_name), attr or "MIGRATIONS")
    except (ImportError, AttributeError) as exc:
        raise CommandError(
            f"cannot load migrations {spec!r}: {exc} (expected MODULE[:ATTR], an importable "
            "module and its Migrations object, MIGRATIONS by default)"
        ) from exc
    if not isinstance(value, Migrations):
        raise CommandError(
            f"{spec!r} is a {type(value).__name__}, not a Migrations object "
            "(expected MODULE[:ATTR], an importable module and its Migrations object)"
        )
    return value


def _report_failures(failed: list[tuple[str, str]]) -> None:
    for key, why in failed:
        print(f"{key!r}: {why}", file=sys.stderr)


def _problem_lines(
    store: Store,
    failed: list[tuple[str, str]],
    *,
    verbose: bool,
    migrating: bool = False,
    lead: str = "",
) -> list[str]:
    """A line for each record the command could not read (key, what is wrong, the remedy),
    and with ``verbose`` the library's whole message under it. Each record is read again for
    its error (a report keeps only its text): one that reads now has its reason said as is."""
    lines = []
    for key, why in failed:
        exc = stored_problem(store, key, migrating=migrating)
        if exc is None:
            lines.append(f"{lead}{key}: {why}")
            continue
        lines.append(lead + record_problem(key, exc, current=store.migrations.current))
        if verbose:
            lines.append(f"{' ' * len(lead)}  {type(exc).__name__}: {' '.join(str(exc).split())}")
    return lines


def _failures_json(failed: list[tuple[str, str]]) -> list[dict[str, str]]:
    return [{"key": key, "error": why} for key, why in failed]


def cmd_migrate(args: argparse.Namespace) -> int:
    from .. import migrate_records  # only this command's

    migrations = load_migrations(args.migrations)
    with store_from(args, migrations=migrations) as store:
        with progress("migrating", count_records(store)) as tick:
            report = migrate_records(store, dry_run=args.dry_run, on_record=tick)
        failed = [] if args.json else report.failed
        problems = _problem_lines(store, failed, verbose=args.verbose, migrating=True)
    version = store.migrations.current
    if args.json:
        print_json(
            {
                "dryRun": args.dry_run,
                "upgraded": report.upgraded,
                "current": report.current,
                "version": version,
                "failed": _failures_json(report.failed),
            }
        )
    else:
        for line in problems:
            print(line, file=sys.stderr)
        verb = "would upgrade" if args.dry_run else "upgraded"
        print(
            f"{verb} {report.upgraded} record(s); {report.current} already at version "
            f"{version}; {len(report.failed)} failed"
        )
    return EXIT["ok"] if not report.failed else EXIT["invalid"]


# -- rekey -----------------------------------------------------------------------------------


def cmd_rekey(args: argparse.Namespace) -> int:
    from .. import rekey_records  # only this command's

    with store_from(args) as store:
        if not os.environ.get(KEYS_ENV):  # the keys store_from read: none
            raise CommandError(
                f"rekey needs keys: set {KEYS_ENV} (the first key is the new primary)"
            )
        with progress("re-encrypting", count_records(store)) as tick:
            report = rekey_records(store, on_record=tick)
    if args.json:
        print_json(
            {
                "rewritten": report.rewritten,
                "current": report.current,
                "failed": _failures_json(report.failed),
            }
        )
    else:
        _report_failures(report.failed)
        print(
            f"re-encrypted {report.rewritten} record(s); {report.current} already under the "
            f"primary key; {len(report.failed)} failed"
        )
    return EXIT["ok"] if not report.failed else EXIT["invalid"]


# -- verify ----------------------------------------------------------------------------------


def cmd_verify(args: argparse.Namespace) -> int:
    with store_from(args) as store:
        with progress("verifying", count_records(store)) as tick:
            report = store.verify(repair=args.repair, on_record=tick)
        bad = [] if args.json else [(k, report.reasons.get(k, "")) for k in report.unreadable]
        problems = _problem_lines(store, bad, verbose=args.verbose, lead="  unreadable: ")
    if args.json:
        print_json(
            {
                "checked": report.checked,
                "unreadable": report.unreadable,
                "unreadableReasons": report.reasons,
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
        for line in problems:
            print(line)
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
    import subprocess
    import tempfile

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
    import signal
    import socket

    from .. import resume_failed_runs  # only this command's

    if not args.command:
        raise CommandError("give the command to run for each resumed run after --")
    command = args.command
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
    if args.json:
        print_json(
            {
                "resumed": report.resumed,
                "failed": _failures_json(report.failed),
                "skipped": report.skipped,
            }
        )
    else:
        for key in report.resumed:
            print(f"resumed {key}")
        for key, why in report.failed:
            print(f"failed {key}: {why}", file=sys.stderr)
        print(
            f"{len(report.resumed)} resumed, {len(report.failed)} failed, {report.skipped} skipped"
        )
    return EXIT["ok"] if not report.failed else EXIT["backend"]


def register(sub: Any) -> None:
    p = sub.add_parser("claims", help="list live claims on runs")
    add_json_option(p, "the claims")
    add_store_option(p)
    p.set_defaults(run=cmd_claims)

    p = sub.add_parser("copy", help="copy every record to another store, verifying each")
    p.add_argument("--to", required=True, metavar="URL", help="target store URL or path")
    p.add_argument(
        "--overwrite", action="store_true", help="replace differing records in the target"
    )
    p.add_argument(
        "--include-unreadable",
        action="store_true",
        help="copy records that do not decode as they are (by default they are reported and "
        "left behind)",
    )
    add_json_option(p, "the report")
    add_store_option(p)
    p.set_defaults(run=cmd_copy)

    p = sub.add_parser("migrate", help="rewrite records stored in an older version (resumable)")
    p.add_argument("--dry-run", action="store_true", help="count what would be upgraded")
    p.add_argument("--migrations", metavar="MODULE:ATTR", help="a Migrations object to use")
    add_json_option(p, "the report")
    add_store_option(p)
    p.set_defaults(run=cmd_migrate)

    p = sub.add_parser("rekey", help="re-encrypt every record under the primary key")
    add_json_option(p, "the report")
    add_store_option(p)
    p.set_defaults(run=cmd_rekey)

    p = sub.add_parser("verify", help="decode every record and check the index")
    p.add_argument("--repair", action="store_true", help="rebuild the index if it disagrees")
    add_json_option(p, "the report")
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
    add_json_option(p, "the report")
    p.add_argument("command", nargs="*", metavar="-- COMMAND ...")
    add_store_option(p)
    p.set_defaults(run=cmd_resume_worker)
