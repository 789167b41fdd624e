"""Codex CLI rollouts (``~/.codex/sessions/**/rollout-*.jsonl``) to canonical turns.

Each line is ``{timestamp, type, payload}``: ``session_meta``, ``turn_context`` (its
``model`` labels the assistant turns that follow), ``event_msg`` (UI events that repeat the
items; ignored), ``response_item`` (a Responses item, read as in ``_openai_responses``) and
``compacted``. Turns before the last ``compacted`` line are left out: the rollout goes on from
its ``replacement_history`` when it has one, else from its summary ``message`` as a user
turn marked ``_meta.compactionSummary``. Older rollouts, whose lines are bare Responses items after a first metadata line,
read the same way. Lines that are not JSON are skipped and reported, as for any log.
"""

from __future__ import annotations

from collections.abc import Iterator

from ._jsonio import JsonLines
from ._openai_responses import ITEM_TYPES, PROVIDER, ItemGrouper
from ._turns import Turn, iso_utc

__all__ = ["ROLLOUT_TYPES", "read_rollout"]

ROLLOUT_TYPES = frozenset(
    {"session_meta", "response_item", "event_msg", "turn_context", "compacted"}
)


def read_rollout(lines: JsonLines, *, ts: str, notes: list[str]) -> Iterator[Turn]:
    """Turns of the conversation a rollout holds now (after its last compaction)."""
    last_compaction = 0
    for line in lines:
        if isinstance(line.value, dict) and line.value.get("type") == "compacted":
            last_compaction = line.number
    grouper = ItemGrouper(ts=ts, notes=notes)
    model: str | None = None
    for line in lines:
        record = line.value
        if not isinstance(record, dict):
            continue
        kind, payload = record.get("type"), record.get("payload")
        at = iso_utc(record.get("timestamp"))
        if kind == "turn_context" and isinstance(payload, dict):
            if isinstance(payload.get("model"), str):
                model = payload["model"]
            continue
        if line.number < last_compaction:
            continue
        if kind == "compacted" and isinstance(payload, dict):
            history = payload.get("replacement_history")
            if isinstance(history, list):
                for k, item in enumerate(history, 1):
                    where = f"line {line.number}, item {k}"
                    yield from grouper.feed(item, ts=at, model=model, where=where)
            else:
                summary = payload.get("message")
                yield Turn(
                    "user",
                    summary if isinstance(summary, str) else "",
                    provider=PROVIDER,
                    ts=at or ts,
                ).as_compaction_summary()
            notes.append(f"started at the compaction on line {line.number}; earlier turns left out")
        elif kind == "response_item" and isinstance(payload, dict):
            yield from grouper.feed(payload, ts=at, model=model, where=f"line {line.number}")
        elif "payload" not in record and isinstance(kind, str) and kind in ITEM_TYPES:
            yield from grouper.feed(record, ts=at, model=model, where=f"line {line.number}")
    yield from grouper.close()
    notes.extend(lines.notes)
