"""A test-only older checkpoint format (version 0) and its upgrade step, for migrate tests."""

from __future__ import annotations

from typing import Any

import orjson

from agent_checkpoint import Migrations
from agent_checkpoint.backends import Record, Summary


def v0_to_v1(doc: dict[str, Any]) -> dict[str, Any]:
    return {
        "version": 1,
        "runId": doc["run_id"],
        "history": [{"role": m["role"], "content": m["text"]} for m in doc["messages"]],
        "lastCompletedIteration": doc.get("iteration", 0),
        "originalInput": {"message": doc["input"]},
    }


MIGRATIONS = Migrations({0: v0_to_v1})


def legacy_record(key: str, saved_at: int, text: str = "hi") -> Record:
    data = {
        "version": 0,
        "run_id": f"old-{key}",
        "messages": [{"role": "user", "text": text}],
        "input": text,
    }
    body = orjson.dumps({"format": "conversation-v1", "data": data, "savedAt": saved_at})
    return Record(
        Summary(key, f"old-{key}", saved_at, None, None, None, None, 1, len(body), 0), body
    )
