"""ADK ``list_sessions`` of a user's 2,000 sessions: our service on each backend beside ADK's
own ``DatabaseSessionService`` on SQLite (``sqlite+aiosqlite``), in one run.

    benchmarks/.venv-peers/bin/python benchmarks/adk_listing.py [--sessions 2000]
        [--events 2] [--long-every 50] [--long-events 40] [--backends memory,disk,...]
        [--repeats 7] [--json OUT]

Every target is seeded alike through ADK's API (8 tasks at a time; SQLite one): ``--sessions`` sessions of one user, each
created with session, user and app state and given ``--events`` events of 0.5-2 KB of text;
every ``--long-every``-th session gets ``--long-events`` instead (its history outgrows what a
record keeps inline, so it is stored in pieces). Another user holds a tenth as many sessions,
so the user filter has something to leave out. Then ``list_sessions(app_name=, user_id=)``
(what ADK's web UI calls) runs ``--repeats`` times on the service that seeded (its connections
made), after one untimed call: the median is reported, with its ratio to the SQLite database
service's median. A second figure lists every user's sessions (``user_id=None``).

With ``s3`` among the backends, a last row is the floor of one object per session on the
run's S3 server: bare boto3 on the bucket our service seeded, one LIST of its record objects
and a GET of each listed session's record (the user's, or every user's), ``--floor-pool``
threads at a time on a client with as many pooled connections (no check, no decoding).

Each listing is checked: the same session ids, oldest update first, no events, and the same
merged state as the SQLite service returns. The target of issue 40: at most 1x the database
service on every backend.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import statistics
import sys
import time
import warnings
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import orjson
import servers
import sessions
import workload

warnings.simplefilter("ignore")

APP, USER, OTHER = "bench", "user-1", "user-2"


def _texts(n: int) -> list[str]:
    return [turn.content or "-" for turn in workload.conversation(max(n, 4))][:n]


def _event(i: int, text: str) -> Any:
    from google.adk.events import Event
    from google.adk.events.event_actions import EventActions
    from google.genai import types

    role = "user" if i % 2 == 0 else "model"
    return Event(
        invocation_id=f"inv-{i // 2}",
        author="user" if role == "user" else "assistant",
        content=types.Content(role=role, parts=[types.Part(text=text)]),
        actions=EventActions(state_delta={"turn": i}),
    )


async def _seed(service: Any, args: argparse.Namespace, tasks: int) -> None:
    texts = _texts(args.long_events)
    plan = [(USER, i) for i in range(args.sessions)]
    plan += [(OTHER, i) for i in range(args.sessions // 10)]

    async def one(user: str, i: int) -> None:
        session = await service.create_session(
            app_name=APP,
            user_id=user,
            session_id=f"s-{i:05d}",
            state={"topic": f"t{i}", "user:tier": "gold", "app:version": 3},
        )
        events = args.long_events if args.long_every and i % args.long_every == 0 else args.events
        for j in range(events):
            await service.append_event(session, _event(j, texts[j % len(texts)]))

    async def make_one(n: int) -> None:
        await one(*plan[n])

    await sessions._seed(len(plan), make_one, tasks=tasks)


def _shape(listed: Any) -> list[tuple[str, str, float, str]]:
    """What a caller sees of a listing, to compare targets by (their clocks differ: the order
    is checked, then left out)."""
    assert all(not s.events for s in listed.sessions), "a listed session holds events"
    times = [s.last_update_time for s in listed.sessions]
    assert times == sorted(times), "not oldest update first"
    state = orjson.OPT_SORT_KEYS
    return sorted((s.user_id, s.id, orjson.dumps(s.state, option=state)) for s in listed.sessions)


async def _timed(fn: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = await fn()
    return time.perf_counter() - start, result


async def measure(name: str, service: Any, args: argparse.Namespace) -> dict[str, Any]:
    servers.log(f"seeding {name}")
    started = time.perf_counter()
    # SQLite takes one writer at a time ("database is locked" under several)
    await _seed(service, args, tasks=1 if name == "adk-database-sqlite" else 8)
    seeded = time.perf_counter() - started
    row: dict[str, Any] = {"target": name, "seed_s": seeded}
    for label, user in (("user", USER), ("all", None)):
        await service.list_sessions(app_name=APP, user_id=user)  # untimed: warm up
        times, shape = [], None
        for _ in range(args.repeats):
            spent, listed = await _timed(
                lambda user=user: service.list_sessions(app_name=APP, user_id=user)
            )
            times.append(spent)
            shape = _shape(listed)
        row[f"{label}_ms"] = statistics.median(times) * 1000
        row[f"{label}_shape"] = shape
    return row


def _record_key(name: str) -> str:
    """The key a record object's name encodes (base32hex, as the store names them)."""
    return base64.b32hexdecode(name.upper() + "=" * (-len(name) % 8)).decode()


def _floor_list(client: Any, bucket: str, prefix: str, user: str | None, threads: int) -> int:
    """One LIST of the record objects, then a GET of each of the sessions listed (the user's,
    or every user's), in parallel: what one object per session costs at least."""
    paths = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            parts = _record_key(item["Key"][len(prefix) :]).split("/")
            if len(parts) == 4 and parts[0] == "adk" and user in (None, parts[2]):
                paths.append(item["Key"])
    with ThreadPoolExecutor(threads) as pool:
        bodies = list(
            pool.map(lambda p: client.get_object(Bucket=bucket, Key=p)["Body"].read(), paths)
        )
    return len(bodies)


async def measure_floor(
    server: Any, place: sessions.Place, args: argparse.Namespace
) -> dict[str, Any]:
    """The S3 floor row, on the bucket ``place`` seeded (``_floor_list``)."""
    client = server.client(max_pool_connections=args.floor_pool)
    prefix = "sessions/records/"
    row: dict[str, Any] = {"target": f"s3-floor (boto3, {args.floor_pool} threads)", "seed_s": 0.0}
    for label, user in (("user", USER), ("all", None)):

        def one(user: str | None = user) -> int:
            return _floor_list(client, place.tag, prefix, user, args.floor_pool)

        count = await asyncio.to_thread(one)  # untimed: warm up
        want = args.sessions if user else args.sessions + args.sessions // 10
        assert count == want, f"the floor read {count} sessions, not {want}"
        times = []
        for _ in range(args.repeats):
            started = time.perf_counter()
            await asyncio.to_thread(one)
            times.append(time.perf_counter() - started)
        row[f"{label}_ms"] = statistics.median(times) * 1000
        row[f"{label}_shape"] = None
    client.close()
    return row


def _service(place: sessions.Place | None, cleanup: servers.Cleanup) -> Any:
    if place is None:
        from google.adk.sessions import DatabaseSessionService

        db = servers.temp_dir(cleanup, "adk-sqlite") / "adk.db"
        return DatabaseSessionService(f"sqlite+aiosqlite:///{db}")
    from agent_checkpoint.integrations.adk import AgentCheckpointSessionService

    return AgentCheckpointSessionService(place.url)


async def main(args: argparse.Namespace) -> list[dict[str, Any]]:
    cleanup = servers.Cleanup()
    s3_server: list[Any] = []

    def s3() -> Any:
        if not s3_server:
            s3_server.append(servers.start_s3(cleanup))
        return s3_server[0]

    rows: list[dict[str, Any]] = []
    try:
        targets: list[tuple[str, sessions.Place | None]] = [("adk-database-sqlite", None)]
        for backend in args.backends.split(","):
            targets.append((f"ours-{backend}", sessions.Place(backend, cleanup, s3)))
        for name, place in targets:
            service = _service(place, cleanup)
            try:
                rows.append(await measure(name, service, args))
            finally:
                await sessions._close(service)
            if place is not None and place.backend == "s3":
                rows.append(await measure_floor(s3(), place, args))
    finally:
        cleanup.run()
    base = dict(rows[0])
    for row in rows:
        for label in ("user", "all"):
            row[f"{label}_ratio"] = row[f"{label}_ms"] / base[f"{label}_ms"]
            shape = row.pop(f"{label}_shape")
            same = shape is None or shape == base[f"{label}_shape"]  # the floor: not a listing
            row[f"{label}_same"] = "yes" if same else "NO"
    return rows


def report(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    users = f"{args.sessions:,} of one user ({args.sessions // 10:,} of another)"
    out = [
        f"\n### list_sessions: {users}; median of {args.repeats}, ms\n",
        "| target | one user, ms | ÷ SQLite | all users, ms | ÷ SQLite | same as SQLite | seed s |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        same = "yes" if row["user_same"] == row["all_same"] == "yes" else "NO"
        out.append(
            f"| {row['target']} | {row['user_ms']:,.0f} | {row['user_ratio']:.2f}x "
            f"| {row['all_ms']:,.0f} | {row['all_ratio']:.2f}x | {same} | {row['seed_s']:,.1f} |"
        )
    return "\n".join(out)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--events", type=int, default=2)
    parser.add_argument("--long-every", type=int, default=50)
    parser.add_argument("--long-events", type=int, default=40)
    parser.add_argument("--backends", default="memory,disk,redis,postgres,s3")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--floor-pool", type=int, default=32)
    parser.add_argument("--json", default="")
    arguments = parser.parse_args()
    started = time.time()
    found = asyncio.run(main(arguments))
    print(report(found, arguments))
    print(f"\n{time.time() - started:,.0f} s; load {os.getloadavg()}")
    if arguments.json:
        Path(arguments.json).write_bytes(orjson.dumps(found, option=orjson.OPT_INDENT_2))
