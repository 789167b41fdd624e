"""Framework integrations, each behind its own extra; the core never imports a framework.

- ``agent_checkpoint.integrations.langgraph``: a LangGraph checkpoint saver
  (``pip install 'localab-checkpoint[langgraph]'``).
- ``agent_checkpoint.integrations.openai_agents``: an OpenAI Agents SDK session
  (``pip install 'localab-checkpoint[openai-agents]'``).

``agent_checkpoint.integrations.keys`` names the keys they store under, and which records are
their bookkeeping rather than runs, without importing any framework.

Each uses only the library's public API (``agent_checkpoint``): a third party could have
written it.
"""

__all__: list[str] = []  # each integration is its own module, imported by name
