"""The learning loop's throughput benchmark on a tiny setting: it runs every phase, counts the
model's FLOPs, checks the before/after rollouts are equal and writes its table (no timed
assertions)."""

from __future__ import annotations

import json

import pytest
import torch

from agentenvs.benchmarks.speed.learning_loop import PhaseCount, forward_flops, main
from agentenvs.benchmarks.speed.model_shapes import update_flops


def test_forward_flops_match_update_flops_counting() -> None:
    from agentenvs.benchmarks.learning.model import CHECK_MODEL
    from agentenvs.benchmarks.speed.model_shapes import ModelShape

    spec = CHECK_MODEL
    shape = ModelShape(
        spec.hidden_size,
        spec.intermediate_size,
        spec.num_hidden_layers,
        spec.num_attention_heads,
        spec.num_key_value_heads,
        spec.head_dim,
        spec.vocab_size,
    )
    prompt, reply, n_body = 300, 20, 800_000
    seq = prompt + reply
    count = PhaseCount(tokens=seq, logit_rows=reply, attention_pairs=seq * seq // 2)
    assert forward_flops(shape, n_body, count) == pytest.approx(
        update_flops(shape, n_body, prompt, reply)[1]
    )


def test_learning_loop_runs_and_writes_its_table(tmp_path) -> None:
    out = tmp_path / "throughput.md"
    settings = [
        "train_tasks=8",
        "validation_tasks=2",
        "rl_prompts=2",
        "rl_samples=3",
        "max_turns=3",
        "max_new_tokens=8",
    ]
    argv = ["--preset", "keydoor", "--work", str(tmp_path / "work"), "--sft-steps", "0"]
    argv += ["--iterations", "1", "--threads", "1", "--ab-repeats", "1", "--out", str(out)]
    argv += [f"--set={item}" for item in settings]
    threads = torch.get_num_threads()
    try:
        assert main(argv) == 0
    finally:
        torch.set_num_threads(threads)
    text = out.read_text()
    assert "| keydoor | rollout |" in text and "| keydoor | update |" in text
    assert "load average" in text and "identical outputs" in text
    data = json.loads(out.with_suffix(".json").read_text())
    (result,) = data["results"]
    assert result["episodes"] == 6 and result["ab"]["identical_outputs"] is True
    assert result["ab"]["rows_shared"] >= 4  # the first turn: 3 samples of each of 2 tasks
    rollout = result["phases"]["rollout"]
    assert rollout["calls"] > 0 and rollout["gflop"] > 0 and 0 < rollout["of_peak"] < 1
    assert result["profile"]["rollout"]["top_ops"] and data["peak_flops"] > 0
    assert result["precision"]["rows"] > 0 and result["precision"]["max_gap"] >= 0
