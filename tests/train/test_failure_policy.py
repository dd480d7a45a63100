"""The RL trainer's failure policy, each fault injected for real: an environment that raises
(TextCraft with a step that fails on chosen episodes), a real ``agentenvs serve`` server killed
mid-iteration, and a server that hangs (a proxy that accepts and never answers).

An episode that errors is played again on a new environment; one that still fails takes its
group out of the update and is counted; too many stop the run after a checkpoint with the first
error and its fix, and ``--resume`` continues.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from agentenvs.train.config import load_config
from agentenvs.train.rl import RLConfig, RLTrainer, RolloutFailureError
from agentenvs.train.rl.trainer import transformers_policy
from agentenvs.train.runtime import latest_checkpoint

from ..serve.conftest import HangingProxy, Server

pytest.importorskip("transformers")

TC = "TextCraft-v0"
TASKS = ("agentgym/0", "agentgym/1", "agentgym/3")
TIMING = ("time", "perf/")


def rl_config(fx, out: Path, **overrides) -> RLConfig:
    settings = {
        "algo": "grpo",
        "model": fx.sft_model,
        "out_dir": out,
        "iterations": 1,
        "prompts_per_iteration": 3,
        "samples_per_prompt": 4,
        "rollout.max_turns": 3,
        "rollout.max_new_tokens": 24,
        "optim.lr": 1e-3,
        "micro_batch_size": 8,
        "save_every": 1,
        "tensorboard": "false",
        "data.tasks": ",".join(TASKS),
    }
    settings.update(overrides)
    return load_config(RLConfig, None, [f"{k}={v}" for k, v in settings.items()])


def metric_lines(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def untimed(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if not k.startswith(TIMING)}


class Faults:
    """TextCraft that raises on chosen environments: ``poison(task_id, n)`` is asked at the n-th
    reset (from 1) of each task; an environment poisoned there raises in that reset and on every
    reset and step after, whatever its task (so a retry that reused it would fail again)."""

    def __init__(self, monkeypatch) -> None:
        from agentenvs.textcraft import TextCraftEnv

        self.poison = lambda task_id, n: False
        self.resets: Counter[str] = Counter()
        self.poisoned: list[object] = []
        self.closed: list[object] = []
        real_reset, real_step = TextCraftEnv.reset, TextCraftEnv.step
        real_close = TextCraftEnv.close
        faults = self

        def reset(env, *, seed=None, options=None):
            answer = real_reset(env, seed=seed, options=options)
            faults.resets[env.task_id] += 1
            if faults.poison(env.task_id, faults.resets[env.task_id]):
                faults.poisoned.append(env)
            faults.check(env)
            return answer

        def step(env, action):
            faults.check(env)
            return real_step(env, action)

        def close(env):
            faults.closed.append(env)
            return real_close(env)

        monkeypatch.setattr(TextCraftEnv, "reset", reset)
        monkeypatch.setattr(TextCraftEnv, "step", step)
        monkeypatch.setattr(TextCraftEnv, "close", close)

    def check(self, env: object) -> None:
        if any(env is p for p in self.poisoned):
            raise RuntimeError(f"the engine of {env.task_id} fell over")


@pytest.fixture
def faults(monkeypatch) -> Faults:
    return Faults(monkeypatch)


# --------------------------------------------------------------------------------------------
# An environment that raises


def test_an_episode_that_raises_once_is_played_again_on_a_new_environment(
    rl_fixture, tmp_path, faults
):
    """The second episode of agentgym/1 gets an environment that raises: it is played again
    from the same start on a new one (the broken one closed, never reused) and trains."""
    faults.poison = lambda task, n: task == "agentgym/1" and n == 2
    trainer = RLTrainer(rl_config(rl_fixture, tmp_path / "once"), progress=False)
    trainer.setup()
    try:
        rows, metrics = trainer.rollout_step(0)
        (broken,) = faults.poisoned
        assert any(env is broken for env in faults.closed)  # closed before the pool was
    finally:
        trainer.close()
    assert metrics["rollout/failed_episodes"] == metrics["rollout/dropped_groups"] == 0
    assert metrics["rollout/retried_episodes"] == 1 and metrics["rollout/episodes"] == 12
    assert metrics["rollout/groups_trained"] == 3
    assert len({r.group_id for r in rows}) == 3
    assert faults.resets["agentgym/1"] == 5  # four episodes and one retry


def test_an_episode_that_keeps_failing_takes_its_group_out(rl_fixture, tmp_path, faults):
    """One episode fails on every attempt (its first reset, then both retries): its group is
    left out of the update whole, though its three other episodes played fine, and counted."""
    faults.poison = lambda task, n: task == "agentgym/1" and n in (2, 5, 6)
    trainer = RLTrainer(rl_config(rl_fixture, tmp_path / "keeps"), progress=False)
    trainer.setup()
    try:
        rows, metrics = trainer.rollout_step(0)
    finally:
        trainer.close()
    assert metrics["rollout/failed_episodes"] == 1 and metrics["rollout/dropped_groups"] == 1
    assert metrics["rollout/retried_episodes"] == 1 and metrics["rollout/groups_trained"] == 2
    assert rows and not any(r.group_id.endswith(":agentgym/1") for r in rows)
    assert faults.resets["agentgym/1"] == 6


class _FailsFromIteration(RLTrainer):
    """The real trainer, whose environments of one task fail from iteration ``start`` on."""

    def __init__(self, config, faults: Faults, start: int) -> None:
        super().__init__(config, progress=False)
        self.faults, self.start = faults, start

    def rollout_step(self, iteration):
        if iteration >= self.start:
            self.faults.poison = lambda task, n: task == "agentgym/3"
        return super().rollout_step(iteration)


def test_too_many_failures_stop_the_run_after_a_checkpoint_and_resume(rl_fixture, tmp_path, faults):
    """A third of iteration 1's episodes fail every attempt (more than the default quarter):
    the run stops with the first error and its fix, its checkpoint of step 1 on disk; with the
    fault gone, --resume finishes the run."""
    out = tmp_path / "stop"
    config = rl_config(rl_fixture, out, iterations=2)
    with pytest.raises(RolloutFailureError) as caught:
        _FailsFromIteration(config, faults, start=1).train()
    message = str(caught.value)
    assert "iteration 1: 4 of 12 episodes failed after 2 retries each" in message
    assert "rollout.max_failed_fraction=0.25" in message
    assert "the first: reset failed: RuntimeError: the engine of agentgym/3 fell over" in message
    assert "Fix: the environment (or the scripted policy) raised" in message
    assert "step-0000001" in message and "--resume" in message
    assert latest_checkpoint(out).name == "step-0000001"
    assert [m["step"] for m in metric_lines(out)] == [1]
    faults.poison = lambda task, n: False
    final = RLTrainer(config, progress=False).train(resume=True)
    assert final.name == "step-0000002" and [m["step"] for m in metric_lines(out)] == [1, 2]


# --------------------------------------------------------------------------------------------
# A server killed mid-iteration


def _killing_policy(at: dict[int, Server]):
    """A policy factory: the trainer's own policy, which kills (SIGKILL) the server
    ``at[n]`` just before its n-th generation call."""
    calls = []

    def factory(model, tokenizer, config):
        policy = transformers_policy(model, tokenizer, config)
        generate = policy.generate

        def generate_and_kill(*args, **kwargs):
            calls.append(1)
            victim = at.get(len(calls))
            if victim is not None:
                victim.proc.kill()
                victim.proc.wait()
            return generate(*args, **kwargs)

        policy.generate = generate_and_kill
        return policy

    return factory


def test_a_server_killed_mid_iteration_costs_nothing(rl_fixture, tmp_path):
    """Two servers, one killed before the iteration's second turn: its episodes are replayed
    on the other and the iteration is the one played in process, metric for metric."""
    RLTrainer(rl_config(rl_fixture, tmp_path / "here"), progress=False).train()
    servers = [Server(), Server()]
    try:
        urls = ",".join(s.url for s in servers)
        config = rl_config(rl_fixture, tmp_path / "http", **{"rollout.env_workers": urls})
        RLTrainer(config, progress=False, policy_factory=_killing_policy({2: servers[0]})).train()
    finally:
        for server in servers:
            server.stop()
    ((here,), (there,)) = metric_lines(tmp_path / "here"), metric_lines(tmp_path / "http")
    assert there["rollout/env_worker_restarts"] == 1 and there["rollout/failed_episodes"] == 0
    here, there = untimed(here), untimed(there)
    here.pop("rollout/env_worker_restarts"), there.pop("rollout/env_worker_restarts")
    assert there == here


def test_episodes_lost_with_two_servers_are_retried_on_the_third(rl_fixture, tmp_path):
    """Server A killed before the first turn, B before the second: the episodes that had moved
    from A to B are lost with B (they were restored once already), so the trainer plays them
    again, from their start, on the third server; nothing fails."""
    servers = [Server(), Server(), Server()]
    try:
        urls = ",".join(s.url for s in servers)
        config = rl_config(rl_fixture, tmp_path / "three", **{"rollout.env_workers": urls})
        factory = _killing_policy({1: servers[0], 2: servers[1]})
        RLTrainer(config, progress=False, policy_factory=factory).train()
    finally:
        for server in servers:
            server.stop()
    (m,) = metric_lines(tmp_path / "three")
    assert m["rollout/env_worker_restarts"] == 3  # A's worker to B; then both of B's to C
    assert m["rollout/retried_episodes"] == 4  # the four of server A's slots
    assert m["rollout/failed_episodes"] == m["rollout/dropped_groups"] == 0
    assert m["rollout/groups_trained"] == 3


def test_the_only_server_killed_stops_the_run_with_its_fix(rl_fixture, tmp_path):
    server = Server()
    out = tmp_path / "alone"
    try:
        config = rl_config(rl_fixture, out, **{"rollout.env_workers": server.url})
        trainer = RLTrainer(config, progress=False, policy_factory=_killing_policy({2: server}))
        with pytest.raises(RolloutFailureError) as caught:
            trainer.train()
    finally:
        server.stop()
    message = str(caught.value)
    assert "iteration 0: the environment workers failed" in message
    assert f"no agentenvs server answers at {server.url}" in message
    assert "Fix: the environment workers died or hung: restart them (agentenvs serve" in message
    assert latest_checkpoint(out).name == "step-0000000" and "--resume" in message


# --------------------------------------------------------------------------------------------
# A server that hangs


def test_a_server_that_hangs_mid_iteration_is_left(rl_fixture, tmp_path):
    """A server that stops answering at its second step batch (its socket open, its process
    alive): past rollout.env_timeout its episodes move to the other server, and the iteration
    is the one played in process."""
    RLTrainer(rl_config(rl_fixture, tmp_path / "here"), progress=False).train()
    servers = [Server(), Server()]
    proxy = HangingProxy(servers[0].url, hang_at=(b"/step_batch", 2))
    try:
        urls = f"{proxy.url},{servers[1].url}"
        overrides = {"rollout.env_workers": urls, "rollout.env_timeout": 1}
        RLTrainer(rl_config(rl_fixture, tmp_path / "http", **overrides), progress=False).train()
    finally:
        proxy.close()
        for server in servers:
            server.stop()
    assert proxy.hung.is_set()
    ((here,), (there,)) = metric_lines(tmp_path / "here"), metric_lines(tmp_path / "http")
    assert there["rollout/env_worker_restarts"] == 1 and there["rollout/failed_episodes"] == 0
    here, there = untimed(here), untimed(there)
    here.pop("rollout/env_worker_restarts"), there.pop("rollout/env_worker_restarts")
    assert there == here


def test_the_only_server_hanging_stops_the_run_in_time(rl_fixture, tmp_path):
    server = Server()
    proxy = HangingProxy(server.url, hang_at=(b"/step_batch", 1))
    out = tmp_path / "hung"
    try:
        overrides = {"rollout.env_workers": proxy.url, "rollout.env_timeout": 1}
        with pytest.raises(RolloutFailureError) as caught:
            RLTrainer(rl_config(rl_fixture, out, **overrides), progress=False).train()
    finally:
        proxy.close()
        server.stop()
    message = str(caught.value)
    assert f"no agentenvs server answers at {proxy.url}" in message
    assert "raise rollout.env_timeout" in message
    assert latest_checkpoint(out).name == "step-0000000"
