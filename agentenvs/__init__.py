"""agentenvs: long-horizon text benchmarks behind one Gymnasium text API.

``import agentenvs`` registers every environment id with Gymnasium (every environment plugin:
ours and those of other installed packages, docs/extending.md)::

    import gymnasium as gym
    import agentenvs

    env = gym.make("TextCraft-v0")
    obs, info = env.reset(options={"task_id": "adapt/0"})
"""

from __future__ import annotations

from agentenvs.core import (
    EpisodeOverError,
    MatchResult,
    MatchStatus,
    Outcome,
    ReplayResult,
    ResetNeededError,
    Snapshot,
    SnapshotError,
    StepResult,
    TextEnv,
    TextSpace,
    UnknownSplitError,
    UnknownTaskError,
)
from agentenvs.plugins import EnvPlugin, PluginError
from agentenvs.registration import ENVIRONMENTS, build_env, env_class, make, register_all

__version__ = "0.1.0"

__all__ = [
    "ENVIRONMENTS",
    "EnvPlugin",
    "EpisodeOverError",
    "MatchResult",
    "MatchStatus",
    "Outcome",
    "PluginError",
    "ReplayResult",
    "ResetNeededError",
    "Snapshot",
    "SnapshotError",
    "StepResult",
    "TextEnv",
    "TextSpace",
    "UnknownSplitError",
    "UnknownTaskError",
    "build_env",
    "env_class",
    "make",
    "register_all",
]

register_all()
