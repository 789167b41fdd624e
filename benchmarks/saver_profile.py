"""Where our LangGraph saver's time goes: cProfile of a few puts late in a conversation and of
one listing of the newest 100 threads, with the store calls and the round trips each makes.

    benchmarks/.venv-peers/bin/python benchmarks/saver_profile.py                    # all
    ... saver_profile.py --backends redis,postgres --n 1000 --threads 10000 --top 12

For each backend, through the harness's own target (``saver.py``: the same namespaces, the same
checkpoints as ``run.py``):

- **put**: a thread checkpointed after every message up to N (as section (b)); the last 5 puts
  are profiled (own time and cumulative time, top functions), and counted;
- **listing**: K one-turn threads loaded as section (c) loads them; one cold listing
  (``list(None, limit=100)`` on a new saver) is profiled and counted, then our store's own
  ``store.list(limit=100)`` on the same namespace, counted, for comparison.

Counts: the ``Store`` methods the saver calls (``put``, ``get_json``, ``get_record``,
``list``, ...) and the round trips under them: Redis commands sent (a pipeline or a script is
one send), PostgreSQL statements executed, S3 HTTP requests; memory and disk count the calls
into the store's backend instead (no network). Profiling slows every call: read the shares,
not the times.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import signal
import sys
import threading
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import saver
import workload
from servers import Cleanup, Context, log
from targets import LIST_LIMIT, Unavailable

STORE_CALLS = ("put", "put_record", "get", "get_json", "get_record", "get_records", "get_envelope", "head",
               "list", "delete", "decode", "decode_json")  # fmt: skip
BACKEND_CALLS = ("load", "load_many", "head", "save", "save_split", "append", "drop", "scan")


class Counts:
    """Store calls and round trips, counted while ``active``."""

    def __init__(self) -> None:
        self.store: Counter[str] = Counter()
        self.trips: Counter[str] = Counter()
        self.active = False
        self._lock = threading.Lock()

    def add(self, where: Counter[str], name: str) -> None:
        if self.active:
            with self._lock:
                where[name] += 1

    @contextmanager
    def counting(self) -> Iterator[None]:
        self.store.clear()
        self.trips.clear()
        self.active = True
        try:
            yield
        finally:
            self.active = False


def _wrap(obj: Any, names: tuple[str, ...], counts: Counts, where: Counter[str], tag: str) -> None:
    for name in names:
        method = getattr(obj, name, None)
        if method is None or not callable(method):
            continue

        def call(*args: Any, _m: Any = method, _n: str = name, **kwargs: Any) -> Any:
            counts.add(where, f"{tag}{_n}")
            return _m(*args, **kwargs)

        setattr(obj, name, call)


def instrument_drivers(counts: Counts) -> None:
    """Count round trips at the drivers (class-level, for every connection of the process)."""
    try:
        import redis.connection

        original = redis.connection.AbstractConnection.send_packed_command

        def send(self: Any, command: Any, check_health: bool = True) -> Any:
            counts.add(counts.trips, "redis send")
            return original(self, command, check_health)

        redis.connection.AbstractConnection.send_packed_command = send  # type: ignore[method-assign]
    except ImportError:
        pass
    try:
        import psycopg

        for name in ("execute", "executemany"):
            original_pg = getattr(psycopg.Cursor, name)

            def execute(self: Any, *a: Any, _o: Any = original_pg, _n: str = name, **k: Any) -> Any:
                counts.add(counts.trips, f"pg {_n}")
                return _o(self, *a, **k)

            setattr(psycopg.Cursor, name, execute)
    except ImportError:
        pass
    try:
        import botocore.endpoint

        original_send = botocore.endpoint.Endpoint._send

        def http(self: Any, request: Any) -> Any:
            counts.add(counts.trips, f"s3 {request.method}")
            return original_send(self, request)

        botocore.endpoint.Endpoint._send = http  # type: ignore[method-assign]
    except ImportError:
        pass


_PATCHED: set[type] = set()


def instrument_store(store: Any, counts: Counts, backend: str) -> None:
    _wrap(store, STORE_CALLS, counts, counts.store, "")
    kind = type(store.backend)
    if backend in ("memory", "disk") and kind not in _PATCHED:
        # no network: count the calls into the backend's class (the records' backend and
        # the segment layer's pieces namespace are both of it)
        _PATCHED.add(kind)
        _wrap(kind, BACKEND_CALLS, counts, counts.trips, "backend ")


def profile_text(prof: cProfile.Profile, top: int, sort: str) -> list[str]:
    text = io.StringIO()
    stats = pstats.Stats(prof, stream=text)
    stats.sort_stats(sort).print_stats(top)
    lines = [ln for ln in text.getvalue().splitlines() if ln.strip()]
    start = next(i for i, ln in enumerate(lines) if "ncalls" in ln)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    import sysconfig

    def short(line: str) -> str:
        for path, name in ((sysconfig.get_paths()["purelib"], "site-packages"),
                           (sysconfig.get_paths()["stdlib"], "stdlib"), (root, ".")):  # fmt: skip
            line = line.replace(path, name)
        return line

    return [lines[0].strip(), "```", *(short(ln) for ln in lines[start:]), "```"]


def count_text(counts: Counts, per: int) -> str:
    def fmt(counter: Counter[str]) -> str:
        if not counter:
            return "none"
        return ", ".join(f"{k} {v / per:g}" for k, v in sorted(counter.items()))

    return f"store calls: {fmt(counts.store)}; round trips: {fmt(counts.trips)}"


def profiled(
    fn: Callable[[], Any], counts: Counts, top: int, per: int, what: str
) -> tuple[Any, list[str]]:
    prof = cProfile.Profile()
    with counts.counting():
        prof.enable()
        result = fn()
        prof.disable()
    out = [f"**{what}**, per call ({per} profiled): {count_text(counts, per)}", ""]
    out += ["By own time:", *profile_text(prof, top, "tottime"), ""]
    out += ["By cumulative time:", *profile_text(prof, top, "cumulative"), ""]
    return result, out


def put_profile(target: saver.Saver, n: int, top: int, counts: Counts) -> list[str]:
    instance = target.open()
    try:
        instrument_store(instance.space.store, counts, target.backend)
        history = target.convert(workload.conversation(n))
        key = "conversation"
        for i in range(1, n - 4):
            instance.put(key, instance.prepare(key, history, i, step=True))
        # put chains each to the thread's latest config, whenever they were prepared
        prepared = [instance.prepare(key, history, i, step=True) for i in range(n - 4, n + 1)]

        def puts() -> None:
            for p in prepared:
                instance.put(key, p)

        _, out = profiled(puts, counts, top, 5, f"{target.name}: the last 5 puts of {n:,}")
        return out
    finally:
        instance.close()


def list_profile(target: saver.Saver, threads: int, top: int, counts: Counts) -> list[str]:
    instance = target.open()
    try:
        expected = instance.load_runs(threads, lambda done: None)
        instrument_store(instance.space.reader, counts, target.backend)
        what = f"{target.name}: one cold listing of the newest {LIST_LIMIT} of {threads:,}"
        got, out = profiled(lambda: instance.list_newest(LIST_LIMIT), counts, top, 1, what)
        out.insert(1, f"right ones: {'yes' if got == expected else 'NO'}")
        with counts.counting():
            page = instance.space.reader.list(limit=LIST_LIMIT)
        out.append(
            f"Our store's `list(limit={LIST_LIMIT})` on the same namespace: "
            f"{count_text(counts, 1)} ({len(page.items)} summaries)"
        )
        return out
    finally:
        instance.close()


def _terminate(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--backends", default=",".join(saver.SAVER_BACKENDS))
    p.add_argument("--n", type=int, default=1000, help="messages in the put conversation")
    p.add_argument("--threads", type=int, default=1000, help="threads loaded for the listing")
    p.add_argument("--top", type=int, default=14)
    p.add_argument("--only", default="put,list", help="put, list or both")
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore", message=r".*keeps no data on disk.*")
    signal.signal(signal.SIGTERM, _terminate)  # kill PID: clean up as on Ctrl-C
    counts = Counts()
    instrument_drivers(counts)
    cleanup = Cleanup()
    ctx = Context(cleanup)
    out: list[str] = []
    try:
        for backend in args.backends.split(","):
            try:
                target = saver.Saver(backend.strip(), ctx)
            except Unavailable as exc:
                log(f"skip saver-{backend}: {exc}")
                continue
            out.append(f"### saver-{backend}\n")
            if "put" in args.only:
                log(f"saver-{backend}: puts")
                out += put_profile(target, args.n, args.top, counts)
            if "list" in args.only:
                log(f"saver-{backend}: listing")
                out += list_profile(target, args.threads, args.top, counts)
        print("\n".join(out))
        return 0
    except KeyboardInterrupt:
        log("interrupted: cleaning up")
        return 130
    finally:
        cleanup.run()


if __name__ == "__main__":
    sys.exit(main())
