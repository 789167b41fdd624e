"""What the writer refuses, and why (``_writable.py``): the backend-independent half;
``StoreConformance`` holds every backend to the rest."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import orjson
import pytest

from agent_checkpoint import InvalidCheckpointError, open_store
from agent_checkpoint._writable import MAX_DEPTH, MAX_SAVED_AT, check_tree, dumps
from agent_checkpoint.testing import checkpoint


def nested(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


def test_the_limit_is_what_orjson_writes() -> None:
    assert orjson.dumps(nested(MAX_DEPTH))
    with pytest.raises(TypeError):
        orjson.dumps(nested(MAX_DEPTH + 1))
    assert dumps(nested(MAX_DEPTH)) == orjson.dumps(nested(MAX_DEPTH))
    with pytest.raises(InvalidCheckpointError, match=f"deeper than {MAX_DEPTH} levels"):
        dumps(nested(MAX_DEPTH + 1))


def test_no_nesting_exhausts_the_stack() -> None:
    deep = nested(200_000)
    with pytest.raises(InvalidCheckpointError, match=f"deeper than {MAX_DEPTH}"):
        check_tree(deep)
    with pytest.raises(InvalidCheckpointError, match=f"deeper than {MAX_DEPTH}"):
        open_store("memory://").put({**checkpoint().to_json(), "deep": deep}, key="k")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({1: "a"}, r"data.x has the key 1 \(int\); JSON object keys are strings"),
        (object(), "data.x is a object, which is not JSON"),
        ({"k": "\udc80"}, r"data.x.k holds a lone surrogate \(U\+DC80\)"),
        ([0, 2**70], r"data.x\[1\] is the integer 1180591620717411303424"),
    ],
)
def test_what_json_cannot_carry_is_refused_by_path(value: Any, message: str) -> None:
    with pytest.raises(InvalidCheckpointError, match=message):
        open_store("memory://").put({**checkpoint().to_json(), "x": value}, key="k")


def test_tuples_are_written_as_arrays() -> None:
    store = open_store("memory://")
    store.put({**checkpoint().to_json(), "x": (1, (2.5, "a"))}, key="k")
    assert store.get_json("k")["data"]["x"] == [1, [2.5, "a"]]  # type: ignore[index]


def test_the_latest_saved_at_is_one_every_listing_can_show() -> None:
    moment = datetime.fromtimestamp(MAX_SAVED_AT / 1000, tz=timezone.utc)
    assert moment.year == 9999 and (moment.month, moment.day) == (12, 31)
