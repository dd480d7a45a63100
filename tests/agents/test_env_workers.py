"""Environment workers: specs, identical results in every kind of pool, and fault isolation.

A worker killed mid-episode (``os.kill`` of its process, ``ray.kill`` of its actor, or a
``SIGSTOP`` that makes it miss its deadline) is replaced; every episode it hosted is retried
once by replaying it on the new worker and ends exactly as in an undisturbed run, with a note in
its metadata; an episode whose worker dies a second time ends with ``error`` set, and the rest
of the batch still matches the undisturbed run. The Ray tests share one local Ray with 2 CPUs
and skip where Ray is not installed.
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from agentenvs.agents.envworkers import (
    EnvWorkerError,
    EnvWorkersSpec,
    EnvWorkersSpecError,
    ProcessPool,
    make_env_pool,
    parse_env_workers,
)
from agentenvs.agents.policy import Completion, Policy
from agentenvs.agents.prompts import format_reply
from agentenvs.agents.registry import make_policy
from agentenvs.agents.rollout import (
    RolloutConfig,
    RolloutStats,
    make_rollout_pool,
    plan_episodes,
    run_rollouts,
)
from agentenvs.registration import make

from .conftest import cut_spec

TC = "TextCraft-v0"
MAX_TURNS = 10
CONFIG = RolloutConfig(max_turns=MAX_TURNS, max_active=8)
ENV_KWARGS = {"max_turns": MAX_TURNS}
NOTES = "env_worker_failures"
_COMMAND = re.compile(r"^craft (\d+) (.+?) using (.+)$", re.M)


class ConversationPolicy(Policy):
    """A deterministic policy that acts from the messages only, as a language model does (so
    the environments, not the policy, hold the state a dead worker loses): it picks one of the
    task's well-formed actions by the length of the latest observation."""

    def generate(self, conversations, sampling=None, *, envs=None, keys=None):
        replies = []
        for messages in conversations:
            users = [m["content"] for m in messages if m["role"] == "user"]
            actions = ["inventory"]
            for count, item, inputs in _COMMAND.findall(users[0]):
                actions.append(f"craft {count} {item} using {inputs}")
                actions += [f"get {part.strip()}" for part in inputs.split(",")]
            action = actions[len(users[-1]) % len(actions)]
            replies.append(Completion(format_reply("pick", action, TC), finish_reason="stop"))
        return replies


def _tasks(n: int) -> list[str]:
    env = make(TC)
    try:
        return env.task_ids("test")[:n]
    finally:
        env.close()


def _policy(name: str) -> Policy:
    return ConversationPolicy("conversation") if name == "conversation" else make_policy(name)


def _by_key(trajectories, keep_notes: bool = True) -> dict[tuple[str, int], dict]:
    out = {}
    for traj in trajectories:
        record = traj.to_dict()
        if not keep_notes:
            record["metadata"] = {k: v for k, v in record["metadata"].items() if k != NOTES}
        out[(traj.group_id, traj.sample_index)] = record
    return out


def _play(policy_name: str, pool=None, on_episode=None, tasks: int = 8):
    return run_rollouts(
        _policy(policy_name),
        TC,
        plan_episodes(_tasks(tasks), 2),
        CONFIG,
        env_pool=pool,
        on_episode=on_episode,
    )


@pytest.fixture(scope="module")
def undisturbed() -> dict[str, dict]:
    """The in-process results every pool must reproduce, per policy."""
    return {name: _by_key(_play(name)) for name in ("random:5", "conversation")}


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False)
    yield ray
    ray.shutdown()


def _killer(kill, pool, times: int = 1):
    """An ``on_episode`` hook that kills worker 0 at the first finished episode, and again at
    the first one after each replacement (so each kill lands in a later turn)."""
    done = []

    def on_episode(_traj) -> None:
        if len(done) < times and pool.restarts == len(done):
            kill(pool, 0)
            done.append(time.monotonic())

    return on_episode, done


def _os_kill(pool, index: int) -> None:
    os.kill(pool.worker_pids()[index], signal.SIGKILL)


def _ray_kill(pool, index: int) -> None:
    import ray

    ray.kill(pool.actors[index])


# --------------------------------------------------------------------------------------------
# Specs and their short forms


def test_parse_env_workers() -> None:
    assert parse_env_workers(0) == parse_env_workers("inprocess") == EnvWorkersSpec("inprocess")
    assert parse_env_workers(None) == EnvWorkersSpec("inprocess")
    assert parse_env_workers(3) == parse_env_workers("process:3") == EnvWorkersSpec("process", 3)
    assert parse_env_workers("process") == EnvWorkersSpec("process", os.cpu_count())
    assert parse_env_workers("ray") == EnvWorkersSpec("ray")
    assert parse_env_workers("ray:4@auto") == EnvWorkersSpec("ray", 4, "auto")
    assert parse_env_workers("ray@ray://head:10001") == EnvWorkersSpec(
        "ray", None, "ray://head:10001"
    )
    for bad in ("threads:2", "process@auto", "ray:0", "-1", "inprocess:2", "ray:x"):
        with pytest.raises(EnvWorkersSpecError, match="Valid forms: inprocess"):
            parse_env_workers(bad)


def test_ray_is_optional() -> None:
    """Without Ray the package imports, and asking for Ray workers says how to install it."""
    code = textwrap.dedent(
        """
        import sys
        sys.modules["ray"] = None  # as if Ray were not installed
        from agentenvs.agents.envworkers import EnvWorkerError, make_env_pool
        from agentenvs.agents.rollout import run_rollouts
        try:
            make_env_pool("TextCraft-v0", "ray:2")
        except EnvWorkerError as exc:
            print(exc)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "pip install 'agentenvs[ray]'" in out.stdout and "process:N" in out.stdout


# --------------------------------------------------------------------------------------------
# Local worker processes


@pytest.mark.parametrize("policy_name", ["random:5", "conversation"])
def test_process_pool_matches_in_process(policy_name: str, undisturbed) -> None:
    with make_env_pool(TC, "process:2", ENV_KWARGS) as pool:
        assert _by_key(_play(policy_name, pool)) == undisturbed[policy_name]
        assert pool.restarts == 0


@pytest.mark.parametrize("policy_name", ["random:5", "conversation"])
def test_process_worker_killed_mid_episode_is_retried_exactly(policy_name, undisturbed) -> None:
    with make_env_pool(TC, "process:2", ENV_KWARGS) as pool:
        on_episode, kills = _killer(_os_kill, pool)
        trajectories = _play(policy_name, pool, on_episode)
        assert len(kills) == 1 and pool.restarts == 1
    retried = [t for t in trajectories if NOTES in t.metadata]
    assert retried and all(t.error is None for t in trajectories)
    notes = [note for t in retried for note in t.metadata[NOTES]]
    assert len(notes) == len(retried)  # one retry each
    assert all("environment worker 0" in n and "killed by SIGKILL" in n for n in notes)
    assert any("restored on a new worker by replaying" in n for n in notes)  # mid-episode
    assert _by_key(trajectories, keep_notes=False) == undisturbed[policy_name]


def test_second_death_marks_the_episode_error_and_the_rest_go_on(undisturbed) -> None:
    with make_env_pool(TC, "process:2", ENV_KWARGS) as pool:
        on_episode, kills = _killer(_os_kill, pool, times=2)
        trajectories = _play("random:5", pool, on_episode)
        assert len(kills) == 2 and pool.restarts == 2
    assert len(trajectories) == 16
    failed = [t for t in trajectories if t.error is not None]
    assert failed, "some episode lived through both deaths of worker 0"
    for traj in failed:
        assert "environment lost" in traj.error and "retried once already" in traj.error
        assert len(traj.metadata[NOTES]) == 2 and not traj.won
    expected = undisturbed["random:5"]
    others = _by_key([t for t in trajectories if t.error is None], keep_notes=False)
    assert others == {key: expected[key] for key in others}
    assert len(others) + len(failed) == 16


def test_cut_starts_in_a_process_pool_match_in_process() -> None:
    """Episodes that start at a cut state (the expert's first action replayed inside the worker)
    play exactly as in-process, also when their worker is killed and they are retried."""
    experts = run_rollouts(make_policy("expert"), TC, plan_episodes(_tasks(8), 1), CONFIG)
    specs = [
        cut_spec(TC, t.task_id, t.actions[:1], f"{t.group_id}@1", j, max_turns=MAX_TURNS)
        for t in experts
        for j in range(2)
    ]
    here = _by_key(run_rollouts(_policy("conversation"), TC, specs, CONFIG))
    assert all(t["error"] is None and t["metadata"]["prefix_turns"] == 1 for t in here.values())
    stats = RolloutStats()
    with make_env_pool(TC, "process:2", ENV_KWARGS) as pool:
        played = run_rollouts(_policy("conversation"), TC, specs, CONFIG, env_pool=pool)
        assert _by_key(played) == here
        on_episode, kills = _killer(_os_kill, pool)
        retried = run_rollouts(
            _policy("conversation"),
            TC,
            specs,
            CONFIG,
            env_pool=pool,
            on_episode=on_episode,
            stats=stats,
        )
        assert len(kills) == 1 and pool.restarts == stats.env_worker_restarts == 1
    notes = [n for t in retried for n in t.metadata.get(NOTES, [])]
    assert any("restored on a new worker by replaying" in n for n in notes)
    assert _by_key(retried, keep_notes=False) == here


def test_hung_worker_is_killed_after_its_deadline(undisturbed) -> None:
    """A stopped (``SIGSTOP``) worker misses its deadline, is killed and replaced."""

    def stop(pool, index: int) -> None:
        os.kill(pool.worker_pids()[index], signal.SIGSTOP)

    with ProcessPool(TC, 2, ENV_KWARGS, step_timeout_s=0.5) as pool:
        on_episode, kills = _killer(stop, pool)
        trajectories = _play("conversation", pool, on_episode)
        assert len(kills) == 1 and pool.restarts == 1
    notes = [n for t in trajectories for n in t.metadata.get(NOTES, [])]
    assert notes and all("gave no answer within" in n for n in notes)
    assert _by_key(trajectories, keep_notes=False) == undisturbed["conversation"]


def test_a_pool_is_reused_across_calls_and_checked(undisturbed) -> None:
    with ProcessPool(TC, 2, ENV_KWARGS) as pool:
        for _ in range(2):
            assert _by_key(_play("conversation", pool)) == undisturbed["conversation"]
        with pytest.raises(ValueError, match="max_turns"):
            run_rollouts(
                _policy("conversation"),
                TC,
                plan_episodes(_tasks(1), 1),
                RolloutConfig(max_turns=3),
                env_pool=pool,
            )


def test_eval_cli_takes_env_workers(tmp_path, capsys) -> None:
    from agentenvs.benchmarks.eval.cli import main

    argv = [TC, "--agent", "expert", "-k", "1", "--limit", "3", "--no-progress"]
    assert main([*argv, "--out", str(tmp_path / "a"), "--env-workers", "process:2"]) == 0
    assert "3 episodes (3 new)" in capsys.readouterr().out
    lines = (tmp_path / "a" / "trajectories.jsonl").read_text().splitlines()
    assert len(lines) == 3
    assert main([*argv, "--out", str(tmp_path / "b"), "--env-workers", "bogus"]) == 2
    assert "Valid forms" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------
# Ray actors


@pytest.mark.parametrize("policy_name", ["random:5", "conversation"])
def test_ray_pool_matches_in_process(policy_name: str, undisturbed, local_ray) -> None:
    with make_env_pool(TC, "ray:2", ENV_KWARGS) as pool:
        assert _by_key(_play(policy_name, pool)) == undisturbed[policy_name]
        assert len(set(pool.worker_pids())) == 2 and pool.restarts == 0


@pytest.mark.parametrize(
    ("kill", "policy_name"), [(_ray_kill, "random:5"), (_os_kill, "conversation")]
)
def test_ray_actor_killed_mid_episode_is_retried_exactly(
    kill, policy_name, undisturbed, local_ray
) -> None:
    with make_env_pool(TC, "ray:2", ENV_KWARGS) as pool:
        on_episode, kills = _killer(kill, pool)
        trajectories = _play(policy_name, pool, on_episode)
        assert len(kills) == 1 and pool.restarts == 1
    retried = [t for t in trajectories if NOTES in t.metadata]
    assert retried and all(t.error is None for t in trajectories)
    assert all("Ray actor" in t.metadata[NOTES][0] for t in retried)
    assert _by_key(trajectories, keep_notes=False) == undisturbed[policy_name]


def test_ray_second_death_marks_error(undisturbed, local_ray) -> None:
    with make_env_pool(TC, "ray:2", ENV_KWARGS) as pool:
        on_episode, kills = _killer(_ray_kill, pool, times=2)
        trajectories = _play("conversation", pool, on_episode)
        assert len(kills) == 2 and pool.restarts == 2
    failed = [t for t in trajectories if t.error is not None]
    assert failed and all("retried once already" in t.error for t in failed)
    expected = undisturbed["conversation"]
    others = _by_key([t for t in trajectories if t.error is None], keep_notes=False)
    assert others == {key: expected[key] for key in others} and len(trajectories) == 16


def test_ray_pool_sizes_itself_to_the_cluster(local_ray) -> None:
    with make_env_pool(TC, "ray", ENV_KWARGS, cpus_per_worker=0.5) as pool:
        assert pool.workers == 4  # 2 CPUs / 0.5
        observations = pool.reset([(s, t) for s, t in enumerate(_tasks(4))])
        assert all("Goal:" in o for o, _ in observations)
    with pytest.raises(EnvWorkerError, match="need 3 CPUs; the Ray cluster has 2"):
        make_env_pool(TC, "ray:3", ENV_KWARGS)


# --------------------------------------------------------------------------------------------
# ALFWorld (the slow environment the workers are for)


def test_alfworld_expert_with_a_killed_worker_matches_in_process() -> None:
    try:
        env = make("ALFWorld-v0")
        tasks = env.task_ids("test")[:4]
        env.close()
    except Exception as exc:  # the alfworld extra or its data is missing here
        pytest.skip(f"ALFWorld-v0 is not available: {exc}")
    config = RolloutConfig(max_turns=50, max_active=4)
    specs = plan_episodes(tasks, 1)
    here = _by_key(run_rollouts(make_policy("expert"), "ALFWorld-v0", specs, config))
    pool_config = dataclasses.replace(config, workers="process:2")  # the protocol's env keywords
    with make_rollout_pool("ALFWorld-v0", pool_config) as pool:
        on_episode, kills = _killer(_os_kill, pool)
        played = run_rollouts(
            make_policy("expert"),
            "ALFWorld-v0",
            specs,
            config,
            env_pool=pool,
            on_episode=on_episode,
        )
        assert len(kills) == 1 and pool.restarts == 1
    assert all(t.won and t.error is None for t in played)
    assert any(NOTES in t.metadata for t in played)
    assert _by_key(played, keep_notes=False) == here
