"""The runtime's content fingerprints and identity namespace (spec §2.3, §2.4)."""

from __future__ import annotations

from .checkpoint import FoldedSpan, RunCheckpoint
from .messages import Message

_FNV_OFFSET = 2166136261
_FNV_PRIME = 16777619


def fnv1a(text: str) -> str:
    """32-bit FNV-1a over UTF-16 code units (JS ``charCodeAt``), lowercase hex, not padded."""
    h = _FNV_OFFSET
    data = text.encode("utf-16-le", "surrogatepass")
    for i in range(0, len(data), 2):
        h ^= data[i] | (data[i + 1] << 8)
        h = (h * _FNV_PRIME) & 0xFFFFFFFF
    return format(h, "x")


def span_fingerprint(messages: list[Message] | tuple[Message, ...]) -> str:
    """``spanFingerprint``: ``fnv1a`` of the messages as ``role:content`` joined by spaces."""
    return fnv1a(" ".join(f"{m.role}:{m.content}" for m in messages))


def folded_span_for(checkpoint: RunCheckpoint, message: Message) -> FoldedSpan | None:
    """The first folded span whose fingerprint is the summary message's; never by index."""
    fp = fnv1a(message.content)
    return next((s for s in checkpoint.folded or () if s.summary_fingerprint == fp), None)


def _segment(value: str | None) -> str:
    if not value:
        return "_"
    if value == "_":
        return "%5F"
    return value.replace("%", "%25").replace("/", "%2F")


def identity_namespace(tenant: str | None, principal: str | None, conversation_id: str) -> str:
    """``tenant/principal/conversationId``; absent is ``_``, and a literal ``_`` is ``%5F``."""
    return "/".join(_segment(v) for v in (tenant, principal, conversation_id))
