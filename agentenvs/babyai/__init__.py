"""BabyAI-Text-v0: minigrid's BabyAI levels behind AgentBoard's text interface.

``levels`` holds AgentGym's 40-level table, task ids and splits; ``text`` the view description,
action list and action expansion; ``fields`` the observation parser; ``env`` the
:class:`BabyAITextEnv` environment. minigrid (the ``babyai`` extra) is imported when the
environment is made (a missing one is a :class:`~agentenvs.registration.MissingDependencyError`
naming the extra); this package imports without it.

Its other parts (docs/architecture.md): the scripted expert in ``expert.py`` here; the prompts
in :mod:`agentenvs.agents.prompts.babyai`; the benchmark protocol entries in
:mod:`agentenvs.agents.protocols`; the speed benchmark in
:mod:`agentenvs.benchmarks.speed.babyai`.
"""

from __future__ import annotations

from agentenvs.babyai.env import BabyAITextEnv
from agentenvs.babyai.fields import parse_fields
from agentenvs.babyai.levels import FAMILIES, LEVELS, STUDY_LEVELS, Level
from agentenvs.babyai.text import View, find_path, read_view, run_primitives

__all__ = [
    "FAMILIES",
    "LEVELS",
    "STUDY_LEVELS",
    "BabyAITextEnv",
    "Level",
    "View",
    "find_path",
    "parse_fields",
    "read_view",
    "run_primitives",
]
