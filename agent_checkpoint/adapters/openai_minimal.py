"""Reference adapter: a minimal OpenAI chat agent that resumes from ``AGENT_CHECKPOINT_INIT``.

    agent-checkpoint resume ckpt.jsonl -- \\
        python -m agent_checkpoint.adapters.openai_minimal "What about Italy?" --print-request

``--print-request`` prints the request instead of sending it (no ``openai`` package needed).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from typing import Any

from agent_checkpoint.transcripts import read_turns, turns_to_messages


def prior_messages() -> list[dict[str, Any]]:
    """The conversation to resume as OpenAI chat messages; none without a checkpoint."""
    path = os.environ.get("AGENT_CHECKPOINT_INIT")
    turns = list(read_turns(path)) if path else []
    messages = [{"role": "system", "content": t.content} for t in turns if t.role == "system"]
    history, _ = turns_to_messages(turns)  # string content, tool calls, tool results
    for m in history:
        message: dict[str, Any] = {"role": m.role, "content": m.content}
        if m.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name,
                 "arguments": json.dumps(dict(c.args))}} for c in m.tool_calls
            ]  # fmt: skip
        if m.role == "tool":
            message["tool_call_id"] = m.tool_call_id
        messages.append(message)
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
