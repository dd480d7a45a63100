"""How each arm chose its actions: the expert's credit of every stepped action, replayed in the
oracle environment with the recorded observations checked, and the reply surprisal, on real
episodes of the expert and the random agent played through the rollout code."""

from __future__ import annotations

import copy
import math

import pytest

from agentenvs.agents.registry import make_policy
from agentenvs.agents.rollout import plan_episodes, run_rollouts
from agentenvs.agents.trajectory import Trajectory, read_trajectories, write_trajectories
from agentenvs.benchmarks.learning.action_choice import action_choice, main, step_credits
from agentenvs.benchmarks.learning.plugins import register_benchmark_envs

ROOMS = ["seed/3", "seed/11", "seed/20"]


def _played(tmp_path, policy: str, env_id: str, task_ids: list[str]) -> list[Trajectory]:
    register_benchmark_envs()
    trajs = run_rollouts(make_policy(policy), env_id, plan_episodes(task_ids, 1))
    path = tmp_path / f"{policy.replace(':', '-')}.jsonl"
    write_trajectories(path, trajs)
    return list(read_trajectories(path))


def test_the_expert_makes_only_shortest_moves_and_the_random_agent_fewer(tmp_path):
    expert = _played(tmp_path, "expert", "Sokoban-v0", ROOMS)
    choice = action_choice(expert)
    assert (choice.episodes, choice.won) == (3, 3)
    assert choice.steps == sum(len(t.steps) for t in expert) > 3
    assert choice.shortest_share == 1.0 and choice.surprisal is None
    random = action_choice(_played(tmp_path, "random:0", "Sokoban-v0", ROOMS * 4))
    assert random.steps > 12 and 0 < random.shortest_share < 1


def test_a_trajectory_of_another_room_is_refused(tmp_path):
    (traj,) = _played(tmp_path, "expert", "Sokoban-v0", ROOMS[:1])
    other = copy.deepcopy(traj)
    other.task_id = "seed/4"
    with pytest.raises(ValueError, match="not this environment's"):
        step_credits(other)


def test_surprisal_is_the_reply_nll(tmp_path):
    (traj,) = _played(tmp_path, "expert", "KeyDoor-v0", ["layout/5"])
    assert step_credits(traj) == [(0.0, True)] * len(traj.steps)
    for step in traj.steps:
        step.logprobs = [-0.5, -0.25]
    choice = action_choice([traj])
    assert choice.shortest_moves == choice.steps == len(traj.steps)
    assert math.isclose(choice.surprisal, 0.75)


def test_moves_after_a_fatal_action_are_not_counted(tmp_path):
    """The random agent's KeyDoor episodes: the replayed credits are the recorded ones; the
    steps after a wrong key (credit 0, no longer solvable) drop out of the count."""
    trajs = _played(tmp_path, "random:0", "KeyDoor-v0", ["layout/5", "layout/9"] * 4)
    pairs = [step_credits(t) for t in trajs]
    for traj, replayed in zip(trajs, pairs, strict=True):
        assert [c for c, _ in replayed] == [s.info["step_credit"] for s in traj.steps]
    assert any(not all(solvable for _, solvable in p) for p in pairs), "a wrong key is taken"
    choice = action_choice(trajs)
    assert choice.steps == sum(solvable for p in pairs for _, solvable in p)
    assert choice.steps < sum(len(p) for p in pairs)


def test_main_writes_a_row_per_arm_and_seed(tmp_path, capsys):
    run = tmp_path / "run"
    for arm, policy in (("random", "random:0"), ("expert", "expert")):
        trajs = run_rollouts(make_policy(policy), "Sokoban-v0", plan_episodes(ROOMS, 2))
        write_trajectories(run / arm / "seed-0" / "eval" / "trajectories.jsonl", trajs)
    out = tmp_path / "choice.md"
    assert main(["--run", str(run), "--out", str(out)]) == 0
    rows = [line for line in out.read_text().splitlines() if line.startswith("| ")][1:]
    assert [r.split(" | ")[:4] for r in rows] == [
        ["| run", "expert", "0", "6"],
        ["| run", "random", "0", "6"],
    ]
    assert "| 1.000 |" in rows[0]
    with pytest.raises(SystemExit):
        main(["--run", str(tmp_path / "empty")])
    assert "has no" in capsys.readouterr().err
