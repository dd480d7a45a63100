"""Sokoban-v0: verl-agent's and RAGEN's text Sokoban, with gym-sokoban's rooms by seed.

``generator`` makes rooms (same seed, same room as verl-agent), ``board`` holds the move rule and
the text rendering, ``env`` is the :class:`SokobanEnv` text environment.

Its other parts (docs/architecture.md): the scripted expert in ``expert.py`` here; the prompts
in :mod:`agentenvs.agents.prompts.sokoban`; the benchmark protocol entries in
:mod:`agentenvs.agents.protocols`; the speed benchmark in
:mod:`agentenvs.benchmarks.speed.sokoban`.
"""

from __future__ import annotations

from agentenvs.sokoban.board import ACTIONS, Board, parse_grid
from agentenvs.sokoban.env import SokobanEnv
from agentenvs.sokoban.generator import Room, RoomGenerationError, generate_room

__all__ = [
    "ACTIONS",
    "Board",
    "Room",
    "RoomGenerationError",
    "SokobanEnv",
    "generate_room",
    "parse_grid",
]
