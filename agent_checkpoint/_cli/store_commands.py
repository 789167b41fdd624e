"""Store commands: put, get, show, ls, rm, prune, setup."""

from __future__ import annotations

import argparse
import re
import sys
from datetime import datetime, timezone
from typing import Any

import orjson

from .. import EnvelopeError, InvalidCheckpointError, Store, Summary
from ..integrations.keys import is_internal
from ._common import (
    EXIT,
    CommandError,
    add_store_option,
    format_size,
    format_time,
    now_ms,
    print_json,
    progress,
    read_input,
    store_from,
)
from ._records import RECORD_ERRORS, read_refusal
from ._table import Column, print_table

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)\s*$")
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}

SUMMARY_COLUMNS = (
    Column("KEY"),
    Column("SAVED (UTC)", drop=1),
    Column("OWNER", shrink_to=8, drop=3),
    Column("AGENT", shrink_to=8, drop=4),
    Column("FAILED", drop=2),
    Column("MSGS", right=True, drop=8),
    Column("SIZE", right=True, drop=7),
    Column("REV", right=True, drop=6),
)
"""``ls`` as the terminal narrows: messages, size and revision go first, then owner and
agent are shortened and left out, then the failure and the time; the key never."""


def _messages(text: str) -> int | None:
    """``--messages``: a count, or ``all`` (``None``: every message)."""
    return None if text == "all" else _count(text)


def _count(text: str) -> int:
    """A whole number >= 0, for argparse (which then names the option it was given to)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return value


def parse_duration_ms(text: str) -> int:
    """``90s``, ``30m``, ``12h``, ``7d``, ``2w`` in milliseconds."""
    found = _DURATION.match(text)
    if not found:
        raise CommandError(f"invalid duration {text!r}: use a number and s, m, h, d or w (e.g. 7d)")
    from decimal import Decimal  # exact for 1.5h; only where an age is given

    return int(Decimal(found.group(1)) * _UNIT_MS[found.group(2)])


def parse_moment_ms(text: str) -> int:
    """An ISO 8601 time (UTC unless it says otherwise), epoch milliseconds, or a duration ago."""
    if text.isdigit():
        return int(text)
    if _DURATION.match(text):
        return now_ms() - parse_duration_ms(text)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise CommandError(
            f"invalid time {text!r}: use ISO 8601 (2026-11-29T10:00:00Z), epoch ms, or an age like 7d"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp() * 1000)


def summary_json(s: Summary) -> dict[str, Any]:
    return {
        "key": s.key,
        "runId": s.run_id,
        "savedAt": s.saved_at,
        "owner": s.owner,
        "agentId": s.agent_id,
        "failurePoint": (
            {"phase": s.failure_phase, "iteration": s.failure_iteration} if s.failed else None
        ),
        "messageCount": s.message_count,
        "size": s.size,
        "revision": s.revision,
    }


def _failure(s: Summary) -> str:
    if not s.failed:
        return "-"
    return (
        f"{s.failure_phase}@{s.failure_iteration}"
        if s.failure_iteration is not None
        else str(s.failure_phase)
    )


def summary_row(s: Summary) -> list[str]:
    return [
        s.key,
        format_time(s.saved_at)[:16],
        s.owner or "-",
        s.agent_id or "-",
        _failure(s),
        str(s.message_count),
        format_size(s.size),
        str(s.revision),
    ]


def print_summaries(summaries: list[Summary], width: int | None = None) -> None:
    print_table(SUMMARY_COLUMNS, [summary_row(s) for s in summaries], width)


def add_json_option(parser: argparse.ArgumentParser, what: str = "the result") -> None:
    parser.add_argument("--json", action="store_true", help=f"{what} as JSON, for scripts")


# -- commands ------------------------------------------------------------------------------


def cmd_put(args: argparse.Namespace) -> int:
    raw = read_input(args.file)
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise CommandError(f"{args.file} is not JSON: {exc}", EXIT["invalid"]) from exc
    if not isinstance(doc, dict):
        raise CommandError(
            f"{args.file} holds JSON but not a checkpoint or envelope object", EXIT["invalid"]
        )
    with store_from(args, create=True) as store:
        try:
            summary = store.put(
                doc, key=args.key, if_revision=args.if_revision, create_only=args.create_only
            )
        except (InvalidCheckpointError, EnvelopeError) as exc:
            # the door's words name the field, not the file; nothing was stored
            raise CommandError(
                f"{args.file}: not a checkpoint this store takes (a run checkpoint's JSON, or "
                f"an envelope of one): {exc}",
                EXIT["invalid"],
            ) from exc
    if args.json:
        print_json(summary_json(summary))
    else:
        print(f"Stored {summary.key} (revision {summary.revision}, {format_size(summary.size)})")
    return EXIT["ok"]


SUGGEST_AMONG = 5_000
"""Newest keys a not-found error looks through for a near miss (one page read, or a few)."""


def missing_run(key: str, store: Store) -> CommandError:
    return CommandError(
        f"no checkpoint stored under {key!r}{_nearest(store, [key])}", EXIT["not_found"]
    )


def _nearest(store: Store, keys: list[str]) -> str:
    """``; did you mean 'conv-00005'?`` for keys a typo away from stored ones."""
    import difflib  # only on this error

    stored: list[str] = []
    cursor = None
    while len(stored) < SUGGEST_AMONG:
        page = store.list(limit=min(500, SUGGEST_AMONG - len(stored)), cursor=cursor)
        stored += [summary.key for summary in page.items]
        if (cursor := page.cursor) is None:
            break
    close = [
        match[0]
        for key in keys
        if (match := difflib.get_close_matches(key, stored, n=1, cutoff=0.8))
    ]
    return f"; did you mean {', '.join(map(repr, close))}?" if close else ""


def unreadable_run(store: Store, key: str, exc: BaseException) -> CommandError:
    """The one line for a stored record that cannot be read (``--verbose`` shows the
    library's message: it is this error's cause)."""
    return CommandError(read_refusal(key, exc, current=store.migrations.current), EXIT["invalid"])


def cmd_get(args: argparse.Namespace) -> int:
    with store_from(args) as store:
        try:
            doc = store.get_json(args.key)
        except RECORD_ERRORS as exc:
            raise unreadable_run(store, args.key, exc) from exc
        if doc is None:
            raise missing_run(args.key, store)
    print_json(doc if args.envelope else doc["data"])
    return EXIT["ok"]


def cmd_show(args: argparse.Namespace) -> int:
    with store_from(args) as store:
        record = store.get_record(args.key)
        if record is None:
            raise missing_run(args.key, store)
        try:
            envelope = store.decode(record)
        except RECORD_ERRORS as exc:
            raise unreadable_run(store, args.key, exc) from exc
    if args.json:
        print_json({"summary": summary_json(record.summary), "envelope": envelope.to_json()})
        return EXIT["ok"]
    s, ckpt = record.summary, envelope.conversation
    print(f"{s.key}  revision {s.revision}, {format_size(s.size)}, {envelope.format}")
    rows = [
        ("run", s.run_id),
        ("saved", f"{format_time(s.saved_at)} UTC"),
        ("owner", s.owner or "-"),
        ("agent", s.agent_id or "-"),
        ("input", " ".join(ckpt.original_input.message.split())),
        ("iteration", str(ckpt.last_completed_iteration)),
    ]
    fp = ckpt.failure_point
    if fp is not None:
        stage = f" (stage: {fp.stage})" if fp.stage else ""
        rows.append(("failed", f"{fp.phase} at iteration {fp.iteration}{stage}"))
    rows.append(("messages", f"{len(ckpt.history)} ({s.message_count} with text)"))
    for name, value in rows:
        print(f"  {name:<10} {value}")
    if args.messages is None:
        tail: Any = ckpt.history
    else:
        tail = ckpt.history[-args.messages :] if args.messages > 0 else ()
    if tail:
        print(f"  {'all' if args.messages is None else 'last'} {len(tail)} message(s):")
    for m in tail:
        text = m.content if m.content else ""
        if m.tool_calls:
            text = (
                (text + " " if text else "")
                + "calls "
                + ", ".join(f"{c.name}({c.id})" for c in m.tool_calls)
            )
        if m.tool_call_id:
            text = f"[{m.tool_name or 'tool'} {m.tool_call_id}] {text}"
        text = " ".join(text.split())
        print(f"    {m.role:>9}: {text[:200]}{'…' if len(text) > 200 else ''}")
    return EXIT["ok"]


def cmd_ls(args: argparse.Namespace) -> int:
    if args.phase is not None and args.ok:
        raise CommandError("--phase lists runs that failed in that phase: it cannot go with --ok")
    filters: dict[str, Any] = {
        "owner": args.owner,
        "agent_id": args.agent,
        "failed": True if args.failed else (False if args.ok else None),
        "phase": args.phase,
        "since": None if args.since is None else parse_moment_ms(args.since),
        "before": None if args.before is None else parse_moment_ms(args.before),
        "prefix": args.prefix,
    }
    with store_from(args) as store:
        if args.all:
            items, cursor = list(store.iter_summaries(**filters)), None
            if not args.all_records:
                items = [s for s in items if not is_internal(s.key)]
        elif args.all_records:
            page = store.list(limit=args.limit, cursor=args.cursor, **filters)
            items, cursor = page.items, page.cursor
        else:
            items, cursor = _runs_page(store, args.limit, args.cursor, filters)
    if args.json:
        print_json({"items": [summary_json(s) for s in items], "cursor": cursor})
        return EXIT["ok"]
    if not items:
        print("no checkpoints")
    else:
        print_summaries(items)
    if cursor is not None:
        print(f"more: --cursor '{cursor}'", file=sys.stderr)
    return EXIT["ok"]


_LARGEST_PAGE = 1000


def _runs_page(
    store: Store, limit: int, cursor: str | None, filters: dict[str, Any]
) -> tuple[list[Summary], str | None]:
    """Up to ``limit`` runs (no integration's internal record) and the cursor after the last
    one. Pages grow while they hold only internal records (a LangGraph thread keeps many); a
    page that holds more runs than wanted is read again up to the last one wanted, so that
    the cursor given is a page's own."""
    items: list[Summary] = []
    size = limit
    while True:
        page = store.list(limit=size, cursor=cursor, **filters)
        runs = [s for s in page.items if not is_internal(s.key)]
        need = limit - len(items)
        if len(runs) > need:
            upto = page.items.index(runs[need - 1]) + 1
            page = store.list(limit=upto, cursor=cursor, **filters)
            runs = [s for s in page.items if not is_internal(s.key)]
        items += runs
        cursor = page.cursor
        if cursor is None or len(items) >= limit:
            return items, cursor
        size = min(size * 2, _LARGEST_PAGE)


def cmd_rm(args: argparse.Namespace) -> int:
    deleted, missing = [], []
    with store_from(args) as store:
        for key in args.keys:
            if store.delete(key, if_revision=args.if_revision):
                deleted.append(key)
                if not args.json:
                    print(f"Deleted {key}")
            else:
                missing.append(key)
        hint = _nearest(store, missing) if missing else ""
    if args.json:
        print_json({"deleted": deleted, "missing": missing})
    if missing:
        raise CommandError(f"not found: {', '.join(map(repr, missing))}{hint}", EXIT["not_found"])
    return EXIT["ok"]


def cmd_prune(args: argparse.Namespace) -> int:
    cutoff = now_ms() - parse_duration_ms(args.older_than)
    with store_from(args) as store:
        victims = store.iter_summaries(before=cutoff)
        if args.dry_run:
            listed = list(victims)
            if args.json:
                print_json({"wouldDelete": [summary_json(s) for s in listed]})
                return EXIT["ok"]
            for s in listed:
                print(f"would delete {s.key} (saved {format_time(s.saved_at)} UTC)")
            print(f"{len(listed)} checkpoint(s) older than {args.older_than} would be deleted")
            return EXIT["ok"]
        total = 0
        with progress("deleting", sum(1 for _ in victims)) as tick:
            while True:
                result = store.forget_older_than(cutoff, limit=args.batch)
                total += result.forgotten
                tick(result.forgotten)
                if not result.more:
                    break
    if args.json:
        print_json({"deleted": total})
    else:
        print(f"Deleted {total} checkpoint(s) older than {args.older_than}")
    return EXIT["ok"]


def cmd_setup(args: argparse.Namespace) -> int:
    with store_from(args, create=True) as store:
        store.setup()
    if args.json:
        print_json({"setUp": True})
    else:
        print("Store is set up")
    return EXIT["ok"]


def register(sub: Any) -> None:
    p = sub.add_parser("put", help="store a checkpoint or envelope JSON file")
    p.add_argument("file", help="checkpoint or envelope JSON file ('-' for stdin)")
    p.add_argument("--key", help="store key (default: identity.conversationId, else runId)")
    p.add_argument("--if-revision", type=int, metavar="N", help="write only over revision N")
    p.add_argument("--create-only", action="store_true", help="refuse if the key exists")
    add_json_option(p, "the stored summary")
    add_store_option(p)
    p.set_defaults(run=cmd_put)

    p = sub.add_parser("get", help="print a stored checkpoint as JSON")
    p.add_argument("key", help="the stored run's key (as ls shows it)")
    p.add_argument("--envelope", action="store_true", help="print the whole envelope")
    add_store_option(p)
    p.set_defaults(run=cmd_get)

    p = sub.add_parser("show", help="summary, failure point and last messages of a checkpoint")
    p.add_argument("key", help="the stored run's key (as ls shows it)")
    p.add_argument(
        "--messages",
        type=_messages,
        default=5,
        metavar="N",
        help="last N messages (default 5), or all",
    )
    add_json_option(p, "the summary and the whole record")
    add_store_option(p)
    p.set_defaults(run=cmd_show)

    p = sub.add_parser("ls", help="list stored checkpoints, newest first")
    p.add_argument("--owner", help="only this principal's runs")
    p.add_argument("--agent", help="only runs of this agent id")
    state = p.add_mutually_exclusive_group()
    state.add_argument("--failed", action="store_true", help="only runs that failed")
    state.add_argument("--ok", action="store_true", help="only runs that did not fail")
    p.add_argument("--phase", choices=["iteration", "tool", "llm", "unknown"], help="failure phase")
    p.add_argument(
        "--since", metavar="TIME", help="saved at or after (ISO 8601, epoch ms or age like 7d)"
    )
    p.add_argument("--before", metavar="TIME", help="saved strictly before (same forms)")
    p.add_argument(
        "--prefix",
        metavar="P",
        help="only keys that begin with P (every character as written: no wildcards)",
    )
    p.add_argument("--limit", type=int, default=50, help="page size (default 50)")
    p.add_argument("--cursor", help="continue after a previous page")
    p.add_argument("--all", action="store_true", help="every page")
    p.add_argument(
        "--all-records",
        action="store_true",
        help="also the integrations' internal records (LangGraph pending writes, ADK app and "
        "user state), left out by default",
    )
    add_json_option(p, "the page")
    add_store_option(p)
    p.set_defaults(run=cmd_ls)

    p = sub.add_parser("rm", help="delete stored checkpoints")
    p.add_argument("keys", nargs="+", metavar="KEY", help="keys of the runs to delete")
    p.add_argument("--if-revision", type=int, metavar="N", help="delete only at revision N")
    add_json_option(p, "the keys deleted and missing")
    add_store_option(p)
    p.set_defaults(run=cmd_rm)

    p = sub.add_parser("prune", help="delete checkpoints older than an age")
    p.add_argument("--older-than", required=True, metavar="AGE", help="e.g. 7d, 12h, 2w")
    p.add_argument("--dry-run", action="store_true", help="list what would be deleted")
    p.add_argument("--batch", type=int, default=100, help=argparse.SUPPRESS)
    add_json_option(p, "what was (or would be) deleted")
    add_store_option(p)
    p.set_defaults(run=cmd_prune)

    p = sub.add_parser("setup", help="create the store, or the tables it needs (idempotent)")
    add_json_option(p)
    add_store_option(p)
    p.set_defaults(run=cmd_setup)
