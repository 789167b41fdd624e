"""The seed package and we save the same transcript to turn files that compare as identical."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent_checkpoint.transcripts import Turn, diff_turns, find_fork, open_transcript

Ran = Any  # the conftest's Ran(code, out, err)
Fixture = Callable[[str], Path]


def test_our_save_diffs_identical_to_the_seeds(
    run: Callable[..., Ran], fixture_path: Fixture, tmp_path: Path
) -> None:
    ours = tmp_path / "ours.jsonl"
    assert run("save", str(fixture_path("seed/weather.json")), "-o", str(ours)).code == 0
    seed = str(fixture_path("seed/weather.seed.jsonl"))
    ran = run("diff", str(ours), seed)
    assert (ran.code, ran.out) == (0, "identical\n")
    merged = tmp_path / "merged.jsonl"
    ran = run("merge", seed, str(ours), "-o", str(merged))
    assert ran.code == 0, ran.err
    assert ran.out == f"Merged 8 turns from {seed} + 0 new turns from {ours} into {merged}\n"


def test_a_results_name_is_not_compared_but_its_content_is(
    saved: Callable[..., list[Turn]], fixture_path: Fixture
) -> None:
    seed = list(open_transcript(fixture_path("seed/weather.seed.jsonl")))
    ours = saved(fixture_path("seed/weather.json"))
    assert ours[3].tool_results[0]["name"] == "get_weather"  # type: ignore[index]
    assert "name" not in seed[3].tool_results[0]  # type: ignore[index]
    assert find_fork(seed, ours).shared == 8
    changed = ours[3].evolve(tool_results=({"tool_call_id": "call_paris", "content": "19°C"},))
    result = diff_turns(seed, [*ours[:3], changed, *ours[4:]])
    assert [(d.op, d.a_index, d.fields) for d in result.differences] == [
        ("change", 3, ("tool_results",))
    ]
    assert json.loads(json.dumps(result.to_json()))["identical"] is False
