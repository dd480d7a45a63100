"""RL trainers: GRPO, DAPO, GRPO-MIS, GiGPO, PTGPO and Prefix-GRPO over one loop.

``agentenvs train rl --algo NAME --model DIR --out DIR [key=value ...]``; see
:mod:`agentenvs.train.rl.config` for the settings and the algorithm presets, :mod:`agentenvs.train.rl.trainer` for
the loop, :mod:`agentenvs.train.rl.rollout` / :mod:`agentenvs.train.rl.batch` / :mod:`agentenvs.train.rl.update` for its parts.
"""

from __future__ import annotations

from agentenvs.train.rl.batch import StepRow, build_rows, collate, compute_advantages
from agentenvs.train.rl.config import ALGORITHMS, AlgoSpec, RLConfig
from agentenvs.train.rl.rollout import Episode, RolloutFailureError, collect_episodes
from agentenvs.train.rl.starts import QueryStart, StartStream, TaskStart, load_query_starts
from agentenvs.train.rl.trainer import RLTrainer, WeightSync, train_rl
from agentenvs.train.rl.update import ppo_update, recompute_old_log_probs, token_log_probs

__all__ = [
    "ALGORITHMS",
    "AlgoSpec",
    "Episode",
    "QueryStart",
    "RLConfig",
    "RLTrainer",
    "RolloutFailureError",
    "StartStream",
    "StepRow",
    "TaskStart",
    "WeightSync",
    "build_rows",
    "collate",
    "collect_episodes",
    "compute_advantages",
    "load_query_starts",
    "ppo_update",
    "recompute_old_log_probs",
    "token_log_probs",
    "train_rl",
]
