"""Records as version 0.4 of the Redis backend stored a history in segments, written with raw
commands, for the tests that read, grow, overwrite and drop them through today's store."""

from __future__ import annotations

from typing import Any

import orjson

from agent_checkpoint._codec import encode_parts, join_parts
from agent_checkpoint._model import RunCheckpoint
from agent_checkpoint.backends._redis_layout import newest, oldest


def write_old_split_record(
    client: Any, prefix: str, key: str, ckpt: RunCheckpoint, *, principal: str
) -> bytes:
    """Store ``ckpt`` under ``key`` as version 0.4's write script laid out a record in
    segments: its hash with ``head``, ``dig`` and ``segs`` (no ``body``), its history in the
    list ``{P}:s:<key>`` (one segment per put, empty for a put that added no message), and its
    index entries; the bytes it assembles to."""
    saved_at = 1_700_000_000_000
    doc = {"format": "conversation-v1", "data": ckpt.to_json(), "savedAt": saved_at}
    messages = doc["data"]["history"]  # type: ignore[index]
    head, _ = encode_parts(doc, messages)
    segments = [orjson.dumps(m) for m in messages[:2]], [], [orjson.dumps(messages[2])]
    segments += tuple([orjson.dumps(m)] for m in messages[3:])
    listed = [b",".join(s) for s in segments]
    whole = join_parts(head, b",".join(s for s in listed if s))
    assert whole == orjson.dumps(doc)
    base = f"{{{prefix}}}:"
    sn, so = newest(saved_at), oldest(saved_at)
    client.hset(
        base + "r:" + key,
        mapping={
            "sn": sn,
            "so": so,
            "run": ckpt.run_id,
            "at": saved_at,
            "msgs": len(messages),
            "rev": 5,
            "head": head,
            "dig": "d" * 16,
            "segs": len(listed),
            "size": len(whole),
            "own": principal,
        },
    )
    client.rpush(base + "s:" + key, *listed)
    client.zadd(base + "new", {f"{sn}:{key}": 0})
    client.zadd(base + "old", {f"{so}:{key}": 0})
    client.zadd(base + "o:" + principal, {f"{sn}:{key}": 0})
    client.sadd(base + "ix", base + "o:" + principal)
    client.set(base + "rev", 5)
    return whole
