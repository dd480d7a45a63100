"""What makes two runs differ: the same short RL run under different thread counts and with
deterministic algorithms forced, compared with a reference run, metric by metric and weight by
weight.

    python -m agentenvs.benchmarks.learning.reproduce --out results/reproduce

Each variant runs in its own process (thread counts and the deterministic-algorithms flag are
process-wide): PTGPO for a few iterations from a small SFT model, on CPU; "another CPU" is
emulated by forcing ATen's and MKL's AVX2 kernels on an AVX-512 machine. The report
says, per variant, whether every non-timing metric and every final weight equals the reference
run's, the first iteration whose metrics differ, the largest weight difference, and how far
apart the two thread counts' log-probs of one fixed batch are before any training (the float
kernels' own difference, which sampling at temperature 1 then amplifies: one different sampled
token changes the episode and everything after it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["VARIANTS", "compare", "main"]

_AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
VARIANTS: dict[str, dict[str, Any]] = {
    "reference (1 thread)": {"threads": 1, "deterministic": False},
    "rerun (1 thread)": {"threads": 1, "deterministic": False},
    "2 threads": {"threads": 2, "deterministic": False},
    "1 thread, deterministic algorithms": {"threads": 1, "deterministic": True},
    "2 threads, deterministic algorithms": {"threads": 2, "deterministic": True},
    # another CPU generation, emulated: the AVX2 kernels of ATen and MKL instead of AVX-512
    "1 thread, AVX2 kernels": {"threads": 1, "deterministic": False, "env": _AVX2},
    "1 thread, AVX2 kernels, deterministic": {"threads": 1, "deterministic": True, "env": _AVX2},
}
TIMING = ("time", "perf/")


def _worker(args: argparse.Namespace) -> int:
    import torch

    torch.set_num_threads(args.threads)
    if args.deterministic:
        torch.use_deterministic_algorithms(True)
    from agentenvs.train.config import load_config
    from agentenvs.train.rl import RLConfig, RLTrainer

    values = {
        "algo": "ptgpo",
        "model": args.model,
        "out_dir": args.out,
        "iterations": args.iterations,
        "prompts_per_iteration": 4,
        "samples_per_prompt": 8,
        "rollout.max_turns": 3,
        "rollout.max_new_tokens": 24,
        "optim.name": "sgd",
        "optim.lr": 0.4,
        "micro_batch_size": 32,
        "save_every": args.iterations,
        "tensorboard": "false",
        "seed": 0,
        "data.tasks": args.tasks,
    }
    config = load_config(RLConfig, None, [f"{k}={v}" for k, v in values.items()])
    final = RLTrainer(config, progress=False).train()
    probe = _probe_log_probs(args.model, args.tasks.split(","))
    torch.save({"probe": probe, "final": str(final)}, Path(args.out) / "probe.pt")
    return 0


def _probe_log_probs(model_dir: str, tasks: list[str]) -> Any:
    """Log-probs of a fixed batch (the tasks' first prompts plus a fixed reply) under the SFT
    model, before any training: the float kernels alone."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentenvs.registration import make

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    env = make("TextCraft-v0").unwrapped
    texts = []
    for task in tasks:
        observation, _ = env.reset(options={"task_id": task})
        texts.append(observation + "\nThink: I take the next step.\nAction: [[ get 1 oak logs ]]")
    batch = tok(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        logits = model(**batch).logits
    log_probs = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    return log_probs.gather(-1, batch["input_ids"][:, 1:, None])[..., 0]


def compare(reference: Path, other: Path) -> dict[str, Any]:
    """Metrics and weights of run ``other`` against run ``reference``."""
    import torch
    from transformers import AutoModelForCausalLM

    def metrics(path: Path) -> list[dict[str, Any]]:
        lines = [json.loads(x) for x in (path / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in m.items() if not k.startswith(TIMING)} for m in lines]

    a, b = metrics(reference), metrics(other)
    first = next((i + 1 for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), None)
    pa, pb = torch.load(reference / "probe.pt"), torch.load(other / "probe.pt")
    wa = AutoModelForCausalLM.from_pretrained(pa["final"] + "/model").state_dict()
    wb = AutoModelForCausalLM.from_pretrained(pb["final"] + "/model").state_dict()
    weight_diff = max(float((wa[k] - wb[k]).abs().max()) for k in wa)
    return {
        "metrics_equal": a == b,
        "first_differing_iteration": first,
        "weights_equal": all(torch.equal(wa[k], wb[k]) for k in wa),
        "max_weight_diff": weight_diff,
        "probe_log_prob_max_diff": float((pa["probe"] - pb["probe"]).abs().max()),
        "success_per_iteration": [m.get("rollout/success_rate") for m in b],
        "generated_tokens_per_iteration": [m.get("rollout/generated_tokens") for m in b],
    }


def _format(results: dict[str, dict[str, Any]], iterations: int, machine: dict) -> str:
    lines = [
        f"# Reproducibility: PTGPO, {iterations} iterations, a small SFT model",
        "",
        f"machine: {machine['cpu_model']}, torch {machine['torch_version']}, "
        f"CPU capability {machine['cpu_capability']}",
        "",
        "| variant | metrics equal | first differing iteration | weights equal | "
        "max weight diff | probe log-prob max diff | success per iteration |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        success = ", ".join(f"{v:.2f}" for v in r["success_per_iteration"])
        lines.append(
            f"| {name} | {r['metrics_equal']} | {r['first_differing_iteration'] or '-'} | "
            f"{r['weights_equal']} | {r['max_weight_diff']:.2e} | "
            f"{r['probe_log_prob_max_diff']:.2e} | {success} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("results/reproduce"))
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--tasks", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--deterministic", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return _worker(args)
    from agentenvs.benchmarks.learning.report import machine
    from agentenvs.benchmarks.learning.run import run_benchmark
    from agentenvs.benchmarks.learning.settings import preset

    base = args.out / "model"
    # a policy that wins some episodes (else every advantage is 0 and no weight moves): SFT
    # longer on 6 training tasks, RL on the same tasks (this measures runs, not learning)
    smoke = preset("smoke", arms=("sft",), seeds=(0,), train_tasks=6, sft_steps=150)
    run_benchmark(smoke, base, progress=False)
    model = json.loads((base / "sft" / "seed-0" / "result.json").read_text())["model"]
    tasks = ",".join(json.loads((base / "tasks.json").read_text())["train"][:6])
    runs = {}
    for i, (name, variant) in enumerate(VARIANTS.items()):
        run = args.out / f"run-{i}"
        if not (run / "probe.pt").is_file():
            cmd = [sys.executable, "-m", "agentenvs.benchmarks.learning.reproduce", "--worker"]
            cmd += ["--model", model, "--tasks", tasks, "--out", str(run)]
            cmd += ["--threads", str(variant["threads"]), "--iterations", str(args.iterations)]
            cmd += ["--deterministic"] if variant["deterministic"] else []
            env = {**os.environ, **variant.get("env", {})}
            subprocess.run(cmd, check=True, env=env)
        runs[name] = run
    reference = runs["reference (1 thread)"]
    results = {name: compare(reference, run) for name, run in runs.items()}
    text = _format(results, args.iterations, machine(1))
    (args.out / "reproduce.json").write_text(json.dumps(results, indent=1))
    (args.out / "reproduce.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
