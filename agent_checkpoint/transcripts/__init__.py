"""The interchange: agent transcripts to canonical turn JSONL and run checkpoints, and back.

::

    from agent_checkpoint.transcripts import open_transcript, plan_integrity, write_turns

    transcript = open_transcript("session.jsonl")        # format detected by content
    plan = plan_integrity(transcript)                     # pass 1: ids and positions only
    write_turns("ckpt.jsonl", plan.apply(transcript))     # pass 2: streamed, atomic
    print(plan.report.lines(), transcript.notes)

Readers: Claude Code session logs, OpenAI chat messages, Anthropic messages, OpenAI
Responses items, Codex CLI rollouts, and the canonical turn JSONL itself (``FORMATS``).
``turns_to_checkpoint`` / ``checkpoint_to_turns`` convert to and from ``RunCheckpoint``,
``turns_to_chat_messages`` to the OpenAI chat messages an adapter sends;
``export_turns`` writes turns back in any of ``EXPORT_FORMATS`` (what a format cannot
hold reported); ``diff_turns`` aligns two conversations; ``find_fork`` and ``merged_turns`` merge them.
"""

from ._chat_messages import turns_to_chat_messages
from ._convert import (
    ConversionReport,
    NotCarried,
    checkpoint_to_turns,
    messages_to_turns,
    turns_to_checkpoint,
    turns_to_messages,
)
from ._detect import FORMATS, Detected, Format, detect
from ._diff import Difference, DiffResult, diff_turns
from ._errors import (
    DivergedError,
    EmptyTranscriptError,
    MalformedTranscriptError,
    TranscriptError,
    TranscriptNotFoundError,
    UnrecognizedFormatError,
)
from ._export import EXPORT_FORMATS, Exported, ExportFormat, export_turns, write_export
from ._integrity import (
    DANGLING_RESULT,
    IntegrityPlan,
    IntegrityReport,
    Policy,
    plan_integrity,
    repair,
)
from ._jsonio import MAX_RECORD_BYTES
from ._merge import Fork, Side, find_fork, merged_turns
from ._sources import Transcript, open_transcript
from ._turns import (
    TURN_KEYS,
    Turn,
    iso_utc,
    make_tool_call,
    make_tool_result,
    read_turns,
    turn_from_json,
    write_turns,
)

__all__ = [
    "DANGLING_RESULT",
    "EXPORT_FORMATS",
    "FORMATS",
    "MAX_RECORD_BYTES",
    "TURN_KEYS",
    "ConversionReport",
    "Detected",
    "DiffResult",
    "Difference",
    "DivergedError",
    "EmptyTranscriptError",
    "ExportFormat",
    "Exported",
    "Fork",
    "Format",
    "IntegrityPlan",
    "IntegrityReport",
    "MalformedTranscriptError",
    "NotCarried",
    "Policy",
    "Side",
    "Transcript",
    "TranscriptError",
    "TranscriptNotFoundError",
    "Turn",
    "UnrecognizedFormatError",
    "checkpoint_to_turns",
    "detect",
    "diff_turns",
    "export_turns",
    "find_fork",
    "iso_utc",
    "make_tool_call",
    "make_tool_result",
    "merged_turns",
    "messages_to_turns",
    "open_transcript",
    "plan_integrity",
    "read_turns",
    "repair",
    "turn_from_json",
    "turns_to_chat_messages",
    "turns_to_checkpoint",
    "turns_to_messages",
    "write_export",
    "write_turns",
]
