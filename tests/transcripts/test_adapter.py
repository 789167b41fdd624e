"""The reference adapter sends everything a checkpoint holds, or says on stderr what it cannot."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

Ran = Any  # the conftest's Ran(code, out, err)
Run = Callable[..., Ran]
Fixture = Callable[[str], Path]
ADAPTER = (sys.executable, "-m", "agent_checkpoint.adapters.openai_minimal")


def request(run: Run, *resume_args: str) -> tuple[list[dict[str, Any]], str]:
    """The messages the adapter would send when resumed, and what was said on stderr."""
    ran = run("resume", *resume_args, "--", *ADAPTER, "next?", "--print-request")
    assert ran.code == 0, ran.err
    messages: list[dict[str, Any]] = json.loads(ran.out)["messages"]
    assert messages[-1] == {"role": "user", "content": "next?"}
    return messages[:-1], ran.err


def test_developer_and_system_messages_and_images_reach_the_request_in_place(
    run: Run, fixture_path: Fixture
) -> None:
    messages, err = request(run, str(fixture_path("transcripts/openai_chat_developer_image.json")))
    assert messages == [
        {"role": "developer", "content": "Answer in French."},
        {"role": "system", "content": "You are a cook."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What dish is this?"},
                {
                    "type": "image_url",
                    "image_url": {"url": "https://example.com/dish.jpg", "detail": "low"},
                },
            ],
        },
        {"role": "assistant", "content": "C'est une ratatouille."},
        {"role": "developer", "content": "From now on answer in English."},
        {"role": "user", "content": "And the wine?"},
        {"role": "assistant", "content": "A Côtes de Provence rosé."},
    ]
    assert "openai_minimal" not in err  # nothing left out


def test_what_a_chat_message_cannot_hold_is_named_on_stderr(
    run: Run, fixture_path: Fixture
) -> None:
    messages, err = request(run, str(fixture_path("transcripts/anthropic_image_document.json")))
    assert messages == [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                {"type": "text", "text": "Total of this invoice?"},
            ],
        },
        {"role": "assistant", "content": "3 items."},
    ]
    notes = [line for line in err.splitlines() if line.startswith("openai_minimal: note: ")]
    assert notes == [
        "openai_minimal: note: not carried into the request: document block, at turn 2",
        "openai_minimal: note: not carried into the request: thinking block (a chat message "
        "holds none), at turn 3",
    ]


def test_short_form_responses_messages_are_sent_with_their_text(
    run: Run, fixture_path: Fixture
) -> None:
    messages, err = request(run, str(fixture_path("transcripts/openai_responses_short_form.json")))
    assert messages == [
        {"role": "user", "content": "What is 3+4?"},
        {"role": "assistant", "content": "Seven."},
        {"role": "user", "content": "And 5+6?"},
        {"role": "assistant", "content": "Eleven."},
    ]
    assert "openai_minimal" not in err


def test_short_form_responses_messages_keep_their_text_in_a_store(
    run: Run, fixture_path: Fixture, tmp_path: Path
) -> None:
    store = str(tmp_path / "store")
    path = str(fixture_path("transcripts/openai_responses_short_form.json"))
    ran = run("save", path, "--store", store, "--key", "sums")
    assert ran.code == 0, ran.err
    assert "content block without a type" not in ran.err
    assert ran.err == ""
    messages, _ = request(run, "--store", store, "sums")
    assert [m["content"] for m in messages] == ["What is 3+4?", "Seven.", "And 5+6?", "Eleven."]
