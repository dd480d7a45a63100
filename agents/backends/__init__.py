"""Generation backends behind :class:`agentenvs.agents.policy.Policy`: transformers, vLLM,
OpenAI-compatible.

Each module imports its heavy dependency only when a policy is built, so importing any of them
is cheap and works where that dependency is absent.
"""
