"""BabyAI-Text-v0 speed: text step and reset against raw minigrid, macro steps, snapshots, expert.

Every row names what it is compared with in the same run: minigrid's own ``step``/``reset`` on
the same level (an unwrapped environment, no text), the raw primitives a macro action runs, or a
replay from reset. Targets: for primitive actions the text layer adds at most 3x the raw step's
cost, i.e. a text step takes at most 4x a raw step; random walks (uniformly random admissible
text actions, 100 per level, every 4th level) cost at most 3x the same primitives stepped on raw
minigrid, text and raw interleaved level by level.
"""

from __future__ import annotations

import contextlib
import io
import itertools
from collections.abc import Iterator

from agentenvs.babyai import BabyAITextEnv
from agentenvs.babyai.expert import BabyAIExpert
from agentenvs.babyai.text import LEFT, RIGHT
from agentenvs.benchmarks.speed.timing import SpeedRow, per_call

__all__ = ["STEP_OVERHEAD_TARGET", "TASK_ID", "bench", "logged_primitives"]

ENV_ID = "BabyAI-Text-v0"
TASK_ID = "agentgym/1804"  # GoToLocalS8N7, seed 45: a test task with seven objects in view
STEP_OVERHEAD_TARGET = 3.0  # the text layer may add at most this multiple of a raw step
WALK_TARGET = 3.0  # a random text walk may cost at most this multiple of its primitives raw
WALK_ACTIONS = 100


def bench(quick: bool = False) -> list[SpeedRow]:
    """The speed rows of BabyAI-Text-v0 (``quick``: shorter timing budgets)."""
    budget = 0.1 if quick else 0.5
    return [
        _walk_row(quick),
        _step_row(budget),
        _reset_row(budget),
        _macro_row(budget),
        _snapshot_row(budget),
        _expert_row(quick),
    ]


def _raw_env(env: BabyAITextEnv) -> object:
    import gymnasium as gym

    return gym.make(env.minigrid.spec.id, disable_env_checker=True).unwrapped


def _step_row(budget: float) -> SpeedRow:
    env = BabyAITextEnv(max_turns=10**9)
    env.reset(options={"task_id": TASK_ID})
    turns = itertools.cycle(["turn left", "turn right"])
    ours = per_call(lambda: env.step(next(turns)), budget_s=budget)
    raw = _raw_env(env)
    raw.reset(seed=45)
    primitives = itertools.cycle([LEFT, RIGHT])
    base = per_call(lambda: raw.step(next(primitives)), budget_s=budget)
    added = (ours - base) / base
    return SpeedRow(
        ENV_ID,
        "step (turn left/right)",
        ours,
        "minigrid step (same level)",
        base,
        f"text adds <= {STEP_OVERHEAD_TARGET:g}x raw (added {added:.2f}x)",
        added <= STEP_OVERHEAD_TARGET,
    )


def _text_walk(env: BabyAITextEnv, task_id: str, seed: int) -> tuple[float, list[int]]:
    """Seconds of a random admissible-action walk and the primitives it ran."""
    import random
    import time

    rng = random.Random(seed)
    env.reset(options={"task_id": task_id})
    with logged_primitives(env) as ran:
        start = time.perf_counter()
        for _ in range(WALK_ACTIONS):
            if env.done:
                break
            env.step(rng.choice(env.admissible_actions()))
        seconds = time.perf_counter() - start
    return seconds, ran


@contextlib.contextmanager
def logged_primitives(env: BabyAITextEnv) -> Iterator[list[int]]:
    """The primitive actions minigrid runs while the block steps ``env`` (logged through an
    instance attribute over minigrid's ``step``, removed after)."""
    mg = env.minigrid
    step = type(mg).step
    ran: list[int] = []

    def logged(action: int) -> object:
        ran.append(int(action))
        return step(mg, action)

    mg.step = logged
    try:
        yield ran
    finally:
        del mg.step


def _walk_row(quick: bool) -> SpeedRow:
    import time

    import gymnasium as gym

    from agentenvs.babyai.levels import level_of

    env = BabyAITextEnv(max_turns=10**9)
    text_total = raw_total = 0.0
    indices = range(0, 40, 8 if quick else 4)
    for index in indices:
        level, seed = level_of(index)
        raw = gym.make(level.minigrid_id, disable_env_checker=True).unwrapped
        best_text = best_raw = float("inf")
        for rep in range(2 if quick else 3):
            seconds, ran = _text_walk(env, f"agentgym/{index}", rep)
            with contextlib.redirect_stdout(io.StringIO()):
                raw.reset(seed=seed)
            start = time.perf_counter()
            for primitive in ran:
                raw.step(primitive)
            best_text, best_raw = (
                min(best_text, seconds),
                min(best_raw, time.perf_counter() - start),
            )
        text_total += best_text
        raw_total += best_raw
    n = len(indices)
    return SpeedRow(
        ENV_ID,
        f"random text walks ({n} levels x {WALK_ACTIONS} actions)",
        text_total / n,
        "the same primitives on raw minigrid",
        raw_total / n,
        f"<= {WALK_TARGET:g}x raw ({text_total / raw_total:.2f}x)",
        text_total <= WALK_TARGET * raw_total,
    )


def _reset_row(budget: float) -> SpeedRow:
    env = BabyAITextEnv()
    env.reset(options={"task_id": TASK_ID})
    ours = per_call(lambda: env.reset(options={"task_id": TASK_ID}), budget_s=budget)
    raw = _raw_env(env)

    def raw_reset() -> None:
        with contextlib.redirect_stdout(io.StringIO()):  # as the text env does
            raw.reset(seed=45)

    base = per_call(raw_reset, budget_s=budget)
    return SpeedRow(ENV_ID, "reset", ours, "minigrid reset(seed) (same level)", base)


def _macro_row(budget: float) -> SpeedRow:
    """``go to`` an object three cells away and back: the search plus the primitives it runs,
    against the same primitives stepped raw."""
    env = BabyAITextEnv(max_turns=10**9)
    env.reset(options={"task_id": TASK_ID})
    there = next(a for a in env.admissible_actions() if a.startswith("go to purple box"))
    path = env.expand(there)
    start = env.snapshot()

    def macro() -> None:
        env.restore(start)
        env.step(there)

    ours = per_call(macro, budget_s=budget)
    raw = _raw_env(env)
    raw.reset(seed=45)
    import copy

    raw_start = copy.deepcopy(raw)

    def raw_macro() -> None:
        sim = copy.deepcopy(raw_start)
        for primitive in path:
            sim.step(primitive)

    base = per_call(raw_macro, budget_s=budget)
    return SpeedRow(
        ENV_ID,
        f"restore + macro step ({len(path)} primitives)",
        ours,
        "copy + the same primitives raw",
        base,
    )


def _snapshot_row(budget: float) -> SpeedRow:
    env = BabyAITextEnv(max_turns=10**9)
    actions = ["turn left", "move forward", "turn right", "move forward", "turn left"]
    env.replay(TASK_ID, actions)
    snap = env.snapshot()
    ours = per_call(lambda: env.restore(env.snapshot()), budget_s=budget)
    base = per_call(lambda: env.replay(TASK_ID, actions), budget_s=budget)
    del snap
    return SpeedRow(ENV_ID, "snapshot + restore", ours, f"replay of {len(actions)} actions", base)


def _expert_row(quick: bool) -> SpeedRow:
    """One whole expert episode on the test task, per decision."""
    env = BabyAITextEnv()
    expert = BabyAIExpert()
    decisions = 0

    def episode() -> None:
        nonlocal decisions
        env.reset(options={"task_id": "agentgym/1805"})  # GoToObjMazeS7: several rooms
        expert.reset()
        decisions = 0
        while not env.done:
            env.step(expert.act(env).action)
            decisions += 1

    seconds = per_call(episode, budget_s=0.5 if quick else 2.0, repeats=3)
    return SpeedRow(ENV_ID, f"expert episode ({decisions} decisions)", seconds)
