"""RL trainers: GRPO, DAPO, GRPO-MIS, GiGPO, PTGPO and Prefix-GRPO over one loop.

``agentenvs train rl --algo NAME --model DIR --out DIR [key=value ...]``; see
:mod:`train.rl.config` for the settings and the algorithm presets, :mod:`train.rl.trainer` for
the loop, :mod:`train.rl.rollout` / :mod:`train.rl.batch` / :mod:`train.rl.update` for its parts.
"""

from __future__ import annotations

from train.rl.batch import StepRow, build_rows, collate, compute_advantages
from train.rl.config import ALGORITHMS, AlgoSpec, RLConfig
from train.rl.rollout import Episode, collect_episodes
from train.rl.starts import QueryStart, StartStream, TaskStart, load_query_starts
from train.rl.trainer import RLTrainer, WeightSync, train_rl
from train.rl.update import ppo_update, recompute_old_log_probs, token_log_probs

__all__ = [
    "ALGORITHMS",
    "AlgoSpec",
    "Episode",
    "QueryStart",
    "RLConfig",
    "RLTrainer",
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
