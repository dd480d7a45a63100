"""KeyDoor-traps-v0, the credit testbed with trap forks: the environment contract, the step
credit of a trap entry (hand-checked), the expert, reproducible layouts, the plugin and the
validation preset."""

from __future__ import annotations

import pytest

from agentenvs.benchmarks.learning.envs import FATAL_CREDIT
from agentenvs.benchmarks.learning.keydoor import (
    FORK_CHANCE,
    KeyDoorTrapsEnv,
    KeyDoorTrapsExpert,
    State,
    layout,
    shortest_length,
)
from agentenvs.checker import check_contract


def _expert_actions(task_id: str) -> list[str]:
    env = KeyDoorTrapsEnv()
    env.reset(options={"task_id": task_id})
    expert, actions = KeyDoorTrapsExpert(), []
    while not env.done:
        actions.append(expert.act(env).action)
        env.step(actions[-1])
    assert env.won, (task_id, actions)
    return actions


def _first_fork(task_range: range, trap: str) -> tuple[str, int, str]:
    """(task, room, side exit) of the first layout whose first fork traps ``trap`` (``east`` or
    ``side``)."""
    for seed in task_range:
        lay = layout(seed, FORK_CHANCE)
        if lay.forks:
            room, side, trapped = lay.forks[0]
            if (trapped == "east") == (trap == "east"):
                return f"layout/{seed}", room, side
    raise AssertionError("no such layout")


def test_trap_entry_is_fatal_with_hand_checked_credit():
    task, room, side = _first_fork(range(100), "east")
    env = KeyDoorTrapsEnv()
    observation, _ = env.reset(options={"task_id": task})
    lay = env.layout
    assert lay.fork_of(room) == (side, "east")
    assert env.step(f"take {lay.door}")[4]["step_credit"] == 0.0
    for _ in range(room):
        observation, reward, terminated, truncated, info = env.step("east")
        assert info["step_credit"] == 0.0 and not terminated
    assert (
        f"{side}, east (trap), west" in observation or f"east (trap), west, {side}" in observation
    )
    assert "east (trap)" in observation and f"{side} (trap)" not in observation
    # L(s) = (rooms - room) + 1 before the trap; after it the room can no longer be won
    assert shortest_length(lay, env.state) == lay.rooms - room + 1
    observation, reward, terminated, truncated, info = env.step("east")
    assert (reward, terminated, info["won"], info["valid"]) == (0.0, True, False, True)
    assert info["step_credit"] == FATAL_CREDIT == -3.0
    assert observation == "You fall into a trap." and env.state.trapped
    assert shortest_length(lay, env.state) is None


def test_the_fork_s_other_way_leads_on_and_a_side_trap_is_fatal_too():
    task, room, side = _first_fork(range(100), "east")
    env = KeyDoorTrapsEnv()
    env.reset(options={"task_id": task})
    env.step(f"take {env.layout.door}")
    for _ in range(room):
        env.step("east")
    info = env.step(side)[4]
    assert info["step_credit"] == 0.0 and env.state == State(room + 1, False, env.layout.door)
    task, room, side = _first_fork(range(100), "side")
    env.reset(options={"task_id": task})
    for _ in range(room):  # without a key: each step east is a step away (-2)
        assert env.step("east")[4]["step_credit"] == -2.0
    observation, reward, terminated, _, info = env.step(side)
    assert (reward, terminated, info["step_credit"]) == (0.0, True, FATAL_CREDIT)


@pytest.mark.parametrize("split", ["train", "validation", "test"])
def test_expert_wins_every_layout_with_zero_credit(split):
    env = KeyDoorTrapsEnv()
    tasks = env.task_ids(split)[:60]
    forks = 0
    for task in tasks:
        actions = _expert_actions(task)
        env.reset(options={"task_id": task})
        forks += len(env.layout.forks)
        assert len(actions) == shortest_length(env.layout, State())
        credits = [env.step(a)[4]["step_credit"] for a in actions]
        assert credits == [0.0] * len(actions) and env.won
    assert forks > len(tasks)  # about 2.5 forks a layout at FORK_CHANCE 0.5


@pytest.mark.parametrize("task_id", ["layout/0", "layout/7", "layout/65537", "layout/65800"])
def test_contract_on_expert_wandering_and_trapped_episodes(task_id):
    split = {0: "train", 1: "test", 2: "validation"}[
        (int(task_id.split("/")[1]) >= 2**16) + (int(task_id.split("/")[1]) >= 2**16 + 200)
    ]
    actions = _expert_actions(task_id)
    check_contract(KeyDoorTrapsEnv(), task_id, actions, split=split)
    check_contract(KeyDoorTrapsEnv(), task_id, ["east", "west", "fly", "north"] + actions)
    lay = layout(int(task_id.split("/")[1]), FORK_CHANCE)
    room, side, trap = lay.forks[0]
    trapped = [f"take {lay.door}"] + ["east"] * room + [trap]
    check_contract(KeyDoorTrapsEnv(), task_id, trapped, split=split)


def test_layouts_are_reproducible_and_keep_keydoor_v0_elsewhere():
    for seed in list(range(200)) + list(range(2**16, 2**16 + 400)):
        plain, traps = layout(seed), layout(seed, FORK_CHANCE)
        assert traps == layout(seed, FORK_CHANCE)
        assert (traps.keys, traps.door, traps.rooms) == (plain.keys, plain.door, plain.rooms)
        fork_rooms = {f[0] for f in traps.forks}
        assert set(traps.alcoves) == {a for a in plain.alcoves if a[0] not in fork_rooms}
        assert all(1 <= f[0] < traps.rooms and f[2] in ("east", f[1]) for f in traps.forks)
    runs = []
    for _ in range(2):
        env = KeyDoorTrapsEnv()
        seen = [env.reset(options={"task_id": "layout/65800"})[0]]
        for action in ["take red", "north", "east", "south", "east", "east"]:
            if not env.done:
                seen.append(env.step(action)[0])
        runs.append(seen)
    assert runs[0] == runs[1] and "(trap)" in "".join(runs[0])


def test_registered_plugin_preset_and_prompt():
    from agentenvs.agents.registry import make_policy
    from agentenvs.agents.rollout import plan_episodes, run_rollouts
    from agentenvs.benchmarks.learning.plugins import register_benchmark_envs
    from agentenvs.benchmarks.learning.settings import preset, rl_env_id

    register_benchmark_envs()
    tasks = KeyDoorTrapsEnv().task_ids("validation")[:4]
    trajs = run_rollouts(make_policy("expert"), "KeyDoor-traps-v0", plan_episodes(tasks, 1))
    assert all(t.won for t in trajs)
    prompts = [m["content"] for t in trajs for m in t.messages if m["role"] == "user"]
    assert all("marked (trap) ends the episode" in p for p in prompts)
    assert any("(trap)" in p.split("current observation")[-1] for p in prompts)
    settings = preset("keydoor-traps-validation")
    assert settings.env_id == "KeyDoor-traps-v0" and settings.eval_split == "validation"
    assert rl_env_id(settings, "oracle") == "KeyDoor-traps-v0"


def test_hidden_traps_are_unmarked_fatal_and_the_expert_avoids_them():
    from agentenvs.benchmarks.learning.keydoor import (
        HIDDEN_FORK_CHANCE,
        KeyDoorHiddenTrapsEnv,
        KeyDoorHiddenTrapsExpert,
    )

    env = KeyDoorHiddenTrapsEnv()
    forks = 0
    for task in env.task_ids("validation")[:40] + env.task_ids("train")[:40]:
        observation, _ = env.reset(options={"task_id": task})
        lay = env.layout
        assert lay == layout(int(task.split("/")[1]), HIDDEN_FORK_CHANCE)
        forks += len(lay.forks)
        expert = KeyDoorHiddenTrapsExpert()
        while not env.done:
            observation, *_ = env.step(expert.act(env).action)
            assert "trap" not in observation
        assert env.won
        if lay.forks:  # the trap of the first fork, with the sign's key: lost, fatal
            room, side, trap = lay.forks[0]
            env.reset(options={"task_id": task})
            steps = [env.step(a) for a in [f"take {lay.door}"] + ["east"] * room]
            seen = steps[-1][0]
            assert "(trap)" not in seen and f"{side}, east, west" in seen
            assert [s[4]["step_credit"] for s in steps] == [0.0] * (room + 1)
            observation, reward, terminated, _, info = env.step(trap)
            assert (reward, terminated, info["step_credit"]) == (0.0, True, FATAL_CREDIT)
            check_contract(KeyDoorHiddenTrapsEnv(), task, [f"take {lay.door}"] + ["east"] * room)
    assert 60 <= forks <= 140  # about 1.25 a layout at HIDDEN_FORK_CHANCE 0.25 (88 here)
