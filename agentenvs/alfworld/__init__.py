"""ALFWorld-v0: ALFWorld's household text games on the real engine (alfworld 0.4.2, textworld 1.7).

``data`` finds game files (the shipped splits, unpacked and verified by ``cache``; the training
split from ``$ALFWORLD_DATA`` when set) and maps task ids to games; ``engine`` drives textworld's
PDDL environment with alfworld's wrappers, ``fastpath`` doing the engine's pure, repeated parses
and translations once per process (same text), ``restore`` remembering the texts of states played
before; ``versions`` turns a shipped game into one of the two
game versions (``alfworld-0.4``, the default, or ``agentgym``: the games as AgentGym serves them,
alfworld 0.3.3's); ``observation`` reads the text; ``env`` is :class:`ALFWorldEnv`.

Its other parts (docs/architecture.md): the scripted expert in ``expert.py`` here; the prompts
in :mod:`agentenvs.agents.prompts.alfworld`; the benchmark protocol entries in
:mod:`agentenvs.agents.protocols`; the speed benchmark in
:mod:`agentenvs.benchmarks.speed.alfworld`.
"""

from __future__ import annotations

from agentenvs.alfworld.data import TASK_TYPES, ALFWorldDataError, GameRef
from agentenvs.alfworld.env import DEFAULT_MAX_TURNS, SPLITS, ALFWorldEnv
from agentenvs.alfworld.versions import (
    DEFAULT_GAME_VERSION,
    GAME_VERSIONS,
    UnknownGameVersionError,
)

__all__ = [
    "DEFAULT_GAME_VERSION",
    "DEFAULT_MAX_TURNS",
    "GAME_VERSIONS",
    "SPLITS",
    "TASK_TYPES",
    "ALFWorldDataError",
    "ALFWorldEnv",
    "GameRef",
    "UnknownGameVersionError",
]
