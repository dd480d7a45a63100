"""The check's run and report: :func:`run_check` plays the selected steps and writes
``OUT/gpu_check.json``; :func:`main` is the command line, printing a table."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import transformers

from agentenvs.benchmarks.eval.cli import key_value
from agentenvs.benchmarks.gpu_check.fsdp import fsdp_worker, run_torchrun
from agentenvs.benchmarks.gpu_check.measure import build_models, build_queries, run_eval
from agentenvs.benchmarks.gpu_check.plan import (
    DRY_RUN_PLAN,
    GPU_PLAN,
    SCHEMA_VERSION,
    STEPS,
    CheckPlan,
    plan_dict,
    set_threads,
)
from agentenvs.benchmarks.gpu_check.rl import run_rl
from agentenvs.benchmarks.gpu_check.runner import StepRunner
from agentenvs.benchmarks.speed.model_shapes import BF16_DENSE_PEAK_TFLOPS, ModelShape

__all__ = ["build_parser", "format_table", "main", "run_check", "versions"]


def versions() -> dict[str, Any]:
    """The software and the device the check ran on."""
    cuda = torch.cuda.is_available()
    nccl = None
    if cuda:
        with contextlib.suppress(Exception):
            nccl = ".".join(str(v) for v in torch.cuda.nccl.version())
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "nccl": nccl,
        "transformers": transformers.__version__,
        "device": torch.cuda.get_device_name() if cuda else platform.processor() or "cpu",
        "device_memory_gib": (
            torch.cuda.get_device_properties(0).total_memory / 2**30 if cuda else None
        ),
        "capability": ".".join(map(str, torch.cuda.get_device_capability())) if cuda else None,
    }


def run_check(
    out: str | Path,
    *,
    dry_run: bool = False,
    steps: Sequence[str] = STEPS,
    peak_tflops: float = BF16_DENSE_PEAK_TFLOPS,
    budget_s: float | None = None,
    policy_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run the selected steps (:mod:`agentenvs.benchmarks.gpu_check`); returns the report (also
    written to ``OUT/gpu_check.json``)."""
    plan = DRY_RUN_PLAN if dry_run else GPU_PLAN
    plan = dataclasses.replace(plan, policy_options=dict(policy_options or {}))
    if budget_s is not None:
        plan = dataclasses.replace(plan, budget_s=budget_s)
    unknown = sorted(set(steps) - set(STEPS))
    if unknown:
        raise ValueError(f"unknown steps {unknown}; choose from {list(STEPS)}")
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    set_threads(plan)
    runner = StepRunner(plan, steps)
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    _run_steps(runner, plan, root, peak_tflops=peak_tflops, dry_run=dry_run)
    report = {
        "schema_version": SCHEMA_VERSION,
        "dry_run": dry_run,
        "started_utc": started,
        "wall_s": time.perf_counter() - runner.start,
        "budget_s": plan.budget_s,
        "peak_tflops": peak_tflops,
        "versions": versions(),
        "plan": plan_dict(plan),
        "steps": [dataclasses.asdict(r) for r in runner.records],
        "failed": [r.name for r in runner.records if not r.ok],
    }
    (root / "gpu_check.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    return report


def _run_steps(
    runner: StepRunner, plan: CheckPlan, root: Path, *, peak_tflops: float, dry_run: bool
) -> None:
    """The steps in order, each given what it needs (:data:`STEPS`)."""
    models = root / "models"
    if "models" not in runner.selected and (models / plan.large.name / "config.json").exists():
        runner.outputs["models"] = {  # a rerun of later steps reuses the models on disk
            s.name: {"path": str(models / s.name)} for s in (plan.small, plan.large)
        }

    def path(shape: ModelShape) -> str:
        return runner.outputs["models"][shape.name]["path"]

    def prefix_grpo() -> dict[str, Any]:
        queries, built = build_queries(plan, path(plan.large), root / "rl" / "queries")
        result = run_rl(
            plan,
            "prefix-grpo",
            path(plan.large),
            root / "rl" / "prefix-grpo",
            peak_tflops,
            queries=queries,
            # a cut's prefix replies count against the turn limit: every query keeps the
            # plan's number of generated replies
            max_turns=plan.rl_max_turns + built["deepest_prefix_turns"],
        )
        return {"query_building": built, **result}

    runner.run("models", lambda: build_models(plan, models))
    for step, shape in (("eval_smollm2_135m", plan.small), ("eval_qwen3_1p7b", plan.large)):
        runner.run(
            step,
            lambda shape=shape: run_eval(plan, shape, path(shape), root / "eval" / shape.name),
            needs=["models"],
        )
    runner.run(
        "rl_ptgpo",
        lambda: run_rl(plan, "ptgpo", path(plan.large), root / "rl" / "ptgpo", peak_tflops),
        needs=["models"],
    )
    runner.run("rl_prefix_grpo", prefix_grpo, needs=["models"])
    runner.run(
        "torchrun_fsdp2",
        lambda: run_torchrun(plan, path(plan.large), root / "fsdp2", runner.limit, dry_run),
        needs=["models"],
    )


def format_table(report: dict[str, Any]) -> str:
    """The report as a Markdown table: one line per step with its main figures."""
    v = report["versions"]
    lines = [
        f"gpu_check{' (dry run)' if report['dry_run'] else ''}: {v['device']}, torch "
        f"{v['torch']}, CUDA {v['cuda']}, NCCL {v['nccl']}, transformers {v['transformers']}; "
        f"{report['wall_s']:.0f} s of {report['budget_s']:.0f}",
        "",
        "| step | ok | s | figures |",
        "|---|---|---:|---|",
    ]
    for step in report["steps"]:
        figures = step["error"] or _figures(step["name"], step["result"])
        lines.append(
            f"| {step['name']} | {'yes' if step['ok'] else 'NO'} | {step['seconds']:.1f} | "
            f"{figures.splitlines()[0] if figures else ''} |"
        )
    return "\n".join(lines)


def _gib(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} GiB"


def _figures(name: str, r: dict[str, Any]) -> str:
    """A step's main figures in one line."""
    if name == "models":
        return ", ".join(
            f"{k} {v['parameters'] / 1e6:.1f}M params" for k, v in r.items() if isinstance(v, dict)
        )
    if name.startswith("eval_"):
        return (
            f"{r['generated_tokens_per_s']:.0f} tok/s, {r['episodes_per_min']:.1f} episodes/min, "
            f"peak {_gib(r['peak_memory_allocated_gib'])}"
        )
    if name.startswith("rl_"):
        m = r["median_after_first"]
        return (
            f"rollout {m['rollout_s']:.1f} s / old-lp {m['old_log_prob_s']:.2f} s / update "
            f"{m['update_s']:.2f} s; gap {m['rollout_trainer_logprob_gap']:.4f}; "
            f"{m['update_tflops']:.1f} TFLOP/s, MFU {100 * m['mfu']:.1f}%; "
            f"peak {_gib(r['peak_memory_allocated_gib'])}"
        )
    if name == "torchrun_fsdp2":
        return (
            f"{r['backend']}, sharded {r['sharded']}, iteration {r['iteration_s']:.1f} s, "
            f"gap {r['rollout_trainer_logprob_gap']:.4f}, peak "
            f"{_gib(r['peak_memory_allocated_gib'])}"
        )
    return ""


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m agentenvs.benchmarks.gpu_check``."""
    parser = argparse.ArgumentParser(
        prog="python -m agentenvs.benchmarks.gpu_check",
        description="The GPU path, checked in one command: eval, RL in bf16 and FSDP2 on NCCL.",
    )
    parser.add_argument("--out", required=True, help="output directory (gpu_check.json)")
    parser.add_argument(
        "--dry-run", action="store_true", help="CPU, small shapes, gloo: every step, quickly"
    )
    parser.add_argument(
        "--steps",
        default=",".join(STEPS),
        help=f"comma-separated subset (default all): {','.join(STEPS)}",
    )
    parser.add_argument(
        "--peak-tflops",
        type=float,
        default=BF16_DENSE_PEAK_TFLOPS,
        help=f"the MFU denominator (default {BF16_DENSE_PEAK_TFLOPS:g}, the dense bf16 peak of "
        "an H100 or H200)",
    )
    parser.add_argument("--budget-s", type=float, default=None, help="overall time budget")
    parser.add_argument(
        "--policy-opt",
        type=key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="transformers backend option for the evals and the RL rollouts, e.g. "
        "prefix_cache=false (repeatable; default: the backend's defaults)",
    )
    parser.add_argument("--fsdp-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the check (or, with ``--fsdp-worker``, the torchrun worker); 1 when a step failed,
    2 for bad arguments."""
    args = build_parser().parse_args(argv)
    if args.fsdp_worker:
        return fsdp_worker(args)
    steps = [s.strip() for s in args.steps.split(",") if s.strip()]
    try:
        report = run_check(
            args.out,
            dry_run=args.dry_run,
            steps=steps,
            peak_tflops=args.peak_tflops,
            budget_s=args.budget_s,
            policy_options=dict(args.policy_opt),
        )
    except ValueError as exc:
        print(f"gpu_check: {exc}", file=sys.stderr)
        return 2
    print(format_table(report))
    print(f"\n{Path(args.out) / 'gpu_check.json'}")
    for step in report["steps"]:
        if not step["ok"]:
            print(f"\n{step['name']} failed: {step['error']}", file=sys.stderr)
            if step["traceback"]:
                print(step["traceback"], file=sys.stderr)
    return 1 if report["failed"] else 0
