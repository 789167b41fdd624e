"""Reference adapter: a minimal OpenAI chat agent that resumes from ``AGENT_CHECKPOINT_INIT``.

    agent-checkpoint resume ckpt.jsonl -- \\
        python -m agent_checkpoint.adapters.openai_minimal "What about Italy?" --print-request

``--print-request`` prints the request instead of sending it (no ``openai`` package needed).
Anything in the checkpoint that a chat message cannot hold is named on stderr.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from typing import Any

from agent_checkpoint.transcripts import read_turns, turns_to_chat_messages


def prior_messages() -> list[dict[str, Any]]:
    """The conversation to resume as OpenAI chat messages; none without a checkpoint."""
    path = os.environ.get("AGENT_CHECKPOINT_INIT")
    if not path:
        return []
    # System and developer messages, images, tool calls and results, each in its place.
    messages, report = turns_to_chat_messages(read_turns(path))
    for line in report.lines(into="the request"):
        print(f"openai_minimal: note: {line}", file=sys.stderr)
    return messages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="openai_minimal")
    parser.add_argument("user_message")
    parser.add_argument("--model", default="gpt-4o-mini")
    parser.add_argument("--print-request", action="store_true", help="print it; no network")
    args = parser.parse_args(argv)
    messages = [*prior_messages(), {"role": "user", "content": args.user_message}]
    if args.print_request:
        body = ",\n".join("  " + json.dumps(m, ensure_ascii=False) for m in messages)
        print(f'{{"model": {json.dumps(args.model)}, "messages": [\n{body}\n]}}')
        return 0
    try:
        openai = importlib.import_module("openai")
    except ImportError:
        print("openai_minimal: error: pip install openai, or use --print-request", file=sys.stderr)
        return 2
    reply = openai.OpenAI().chat.completions.create(model=args.model, messages=messages)
    print(reply.choices[0].message.content)
    return 0


if __name__ == "__main__":
    sys.exit(main())
