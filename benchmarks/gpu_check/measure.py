"""The check's models, its eval measurement and Prefix-GRPO's queries, and the device and
memory helpers the steps share."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentenvs.agents.tiny_model import build_tiny_model
from agentenvs.agents.trajectory import read_trajectories, write_trajectories
from agentenvs.benchmarks.eval.evaluate import evaluate
from agentenvs.benchmarks.eval.resume import TRAJECTORIES
from agentenvs.benchmarks.eval.settings import EvalSettings
from agentenvs.benchmarks.gpu_check.plan import CheckPlan
from agentenvs.benchmarks.gpu_check.runner import free_device_memory
from agentenvs.benchmarks.learning.check import expert_trajectories
from agentenvs.benchmarks.speed.model_shapes import ModelShape, nonembedding_parameters
from agentenvs.replay import CutConfig, run_cuts, run_sidecar, run_validate

__all__ = ["build_models", "build_queries", "check_device", "peak_memory", "run_eval"]


def check_device(plan: CheckPlan) -> torch.device:
    """The plan's device; a CUDA plan without a CUDA device is an error saying what to do."""
    if plan.device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError("no CUDA device here: run on a GPU, or pass --dry-run (CPU)")
    return torch.device(plan.device)


@contextlib.contextmanager
def peak_memory(device: torch.device, into: dict[str, Any]) -> Iterator[None]:
    """Peak allocated / reserved GPU memory of the block (GiB) into ``into`` (None on CPU)."""
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    try:
        yield
    finally:
        if cuda:
            torch.cuda.synchronize()
        into["peak_memory_allocated_gib"] = (
            torch.cuda.max_memory_allocated() / 2**30 if cuda else None
        )
        into["peak_memory_reserved_gib"] = (
            torch.cuda.max_memory_reserved() / 2**30 if cuda else None
        )


def build_models(plan: CheckPlan, out: Path) -> dict[str, Any]:
    """The tiny model's tokenizer and a random-init model of each shape, saved in bf16."""
    device = check_device(plan)
    tokenizer = AutoTokenizer.from_pretrained(build_tiny_model(out / "tiny"))
    result: dict[str, Any] = {"tokenizer_tokens": len(tokenizer)}
    for seed, shape in enumerate((plan.small, plan.large)):
        clock = time.perf_counter()
        target = out / shape.name
        torch.manual_seed(seed)
        with torch.device(device):  # initialise where it runs: a 1.7B init on CPU takes long
            model = AutoModelForCausalLM.from_config(shape.config(tokenizer), dtype=torch.float32)
        model.generation_config.eos_token_id = model.config.eos_token_id
        model.generation_config.pad_token_id = model.config.pad_token_id
        model.to(torch.bfloat16).save_pretrained(target)
        tokenizer.save_pretrained(target)
        result[shape.name] = {
            "path": str(target),
            "class": type(model).__name__,
            "parameters": sum(p.numel() for p in model.parameters()),
            "nonembedding_parameters": nonembedding_parameters(model),
            "seconds": time.perf_counter() - clock,
        }
        del model
        free_device_memory()
    return result


def run_eval(plan: CheckPlan, shape: ModelShape, model_dir: str, out: Path) -> dict[str, Any]:
    """``agentenvs eval`` on TextCraft with the transformers backend; speed and memory."""
    device = check_device(plan)
    episodes = plan.eval_tasks * plan.eval_samples
    settings = EvalSettings(
        env_id="TextCraft-v0",
        agent=f"hf:{model_dir}",
        k=plan.eval_samples,
        limit=plan.eval_tasks,
        max_turns=plan.eval_max_turns,
        max_new_tokens=plan.eval_max_new_tokens,
        max_active=episodes,
        agent_options={
            "device": plan.device,
            "dtype": plan.eval_dtype,
            "max_batch_size": episodes,
            **plan.policy_options,
        },
    )
    result: dict[str, Any] = {"episodes_planned": episodes}
    with peak_memory(device, result):
        clock = time.perf_counter()
        evaluated = evaluate(settings, out, fresh=True, progress=False)
        wall = time.perf_counter() - clock
    trajectories = list(read_trajectories(out / TRAJECTORIES))
    errors = [t.error for t in trajectories if t.error is not None]
    if errors:
        raise RuntimeError(f"{len(errors)} of {len(trajectories)} episodes failed: {errors[0]}")
    tokens = sum(len(s.token_ids or ()) for t in trajectories for s in t.steps)
    backend = json.loads((out / "run.json").read_text()).get("backend", {})
    result.update(
        shape=shape.name,
        episodes=evaluated.episodes,
        turns=sum(t.turns for t in trajectories),
        generated_tokens=tokens,
        wall_s=wall,
        generated_tokens_per_s=tokens / wall,
        episodes_per_min=evaluated.episodes / wall * 60.0,
        max_turns=plan.eval_max_turns,
        max_new_tokens=plan.eval_max_new_tokens,
        backend=backend,
    )
    return result


def build_queries(plan: CheckPlan, model_dir: str, out: Path) -> tuple[Path, dict[str, Any]]:
    """Prefix-GRPO's queries: the expert's episodes, cut, replay-validated, with sidecars."""
    out.mkdir(parents=True, exist_ok=True)
    clock = time.perf_counter()
    expert = out / "expert.jsonl"
    write_trajectories(expert, expert_trajectories("TextCraft-v0", plan.query_tasks))
    dtype = plan.eval_dtype
    run_cuts(
        [expert],
        out / "queries.jsonl",
        [CutConfig()],
        model_path=model_dir,
        device=plan.device,
        dtype=dtype,
        progress=False,
    )
    run_validate(out / "queries.jsonl", out / "validated.jsonl", progress=False)
    sidecar = run_sidecar(
        out / "validated.jsonl",
        out / "samples.jsonl",
        model_path=model_dir,
        device=plan.device,
        dtype=dtype,
        progress=False,
    )
    samples = out / "samples.jsonl"
    rows = [json.loads(line) for line in samples.read_text().splitlines() if line.strip()]
    if not rows:
        raise RuntimeError(f"no validated query in {samples}: {sidecar}")
    return samples, {
        "queries": len(rows),
        "deepest_prefix_turns": max(int(r["prefix_turns"]) for r in rows),
        "seconds": time.perf_counter() - clock,
    }
