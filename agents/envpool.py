"""The former home of the rollout's environment runners; kept so that its names still work.

Everything now lives in :mod:`agentenvs.agents.envworkers` (in-process, process-pool and Ray pools with
per-episode fault isolation). ``InProcessEnvs`` and ``ProcessPoolEnvs`` are the in-process and
process pools under their old names; ``make_env_runner(env_id, workers, env_kwargs)`` accepts
what ``make_env_pool`` accepts (a worker count or a spec string such as ``"ray:4"``).
"""

from __future__ import annotations

from typing import Any

from agentenvs.agents.envworkers import EnvFailure, EnvWorkerPool, InProcessPool, ProcessPool, make_env_pool

__all__ = ["EnvFailure", "InProcessEnvs", "ProcessPoolEnvs", "make_env_runner"]

InProcessEnvs = InProcessPool
ProcessPoolEnvs = ProcessPool


def make_env_runner(
    env_id: str, workers: int | str = 0, env_kwargs: dict[str, Any] | None = None
) -> EnvWorkerPool:
    """In-process environments for ``workers == 0``, else the pool ``workers`` names."""
    return make_env_pool(env_id, workers, env_kwargs)
