"""PTGPO and GiGPO on ALFWorld end to end, offline, on a CPU: the expert's episodes of shipped
training games under the ``ptgpo`` protocol -> a tiny model (tokenizer trained on those episodes)
-> SFT -> ``agentenvs train rl --algo ptgpo|gigpo --env ALFWorld-v0`` with two environment worker
processes, for three iterations each.

Slow (a few minutes on two shared cores); the README's "ALFWorld: expert -> SFT -> PTGPO" recipe
quotes the time per iteration and the environment's share of it measured by this test.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("alfworld", reason="ALFWorld-v0 needs the alfworld extra (make install)")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.slow

ENV_ID = "ALFWorld-v0"
REPO = Path(__file__).resolve().parents[2]
TASKS = (  # four short training games (three-command walkthroughs), shipped with the package
    "alfworld/train/look_at_obj_in_light-AlarmClock-None-DeskLamp-301/trial_T20190907_174127_043461",
    "alfworld/train/look_at_obj_in_light-AlarmClock-None-DeskLamp-301/trial_T20190907_174142_375532",
    "alfworld/train/look_at_obj_in_light-AlarmClock-None-DeskLamp-302/trial_T20190908_192756_298295",
    "alfworld/train/look_at_obj_in_light-AlarmClock-None-DeskLamp-303/trial_T20190908_144933_600228",
)
THOUGHT = "I take the next step."
ITERATIONS = 3


def expert_episodes(tasks: tuple[str, ...]) -> list:
    """The expert's episodes under the ptgpo protocol (verl-agent's ALFWorld prompt and
    ``<think>``/``<action>`` replies), each thought replaced by a short fixed one."""
    from agentenvs.agents.prompts import format_reply
    from agentenvs.agents.registry import make_policy
    from agentenvs.agents.rollout import RolloutConfig, plan_episodes, run_rollouts

    config = RolloutConfig(protocol="ptgpo", max_turns=6)
    trajs = run_rollouts(make_policy("expert"), ENV_ID, plan_episodes(list(tasks), 1), config)
    for traj in trajs:
        steps = iter(traj.steps)
        for message in traj.messages:
            if message["role"] == "assistant":
                step = next(steps)
                text = format_reply(THOUGHT, step.action or "", ENV_ID, traj.metadata["prompt"])
                message["content"] = step.completion = text
    return trajs


@pytest.fixture(scope="module")
def sft_model(tmp_path_factory) -> Path:
    from agentenvs.agents.trajectory import write_trajectories
    from agentenvs.benchmarks.learning.check import CHECK_MODEL, build_env_model
    from agentenvs.train.config import load_config
    from agentenvs.train.sft import SFTConfig, train_sft

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("alfworld_rl")
    trajs = expert_episodes(TASKS)
    assert [t.won for t in trajs] == [True] * len(TASKS)
    expert = root / "expert.jsonl"
    write_trajectories(expert, trajs)
    spec = dataclasses.replace(
        CHECK_MODEL,
        vocab_size=2048,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    base = build_env_model(root / "base", spec, ENV_ID, trajs)
    settings = {
        "model": base,
        "data": expert,
        "out_dir": root / "sft",
        "epochs": 1000,
        "max_steps": 80,
        "batch_size": 2,
        "micro_batch_size": 2,
        "lr": 1e-2,
        "warmup_ratio": 0.05,
        "save_every": 100_000,
        "tensorboard": "false",
    }
    final = train_sft(
        load_config(SFTConfig, None, [f"{k}={v}" for k, v in settings.items()]), progress=False
    )
    torch.set_num_threads(threads)
    return final / "model"


@pytest.mark.parametrize("algo", ["ptgpo", "gigpo"])
def test_train_rl_on_alfworld_with_two_env_worker_processes(sft_model, tmp_path, algo):
    out = tmp_path / algo
    cmd = [sys.executable, "-m", "agentenvs.cli", "train", "rl", "--algo", algo, "--env", ENV_ID]
    cmd += ["--model", str(sft_model), "--out", str(out), "--no-progress"]
    cmd += [
        f"iterations={ITERATIONS}",
        "prompts_per_iteration=2",
        "samples_per_prompt=4",
        "rollout.max_turns=6",
        "rollout.max_new_tokens=32",
        "rollout.env_workers=process:2",
        "optim.lr=1e-3",
        "micro_batch_size=8",
        f"save_every={ITERATIONS}",
        "tensorboard=false",
        "data.tasks=" + ",".join(TASKS),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("ALFWORLD_DATA", None)  # the shipped training games, no setup
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-3000:]

    protocol = json.loads((out / "protocol.json").read_text())
    assert protocol["protocol"] == "ptgpo"
    assert protocol["settings"]["env_kwargs"]["game_version"] == "alfworld-0.4"
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == list(range(1, ITERATIONS + 1))
    for m in lines:
        for key in ("rollout/reward_mean", "actor/pg_loss", "actor/grad_norm", "adv/abs_mean"):
            assert math.isfinite(m[key]), key
        assert m["rollout/error_episodes"] == 0 and m["rollout/env_worker_restarts"] == 0
        assert m["rollout/turns_mean"] > 0 and m["time/env_s"] > 0
    assert any(m["adv/abs_mean"] > 0 for m in lines), "no advantage signal"
    # the SFT taught the reply format: some replies parse
    assert min(m["rollout/invalid_format_frac"] for m in lines) < 1.0
    if algo == "ptgpo":
        assert all(m["adv/tree_nodes"] > 0 for m in lines)

    before = transformers.AutoModelForCausalLM.from_pretrained(sft_model).state_dict()
    final = out / "checkpoints" / f"step-{ITERATIONS:07d}" / "model"
    after = transformers.AutoModelForCausalLM.from_pretrained(final).state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before), "no weight changed"
    assert all(torch.isfinite(v).all() for v in after.values())

    # what the README recipe quotes: seconds per iteration and the environment's share
    # (iteration 1 includes starting the two worker processes and loading the games)
    per_iter = [m["time/iteration_s"] for m in lines]
    share = [m["time/env_s"] / m["time/iteration_s"] for m in lines]
    print(
        f"\n{algo}: s/iteration {[round(t, 1) for t in per_iter]}, "
        f"env share {[round(s, 2) for s in share]}, "
        f"invalid format {[round(m['rollout/invalid_format_frac'], 2) for m in lines]}, "
        f"success {[m['rollout/success_rate'] for m in lines]}"
    )
