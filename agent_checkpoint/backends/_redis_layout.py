"""How the Redis backend encodes records and index positions into the key layout drawn in
``_redis.py``: the sorted-set members that order records by ``saved_at``, the ZRANGEBYLEX bounds of
a query, the summary fields of a record's hash, and which index serves which filters.
"""

from __future__ import annotations

from typing import Any

from ..errors import UnsupportedOperationError
from ._base import Query, Summary

__all__ = [
    "FIELDS",
    "LOADED",
    "OFFSET",
    "SAVED_AT_LIMIT",
    "WIDTH",
    "bounds",
    "candidate_indexes",
    "clamp",
    "newest",
    "oldest",
    "opt",
    "page_filter",
    "summary_of",
    "write_args",
]

OFFSET = 10**16
SAVED_AT_LIMIT = 10**15
"""``saved_at`` values this layout can order, in either direction from the epoch."""
WIDTH = 17
FIELDS = ("run", "at", "own", "agent", "phase", "iter", "msgs", "size", "rev")
LOADED = ["body", "head", "segs", *FIELDS]


def newest(saved_at: int) -> str:
    return f"{OFFSET - 1 - saved_at:0{WIDTH}d}"


def oldest(saved_at: int) -> str:
    return f"{saved_at + OFFSET:0{WIDTH}d}"


def clamp(value: int) -> int:
    # Stored values lie within ±SAVED_AT_LIMIT; clamping bounds just outside keeps every
    # comparison's outcome and the encodings 17 digits wide.
    return max(-SAVED_AT_LIMIT - 2, min(SAVED_AT_LIMIT + 2, value))


def bounds(query: Query) -> tuple[bytes, bytes]:
    """ZRANGEBYLEX min and max for the query's time window and keyset position."""
    lows: list[tuple[str, bool]] = []  # (bound, exclusive)
    high = "+"
    before = None if query.saved_before is None else clamp(query.saved_before)
    since = None if query.saved_since is None else clamp(query.saved_since)
    if query.oldest_first:
        if since is not None:
            lows.append((oldest(since), False))
        if before is not None:
            high = "(" + oldest(before)
        if query.after is not None:
            lows.append((oldest(clamp(query.after[0])) + ":" + query.after[1], True))
    else:
        if before is not None:
            lows.append((newest(before - 1), False))
        if since is not None:
            high = "(" + newest(since - 1)
        if query.after is not None:
            lows.append((newest(clamp(query.after[0])) + ":" + query.after[1], True))
    if not lows:
        return b"-", high.encode()
    bound, exclusive = max(lows, key=lambda b: (b[0].encode(), b[1]))
    return ("(" if exclusive else "[").encode() + bound.encode(), high.encode()


def candidate_indexes(base: str, query: Query) -> list[str]:
    """The indexes that apply the query's filters (ZCARD decides between several)."""
    if query.oldest_first:
        return [base + "old"]
    candidates = []
    if query.owner is not None:
        candidates.append(base + "o:" + query.owner)
    if query.agent_id is not None:
        candidates.append(base + "a:" + query.agent_id)
    if query.phase is not None:
        candidates.append(base + "p:" + query.phase)
    elif query.failed:
        candidates.append(base + "f")
    return candidates or [base + "new"]


def page_filter(base: str, index: str) -> tuple[str, int, str]:
    """The PAGE script's position field, column and wanted value for a batch of ``index``."""
    position = "so" if index == base + "old" else "sn"
    kind, _, value = index[len(base) :].partition(":")
    column, wanted = {"o": (4, "=" + value), "a": (5, "=" + value), "p": (6, "=" + value)}.get(
        kind, (6, "") if kind == "f" else (0, "")
    )
    return position, column, wanted


def opt(value: str | None) -> str:
    return "" if value is None else "=" + value


def summary_of(key: str, row: list[Any]) -> Summary:
    run, at, own, agent, phase, iteration, msgs, size, rev = row

    def text(value: bytes | None) -> str | None:
        return None if value is None else value.decode()

    return Summary(
        key=key,
        run_id=run.decode(),
        saved_at=int(at),
        owner=text(own),
        agent_id=text(agent),
        failure_phase=text(phase),
        failure_iteration=None if iteration is None else int(iteration),
        message_count=int(msgs),
        size=int(size),
        revision=int(rev),
    )


def write_args(
    base: str, s: Summary, create_only: bool, revision: int | None, body: bytes, ttl_ms: int
) -> list[Any]:
    """The WRITE script's arguments 1 to 15 for the record summed up by ``s``."""
    if not -SAVED_AT_LIMIT <= s.saved_at <= SAVED_AT_LIMIT:
        raise UnsupportedOperationError(
            f"record {s.key!r} has savedAt {s.saved_at}; the redis store orders values "
            f"within ±{SAVED_AT_LIMIT} ms of the epoch"
        )
    return [
        base,
        s.key,
        "1" if create_only else "0",
        "" if revision is None else str(revision),
        body,
        newest(s.saved_at),
        oldest(s.saved_at),
        opt(s.owner),
        opt(s.agent_id),
        opt(s.failure_phase),
        s.run_id,
        str(s.saved_at),
        str(s.message_count),
        opt(None if s.failure_iteration is None else str(s.failure_iteration)),
        str(ttl_ms),
    ]
