"""ALFWorld sessions that share per-game data cannot affect each other.

The sessions of a game share one planner library copy (each holds its own state id in the
library's state registry, :mod:`agentenvs.alfworld.planner`), one parsed game file and the fast
path's per-game translations (:mod:`agentenvs.alfworld.shared`). Interleaved play in several
sessions must say exactly what each session says when it plays alone: every observation,
admissible list, reward and win, through resets, invalid commands, snapshots, restores and plans.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

pytest.importorskip("alfworld", reason="ALFWorld-v0 needs the alfworld extra (make install)")
pytest.importorskip("textworld")

from agentenvs.alfworld import ALFWorldEnv, planner  # noqa: E402

STEPS = 10
_TEST_GAMES = (0, 1)  # indices into task_ids("test")


def _task(index: int) -> str:
    env = ALFWorldEnv()
    task_id = env.task_ids("test")[index]
    env.close()
    return task_id


def _script(task_id: str, seed: int) -> list[str]:
    """A seeded walk's commands (one in five invalid), drawn from a session playing alone."""
    env = ALFWorldEnv(max_turns=10**6)
    _, info = env.reset(options={"task_id": task_id})
    rng = random.Random(seed)
    commands = []
    for _ in range(STEPS):
        if rng.random() < 0.2:
            command = "juggle the fridge 1"
        else:
            command = rng.choice(info["admissible_actions"])
        commands.append(command)
        _, _, terminated, _, info = env.step(command)
        if terminated:
            break
    env.close()
    return commands


def _record(obs: str, reward: float, info: dict[str, Any]) -> tuple:
    return obs, reward, info["won"], info["valid"], tuple(info["admissible_actions"])


def _alone(task_id: str, commands: list[str]) -> list[tuple]:
    env = ALFWorldEnv(max_turns=10**6)
    obs, info = env.reset(options={"task_id": task_id})
    trace = [(obs, tuple(info["admissible_actions"]))]
    for command in commands:
        obs, reward, _, _, info = env.step(command)
        trace.append(_record(obs, reward, info))
    env.close()
    return trace


def test_interleaved_sessions_of_one_game_say_what_each_says_alone():
    task_id = _task(_TEST_GAMES[0])
    scripts = [_script(task_id, seed) for seed in (1, 2, 3)]
    expected = [_alone(task_id, s) for s in scripts]
    envs = [ALFWorldEnv(max_turns=10**6) for _ in scripts]
    traces: list[list[tuple]] = []
    for env in envs:
        obs, info = env.reset(options={"task_id": task_id})
        traces.append([(obs, tuple(info["admissible_actions"]))])
    for n in range(max(len(s) for s in scripts)):
        for k in (2, 0, 1) if n % 2 else (0, 1, 2):  # a different order each round
            if n < len(scripts[k]):
                obs, reward, _, _, info = envs[k].step(scripts[k][n])
                traces[k].append(_record(obs, reward, info))
    for env in envs:
        env.close()
    assert traces == expected


def test_a_reset_restore_or_plan_in_one_session_leaves_the_other_where_it_was():
    task_id = _task(_TEST_GAMES[0])
    script = _script(task_id, 7)
    expected = _alone(task_id, script)
    half = len(script) // 2
    a, b = ALFWorldEnv(max_turns=10**6), ALFWorldEnv(max_turns=10**6)
    a.reset(options={"task_id": task_id})
    for command in script[:half]:
        a.step(command)
    b.reset(options={"task_id": task_id})
    b.step(script[0])
    snapshot = a.snapshot()
    b.reset(options={"task_id": task_id})  # back to the initial state: a stays where it is
    plan_b = b.plan()
    assert a.admissible_actions() == list(expected[half][-1])
    for command in script[half:]:
        b.step(command)  # b plays a's future first
    b.restore(snapshot)
    trace = []
    for command in script[half:]:
        obs, reward, _, _, info = a.step(command)
        trace.append(_record(obs, reward, info))
    assert trace == expected[half + 1 :]
    trace = []
    for command in script[half:]:
        obs, reward, _, _, info = b.step(command)  # the restored copy of a says the same
        trace.append(_record(obs, reward, info))
    assert trace == expected[half + 1 :]
    fresh = ALFWorldEnv()
    fresh.reset(options={"task_id": task_id})
    assert plan_b == fresh.plan()  # planned from b's initial state, not from a's
    for env in (a, b, fresh):
        env.close()


def test_sessions_of_two_games_and_reused_library_copies():
    first, second = (_task(i) for i in _TEST_GAMES)
    scripts = {first: _script(first, 11), second: _script(second, 12)}
    expected = {t: _alone(t, s) for t, s in scripts.items()}
    a, b = ALFWorldEnv(max_turns=10**6), ALFWorldEnv(max_turns=10**6)
    for _ in range(2):  # the second round switches games: each copy is released and reused
        traces = {}
        for env, task_id in ((a, first), (b, second)):
            obs, info = env.reset(options={"task_id": task_id})
            traces[task_id] = [(obs, tuple(info["admissible_actions"]))]
        for n in range(max(len(s) for s in scripts.values())):
            for env, task_id in ((a, first), (b, second)):
                if n < len(scripts[task_id]):
                    obs, reward, _, _, info = env.step(scripts[task_id][n])
                    traces[task_id].append(_record(obs, reward, info))
        assert traces == expected
        first, second = second, first
        a, b = b, a
    a.close()
    b.close()


def test_sessions_of_one_game_share_one_library_copy_parsed_game_and_entity_records():
    task_id = _task(_TEST_GAMES[0])
    warm = ALFWorldEnv()
    warm.reset(options={"task_id": task_id})
    copies = planner.library_copies()
    envs = [ALFWorldEnv() for _ in range(8)]
    for env in envs:
        env.reset(options={"task_id": task_id})
        env.step("look")
    assert planner.library_copies() == copies  # the game's copy, not one per session
    pddls = [env._engine._pddl for env in [warm, *envs]]
    assert len({id(p._game_data) for p in pddls}) == 1  # one parsed game file
    assert len({id(p._entity_infos) for p in pddls}) == 1  # one set of entity records
    for env in [warm, *envs]:
        env.close()
