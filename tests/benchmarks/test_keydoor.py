"""The learning benchmark's credit testbed (KeyDoor-v0) and Sokoban with oracle step credit:
the environment contract, held-out colour pairs, the expert, the step credit of each kind of
action, and both registered as this process's plugins (played through the rollout code)."""

from __future__ import annotations

import json

import pytest

from agentenvs.benchmarks.learning.envs import FATAL_CREDIT, SokobanOracleEnv
from agentenvs.benchmarks.learning.keydoor import (
    COLORS,
    HELD_OUT_PAIRS,
    KeyDoorEnv,
    KeyDoorExpert,
    State,
    layout,
    shortest_length,
)
from agentenvs.benchmarks.learning.plugins import register_benchmark_envs
from agentenvs.checker import check_contract


def _expert_actions(env: KeyDoorEnv, task_id: str) -> list[str]:
    env.reset(options={"task_id": task_id})
    expert, actions = KeyDoorExpert(), []
    while not env.done:
        action = expert.act(env).action
        actions.append(action)
        env.step(action)
    assert env.won
    return actions


@pytest.mark.parametrize("task_id", ["layout/0", "layout/7", "layout/65536", "layout/65700"])
def test_contract_on_expert_and_wandering_episodes(task_id):
    env = KeyDoorEnv()
    split = "test" if int(task_id.split("/")[1]) >= 2**16 else "train"
    actions = _expert_actions(env, task_id)
    check_contract(KeyDoorEnv(), task_id, actions, split=split)
    check_contract(KeyDoorEnv(), task_id, ["east", "west", "fly", "north", "south"] + actions)


def test_held_out_colour_pairs_and_layouts():
    env = KeyDoorEnv()
    train, test = env.task_ids("train"), env.task_ids("test")
    validation = env.task_ids("validation")
    assert not set(train) & set(test) and len(test) == len(validation) == 200
    assert not (set(train) | set(test)) & set(validation)
    for seed in range(300):
        lay = layout(seed)
        assert not {(lay.door, k) for k in lay.keys} & HELD_OUT_PAIRS
        assert 4 <= lay.rooms <= 8 and len(set(lay.keys)) == len(lay.keys) in (2, 3)
    doors, distractors = set(), set()
    for task in test + validation:
        lay = layout(int(task.split("/")[1]))
        assert {(lay.door, k) for k in lay.keys} & HELD_OUT_PAIRS
    for seed in range(300):
        lay = layout(seed)
        doors.add(lay.door)
        distractors.update(k for k in lay.keys if k != lay.door)
    assert doors == distractors == set(COLORS)  # every colour in both roles in training
    assert layout(5) == layout(5)  # a task is the same layout every time


def test_step_credit_of_each_kind_of_action():
    env = KeyDoorEnv()
    env.reset(options={"task_id": "layout/3"})
    lay = env.layout
    wrong = next(k for k in lay.keys if k != lay.door)
    assert env.step("west")[4]["step_credit"] == -1.0  # no exit west of the hall: a lost turn
    assert env.step("east")[4]["step_credit"] == -2.0  # away from the keys
    assert env.step("west")[4]["step_credit"] == 0.0  # back: a move of a shortest plan
    info = env.step(f"take {wrong}")[4]
    assert info["step_credit"] == FATAL_CREDIT and info["valid"] is True
    assert env.step("east")[4]["step_credit"] == 0.0  # lost: nothing can change the outcome
    env.reset(options={"task_id": "layout/3"})
    credits = [env.step(a)[4]["step_credit"] for a in _expert_actions(KeyDoorEnv(), "layout/3")]
    assert credits == [0.0] * len(credits) and env.won
    assert shortest_length(lay, State()) == len(credits)


def test_wrong_key_at_the_door_ends_the_episode_unrewarded():
    env = KeyDoorEnv()
    env.reset(options={"task_id": "layout/11"})
    lay = env.layout
    env.step(f"take {next(k for k in lay.keys if k != lay.door)}")
    for _ in range(lay.rooms):
        env.step("east")
    observation, reward, terminated, truncated, info = env.step("open door")
    assert (reward, terminated, info["won"]) == (0.0, True, False)
    assert "does not fit" in observation


def test_oracle_sokoban_credit():
    env = SokobanOracleEnv()
    env.reset(options={"task_id": "seed/1"})
    from agentenvs.sokoban.expert import shortest_solution

    plan = shortest_solution(env.board)
    assert plan is not None
    credits = [env.step(move)[4]["step_credit"] for move in plan]
    assert credits == [0.0] * len(plan) and env.won
    env.reset(options={"task_id": "seed/1"})
    assert env.step("down")[4]["step_credit"] == -1.0  # the wall below the player: a lost turn
    assert env.step("up")[4]["step_credit"] == 0.0  # the box onto the target's column
    check_contract(SokobanOracleEnv(), "seed/1", list(plan))


def test_registered_plugins_play_through_the_rollout_code():
    register_benchmark_envs()
    from agentenvs.agents.registry import make_policy
    from agentenvs.agents.rollout import RolloutConfig, plan_episodes, run_rollouts

    tasks = KeyDoorEnv().task_ids("test")[:4]
    trajs = run_rollouts(make_policy("expert"), "KeyDoor-v0", plan_episodes(tasks, 1))
    assert all(t.won for t in trajs)
    assert all(s.info["step_credit"] == 0.0 for t in trajs for s in t.steps)
    randoms = run_rollouts(
        make_policy("random:0"), "Sokoban-oracle-v0", plan_episodes(["seed/2"], 2),
        RolloutConfig(max_turns=6),
    )  # fmt: skip
    assert all("step_credit" in s.info for t in randoms for s in t.steps)


def test_oracle_arm_trains_on_the_credit_environment():
    from agentenvs.benchmarks.learning.settings import preset, rl_env_id

    sokoban = preset("sokoban-validation")
    assert rl_env_id(sokoban, "oracle") == "Sokoban-oracle-v0"
    assert rl_env_id(sokoban, "grpo") == "Sokoban-v0"
    assert rl_env_id(preset("keydoor"), "oracle") == "KeyDoor-v0"
    with pytest.raises(ValueError, match="no step credit"):
        rl_env_id(preset("textcraft"), "oracle")


def test_keydoor_benchmark_with_random_and_oracle_arms(tmp_path):
    """Every stage on KeyDoor at toy size: the random agent, SFT, GRPO and the oracle (which
    reads the environment's step credit), evaluated on validation layouts only."""
    from agentenvs.benchmarks.learning.run import run_benchmark
    from agentenvs.benchmarks.learning.settings import PRESETS, preset

    settings = preset(
        "keydoor-validation",
        seeds=(0,),
        train_tasks=8,
        validation_tasks=2,
        sft_steps=10,
        rl_iterations=1,
        eval_every=1,
        rl_prompts=2,
        rl_samples=2,
        eval_n=2,
        max_turns=6,
        model=PRESETS["smoke"].model,
    )
    summary = run_benchmark(settings, tmp_path, progress=False)
    from agentenvs.benchmarks.learning.keydoor import KeyDoorEnv

    validation = KeyDoorEnv().task_ids("validation")
    assert summary["eval_split"] == "validation" and set(summary["eval_task_ids"]) <= set(
        validation
    )
    assert set(summary["per_task"]) == {"sft", "random", "grpo", "oracle"}
    assert set(summary["paired"]) == {"grpo", "oracle"}  # random is compared as sft - random
    assert {"sft - random", "oracle - grpo"} <= set(summary["contrasts"])
    oracle = summary["training"]["oracle"]["0"]
    assert oracle["adv/step_credit_abs_mean"][0] is not None
    assert 0 <= oracle["rollout/invalid_format_frac"][0] <= 1
    result = json.loads((tmp_path / "random/seed-0/result.json").read_text())
    assert result["policy"] == "random:0"
