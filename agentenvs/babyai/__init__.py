"""BabyAI-Text-v0: minigrid's BabyAI levels behind AgentBoard's text interface.

``levels`` holds AgentGym's 40-level table, task ids and splits; ``text`` the view description,
action list and action expansion; ``fields`` the observation parser; ``env`` the
:class:`BabyAITextEnv` environment. minigrid (the ``babyai`` extra) is imported when the
environment is made (a missing one is a :class:`~agentenvs.registration.MissingDependencyError`
naming the extra); this package imports without it.

Its plugin (``plugin.py`` here, declared in ``pyproject.toml``'s ``agentenvs.envs`` entry
points) names its parts: the class, the scripted expert in ``expert.py`` here, the prompts in
:mod:`agentenvs.agents.prompts.babyai` and the benchmark protocol entries in
:mod:`agentenvs.agents.protocols`. Its speed benchmark is
:mod:`agentenvs.benchmarks.speed.babyai`.
"""

from __future__ import annotations

from agentenvs.plugins import lazy_exports

# name -> the module defining it, imported on first use (importing the package, e.g. for its
# plugin declaration, imports none of them)
_EXPORTS = {
    "BabyAITextEnv": "env",
    "parse_fields": "fields",
    "FAMILIES": "levels",
    "LEVELS": "levels",
    "STUDY_LEVELS": "levels",
    "Level": "levels",
    "View": "text",
    "find_path": "text",
    "read_view": "text",
    "run_primitives": "text",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
