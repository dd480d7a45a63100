"""RL trainers: GRPO, DAPO, GRPO-MIS, GiGPO, PTGPO and Prefix-GRPO over one loop.

``agentenvs train rl --algo NAME --model DIR --out DIR [key=value ...]``; see
:mod:`agentenvs.train.rl.algorithms` for the algorithm presets, :mod:`agentenvs.train.rl.config`
for the settings, :mod:`agentenvs.train.rl.trainer` for the loop,
:mod:`agentenvs.train.rl.rollout` / :mod:`agentenvs.train.rl.batch` /
:mod:`agentenvs.train.rl.update` for its parts.

The names below load with their module on first use, so the command line and the algorithm
table (:mod:`agentenvs.train.rl.cli`, :mod:`agentenvs.train.rl.algorithms`) import without torch.
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> the module of this package that defines it
_EXPORTS: dict[str, str] = {
    "ALGORITHMS": "algorithms",
    "AlgoSpec": "algorithms",
    "RLConfig": "config",
    "StepRow": "batch",
    "build_rows": "batch",
    "collate": "batch",
    "compute_advantages": "batch",
    "Episode": "rollout",
    "collect_episodes": "rollout",
    "RolloutFailureError": "rollout",
    "QueryStart": "starts",
    "StartStream": "starts",
    "TaskStart": "starts",
    "episode_starts": "starts",
    "load_query_starts": "starts",
    "RLTrainer": "trainer",
    "WeightSync": "trainer",
    "train_rl": "trainer",
    "ppo_update": "update",
    "recompute_old_log_probs": "update",
    "token_log_probs": "update",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
