"""Sokoban-v0: verl-agent's and RAGEN's text Sokoban, with gym-sokoban's rooms by seed.

``generator`` makes rooms (same seed, same room as verl-agent), ``board`` holds the move rule and
the text rendering, ``env`` is the :class:`SokobanEnv` text environment.

Its plugin (``plugin.py`` here, declared in ``pyproject.toml``'s ``agentenvs.envs`` entry
points) names its parts: the class, the scripted expert in ``expert.py`` here, the prompts in
:mod:`agentenvs.agents.prompts.sokoban` and the benchmark protocol entries in
:mod:`agentenvs.agents.protocols`. Its speed benchmark is
:mod:`agentenvs.benchmarks.speed.sokoban`.
"""

from __future__ import annotations

from agentenvs.plugins import lazy_exports

# name -> the module defining it, imported on first use (importing the package, e.g. for its
# plugin declaration, imports none of them)
_EXPORTS = {
    "ACTIONS": "board",
    "Board": "board",
    "parse_grid": "board",
    "SokobanEnv": "env",
    "Room": "generator",
    "RoomGenerationError": "generator",
    "generate_room": "generator",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
