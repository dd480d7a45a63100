"""Vector environments: ``gym.make_vec(ID, n, vectorization_mode=...)`` with
the defaults gives, in both modes, the observations, rewards, flags and infos of ``n`` single
environments reset with the same seeds, autoreset included (Gymnasium's default ``NEXT_STEP``:
the step after an episode ends resets that environment and returns its reset observation with
reward 0; the action sent for it is ignored)."""

from __future__ import annotations

import importlib.util
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import agentenvs  # noqa: F401  (registers the ids)
from agentenvs.registration import make

N_ENVS = 2
SEED = 11

# per environment: actions cycled through (env i starts at action i), steps (past max_turns)
CASES: dict[str, tuple[list[str], int]] = {
    "TextCraft-v0": (
        ["inventory", "get 1 oak logs", "get 2 x", "craft 4 oak planks using 1 oak logs"],
        33,
    ),
    "BabyAI-Text-v0": (["turn left", "move forward", "check available actions", "drop", "xyz"], 23),
    "WebShop-v0": (
        ["search[shoes]", "click[next >]", "click[< prev]", "click[back to search]"],
        18,
    ),
    "Sokoban-v0": (["up", "left", "down", "right", "jump"], 20),
}
REQUIRES = {"BabyAI-Text-v0": "minigrid", "WebShop-v0": "jinja2", "ALFWorld-v0": "alfworld"}


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value


def _info_of(batched: dict[str, Any], i: int) -> dict[str, Any]:
    """Environment ``i``'s info out of Gymnasium's batched info (a key is present where its
    ``_key`` mask is set)."""
    out: dict[str, Any] = {}
    for key, value in batched.items():
        if key.startswith("_"):
            continue
        mask = batched.get(f"_{key}")
        if mask is not None and not mask[i]:
            continue
        out[key] = _info_of(value, i) if isinstance(value, dict) else _plain(value[i])
    return out


def _single_runs(env_id: str, actions: list[str], steps: int) -> list[list[tuple]]:
    runs = []
    for i in range(N_ENVS):
        env = make(env_id)
        obs, info = env.reset(seed=SEED + i)
        run = [(obs, info)]
        for t in range(steps):
            if env.done:  # NEXT_STEP autoreset: this step resets
                obs, info = env.reset()
                run.append((obs, 0.0, False, False, info))
            else:
                run.append(env.step(actions[(t + i) % len(actions)]))
        runs.append(run)
        env.close()
    return runs


def _vector_runs(env_id: str, mode: str, actions: list[str], steps: int) -> list[list[tuple]]:
    vec = gym.make_vec(env_id, num_envs=N_ENVS, vectorization_mode=mode)
    try:
        obs, info = vec.reset(seed=SEED)
        runs = [[(obs[i], _info_of(info, i))] for i in range(N_ENVS)]
        for t in range(steps):
            batch = [actions[(t + i) % len(actions)] for i in range(N_ENVS)]
            obs, reward, terminated, truncated, info = vec.step(batch)
            for i in range(N_ENVS):
                runs[i].append(
                    (
                        obs[i],
                        float(reward[i]),
                        bool(terminated[i]),
                        bool(truncated[i]),
                        _info_of(info, i),
                    )
                )
    finally:
        vec.close()
    return runs


def _check(env_id: str, actions: list[str], steps: int) -> None:
    module = REQUIRES.get(env_id)
    if module and importlib.util.find_spec(module) is None:
        pytest.skip(f"{env_id} needs {module}")
    expected = _single_runs(env_id, actions, steps)
    assert any(r[2] or r[3] for run in expected for r in run[1:]), "no episode ended: no autoreset"
    for mode in ("sync", "async"):
        got = _vector_runs(env_id, mode, actions, steps)
        for i in range(N_ENVS):
            for t, (want, have) in enumerate(zip(expected[i], got[i], strict=True)):
                assert have == tuple(want), (mode, i, t)


@pytest.mark.parametrize("env_id", sorted(CASES))
def test_make_vec_equals_single_environments(env_id: str) -> None:
    _check(env_id, *CASES[env_id])


@pytest.mark.slow
def test_make_vec_equals_single_environments_alfworld() -> None:
    _check("ALFWorld-v0", ["look", "inventory", "go to cabinet 1", "examine cabinet 1"], 53)


def test_async_shared_memory_keeps_unicode_text() -> None:
    # Sokoban's box on target is "√"; the text crosses processes through shared memory as is
    vec = gym.make_vec("Sokoban-v0", num_envs=2, vectorization_mode="async")
    try:
        obs, _ = vec.reset(seed=0)
        single = [make("Sokoban-v0").reset(seed=s)[0] for s in (0, 1)]
        assert isinstance(obs, tuple) and list(obs) == single
    finally:
        vec.close()


def test_same_step_autoreset_and_spawn_context() -> None:
    # Gymnasium's other autoreset mode: the reset observation comes in the ending step, the
    # final one in info["final_obs"]; sync and async (spawned workers) agree
    kwargs = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}
    runs = []
    for mode, extra in (("sync", {}), ("async", {"context": "spawn"})):
        vec = gym.make_vec(
            "TextCraft-v0", 2, vectorization_mode=mode, vector_kwargs=kwargs | extra, max_turns=2
        )
        try:
            vec.reset(seed=SEED)
            vec.step(["inventory", "get 1 x"])
            obs, _, _, truncated, info = vec.step(["get 2 x", "inventory"])
        finally:
            vec.close()
        assert truncated.all() and all(o.startswith("Crafting commands:") for o in obs)
        runs.append((obs, tuple(info["final_obs"])))
    assert runs[0] == runs[1]
    assert runs[0][1] == ("Could not find x", "Inventory: You are not carrying anything.")
