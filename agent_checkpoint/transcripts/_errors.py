"""The interchange layer's errors; they live in ``agent_checkpoint.errors`` with the rest."""

from ..errors import (
    DivergedError,
    EmptyTranscriptError,
    MalformedTranscriptError,
    TranscriptError,
    TranscriptNotFoundError,
    UnrecognizedFormatError,
)

__all__ = [
    "DivergedError",
    "EmptyTranscriptError",
    "MalformedTranscriptError",
    "TranscriptError",
    "TranscriptNotFoundError",
    "UnrecognizedFormatError",
]
