"""TextCraft-v0 speed: reset, step, snapshot and restore, and restore against replay.

Targets (issue: the foundation): step <= 50 us, reset <= 2 ms, restore >= 10x faster than
replaying 20 steps from reset. The step is measured over the actions of an expert episode
(gets, crafts and inventory checks), restarted from a snapshot whenever it ends.
"""

from __future__ import annotations

from agentenvs.textcraft import TextCraftEnv
from agentenvs.textcraft.env import _load_task
from agents.experts.textcraft import TextCraftExpert
from benchmarks.timing import SpeedRow, per_call, snapshot_times, step_time_along

__all__ = ["bench"]

ENV_ID = "TextCraft-v0"
REPLAY_STEPS = 20


def _expert_actions(env: TextCraftEnv, task_id: str) -> list[str]:
    expert = TextCraftExpert()
    env.reset(options={"task_id": task_id})
    actions = []
    while not env.done:
        actions.append(expert.act(env).action)
        env.step(actions[-1])
    return actions


def bench(quick: bool = False) -> list[SpeedRow]:
    budget = 0.1 if quick else 0.5
    env = TextCraftEnv(max_turns=10**6)
    task_id = "adapt/0"  # a depth-4 task: 21 expert actions
    actions = _expert_actions(env, task_id)[:-1]  # all but the winning craft
    actions = (actions + ["inventory"] * REPLAY_STEPS)[: max(REPLAY_STEPS, len(actions))]

    test_ids = env.task_ids("test")
    for t in test_ids:  # warm the per-task cache, as a long run would have it
        env.reset(options={"task_id": t})
    cursor = iter(range(10**12))
    reset = per_call(
        lambda: env.reset(options={"task_id": test_ids[next(cursor) % len(test_ids)]}),
        budget_s=budget,
    )

    def cold_reset() -> None:
        _load_task.cache_clear()
        env.reset(options={"task_id": test_ids[next(cursor) % len(test_ids)]})

    cold = per_call(cold_reset, budget_s=budget)

    step_time = step_time_along(env, task_id, actions, budget_s=budget)
    snapshot, restore, replay = snapshot_times(
        env, task_id, actions[:REPLAY_STEPS], budget_s=budget
    )
    return [
        SpeedRow(
            ENV_ID, "reset (test split, cached tasks)", reset, target="<= 2 ms", met=reset <= 2e-3
        ),
        SpeedRow(
            ENV_ID, "reset (first time a task is built)", cold, target="<= 2 ms", met=cold <= 2e-3
        ),
        SpeedRow(
            ENV_ID,
            "step (expert episode actions)",
            step_time,
            target="<= 50 us",
            met=step_time <= 50e-6,
        ),
        SpeedRow(ENV_ID, "snapshot", snapshot),
        SpeedRow(
            ENV_ID,
            f"restore (after {REPLAY_STEPS} steps)",
            restore,
            f"replay {REPLAY_STEPS} steps from reset",
            replay,
            ">= 10x faster",
            replay / restore >= 10,
        ),
    ]
