"""S3 requests per store operation, counted on the boto3 client (as ``tests/test_s3_segments.py``
counts them) against a SeaweedFS server started here. Prints a markdown table: requests by kind
for a first put, a later full put, an append, a get (by the writer and by another process),
a listing page, a delete, and a get of a longer history (60 messages of 1 KB, which the store
keeps partly in pieces). Background deletes (what a write supersedes) are counted too,
after ``flush()``, in their own column.

    .venv/bin/python benchmarks/s3_requests.py
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from servers import Cleanup, S3Server, s3_drop_bucket, start_s3, unique

from agent_checkpoint import Store
from agent_checkpoint._model import Message
from agent_checkpoint.backends._s3 import S3Backend
from agent_checkpoint.testing import checkpoint

COUNTED = ("put_object", "get_object", "head_object", "delete_object", "delete_objects",
           "list_objects_v2", "copy_object")  # fmt: skip
SHORT = {"put_object": "PUT", "get_object": "GET", "head_object": "HEAD",
         "delete_object": "DELETE", "delete_objects": "DELETE (bulk)",
         "list_objects_v2": "LIST", "copy_object": "COPY"}  # fmt: skip


class Recording:
    """The boto3 client, counting the object requests made through it."""

    def __init__(self, client: Any) -> None:
        self.inner = client
        self.calls: list[str] = []
        self.background: list[str] = []
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)
        if name not in COUNTED:
            return method

        def call(**kwargs: Any) -> Any:
            later = "cleanup" in threading.current_thread().name  # the backend's janitor
            with self._lock:
                (self.background if later else self.calls).append(SHORT[name])
            return method(**kwargs)

        return call

    def take(self) -> tuple[list[str], list[str]]:
        with self._lock:
            taken = self.calls, self.background
            self.calls, self.background = [], []
        return taken


def describe(calls: list[str]) -> str:
    counts = Counter(calls)
    return ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items())) or "none"


def history(n: int, pad: int = 0) -> tuple[Message, ...]:
    return tuple(
        Message(("user", "assistant")[i % 2], f"message {i} " + "x" * pad) for i in range(n)
    )


def measure(server: S3Server) -> list[tuple[str, list[str], list[str]]]:
    client = server.client()
    bucket = unique("requests-")
    client.create_bucket(Bucket=bucket)
    rows: list[tuple[str, list[str], list[str]]] = []
    try:
        recording = Recording(client)
        backend = S3Backend(recording, bucket, "p")
        store = Store(backend)
        base = checkpoint("count")
        store.put(base.evolve(history=history(1)), key="warm")  # the bucket check, once
        backend.flush()
        recording.take()

        def row(what: str, step: Any) -> None:
            recording.take()
            step()
            backend.flush()
            other.backend.flush()  # type: ignore[attr-defined]
            rows.append((what, *recording.take()))

        other = Store(S3Backend(recording, bucket, "p"))
        row(
            "first put on a new backend object (new key)",
            lambda: other.put(base.evolve(history=history(10)), key="n"),
        )

        row(
            "first put (new key, 10 messages)",
            lambda: store.put(base.evolve(history=history(10)), key="k"),
        )
        row(
            "append (one message more)",
            lambda: store.put(base.evolve(history=history(11)), key="k"),
        )
        row(
            "later full put (history rewritten)",
            lambda: store.put(base.evolve(history=history(5)), key="k"),
        )
        row(
            "create_only put (new key)",
            lambda: store.put(base.evolve(history=history(3)), key="c", create_only=True),
        )
        row(
            "if_revision put (append)",
            lambda: store.put(base.evolve(history=history(6)), key="k", if_revision=3),
        )
        row("get (the writer)", lambda: store.get("k"))
        row("get (another process)", lambda: other.get("k"))
        row(
            "put by another process (full)",
            lambda: other.put(base.evolve(history=history(7)), key="k"),
        )
        row(
            "append by another process", lambda: other.put(base.evolve(history=history(8)), key="k")
        )
        for i in range(30):
            store.put(base.evolve(history=history(2)), key=f"l{i}")
        backend.flush()
        row("list page (limit 20 of 33)", lambda: store.list(limit=20))
        row("delete", lambda: store.delete("c"))
        for n in range(1, 61):
            store.put(base.evolve(history=history(n, 1000)), key="long")
        backend.flush()
        row("get of 60 KB of history (another process)", lambda: other.get("long"))
        store.close()
        other.close()
    finally:
        s3_drop_bucket(client, bucket)
        client.close()
    return rows


def main() -> None:
    cleanup = Cleanup()
    try:
        rows = measure(start_s3(cleanup))
    finally:
        cleanup.run()
    print("| operation | requests on the call's path | deleted in the background |")
    print("|---|---|---|")
    for what, inline, background in rows:
        print(f"| {what} | {len(inline)}: {describe(inline)} | {describe(background)} |")


if __name__ == "__main__":
    main()
