"""The keys the integrations store their records under, and which of those records are the
integrations' own bookkeeping rather than runs. Plain strings: importing this module imports
no framework (the CLI's ``ls`` lists runs only, through ``is_internal``).

- LangGraph (``langgraph.py``): ``langgraph/<thread>/<namespace>/m/<lineage>`` is a thread's
  lineage, its messages and checkpoints: a run. ``langgraph/<thread>/<namespace>/c/<inverted
  checkpoint id>/w/<task id>`` holds the pending writes of one task: internal.
- ADK (``adk.py``): ``adk/<app>/<user>/<session id>`` is a session: a run.
  ``adk-state/<app>`` and ``adk-state/<app>/<user>`` hold app and user state: internal.
- OpenAI Agents SDK (``openai_agents.py``): ``openai-agents/<session id>`` is a session: a
  run. It keeps no other record.

Each ``/``-separated part is escaped (``%`` as ``%25``, ``/`` as ``%2F``), so a thread, app,
user or session id never adds a part. A key of another shape is a run, whoever wrote it.
"""

from __future__ import annotations

__all__ = [
    "ADK_SESSION_PREFIX",
    "ADK_STATE_PREFIX",
    "LANGGRAPH_PREFIX",
    "OPENAI_AGENTS_PREFIX",
    "is_internal",
]

LANGGRAPH_PREFIX = "langgraph/"
"""Every record of the LangGraph saver begins with it."""

ADK_SESSION_PREFIX = "adk/"
"""An ADK session's record is stored under ``ADK_SESSION_PREFIX + "<app>/<user>/<session>"``."""

ADK_STATE_PREFIX = "adk-state/"
"""ADK app state is stored under ``ADK_STATE_PREFIX + "<app>"``, user state under
``ADK_STATE_PREFIX + "<app>/<user>"``."""

OPENAI_AGENTS_PREFIX = "openai-agents/"
"""An Agents SDK session's record is stored under ``OPENAI_AGENTS_PREFIX + session_id``."""


def is_internal(key: str) -> bool:
    """Whether ``key`` is an integration's bookkeeping (LangGraph pending writes, ADK app or
    user state) rather than a run: ``agent-checkpoint ls`` leaves such records out unless
    given ``--all-records``."""
    if key.startswith(ADK_STATE_PREFIX):
        parts = key[len(ADK_STATE_PREFIX) :].split("/")
        return len(parts) <= 2 and all(parts)
    if key.startswith(LANGGRAPH_PREFIX):
        parts = key.split("/")
        return len(parts) == 7 and parts[3] == "c" and parts[5] == "w" and all(parts)
    return False
