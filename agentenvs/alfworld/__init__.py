"""ALFWorld-v0: ALFWorld's household text games on the real engine (alfworld 0.4.2, textworld 1.7).

``data`` finds game files (the shipped splits, unpacked and verified by ``cache``; the training
split from ``$ALFWORLD_DATA`` when set) and maps task ids to games; ``engine`` drives textworld's
PDDL environment with alfworld's wrappers, ``fastpath`` doing the engine's pure, repeated parses
and translations once per process (same text), ``restore`` remembering the texts of states played
before; ``versions`` turns a shipped game into one of the two
game versions (``alfworld-0.4``, the default, or ``agentgym``: the games as AgentGym serves them,
alfworld 0.3.3's); ``observation`` reads the text; ``env`` is :class:`ALFWorldEnv`.

Its plugin (``plugin.py`` here, declared in ``pyproject.toml``'s ``agentenvs.envs`` entry
points) names its parts: the class, the scripted expert in ``expert.py`` here, the prompts in
:mod:`agentenvs.agents.prompts.alfworld` and the benchmark protocol entries in
:mod:`agentenvs.agents.protocols`. Its speed benchmark is
:mod:`agentenvs.benchmarks.speed.alfworld`.
"""

from __future__ import annotations

from agentenvs.plugins import lazy_exports

# name -> the module defining it, imported on first use (importing the package, e.g. for its
# plugin declaration, imports none of them)
_EXPORTS = {
    "TASK_TYPES": "data",
    "ALFWorldDataError": "data",
    "GameRef": "data",
    "DEFAULT_MAX_TURNS": "env",
    "SPLITS": "env",
    "ALFWorldEnv": "env",
    "DEFAULT_GAME_VERSION": "versions",
    "GAME_VERSIONS": "versions",
    "UnknownGameVersionError": "versions",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
