"""Same seed, same machine, same threads: the same RL run, bit for bit.

Each algorithm runs 3 iterations twice from the same SFT model (the trainer fixture's); every
logged metric that is not a timing and every final weight must be exactly equal. What can make
two *machines* differ (float kernels, thread counts) is measured by
:mod:`agentenvs.benchmarks.learning.reproduce` and written up in ``docs/learning-check/README.md``.
"""

from __future__ import annotations

import json

import pytest
import torch

from agentenvs.train.config import load_config
from agentenvs.train.rl import RLConfig, RLTrainer

transformers = pytest.importorskip("transformers")

TIMING = ("time", "perf/")  # the wall clock ("time"), time/*, time_share/*, throughputs


def config(fx, out, algo: str) -> RLConfig:
    settings = {
        "algo": algo,
        "model": fx.sft_model,
        "out_dir": out,
        "iterations": 3,
        "prompts_per_iteration": 2,
        "samples_per_prompt": 4,
        "rollout.max_turns": 3,
        "rollout.max_new_tokens": 24,
        "optim.lr": 1e-3,
        "micro_batch_size": 8,
        "save_every": 3,
        "tensorboard": "false",
        "seed": 7,
        "data.tasks": "agentgym/0,agentgym/1,agentgym/3",
    }
    if algo == "prefix-grpo":
        del settings["data.tasks"]
        settings["data.queries"] = fx.samples
        settings["prompts_per_iteration"] = 4
    return load_config(RLConfig, None, [f"{k}={v}" for k, v in settings.items()])


def run(fx, out, algo: str) -> tuple[list[dict], dict[str, torch.Tensor]]:
    final = RLTrainer(config(fx, out, algo), progress=False).train()
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    metrics = [{k: v for k, v in m.items() if not k.startswith(TIMING)} for m in lines]
    weights = transformers.AutoModelForCausalLM.from_pretrained(final / "model").state_dict()
    return metrics, weights


@pytest.mark.parametrize("algo", ["grpo", "dapo", "gigpo", "ptgpo", "prefix-grpo"])
def test_two_runs_with_the_same_seed_are_identical(rl_fixture, tmp_path, algo):
    first_metrics, first_weights = run(rl_fixture, tmp_path / "a", algo)
    second_metrics, second_weights = run(rl_fixture, tmp_path / "b", algo)
    assert [m["step"] for m in first_metrics] == [1, 2, 3]
    assert first_metrics == second_metrics  # exact: every non-timing metric, every iteration
    assert len(first_metrics[0]) > 20
    assert first_weights.keys() == second_weights.keys()
    for name, tensor in first_weights.items():
        assert torch.equal(tensor, second_weights[name]), name
    sft = transformers.AutoModelForCausalLM.from_pretrained(rl_fixture.sft_model).state_dict()
    moved = [k for k in sft if not torch.equal(sft[k], first_weights[k])]
    assert moved, "the runs compared never changed a weight"
