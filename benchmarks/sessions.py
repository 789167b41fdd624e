"""Our Agents SDK session and ADK session service beside the frameworks' own, in one run.

    benchmarks/.venv-peers/bin/python benchmarks/sessions.py [--items 1000] [--events 3000]
        [--sessions 100000] [--peer-sessions 10000] [--only PATTERN,...] [--json OUT]

Three measurements (issue 19), each target on its real server (Redis and PostgreSQL of the
machine, SeaweedFS started here, files in a temporary folder):

- (1) appends: one item (``add_items``) or one event (``append_event``) at a time to
  ``--items``; the total, the median call around the 10th and over the last ten, and their
  ratio (flat: about 1x).
- (2) the newest ten: ``get_session(num_recent_events=10)`` of a session grown to ``--events``
  events one append at a time, against ``get_session`` of a session of ten events (ADK); the
  SDK's ``get_items(limit=10)`` of ``--events`` items against ``get_items()`` of ten. A fresh
  service or session object reads (nothing of the session remembered), median of 15.
- (3) listing: the newest 50 of ``--sessions`` sessions on Redis and PostgreSQL through our
  ``list_sessions`` (median of 15), seeded through the same public API (the store's bulk
  settings as benchmarks/ours.py uses them: PostgreSQL without waiting for the WAL flush).
  The peers that can list sessions at all (ADK's database and Redis services; no SDK session
  lists) list all of a user's sessions, with no page: seeded to ``--peer-sessions``.

Targets: flat appends; the newest 10 of 3,000 events within 2x a 10-event session's read; the
50 newest sessions in at most 50 ms on Redis and PostgreSQL.
"""

from __future__ import annotations

import argparse
import asyncio
import fnmatch
import os
import statistics
import sys
import time
import warnings
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import orjson
import servers
import workload

from agent_checkpoint import AsyncStore, open_async_store, open_store

warnings.simplefilter("ignore")

WINDOW = 10  # calls the 10th and the last appends are medians of
REPEATS = 15


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


async def _timed(fn: Callable[[], Awaitable[Any]]) -> float:
    start = time.perf_counter()
    await fn()
    return time.perf_counter() - start


# -- where each target keeps its data ----------------------------------------------------------


class Place:
    """A store URL (ours) or a peer's address on one backend, and how to remove it."""

    def __init__(self, backend: str, cleanup: servers.Cleanup, s3: Callable[[], Any]) -> None:
        self.backend = backend
        self.cleanup = cleanup
        self.tag = servers.unique("sess-")
        if backend == "memory":
            self.url = "memory://"
        elif backend == "disk":
            self.url = str(servers.temp_dir(cleanup, "sessions"))
        elif backend == "redis":
            self.url = f"{servers.REDIS_URL}?prefix={self.tag}"
            pattern = "{" + servers.redis_glob_escape(self.tag) + "*"
            client = servers.redis_client()
            cleanup.add(f"drop {self.tag}", lambda: servers.redis_delete(client, pattern))
        elif backend == "postgres":
            schema = self.tag.replace("-", "_")
            self.url = f"{servers.PG_URL}?schema={schema}"

            def drop() -> None:
                with servers.pg_connect() as conn:
                    conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

            cleanup.add(f"drop schema {schema}", drop)
            from agent_checkpoint import open_store

            with open_store(self.url) as store:
                store.setup()
        elif backend == "s3":
            server = s3()
            client = server.client()
            client.create_bucket(Bucket=self.tag)
            cleanup.add(f"drop bucket {self.tag}", lambda: servers.s3_drop_bucket(client, self.tag))
            os.environ["AWS_ACCESS_KEY_ID"] = servers.S3_ACCESS_KEY
            os.environ["AWS_SECRET_ACCESS_KEY"] = servers.S3_SECRET_KEY
            self.url = (
                f"s3://{self.tag}/sessions?endpoint_url={server.endpoint_url}"
                f"&region={servers.S3_REGION}"
            )
        else:
            raise ValueError(backend)

    def bulk_url(self) -> str:
        """The URL seeding writes through: PostgreSQL without waiting for the WAL flush."""
        if self.backend == "postgres":
            return f"{self.url}&options=-c%20synchronous_commit%3Doff"
        return self.url


# -- the Agents SDK ----------------------------------------------------------------------------


def _items(n: int) -> list[dict[str, Any]]:
    return workload.agents_items(workload.conversation(n))[:n]


class Ours:
    """Our store on one backend: one ``AsyncStore`` every writing session shares (as a server
    holds one), and fresh ones for cold reads (nothing of a session remembered)."""

    def __init__(self, place: Place, *, bulk: bool = False) -> None:
        self.place = place
        self.url = place.bulk_url() if bulk else place.url
        self._memory = open_store("memory://") if place.backend == "memory" else None
        if self._memory is not None:
            place.cleanup.add("close memory store", self._memory.close)
        self._writer: AsyncStore | None = None

    def _open(self) -> Any:
        if self._memory is not None:
            return AsyncStore.over(self._memory)  # memory:// is one store per opening
        return open_async_store(self.url)

    def writer(self) -> Any:
        if self._writer is None:
            self._writer = self._open()
        return self._writer

    async def fresh(self) -> Any:
        """A new store, its connections made (a read of a missing key) before it is timed."""
        if self._memory is not None:
            return self.writer()  # one store per opening of memory://: none colder to read
        store = self._open()
        await store.head("warm-up")
        return store

    async def release(self, store: Any) -> None:
        """Close a store ``fresh`` gave."""
        if store is not self._writer:
            await store.close()

    async def close(self) -> None:
        if self._writer is not None:
            await self._writer.close()


class SdkTarget:
    """SDK sessions: ``session(session_id, store)`` gives a new session object (``store``:
    ours only, the AsyncStore it runs on)."""

    def __init__(self, name: str, session: Callable[..., Any], ours: Ours | None) -> None:
        self.name, self.session, self.ours = name, session, ours

    def make(self, session_id: str) -> Any:
        return self.session(session_id, self.ours.writer() if self.ours else None)


def sdk_targets(
    backends: list[str], places: dict[str, Ours], cleanup: servers.Cleanup
) -> list[Any]:
    from agent_checkpoint.integrations.openai_agents import AgentCheckpointSession

    targets: list[SdkTarget] = []
    for backend in backends:
        targets.append(SdkTarget(f"sdk-ours-{backend}", AgentCheckpointSession, places[backend]))
        if backend == "disk":
            from agents import SQLiteSession

            db = str(servers.temp_dir(cleanup, "sqlite") / "sessions.db")
            targets.append(SdkTarget("sdk-sqlite", lambda s, _, db=db: SQLiteSession(s, db), None))
        if backend == "redis":
            from agents.extensions.memory.redis_session import RedisSession

            prefix = servers.unique("agents-")
            client = servers.redis_client()
            pattern = servers.redis_glob_escape(prefix) + "*"
            cleanup.add(f"drop {prefix}", lambda c=client, p=pattern: servers.redis_delete(c, p))
            targets.append(
                SdkTarget(
                    "sdk-redis",
                    lambda s, _, p=prefix: RedisSession.from_url(
                        s, url=servers.REDIS_URL, key_prefix=p
                    ),
                    None,
                )
            )
    return targets


async def _close(target: Any) -> None:
    """Close a session or a service, however it is closed (ADK's database service: its
    engine)."""
    for name in ("close", "aclose"):
        method = getattr(target, name, None)
        if method is not None:
            result = method()
            if asyncio.iscoroutine(result):
                await result
            return
    engine = getattr(target, "db_engine", None)
    if engine is not None:
        await engine.dispose()


async def sdk_appends(target: SdkTarget, n: int) -> dict[str, Any]:
    session = target.make(servers.unique("append-"))
    items = _items(n)
    times: list[float] = []
    try:
        for item in items:
            times.append(await _timed(lambda item=item: session.add_items([item])))
        got = await session.get_items()
        assert len(got) == n, (target.name, len(got))
    finally:
        await _close(session)
    return _appends_row(target.name, times)


async def sdk_newest(target: SdkTarget, n: int) -> dict[str, Any]:
    long_id, short_id = servers.unique("long-"), servers.unique("short-")
    writer = target.make(long_id)
    items = _items(n)
    try:
        for item in items:  # one at a time, as an agent adds them
            await writer.add_items([item])
    finally:
        await _close(writer)
    short = target.make(short_id)
    try:
        await short.add_items(items[-10:])
    finally:
        await _close(short)

    async def read(session_id: str, limit: int | None) -> float:
        store = await target.ours.fresh() if target.ours else None
        session = target.session(session_id, store)
        try:
            start = time.perf_counter()
            got = await session.get_items(limit)
            spent = time.perf_counter() - start
            assert got == items[-10:], target.name
            return spent
        finally:
            await _close(session)
            if store is not None and target.ours is not None:
                await target.ours.release(store)

    newest = [await read(long_id, 10) for _ in range(REPEATS)]
    ten = [await read(short_id, None) for _ in range(REPEATS)]
    return _newest_row(target.name, n, newest, ten)


# -- Google ADK --------------------------------------------------------------------------------

APP, USER = "bench", "user-1"


class AdkTarget:
    """ADK session services: ``service(store)`` gives a new one (``store``: ours only)."""

    def __init__(self, name: str, service: Callable[[Any], Any], ours: Ours | None) -> None:
        self.name, self.service, self.ours = name, service, ours

    def make(self) -> Any:
        return self.service(self.ours.writer() if self.ours else None)

    async def cold(self) -> tuple[Any, Any]:
        """A new service for a cold read, warmed up (its connections made), and its store."""
        store = await self.ours.fresh() if self.ours else None
        service = self.service(store)
        if store is None:
            await service.get_session(app_name=APP, user_id=USER, session_id="warm-up")
        return service, store


def _event(i: int, text: str) -> Any:
    from google.adk.events import Event
    from google.genai import types

    role = "user" if i % 2 == 0 else "model"
    return Event(
        invocation_id=f"inv-{i // 2}",
        author="user" if role == "user" else "assistant",
        content=types.Content(role=role, parts=[types.Part(text=text)]),
    )


def _texts(n: int) -> list[str]:
    return [turn.content or "-" for turn in workload.conversation(n)][:n]


def adk_targets(
    backends: list[str], places: dict[str, Ours], cleanup: servers.Cleanup
) -> list[AdkTarget]:
    try:
        from agent_checkpoint.integrations.adk import AgentCheckpointSessionService
    except ImportError as exc:
        servers.log(f"ADK targets left out: {exc}")
        return []
    targets: list[AdkTarget] = []
    for backend in backends:
        targets.append(
            AdkTarget(
                f"adk-ours-{backend}",
                lambda store: AgentCheckpointSessionService(store),
                places[backend],
            )
        )
        if backend == "disk":
            from google.adk.sessions import DatabaseSessionService

            db = servers.temp_dir(cleanup, "adk-sqlite") / "adk.db"
            targets.append(
                AdkTarget(
                    "adk-database-sqlite",
                    lambda _, db=db: DatabaseSessionService(f"sqlite+aiosqlite:///{db}"),
                    None,
                )
            )
        if backend == "postgres":
            from google.adk.sessions import DatabaseSessionService

            database = servers.unique("bench_adk_").replace("-", "_")
            with servers.pg_connect() as conn:
                conn.execute(f'CREATE DATABASE "{database}"')

            def drop(database: str = database) -> None:
                with servers.pg_connect() as conn:
                    conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')

            cleanup.add(f"drop database {database}", drop)
            url = servers.PG_URL.replace("postgresql://", "postgresql+psycopg://").rsplit("/", 1)[0]
            targets.append(
                AdkTarget(
                    "adk-database-postgres",
                    lambda _, url=f"{url}/{database}": DatabaseSessionService(url),
                    None,
                )
            )
        if backend == "redis":
            try:
                from google.adk_community.sessions.redis_session_service import (
                    RedisSessionService,
                )
            except ImportError as exc:
                servers.log(f"adk-community-redis left out: {exc}")
                continue
            targets.append(
                AdkTarget(
                    "adk-community-redis",
                    lambda _: RedisSessionService(uri=servers.REDIS_URL),
                    None,
                )
            )
    return targets


async def adk_appends(target: AdkTarget, n: int) -> dict[str, Any]:
    service = target.make()
    times: list[float] = []
    try:
        session = await service.create_session(app_name=APP, user_id=USER)
        for i, text in enumerate(_texts(n)):
            event = _event(i, text)
            times.append(await _timed(lambda e=event: service.append_event(session, e)))
        again = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
        assert again is not None and len(again.events) == n, target.name
    finally:
        await _close(service)
    return _appends_row(target.name, times)


async def adk_newest(target: AdkTarget, n: int) -> dict[str, Any]:
    from google.adk.sessions.base_session_service import GetSessionConfig

    texts = _texts(n)
    service = target.make()
    try:
        long = await service.create_session(app_name=APP, user_id=USER)
        for i, text in enumerate(texts):
            await service.append_event(long, _event(i, text))
        short = await service.create_session(app_name=APP, user_id=USER)
        for i, text in enumerate(texts[-10:]):
            await service.append_event(short, _event(n - 10 + i, text))
    finally:
        await _close(service)

    async def read(session_id: str, config: Any) -> float:
        reader, store = await target.cold()
        try:
            start = time.perf_counter()
            got = await reader.get_session(
                app_name=APP, user_id=USER, session_id=session_id, config=config
            )
            spent = time.perf_counter() - start
            assert got is not None
            assert [e.content.parts[0].text for e in got.events] == texts[-10:], target.name
            return spent
        finally:
            await _close(reader)
            if store is not None and target.ours is not None:
                await target.ours.release(store)

    newest = [await read(long.id, GetSessionConfig(num_recent_events=10)) for _ in range(REPEATS)]
    ten = [await read(short.id, None) for _ in range(REPEATS)]
    return _newest_row(target.name, n, newest, ten)


# -- (3) listing -------------------------------------------------------------------------------


async def _seed(count: int, make_one: Callable[[int], Awaitable[None]], tasks: int = 16) -> None:
    queue = iter(range(count))
    done = 0

    async def worker() -> None:
        nonlocal done
        for i in queue:
            await make_one(i)
            done += 1
            if done % 10_000 == 0:
                servers.log(f"  seeded {done:,} of {count:,}")

    await asyncio.gather(*(worker() for _ in range(tasks)))


async def sdk_listing(place: Place, count: int) -> dict[str, Any]:

    from agent_checkpoint.integrations.openai_agents import AgentCheckpointSession, list_sessions

    item = _items(1)
    bulk = Ours(place, bulk=True)
    try:
        await _seed(
            count, lambda i: AgentCheckpointSession(f"s-{i:07d}", bulk.writer()).add_items(item)
        )
    finally:
        await bulk.close()
    with open_store(place.url) as store:

        def listing() -> float:
            times = []
            for _ in range(REPEATS):
                start = time.perf_counter()
                page = list_sessions(store, limit=50)
                times.append(time.perf_counter() - start)
                assert len({s.session_id for s in page.sessions}) == 50 and page.cursor
            updated = [s.updated_at for s in page.sessions]
            assert updated == sorted(updated, reverse=True), "not newest first"
            return _median_ms(times)

        fresh = listing()
        analyzed = listing() if _analyze(place) else "-"
    row = {"target": f"sdk-ours-{place.backend}", "sessions": count, "listed": 50}
    return row | {"ms": fresh, "analyzed_ms": analyzed}


def _analyze(place: Place) -> bool:
    """ANALYZE a PostgreSQL place's records table, as autovacuum does within a minute or so
    of a bulk load (until then the planner has no statistics); ``False`` elsewhere."""
    if place.backend != "postgres":
        return False
    with servers.pg_connect() as conn:
        conn.execute(f'ANALYZE "{place.tag.replace("-", "_")}".agent_checkpoints')
    return True


async def adk_listing(target: AdkTarget, count: int) -> dict[str, Any]:
    """Ours: the newest 50, a page; ADK's own services: every session of the user (they have
    no page to ask for)."""
    seeder = target
    if target.ours is not None:  # seeded through the bulk settings, listed with the normal ones
        bulk = Ours(target.ours.place, bulk=True)
        seeder = AdkTarget(target.name, target.service, bulk)
    service = seeder.make()
    try:
        await _seed(count, lambda i: service.create_session(app_name=APP, user_id=USER), tasks=8)
    finally:
        await _close(service)
        if seeder.ours is not None and seeder is not target:
            await seeder.ours.close()

    async def listing() -> tuple[float, int]:
        times = []
        for _ in range(REPEATS):
            reader, store = await target.cold()
            try:
                start = time.perf_counter()
                if target.ours is not None:
                    page = await reader.list_session_page(app_name=APP, user_id=USER, limit=50)
                else:
                    page = await reader.list_sessions(app_name=APP, user_id=USER)
                times.append(time.perf_counter() - start)
                listed = len(page.sessions)
            finally:
                await _close(reader)
                if store is not None and target.ours is not None:
                    await target.ours.release(store)
        return _median_ms(times), listed

    fresh, listed = await listing()
    analyzed: float | str = "-"
    if target.ours is not None and _analyze(target.ours.place):
        analyzed, listed = await listing()
    if target.ours is not None:
        assert listed == 50, (target.name, listed)
    # a peer that lists fewer than it holds is reported as it is (the community Redis service
    # gathers a GET per session and runs out of its pool's connections)
    row = {"target": target.name, "sessions": count, "listed": listed}
    return row | {"ms": fresh, "analyzed_ms": analyzed}


# -- rows and tables ---------------------------------------------------------------------------


def _appends_row(name: str, times: list[float]) -> dict[str, Any]:
    tenth = _median_ms(times[5 : 5 + WINDOW])
    last = _median_ms(times[-WINDOW:])
    return {
        "target": name,
        "items": len(times),
        "total_s": sum(times),
        "tenth_ms": tenth,
        "last_ms": last,
        "ratio": last / tenth,
    }


def _newest_row(name: str, n: int, newest: list[float], ten: list[float]) -> dict[str, Any]:
    a, b = _median_ms(newest), _median_ms(ten)
    return {"target": name, "of": n, "newest_ms": a, "ten_ms": b, "ratio": a / b}


def _table(title: str, rows: list[dict[str, Any]], columns: list[tuple[str, str]]) -> str:
    out = [f"\n### {title}\n", "| " + " | ".join(h for h, _ in columns) + " |"]
    out.append("|" + "---|" * len(columns))
    for row in rows:
        cells = []
        for _, field in columns:
            value = row.get(field, "-")
            cells.append(
                f"{value:,.3g}"
                if isinstance(value, float)
                else f"{value:,}"
                if isinstance(value, int)
                else str(value)
            )
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


async def main(args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    cleanup = servers.Cleanup()
    s3_server: list[Any] = []

    def s3() -> Any:
        if not s3_server:
            s3_server.append(servers.start_s3(cleanup))
        return s3_server[0]

    wanted = [p for p in args.only.split(",") if p]

    def chosen(name: str) -> bool:
        return not wanted or any(fnmatch.fnmatch(name, p) for p in wanted)

    results: dict[str, list[dict[str, Any]]] = {"appends": [], "newest": [], "listing": []}
    opened: list[Ours] = []

    def ours(backend: str) -> Ours:
        opened.append(Ours(Place(backend, cleanup, s3)))
        return opened[-1]

    try:
        backends = args.backends.split(",")
        places = {backend: ours(backend) for backend in backends}
        sdk = [t for t in sdk_targets(backends, places, cleanup) if chosen(t.name)]
        adk = [t for t in adk_targets(backends, places, cleanup) if chosen(t.name)]
        for target in [*sdk, *adk]:
            servers.log(f"(1) appends: {target.name}")
            if isinstance(target, SdkTarget):
                results["appends"].append(await sdk_appends(target, args.items))
            else:
                results["appends"].append(await adk_appends(target, args.items))
        for target in [*sdk, *adk]:
            servers.log(f"(2) newest ten of {args.events:,}: {target.name}")
            if isinstance(target, SdkTarget):
                results["newest"].append(await sdk_newest(target, args.events))
            else:
                results["newest"].append(await adk_newest(target, args.events))
        listed = ("redis", "postgres")
        for target in sdk if args.sessions else []:
            if target.ours is not None and target.ours.place.backend in listed:
                servers.log(f"(3) listing of {args.sessions:,}: {target.name}")
                place = Place(target.ours.place.backend, cleanup, s3)
                results["listing"].append(await sdk_listing(place, args.sessions))
        for target in adk if args.sessions else []:
            if target.ours is not None:
                if target.ours.place.backend not in listed:
                    continue
                target = AdkTarget(target.name, target.service, ours(target.ours.place.backend))
            elif target.name == "adk-database-sqlite":
                continue
            count = args.sessions if target.ours is not None else args.peer_sessions
            servers.log(f"(3) listing of {count:,}: {target.name}")
            results["listing"].append(await adk_listing(target, count))
    finally:
        for place in opened:
            await place.close()
        cleanup.run()
    return results


def report(results: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> str:
    return "\n".join(
        (
            _table(
                f"(1) one item or event at a time to {args.items:,}",
                results["appends"],
                [
                    ("target", "target"),
                    ("total s", "total_s"),
                    ("10th ms", "tenth_ms"),
                    ("last ms", "last_ms"),
                    ("last ÷ 10th", "ratio"),
                ],
            ),
            _table(
                f"(2) the newest 10 of {args.events:,} against a 10-long session's whole read",
                results["newest"],
                [
                    ("target", "target"),
                    ("newest 10 ms", "newest_ms"),
                    ("10-long ms", "ten_ms"),
                    ("ratio", "ratio"),
                ],
            ),
            _table(
                "(3) listing sessions (ours: the newest 50; ADK's own: all, no page)",
                results["listing"],
                [
                    ("target", "target"),
                    ("sessions", "sessions"),
                    ("listed", "listed"),
                    ("ms, right after the load", "ms"),
                    ("ms, after ANALYZE", "analyzed_ms"),
                ],
            ),
        )
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--events", type=int, default=3000)
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--peer-sessions", type=int, default=10_000)
    parser.add_argument("--backends", default="memory,disk,redis,postgres,s3")
    parser.add_argument("--only", default="", help="target name patterns, comma separated")
    parser.add_argument("--json", default="")
    arguments = parser.parse_args()
    started = time.time()
    found = asyncio.run(main(arguments))
    print(report(found, arguments))
    print(f"\n{time.time() - started:,.0f} s; {os.uname().nodename}; load {os.getloadavg()}")
    if arguments.json:
        Path(arguments.json).write_bytes(orjson.dumps(found, option=orjson.OPT_INDENT_2))
