"""Fixtures of the trainer tests: a small TextCraft policy after a short SFT, and Prefix-GRPO
queries cut from expert trajectories under it.

The policy is the learning check's model
(:func:`agentenvs.benchmarks.learning.check.build_check_model`) at its smallest shape, SFT'd for 100
steps on the expert's episodes of four depth-1 tasks: it then solves about half of its sampled
episodes, so rewards vary within a group and every algorithm has a non-zero signal in two
iterations.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

TASKS = ("agentgym/0", "agentgym/1", "agentgym/3", "agentgym/2")


@dataclass(frozen=True)
class RLFixture:
    sft_model: Path
    expert: Path
    samples: Path


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models run faster on one thread on a shared machine (and results do not depend
    on thread scheduling); restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def rl_fixture(tmp_path_factory) -> RLFixture:
    from agentenvs.agents.trajectory import write_trajectories
    from agentenvs.benchmarks.learning.check import (
        CHECK_MODEL,
        build_check_model,
        expert_trajectories,
    )
    from agentenvs.replay import CutConfig, run_cuts, run_sidecar, run_validate
    from agentenvs.train.config import load_config
    from agentenvs.train.sft import SFTConfig, train_sft

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("rl")
    spec = dataclasses.replace(
        CHECK_MODEL,
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    base = build_check_model(root / "base", spec, tokenizer_tasks=40)
    expert = root / "expert.jsonl"
    write_trajectories(expert, expert_trajectories("TextCraft-v0", TASKS))
    settings = {
        "model": base,
        "data": expert,
        "out_dir": root / "sft",
        "epochs": 1000,
        "max_steps": 100,
        "batch_size": 4,
        "micro_batch_size": 4,
        "lr": 5e-3,
        "warmup_ratio": 0.05,
        "save_every": 100_000,
        "tensorboard": "false",
    }
    final = train_sft(
        load_config(SFTConfig, None, [f"{k}={v}" for k, v in settings.items()]), progress=False
    )
    model = final / "model"
    run_cuts([expert], root / "queries.jsonl", [CutConfig()], model_path=str(model), progress=False)
    run_validate(root / "queries.jsonl", root / "validated.jsonl", progress=False)
    run_sidecar(
        root / "validated.jsonl", root / "samples.jsonl", model_path=str(model), progress=False
    )
    torch.set_num_threads(threads)
    return RLFixture(model, expert, root / "samples.jsonl")
