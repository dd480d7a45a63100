"""The GPU check (:mod:`agentenvs.benchmarks.gpu_check`): its dry run plays every step on CPU
(tiny shapes, gloo instead of NCCL) and reports numbers for each; the shapes are the published
models'; a failed or overlong step is recorded and the command exits non-zero."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agentenvs.benchmarks.gpu_check import cli, fsdp, plan, rl  # noqa: E402
from agentenvs.benchmarks.gpu_check.runner import StepRunner, StepTimeout  # noqa: E402
from agentenvs.benchmarks.speed.model_shapes import (  # noqa: E402
    BF16_DENSE_PEAK_TFLOPS,
    QWEN3_1P7B,
    SMOLLM2_135M,
    nonembedding_parameters,
)

ROOT = Path(__file__).resolve().parents[2]


def run_command(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.run(
        [sys.executable, "-m", "agentenvs.benchmarks.gpu_check", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def test_dry_run_plays_every_step_and_reports_numbers(tmp_path):
    if not torch.distributed.is_available():
        pytest.skip("this torch build has no torch.distributed (the torchrun step needs it)")
    proc = run_command("--dry-run", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["schema_version"] == plan.SCHEMA_VERSION and report["dry_run"] is True
    assert report["versions"]["torch"] == torch.__version__
    assert report["peak_tflops"] == BF16_DENSE_PEAK_TFLOPS
    steps = {s["name"]: s for s in report["steps"]}
    assert list(steps) == list(plan.STEPS) and report["failed"] == []
    for step in steps.values():
        assert step["ok"] and step["error"] is None and 0 < step["seconds"] <= step["limit_s"]

    models = steps["models"]["result"]
    assert models["smollm2_135m"]["class"] == "LlamaForCausalLM"
    assert models["qwen3_1p7b"]["class"] == "Qwen3ForCausalLM"
    dry = plan.DRY_RUN_PLAN
    for name in ("eval_smollm2_135m", "eval_qwen3_1p7b"):
        r = steps[name]["result"]
        assert r["episodes"] == dry.eval_tasks * dry.eval_samples
        assert r["generated_tokens"] > 0
        assert r["generated_tokens_per_s"] > 0 and r["episodes_per_min"] > 0
        assert r["backend"]["device"] == "cpu"
    for name in ("rl_ptgpo", "rl_prefix_grpo"):
        r = steps[name]["result"]
        assert len(r["iterations"]) == dry.rl_iterations
        for it in r["iterations"]:
            for key in ("rollout_s", "old_log_prob_s", "update_s", "update_tflops", "mfu"):
                assert finite(it[key]) and it[key] > 0, (name, key, it)
            assert finite(it["rollout_trainer_logprob_gap"])
            assert it["rows"] > 0 and it["optimizer_steps"] > 0  # the passes ran
        assert all(finite(v) for v in r["median_after_first"].values())
    assert steps["rl_prefix_grpo"]["result"]["query_building"]["queries"] > 0
    fsdp = steps["torchrun_fsdp2"]["result"]
    assert fsdp["backend"] == "gloo" and fsdp["sharded"] is True and fsdp["world_size"] == 1
    assert fsdp["rows"] > 0 and fsdp["update_s"] > 0
    assert "| rl_ptgpo | yes |" in proc.stdout  # the printed table


def test_a_step_without_its_models_is_a_recorded_failure(tmp_path, capsys):
    steps = "rl_ptgpo,eval_qwen3_1p7b"
    assert cli.main(["--dry-run", "--out", str(tmp_path), "--steps", steps]) == 1
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["failed"] == ["eval_qwen3_1p7b", "rl_ptgpo"]
    assert all("needs step(s) models" in s["error"] for s in report["steps"])
    out = capsys.readouterr()
    assert "| rl_ptgpo | NO |" in out.out and "rl_ptgpo failed" in out.err


def test_unknown_step_is_refused(tmp_path):
    assert cli.main(["--out", str(tmp_path), "--steps", "models,warp"]) == 2


def test_overlong_and_failing_steps_are_recorded_and_the_next_steps_run():
    limited = dataclasses.replace(plan.DRY_RUN_PLAN, limits_s={"slow": 0.5, "bad": 10, "fine": 10})
    runner = StepRunner(limited, ["slow", "bad", "fine"])
    clock = time.perf_counter()
    runner.run("slow", lambda: time.sleep(30) or {})
    runner.run("bad", lambda: 1 / 0)
    runner.run("fine", lambda: {"value": 1.0})
    assert time.perf_counter() - clock < 20  # the 30 s sleep was cut off at its 0.5 s limit
    slow, bad, fine = runner.records
    assert not slow.ok and slow.error.startswith("StepTimeout") and "0.5 s limit" in slow.error
    assert not bad.ok and bad.error.startswith("ZeroDivisionError")
    assert "1 / 0" in bad.traceback
    assert fine.ok and fine.result == {"value": 1.0}


def test_spent_budget_skips_the_remaining_steps():
    runner = StepRunner(dataclasses.replace(plan.DRY_RUN_PLAN, budget_s=0.5), ["late"])
    time.sleep(0.6)
    runner.run("late", lambda: {})
    assert not runner.records[0].ok and "budget was spent" in runner.records[0].error


@pytest.mark.parametrize(
    ("shape", "cls", "total", "body"),
    [
        # published: SmolLM2-135M 134.5M parameters; Qwen3-1.7B 1.7B, 1.4B non-embedding
        (SMOLLM2_135M, "LlamaForCausalLM", 134_515_008, 106_203_456),
        (QWEN3_1P7B, "Qwen3ForCausalLM", 1_720_574_976, 1_409_410_048),
    ],
)
def test_shapes_are_the_published_models(tmp_path, shape, cls, total, body):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentenvs.agents.tiny_model import build_tiny_model

    tokenizer = AutoTokenizer.from_pretrained(build_tiny_model(tmp_path / "tiny"))
    config = shape.config(tokenizer)
    with torch.device("meta"):  # shapes only, no memory
        model = AutoModelForCausalLM.from_config(config)
    assert type(model).__name__ == cls and config.tie_word_embeddings
    assert sum(p.numel() for p in model.parameters()) == total
    assert nonembedding_parameters(model) == body
    assert config.eos_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>")


def test_update_tflops_counts_the_shapes_flops():
    shape = QWEN3_1P7B
    body, d, layers, d_attn = 1_409_410_048, 2048, 28, 16 * 128
    seq, reply = 1000, 100
    per_row = 6 * body * seq + 6 * d * shape.vocab_size * reply + 6 * layers * d_attn * seq**2
    measured = rl.update_tflops(shape, body, [(seq - reply, reply)] * 4, 2, 1.0)
    assert measured == pytest.approx(per_row * 4 * 2 / 1e12)


def test_torchrun_past_its_limit_is_stopped_and_recorded(tmp_path):
    clock = time.perf_counter()
    with pytest.raises(StepTimeout, match="torchrun stopped after 4 s"):
        fsdp.run_torchrun(plan.DRY_RUN_PLAN, str(tmp_path), tmp_path, 4, True)
    assert time.perf_counter() - clock < 10
    assert not (tmp_path / "worker.json").exists()


def test_policy_options_reach_the_rl_rollout_policy(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentenvs.agents.tiny_model import build_tiny_model
    from agentenvs.train.rl import RLConfig

    args = cli.build_parser().parse_args(
        ["--out", "x", "--policy-opt", "share_prefix=false", "--policy-opt", "prefix_cache=false"]
    )
    options = dict(args.policy_opt)
    assert options == {"share_prefix": False, "prefix_cache": False}
    assert rl.policy_factory(plan.DRY_RUN_PLAN) is None  # the trainer's own
    with_options = dataclasses.replace(plan.DRY_RUN_PLAN, policy_options=options)
    model_dir = build_tiny_model(tmp_path / "tiny")
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    config = RLConfig(algo="ptgpo", model=str(model_dir), tensorboard=False)
    policy = rl.policy_factory(with_options)(model, tokenizer, config)
    try:
        assert policy.model is model  # generates with the trainer's model
        assert policy.share_prefix is False and policy.prefix_cache is None
    finally:
        policy.close()
