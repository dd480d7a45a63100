"""Does RL learn? A held-out, multi-seed learning benchmark (TextCraft, Sokoban).

    python -m agentenvs.benchmarks.learning.check --preset textcraft --out docs/learning-check
    python -m agentenvs.benchmarks.learning.check --preset sokoban --out results/learning/sokoban
    make learning-check                      # both, resumable

The code is :mod:`agentenvs.benchmarks.learning`; this module is its command line and keeps the
names other code imports (the trainer tests' fixture builds its model with
:func:`build_check_model`).
"""

from __future__ import annotations

from agentenvs.benchmarks.learning.model import (
    CHECK_MODEL,
    SHORT_THOUGHT,
    build_check_model,
    build_env_model,
    expert_trajectories,
)
from agentenvs.benchmarks.learning.run import main, run_benchmark
from agentenvs.benchmarks.learning.settings import PRESETS, BenchSettings, preset

__all__ = [
    "CHECK_MODEL",
    "PRESETS",
    "SHORT_THOUGHT",
    "BenchSettings",
    "build_check_model",
    "build_env_model",
    "expert_trajectories",
    "main",
    "preset",
    "run_benchmark",
]

if __name__ == "__main__":
    raise SystemExit(main())
