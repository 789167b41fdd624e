"""Our store against its floor and its peers, in one process and one run; prints the tables.

    bash benchmarks/setup-peers.sh                       # once: the peers' venv
    benchmarks/.venv-peers/bin/python benchmarks/run.py  # everything (< 10 min on 2 cores)
    .venv/bin/python benchmarks/run.py                   # our backends only: peers skipped
    ... run.py --quick | --only redis,postgres | --n 10,100 | --list-sizes 10000 | --big
    ... run.py --only 'ours,saver-*,langgraph-*'        # our LangGraph saver beside LangGraph's

Targets: ``floor`` and ``ours`` (our store) on each backend, ``saver-<backend>`` (our LangGraph
saver on our store, ``saver.py``) and the peers (``peers.py``).

Sections (see README.md beside this file for what each figure means):
  (a) put one checkpoint of N messages, then get it back: medians of several repetitions;
  (b) checkpoint after every message up to N: total time, bytes the server holds at the end,
      the tenth and the last put;
  (c) list the newest 100 of many stored runs, and check they are the right ones.
Progress goes to stderr; the tables (markdown) to stdout.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import fnmatch
import io
import json
import os
import platform
import pstats
import signal
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any

import floor
import ours
import peers
import saver
import servers
import workload
from servers import Cleanup, Context, log
from targets import LIST_LIMIT, Target, Unavailable, frozen_heap, timed

GROUPS = ("memory", "disk", "redis", "postgres", "s3", "fsspec")
GROUP_OF = {
    "memory": "memory",
    "disk": "disk",
    "sqlite": "disk",
    "redis": "redis",
    "postgres": "postgres",
    "s3": "s3",
    "fsspec": "fsspec",
}
FAMILY_ORDER = {"floor": 0, "ours": 1, "saver": 2, "peer": 3}
NOT_BIG = ("saver", "peer")  # families --big leaves out at N = BIG_N
BIG_N = 10_000


@dataclass
class Row:
    section: str
    n: int
    group: str
    target: str
    family: str
    values: dict[str, Any] = field(default_factory=dict)
    note: str = ""


@dataclass
class Run:
    args: argparse.Namespace
    ctx: Context
    targets: list[Any]
    rows: list[Row] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    load_start: float = field(default_factory=lambda: os.getloadavg()[0])
    began: datetime.datetime = field(default_factory=lambda: datetime.datetime.now().astimezone())

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        return row

    def elapsed(self) -> str:
        return f"{time.monotonic() - self.started:6.1f}s"


# -- command line --------------------------------------------------------------------------


def _ints(text: str) -> list[int]:
    return [int(part.replace("_", "")) for part in text.split(",") if part.strip()]


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--quick",
        action="store_true",
        help="N=10,100, 1,000 runs listed, 3 repetitions: a smoke run in ~1 min",
    )
    p.add_argument(
        "--only",
        default="",
        help="comma list of backends (memory,disk,redis,postgres,s3,fsspec; sqlite peers "
        "count as disk) and/or targets (ours, floor, saver-redis, langgraph-postgres, ...; "
        "shell-style patterns such as 'saver-*' too; 'saver' names every saver-*)",
    )
    p.add_argument("--n", type=_ints, default=None, help="message counts (default 10,100,1000)")
    p.add_argument(
        "--big", action="store_true", help=f"also N={BIG_N:,} for our store and the floor (slow)"
    )
    p.add_argument(
        "--list-sizes",
        type=_ints,
        default=None,
        help="stored runs to list the newest 100 of (default 10000,100000)",
    )
    p.add_argument(
        "--s3-list-max",
        type=int,
        default=10_000,
        help="largest listing load on S3 (SeaweedFS takes ~250 PUT/s here; default 10000)",
    )
    p.add_argument("--sections", default="a,b,c", help="which sections to run (default a,b,c)")
    p.add_argument(
        "--reps",
        type=int,
        default=None,
        help="repetitions of (a) (default 7, 5 at N>=1000, 3 at N>=10000)",
    )
    p.add_argument(
        "--b-budget",
        type=float,
        default=30.0,
        help="seconds of puts one target may spend in (b) per N before it stops "
        "(the row then says where; default 30)",
    )
    p.add_argument(
        "--no-peers", action="store_true", help="no peers: our store, our saver and the floor"
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="after the tables, cProfile our put and get at N=1000 on each backend",
    )
    p.add_argument("--json", default=None, help="also write every measurement to this file")
    args = p.parse_args(argv)
    if args.n is None:
        args.n = [10, 100] if args.quick else [10, 100, 1000]
    if args.big and BIG_N not in args.n:
        args.n.append(BIG_N)
    if args.list_sizes is None:
        args.list_sizes = [1000] if args.quick else [10_000, 100_000]
    if args.reps is None and args.quick:
        args.reps = 3
    args.only = {t.strip() for t in args.only.split(",") if t.strip()}
    args.sections = {s.strip() for s in args.sections.split(",") if s.strip()}
    return args


def selected(args: argparse.Namespace, name: str, family: str, backend: str) -> bool:
    if not args.only:
        return True
    groups = args.only & set(GROUP_OF)
    names = args.only - set(GROUP_OF)
    if groups and backend not in groups and GROUP_OF[backend] not in groups:
        return False
    if names:
        wanted = names | ({"floor"} if "ours" in names else set())
        return family in wanted or any(fnmatch.fnmatchcase(name, w) for w in wanted)
    return True


# -- targets -------------------------------------------------------------------------------


def build_targets(run: Run) -> None:
    args, ctx = run.args, run.ctx
    for backend in ours.BACKENDS:
        for family, make in (("floor", floor.Floor), ("ours", ours.Ours)):
            if not selected(args, family, family, backend):
                continue
            try:
                run.targets.append(make(backend, ctx))
            except Unavailable as exc:
                run.skipped.append((f"{family}/{backend}", str(exc)))
                log(f"skip {family}/{backend}: {exc}")
    for backend in saver.SAVER_BACKENDS:
        name = f"saver-{backend}"
        if not selected(args, name, "saver", backend):
            continue
        try:
            run.targets.append(saver.Saver(backend, ctx))
        except Unavailable as exc:
            run.skipped.append((name, str(exc)))
            log(f"skip {name}: {exc}")
    if args.no_peers:
        run.skipped.append(("peers", "--no-peers"))
        return
    wanted = [n for n, b in peers.PEER_BACKENDS.items() if selected(args, n, "peer", b)]
    if not wanted:
        # --only named no backend or target a peer runs on (memory and fsspec have none):
        # say that, not that the peers' venv is missing
        run.skipped.append(("peers", "none selected by --only"))
        return
    try:
        import langgraph.checkpoint.base  # noqa: F401
    except ImportError:
        reason = (
            "not installed in this interpreter; run benchmarks/setup-peers.sh and use "
            "benchmarks/.venv-peers/bin/python"
        )
        run.skipped.append(("peers", reason))
        log(f"skip all peers: {reason}")
        return
    for name in wanted:
        try:
            run.targets.append(peers.make_peer(name, ctx))
        except Unavailable as exc:
            run.skipped.append((name, str(exc)))
            log(f"skip {name}: {exc}")


def label(target: Target) -> str:
    return f"{target.name}/{target.backend}" if target.family in ("floor", "ours") else target.name


def ordered(targets: Iterable[Any]) -> list[Any]:
    return sorted(
        targets,
        key=lambda t: (GROUPS.index(GROUP_OF[t.backend]), FAMILY_ORDER[t.family], t.name),
    )


# -- (a) one checkpoint --------------------------------------------------------------------


def reps_for(args: argparse.Namespace, n: int) -> int:
    if args.reps:
        return int(args.reps)
    return 3 if n >= BIG_N else 5 if n >= 1000 else 7


def section_a(run: Run) -> None:
    for n in run.args.n:
        turns = workload.conversation(n)
        for target in ordered(run.targets):
            if n >= BIG_N and target.family in NOT_BIG:
                continue
            row = run.add(Row("a", n, GROUP_OF[target.backend], target.name, target.family))
            try:
                with frozen_heap():
                    _one_checkpoint(run, target, turns, n, row)
            except Exception as exc:
                row.note = f"error: {type(exc).__name__}: {exc}"[:200]
                log(f"[a] N={n} {label(target)}: {row.note}")


def _one_checkpoint(
    run: Run, target: Any, turns: tuple[workload.Turn, ...], n: int, row: Row
) -> None:
    history = target.convert(turns)
    instance = target.open()
    try:
        warm = instance.prepare("warm-up", history, min(n, 4), step=False)
        instance.put("warm-up", warm)
        instance.get("warm-up")
        puts: list[float] = []
        gets: list[float] = []
        reps = reps_for(run.args, n)
        begun = time.monotonic()
        for rep in range(reps):
            key = f"a-{n}-{rep}"
            prepared = instance.prepare(key, history, n, step=False)
            put_s, _ = timed(partial(instance.put, key, prepared))
            get_s, count = timed(partial(instance.get, key))
            if count != n:
                raise AssertionError(f"get gave {count} messages, not {n}")
            puts.append(put_s)
            gets.append(get_s)
            if rep >= 2 and time.monotonic() - begun > 30:
                break
        row.values = {
            "put_ms": 1e3 * statistics.median(puts),
            "get_ms": 1e3 * statistics.median(gets),
            "reps": len(puts),
        }
        log(
            f"[a] {run.elapsed()} N={n:<6} {label(target):<28} put {row.values['put_ms']:9.2f}"
            f" ms  get {row.values['get_ms']:9.2f} ms  ({len(puts)} reps)"
        )
    finally:
        instance.close()


# -- (b) a checkpoint after every message ----------------------------------------------------


def section_b(run: Run) -> None:
    for n in run.args.n:
        turns = workload.conversation(n)
        for target in ordered(run.targets):
            if n >= BIG_N and target.family in NOT_BIG:
                continue
            row = run.add(Row("b", n, GROUP_OF[target.backend], target.name, target.family))
            try:
                with frozen_heap():
                    _every_message(run, target, turns, n, row)
            except Exception as exc:
                row.note = f"error: {type(exc).__name__}: {exc}"[:200]
                log(f"[b] N={n} {label(target)}: {row.note}")


def _window(times: list[float], center: int, width: int = 5) -> float:
    """Median of ``width`` puts around the 1-based position ``center`` (one put is noisy)."""
    low = max(0, min(center - 1 - width // 2, len(times) - width))
    return statistics.median(times[low : low + width])


def _every_message(
    run: Run, target: Any, turns: tuple[workload.Turn, ...], n: int, row: Row
) -> None:
    history = target.convert(turns)
    instance = target.open()
    try:
        key = f"conversation-{n}"
        times: list[float] = []
        spent = 0.0
        for i in range(1, n + 1):
            prepared = instance.prepare(key, history, i, step=True)
            put_s, _ = timed(partial(instance.put, key, prepared), collect=False)
            times.append(put_s)
            spent += put_s
            if spent > run.args.b_budget and i < n:
                row.note = f"stopped after {i} of {n} messages ({run.args.b_budget:.0f} s budget)"
                break
        done = len(times)
        stored = instance.stored_bytes()
        count = instance.get(key)
        if count != done:
            raise AssertionError(f"get gave {count} messages after {done} puts")
        tenth = _window(times, min(10, done))
        last = statistics.median(times[-5:])
        row.values = {
            "total_s": spent,
            "stored_bytes": stored,
            "tenth_ms": 1e3 * tenth,
            "last_ms": 1e3 * last,
            "done": done,
        }
        shown = "-" if stored is None else f"{stored / 1e6:.2f} MB"
        log(
            f"[b] {run.elapsed()} N={n:<6} {label(target):<28} total {spent:8.3f} s  stored "
            f"{shown:>11}  10th {1e3 * tenth:8.2f} ms  last {1e3 * last:8.2f} ms {row.note}"
        )
    finally:
        instance.close()


# -- (c) the newest 100 of many runs -------------------------------------------------------


def section_c(run: Run) -> None:
    for size in run.args.list_sizes:
        for target in ordered(run.targets):
            if target.family == "floor":
                continue
            row = run.add(Row("c", size, GROUP_OF[target.backend], target.name, target.family))
            if target.backend == "s3" and size > run.args.s3_list_max:
                row.note = (
                    f"skipped: loading {size:,} runs into SeaweedFS (~250 PUT/s here) "
                    "takes too long; raise --s3-list-max"
                )
                log(f"[c] {size:,} {label(target)}: {row.note}")
                continue
            try:
                with frozen_heap():
                    _newest(run, target, size, row)
            except Unavailable as exc:
                row.note = f"n/a: {exc}"
                log(f"[c] {size:,} {label(target)}: {row.note}")
            except Exception as exc:
                row.note = f"error: {type(exc).__name__}: {exc}"[:200]
                log(f"[c] {size:,} {label(target)}: {row.note}")


def _repeat(fn: Callable[[], Any], *, most: int = 11, budget: float = 5.0) -> tuple[float, Any]:
    """Median seconds of ``fn`` over up to ``most`` calls within ``budget`` seconds (at least
    three, or one for a call that takes over a second), after one warm-up call (connections,
    statement caches) that counts as a sample when it took over a second."""
    warm_s, result = timed(fn)
    times: list[float] = [warm_s] if warm_s > 1 else []
    begun = time.monotonic()
    while len(times) < most:
        spent = time.monotonic() - begun
        if times and spent > budget and (len(times) >= 3 or times[0] > 1):
            break
        seconds, result = timed(fn)
        times.append(seconds)
    return statistics.median(times), result


def _newest(run: Run, target: Any, size: int, row: Row) -> None:
    instance = target.open()
    try:
        begun = time.monotonic()
        step = max(1, size // 5)

        def progress(done: int) -> None:
            if done % step == 0 or done == size:
                log(f"[c] {run.elapsed()} {label(target)}: loaded {done:,}/{size:,}")

        expected = instance.load_runs(size, progress)
        load_s = time.monotonic() - begun
        seconds, got = _repeat(lambda: instance.list_newest(LIST_LIMIT))
        right = len(set(got) & set(expected))
        row.values = {
            "list_ms": 1e3 * seconds,
            "exact": got == expected,
            "right": right,
            "returned": len(got),
            "load_s": load_s,
        }
        floor_read = getattr(instance, "floor_list", lambda limit: None)(LIST_LIMIT)
        if floor_read is not None:
            row.values["floor_ms"] = 1e3 * _repeat(floor_read)[0]
        warm_lister = getattr(instance, "warm_lister", None)
        if warm_lister is not None:  # our saver: the same listing on one saver, cache warm
            warm_s, warm_got = _repeat(warm_lister(LIST_LIMIT))
            row.values["warm_ms"] = 1e3 * warm_s
            row.values["warm_exact"] = warm_got == expected
            row.note = f"repeated on one saver (cache warm): {ms(1e3 * warm_s)} ms" + (
                "" if warm_got == expected else ", NOT the right ones"
            )
        threads_lister = getattr(instance, "threads_lister", None)
        if threads_lister is not None:  # our saver's index-only listing: saver.threads()
            threads_s, threads_got = _repeat(threads_lister(LIST_LIMIT))
            row.values["threads_ms"] = 1e3 * threads_s
            row.values["threads_exact"] = threads_got == expected
            row.note += f"; saver.threads(): {ms(1e3 * threads_s)} ms" + (
                "" if threads_got == expected else ", NOT the right ones"
            )
        log(
            f"[c] {run.elapsed()} {size:>7,} {label(target):<28} newest {LIST_LIMIT}: "
            f"{1e3 * seconds:9.2f} ms  right {right}/{LIST_LIMIT} exact={got == expected} "
            f"(load {load_s:.1f} s) {row.note}"
        )
    finally:
        instance.close()


# -- output --------------------------------------------------------------------------------


def ms(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 1:
        return f"{value:.3f}"
    if value < 10:
        return f"{value:.2f}"
    return f"{value:.1f}" if value < 100 else f"{value:,.0f}"


def ratio(num: float | None, den: float | None) -> str:
    if num is None or den is None or den <= 0:
        return "-"
    r = num / den
    return f"{r:.2f}x" if r < 10 else f"{r:.1f}x" if r < 100 else f"{r:,.0f}x"


def size_text(value: int | None) -> str:
    if value is None:
        return "-"
    if value >= 1e6:
        return f"{value / 1e6:,.1f} MB" if value >= 1e7 else f"{value / 1e6:.2f} MB"
    return f"{value / 1e3:.1f} KB"


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _value(
    rows: list[Row],
    section: str,
    n: int,
    group: str,
    family: str,
    key: str,
    name: str | None = None,
) -> float | None:
    for row in rows:
        if (row.section, row.n, row.group, row.family) == (section, n, group, family) and (
            name is None or row.target == name
        ):
            value = row.values.get(key)
            return None if value is None else float(value)
    return None


def _best_peer(
    rows: list[Row], section: str, n: int, group: str, key: str, prefix: str = ""
) -> tuple[str, float] | None:
    found = [
        (float(r.values[key]), r.target)
        for r in rows
        if (r.section, r.n, r.group, r.family) == (section, n, group, "peer")
        and key in r.values
        and r.target.startswith(prefix)
    ]
    if not found:
        return None
    value, name = min(found)
    return name, value


def _name(row: Row) -> str:
    return {"floor": "floor (orjson + bare driver)", "ours": "**ours**"}.get(row.family, row.target)


def report(run: Run) -> str:
    rows = run.rows
    out: list[str] = []
    if "a" in run.args.sections:
        body = []
        for row in (r for r in rows if r.section == "a"):
            put = row.values.get("put_ms")
            get = row.values.get("get_ms")
            f_put = _value(rows, "a", row.n, row.group, "floor", "put_ms")
            f_get = _value(rows, "a", row.n, row.group, "floor", "get_ms")
            own = row.family != "floor"
            body.append(
                [
                    f"{row.n:,}",
                    row.group,
                    _name(row),
                    ms(put),
                    ms(get),
                    ratio(put, f_put) if own else "",
                    ratio(get, f_get) if own else "",
                    row.note,
                ]
            )
        out.append("### (a) one checkpoint of N messages: put, then get (median, ms)\n")
        out.append(
            table(
                [
                    "N",
                    "backend",
                    "target",
                    "put ms",
                    "get ms",
                    "put ÷ floor",
                    "get ÷ floor",
                    "note",
                ],
                body,
            )
        )
        summary = []
        for n in run.args.n:
            for group in GROUPS:
                o_put = _value(rows, "a", n, group, "ours", "put_ms")
                o_get = _value(rows, "a", n, group, "ours", "get_ms")
                if o_put is None:
                    continue
                bp = _best_peer(rows, "a", n, group, "put_ms")
                bg = _best_peer(rows, "a", n, group, "get_ms")
                summary.append(
                    [
                        f"{n:,}",
                        group,
                        ratio(o_put, _value(rows, "a", n, group, "floor", "put_ms")),
                        ratio(o_get, _value(rows, "a", n, group, "floor", "get_ms")),
                        f"{ratio(bp[1], o_put)} ({bp[0]})" if bp else "-",
                        f"{ratio(bg[1], o_get)} ({bg[0]})" if bg else "-",
                    ]
                )
        out.append("\nRatios (target at N = 1,000: ours ÷ floor ≤ 2x, best peer ÷ ours ≥ 5x):\n")
        out.append(
            table(
                [
                    "N",
                    "backend",
                    "ours put ÷ floor",
                    "ours get ÷ floor",
                    "best peer put ÷ ours",
                    "best peer get ÷ ours",
                ],
                summary,
            )
        )
        savers = []
        for n in run.args.n:
            for group in GROUPS:
                s_put = _value(rows, "a", n, group, "saver", "put_ms")
                s_get = _value(rows, "a", n, group, "saver", "get_ms")
                if s_put is None:
                    continue
                bp = _best_peer(rows, "a", n, group, "put_ms", "langgraph-")
                bg = _best_peer(rows, "a", n, group, "get_ms", "langgraph-")
                savers.append(
                    [
                        f"{n:,}",
                        group,
                        ms(s_put),
                        ms(s_get),
                        ratio(s_put, _value(rows, "a", n, group, "ours", "put_ms")),
                        ratio(s_get, _value(rows, "a", n, group, "ours", "get_ms")),
                        f"{ratio(bp[1], s_put)} ({bp[0]})" if bp else "-",
                        f"{ratio(bg[1], s_get)} ({bg[0]})" if bg else "-",
                    ]
                )
        if savers:
            out.append(
                "\nOur LangGraph saver (saver-*) against our store and LangGraph's savers:\n"
            )
            out.append(
                table(
                    [
                        "N",
                        "backend",
                        "saver put ms",
                        "saver get ms",
                        "saver put ÷ ours",
                        "saver get ÷ ours",
                        "best LangGraph peer put ÷ saver",
                        "best LangGraph peer get ÷ saver",
                    ],
                    savers,
                )
            )
    if "b" in run.args.sections:
        body = []
        for row in (r for r in rows if r.section == "b"):
            v = row.values
            f_total = _value(rows, "b", row.n, row.group, "floor", "total_s")
            f_bytes = _value(rows, "b", row.n, row.group, "floor", "stored_bytes")
            own = row.family != "floor"
            total = v.get("total_s")
            stored = v.get("stored_bytes")
            body.append(
                [
                    f"{row.n:,}",
                    row.group,
                    _name(row),
                    "-" if total is None else f"{total:.3f}" if total < 10 else f"{total:.1f}",
                    size_text(stored),
                    ms(v.get("tenth_ms")),
                    ms(v.get("last_ms")),
                    ratio(v.get("last_ms"), v.get("tenth_ms")),
                    ratio(total, f_total) if own else "",
                    ratio(stored, f_bytes) if own else "",
                    row.note,
                ]
            )
        out.append("\n### (b) a checkpoint after every message, up to N\n")
        out.append("Floor here = append-only: each step writes only the new message.\n")
        out.append(
            table(
                [
                    "N",
                    "backend",
                    "target",
                    "total s",
                    "stored",
                    "10th put ms",
                    "last put ms",
                    "last ÷ 10th",
                    "total ÷ floor",
                    "stored ÷ floor",
                    "note",
                ],
                body,
            )
        )
    if "c" in run.args.sections:
        body = []
        for row in (r for r in rows if r.section == "c"):
            v = row.values
            right = ""
            if "right" in v:
                right = "yes" if v["exact"] else f"NO: {v['right']}/{LIST_LIMIT} right"
                if not v["exact"] and v["right"] == LIST_LIMIT:
                    right = "NO: right runs, wrong order"
            o_list = _value(rows, "c", row.n, row.group, "ours", "list_ms")
            body.append(
                [
                    f"{row.n:,}",
                    row.group,
                    _name(row),
                    ms(v.get("list_ms")),
                    right,
                    ms(v.get("floor_ms")),
                    ratio(v.get("list_ms"), v.get("floor_ms")),
                    ratio(v.get("list_ms"), o_list) if row.family == "saver" else "",
                    f"{v['load_s']:.1f}" if "load_s" in v else "",
                    row.note,
                ]
            )
        out.append(f"\n### (c) the newest {LIST_LIMIT} of many stored runs (median ms)\n")
        out.append(
            "Floor = the bare driver's read of our own index: PostgreSQL, one SELECT of the "
            "summary columns ... ORDER BY saved_at DESC, key LIMIT 100; disk, the same SELECT "
            "on the SQLite index; Redis, one ZRANGE BYLEX of the index (keys only, no "
            "summaries); S3, one ListObjectsV2 of the index prefix (names only); fsspec, one "
            "ls of the index folder (names only, the whole folder: fsspec has no limit). "
            "÷ ours = our LangGraph saver's listing (a new saver, cold) ÷ our store's "
            "listing on the same backend, in this run.\n"
        )
        out.append(
            table(
                [
                    "runs",
                    "backend",
                    "target",
                    "list ms",
                    "right ones",
                    "floor ms",
                    "÷ floor",
                    "÷ ours",
                    "load s",
                    "note",
                ],
                body,
            )
        )
    if run.skipped:
        out.append("\nSkipped: " + "; ".join(f"{name}: {why}" for name, why in run.skipped))
    return "\n".join(out)


def environment(run: Run) -> str:
    versions = {f"{label(t)}": t.version for t in ordered(run.targets) if t.family != "floor"}
    cpu = ""
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next(
                (ln.split(":", 1)[1].strip() for ln in info if ln.startswith("model name")), ""
            )
    except OSError:
        pass
    server: list[str] = []
    if servers.redis_check() is None:
        client = servers.redis_client()
        server.append(f"Redis {client.info('server').get('redis_version')}")
        client.close()
    if servers.pg_check() is None:
        with servers.pg_connect() as conn:
            row = conn.execute("SHOW server_version").fetchone()
            server.append(f"PostgreSQL {row[0] if row else '?'}")
    if run.ctx._s3 is not None:
        server.append("SeaweedFS 4.48 (weed mini)")
    if any(t.backend == "fsspec" for t in run.targets):
        import fsspec

        server.append(f"fsspec {fsspec.__version__} (MemoryFileSystem, in process)")
    peers_text = ", ".join(
        f"{k} {v}" for k, v in versions.items() if not k.startswith(("ours", "saver-"))
    )
    mine = next((v for k, v in versions.items() if k.startswith("ours")), "?")
    return "\n".join(
        [
            f"Run {run.began:%Y-%m-%d %H:%M %Z} on {os.cpu_count()} cores"
            f" ({cpu or platform.machine()}), Python {platform.python_version()}.",
            f"agent-checkpoint {mine}; servers: {', '.join(server) or '-'}. Load average "
            f"{run.load_start:.1f} at start, {os.getloadavg()[0]:.1f} at end "
            f"(other processes on the machine; {time.monotonic() - run.started:.0f} s in all).",
            f"Peers: {peers_text or 'none'}.",
            f"Workload: seeded conversation (user / assistant calling a tool / tool / assistant), "
            f"messages of {workload.MIN_TEXT}-{workload.MAX_TEXT} characters; "
            f"N = {', '.join(f'{n:,}' for n in run.args.n)}; "
            f"listing of {', '.join(f'{n:,}' for n in run.args.list_sizes)} runs.",
        ]
    )


# -- profile -------------------------------------------------------------------------------


def profile(run: Run, n: int = 1000, top: int = 14) -> str:
    turns = workload.conversation(n)
    out = [f"\n### Profile: our put and get at N = {n:,} (5 of each, by own time)\n"]
    for target in ordered(t for t in run.targets if t.family == "ours"):
        instance = target.open()
        try:
            history = target.convert(turns)
            instance.put("warm", instance.prepare("warm", history, 4, step=False))
            prepared = [instance.prepare(f"p{i}", history, n, step=False) for i in range(5)]
            for op in ("put", "get"):
                prof = cProfile.Profile()
                prof.enable()
                for i in range(5):
                    if op == "put":
                        instance.put(f"p{i}", prepared[i])
                    else:
                        instance.get(f"p{i}")
                prof.disable()
                text = io.StringIO()
                stats = pstats.Stats(prof, stream=text)
                stats.sort_stats("tottime").print_stats(top)
                lines = [ln for ln in text.getvalue().splitlines() if ln.strip()]
                start = next(i for i, ln in enumerate(lines) if "ncalls" in ln)
                out.append(f"{target.backend} {op}: {lines[0].strip()}")
                out.append("```")
                out.extend(_short(ln) for ln in lines[start:])
                out.append("```")
        finally:
            instance.close()
    return "\n".join(out)


def _short(line: str) -> str:
    """A profile line with the long path prefixes cut."""
    import sysconfig

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for path, short in (
        (sysconfig.get_paths()["purelib"], "site-packages"),
        (sysconfig.get_paths()["stdlib"], "stdlib"),
        (root, "."),
    ):
        line = line.replace(path, short)
    return line


# -- main ----------------------------------------------------------------------------------


def _terminate(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    # our Redis store warns that a server without persistence loses data: true, and said once
    # in the README, not once per store the harness opens
    warnings.filterwarnings("ignore", message=r".*keeps no data on disk.*")
    signal.signal(signal.SIGTERM, _terminate)
    cleanup = Cleanup()
    run = Run(args, Context(cleanup), [])
    try:
        build_targets(run)
        if not run.targets:
            log("nothing to measure")
            return 2
        log("targets: " + ", ".join(label(t) for t in ordered(run.targets)))
        for name, section in (("a", section_a), ("b", section_b), ("c", section_c)):
            if name in args.sections:
                section(run)
        print(environment(run) + "\n")
        print(report(run))
        if args.profile:
            print(profile(run))
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(
                    {
                        "args": {
                            k: sorted(v) if isinstance(v, set) else v for k, v in vars(args).items()
                        },
                        "rows": [asdict(r) for r in run.rows],
                        "skipped": run.skipped,
                    },
                    fh,
                    indent=1,
                )
        log(f"done in {run.elapsed().strip()}")
        return 0
    except KeyboardInterrupt:
        log("interrupted: cleaning up")
        return 130
    finally:
        cleanup.run()


if __name__ == "__main__":
    sys.exit(main())
