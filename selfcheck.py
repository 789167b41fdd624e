"""Self-check: save a synthetic transcript, resume it through the reference adapter, and
assert that the resumed agent's first request holds every prior turn, in order, plus the
new one. Plain ``assert`` statements, no test framework; it runs the real CLI.

    python selfcheck.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

TRANSCRIPT: list[dict[str, Any]] = [
    {"role": "user", "content": "What's the weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "18°C and cloudy"},
    {"role": "assistant", "content": "It is 18°C and cloudy in Paris."},
    {"role": "user", "content": "Should I take an umbrella?"},
    {"role": "assistant", "content": "Cloudy, not rainy: no umbrella needed."},
]
"""Six turns, one of them a tool round trip."""

DANGLING: dict[str, Any] = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    ],
}
"""A call the run was killed during: it has no result, so ``save`` must leave it out."""


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "agent_checkpoint", *args], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        transcript, checkpoint = Path(tmp) / "transcript.json", Path(tmp) / "checkpoint.jsonl"
        transcript.write_text(json.dumps([*TRANSCRIPT, DANGLING]), encoding="utf-8")
        saved = cli("save", str(transcript), "-o", str(checkpoint))
        assert saved.stdout == f"Saved 6 turns to {checkpoint}\n", saved.stdout
        assert "call_2" in saved.stderr, "the dropped dangling call is reported"
        adapter = [sys.executable, "-m", "agent_checkpoint.adapters.openai_minimal"]
        resumed = cli("resume", str(checkpoint), "--", *adapter, "Thanks!", "--print-request")
        request = json.loads(resumed.stdout)
        messages = request["messages"]
        assert request["model"] == "gpt-4o-mini"
        assert [m["role"] for m in messages] == [
            *(m["role"] for m in TRANSCRIPT),
            "user",
        ], messages
        call = messages[1]["tool_calls"][0]
        assert call["id"] == "call_1" and call["function"]["name"] == "get_weather"
        assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
        assert messages[2] == {
            "role": "tool",
            "content": "18°C and cloudy",
            "tool_call_id": "call_1",
        }
        for sent, original in zip(messages, TRANSCRIPT, strict=False):
            assert sent["content"] == (original["content"] or ""), (sent, original)
        assert messages[-1] == {"role": "user", "content": "Thanks!"}
    print("selfcheck: ok (6 turns saved, a dangling call dropped, resumed with 7 messages)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
