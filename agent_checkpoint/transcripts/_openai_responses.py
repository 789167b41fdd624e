"""OpenAI Responses items to canonical turns (Codex rollouts reuse this).

Consecutive model-side items (``reasoning``, assistant ``message``, ``function_call``,
``custom_tool_call``, ``local_shell_call``, ``computer_call`` and server tool items such as
``web_search_call``) form one assistant turn whose ``content`` is the list of those items as
sent; the client-side calls among them are its ``tool_calls``. Each ``*_output`` item becomes
a tool turn. A user, system or developer message (typed or the short ``{role, content}``
form) becomes a turn of that role with the message's own ``content``. A record that is not
a Responses item (a chat message or a canonical turn, read with the wrong ``--format``) is
refused, naming it, rather than wrapped whole into an assistant turn.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from .._model import Json
from ._errors import MalformedTranscriptError
from ._turns import CallNames, Turn, make_tool_call, make_tool_result

__all__ = [
    "CALL_TYPES",
    "ITEM_TYPES",
    "OUTPUT_TYPES",
    "PROVIDER",
    "ItemGrouper",
    "turns_from_items",
]

PROVIDER = "openai"
CALL_TYPES = frozenset({"function_call", "custom_tool_call", "local_shell_call", "computer_call"})
OUTPUT_TYPES = frozenset(
    {
        "function_call_output",
        "custom_tool_call_output",
        "local_shell_call_output",
        "computer_call_output",
    }
)
SERVER_TYPES = frozenset(
    {
        "web_search_call",
        "file_search_call",
        "image_generation_call",
        "code_interpreter_call",
        "mcp_call",
        "mcp_list_tools",
        "mcp_approval_request",
        "tool_search_call",
    }
)
SKIPPED_TYPES = frozenset({"item_reference", "ghost_snapshot"})
"""Items that point into server or tool state rather than carry conversation."""
ITEM_TYPES = CALL_TYPES | OUTPUT_TYPES | SERVER_TYPES | SKIPPED_TYPES | {"message", "reasoning"}
ROLES = frozenset({"user", "assistant", "system", "developer"})
_FOREIGN_KEYS = ("tool_calls", "tool_results", "tool_call_id")
"""Keys of chat messages and canonical turns that no Responses item has."""


def _call(item: dict[str, Json]) -> dict[str, Json]:
    kind = item["type"]
    id_ = item.get("call_id", item.get("id"))
    id_ = id_ if isinstance(id_, str) else ""
    name = item.get("name")
    name = name if isinstance(name, str) else ""
    if kind == "function_call":
        return make_tool_call(id_, name, item.get("arguments", "{}"))
    if kind == "custom_tool_call":
        return make_tool_call(id_, name, {"input": item.get("input")}, custom=True)
    if kind == "local_shell_call":
        return make_tool_call(id_, "local_shell", {"action": item.get("action")})
    return make_tool_call(id_, "computer", {"action": item.get("action")})


class ItemGrouper:
    """Feeds items one at a time and yields turns as soon as they are complete."""

    def __init__(self, *, ts: str, notes: list[str] | None = None) -> None:
        self.default_ts = ts
        self.notes = notes if notes is not None else []
        self.names = CallNames()
        self._content: list[Json] = []
        self._calls: list[dict[str, Json]] = []
        self._ts: str | None = None
        self._model: str | None = None
        self._skipped: dict[str, int] = {}
        self._fed = 0

    def feed(
        self,
        item: Json,
        *,
        ts: str | None = None,
        model: str | None = None,
        where: str | None = None,
    ) -> Iterator[Turn]:
        """Turns completed by ``item`` (a Responses item or short-form message); ``where``
        names it in errors (default: ``item N``, counting the items fed)."""
        self._fed += 1
        where = where or f"item {self._fed}"
        if not isinstance(item, dict):
            raise MalformedTranscriptError(
                f"{where} is not a Responses item (a {type(item).__name__})"
            )
        kind = item.get("type", "message" if "role" in item else None)
        if not isinstance(kind, str):
            raise MalformedTranscriptError(f"{where} needs a `type` (or a `role`)")
        foreign = next((k for k in _FOREIGN_KEYS if k in item), None)
        if foreign is not None:
            raise MalformedTranscriptError(
                f"{where} is not a Responses item: it has `{foreign}`, as a chat message or a "
                "turn does"
            )
        ts = ts or self.default_ts
        role = item.get("role")
        role = role if isinstance(role, str) else ""
        if kind == "message" and role not in ROLES:
            raise MalformedTranscriptError(
                f"{where} is not a Responses message (needs a role among "
                f"{', '.join(sorted(ROLES))})"
            )
        if kind == "message" and role != "assistant":
            yield from self.flush()
            yield Turn(role, item.get("content"), provider=PROVIDER, ts=ts)
        elif kind in OUTPUT_TYPES:
            yield from self.flush()
            id_ = item.get("call_id")
            id_ = id_ if isinstance(id_, str) else ""
            output = item.get("output")
            result = make_tool_result(id_, output, name=self.names.take(id_))
            yield Turn("tool", output, tool_results=(result,), provider=PROVIDER, ts=ts)
        elif kind in SKIPPED_TYPES:
            self._skipped[kind] = self._skipped.get(kind, 0) + 1
        else:
            if not self._content:
                self._ts, self._model = ts, model
                self.names.new_batch()
            self._content.append(item)
            if kind in CALL_TYPES:
                call = _call(item)
                self._calls.append(call)
                function = call["function"]
                if isinstance(function, dict):
                    self.names.add(str(call["id"]), str(function["name"]))

    def flush(self) -> Iterator[Turn]:
        """The assistant turn being gathered, if any."""
        if self._content:
            yield Turn(
                "assistant",
                self._content,
                tool_calls=tuple(self._calls) or None,
                provider=PROVIDER,
                model=self._model,
                ts=self._ts,
            )
        self._content, self._calls = [], []

    def close(self) -> Iterator[Turn]:
        yield from self.flush()
        for kind, count in self._skipped.items():
            self.notes.append(f"skipped {count} {kind} item(s): they carry no conversation")


def turns_from_items(
    items: Iterable[Json],
    *,
    instructions: Json = None,
    model: str | None = None,
    ts: str,
    notes: list[str] | None = None,
) -> Iterator[Turn]:
    """Turns of a Responses ``input`` (and ``output``) item list, in order."""
    if isinstance(instructions, str) and instructions:
        yield Turn("system", instructions, provider=PROVIDER, ts=ts)
    grouper = ItemGrouper(ts=ts, notes=notes)
    for item in items:
        yield from grouper.feed(item, model=model)
    yield from grouper.close()
