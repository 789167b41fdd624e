"""Reference adapters: agents that resume from ``AGENT_CHECKPOINT_INIT``.

The contract is one environment variable: when ``agent-checkpoint resume`` runs an agent, it
sets ``AGENT_CHECKPOINT_INIT`` to the absolute path of a canonical turn JSONL file. An agent
that seeds its message list from that file, then appends its new turn, resumes. These
modules use only the public API.
"""

__all__: list[str] = []
