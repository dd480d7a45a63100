"""Training speed: tokens per second and where an RL iteration's time goes.

    python -m agentenvs.benchmarks.speed.train --mode cpu  # the RL loop with the tiny model
    python -m agentenvs.benchmarks.speed.train --mode gpu  # Qwen3-1.7B shape, bf16 (needs CUDA)
    # the GPU code path, checked on CPU with a small shape:
    python -m agentenvs.benchmarks.speed.train --mode gpu --device cpu --shape small

``cpu`` runs the real loop (:class:`agentenvs.train.rl.RLTrainer`, PTGPO) on TextCraft with the tiny
randomly initialised model (:func:`agentenvs.agents.tiny_model.build_tiny_model`, the paper's
prompts) and reports, per iteration after a warm-up one: training tokens per second in the update
(prompt and reply tokens of every row, times the PPO epochs, over the update's time), end-to-end
tokens per second, generated tokens per second, and the shares of time in rollout, advantage,
old-log-prob recomputation and update.

``gpu`` times the trainer's update path on synthetic rows (random token ids, random advantages)
with a randomly initialised model of Qwen3-1.7B's shape: the old-log-prob pass and one PPO epoch
(fp32 master weights, bf16 autocast, AdamW), and reports training tokens per second and model
FLOPs utilisation: FLOPs counted as 6 x non-embedding parameters per token, 6 x d_model x vocab
per reply token (logits are computed only where a log-prob is needed), and causal attention
6 x layers x d_attn x S^2 per row (x 1/3 of each for the forward-only old-log-prob pass),
over the bf16 dense peak (``--peak-tflops``; default
:data:`agentenvs.benchmarks.speed.model_shapes.BF16_DENSE_PEAK_TFLOPS` on an H100 or H200).

``generate`` (also part of ``gpu``) compares the rollout side with the trainer's side on the same
randomly initialised model (fp32 weights, bf16 autocast on GPUs, as the RL loop holds it):
transformers ``generate`` (sampling, a KV cache, every row decoding ``--new-tokens`` tokens)
in generated tokens per second, against the trainer's forward pass over the same sequences (the
old-log-prob pass) in tokens per second, and their ratio: how much faster the trainer reads a
token than the rollout engine writes one (the gap vLLM closes).

    python -m agentenvs.benchmarks.speed.train --mode generate      # Qwen3-1.7B shape on CUDA
    python -m agentenvs.benchmarks.speed.train --mode generate --device cpu --shape small
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agentenvs.benchmarks.speed.model_shapes import (
    QWEN3_1P7B,
    ModelShape,
    nonembedding_parameters,
    peak_tflops_for,
    update_flops,
)

__all__ = [
    "SMALL_SHAPE",
    "GenerateSpeed",
    "UpdateSpeed",
    "generate_speed",
    "loop_speed",
    "main",
    "update_speed",
]


SMALL_SHAPE = ModelShape(128, 384, 2, 4, 2, 32, 4096, name="small")


@dataclass(frozen=True)
class UpdateSpeed:
    """Timings of the update path on synthetic rows."""

    rows: int
    prompt_tokens: int
    response_tokens: int
    old_log_prob_s: float
    update_s: float
    tokens_per_s: float
    """(prompt + reply) tokens of every row over the update's time (one epoch)."""
    update_tflops: float
    old_log_prob_tflops: float
    mfu: float | None
    peak_tflops: float | None
    peak_memory_gib: float | None


def _synthetic_rows(rows: int, prompt: int, response: int, vocab: int, seed: int) -> list[Any]:
    import torch

    from agentenvs.train.rl.batch import StepRow

    generator = torch.Generator().manual_seed(seed)
    out = []
    for i in range(rows):
        ids = torch.randint(10, vocab, (prompt + response,), generator=generator).tolist()
        out.append(
            StepRow(
                prompt_ids=ids[:prompt],
                response_ids=ids[prompt:],
                rollout_log_probs=[0.0] * response,
                reward=float(i % 2),
                group_id=str(i // 8),
                episode_id=str(i),
                step_index=0,
                anchor="",
                action="",
                episode_won=bool(i % 2),
                episode_reward=float(i % 2),
                advantages=torch.randn(response, generator=generator),
            )
        )
    return out


def _sync(device: Any) -> None:
    """Wait for the device's queued work (CUDA runs asynchronously)."""
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize()


def _random_model(shape: ModelShape, device: Any, seed: int) -> Any:
    """A randomly initialised model of ``shape``, fp32 weights (the trainer's), on ``device``."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(shape.config(), dtype=torch.float32).to(device)


def _timed_old_log_probs(
    model: Any, rows: list[Any], micro_batch_size: int, device: Any, precision: str
) -> float:
    """Seconds of the trainer's old-log-prob pass over ``rows`` (device work included)."""
    from agentenvs.train.rl.update import recompute_old_log_probs

    _sync(device)
    start = time.perf_counter()
    recompute_old_log_probs(
        model,
        rows,
        micro_batch_size=micro_batch_size,
        pad_id=0,
        device=device,
        precision=precision,
    )
    _sync(device)
    return time.perf_counter() - start


def update_speed(
    shape: ModelShape,
    *,
    device: str = "cuda",
    rows: int = 64,
    prompt: int = 1536,
    response: int = 512,
    micro_batch_size: int = 8,
    precision: str = "bf16",
    peak_tflops: float | None = None,
    seed: int = 0,
) -> UpdateSpeed:
    """Time the old-log-prob pass and one PPO epoch on ``rows`` synthetic rows."""
    import torch

    from agentenvs.train.losses import PolicyLossConfig
    from agentenvs.train.rl.update import (
        UpdateSettings,
        apply_correction,
        ppo_update,
    )
    from agentenvs.train.runtime import make_optimizer, make_scheduler

    dev = torch.device(device)
    model = _random_model(shape, dev, seed)
    n_body = nonembedding_parameters(model)
    optimizer = make_optimizer(model, 1e-6)
    scheduler = make_scheduler(optimizer, 10, 0.0, "constant")
    data = _synthetic_rows(rows, prompt, response, shape.vocab_size, seed)
    settings = UpdateSettings(
        PolicyLossConfig(), None, None, 1, 1, micro_batch_size, 1.0, precision, seed
    )

    def run() -> tuple[float, float]:
        old_s = _timed_old_log_probs(model, data, micro_batch_size, dev, precision)
        apply_correction(data, None)
        t1 = time.perf_counter()
        ppo_update(
            model,
            optimizer,
            scheduler,
            data,
            settings,
            iteration=0,
            pad_id=0,
            device=dev,
            last_checkpoint=None,
        )
        _sync(dev)
        return old_s, time.perf_counter() - t1

    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    run()  # warm-up (kernels, allocator, optimizer state)
    old_s, update_s = run()
    train_flops, fwd_flops = update_flops(shape, n_body, prompt, response)
    update_tflops = train_flops * rows / update_s / 1e12
    memory = torch.cuda.max_memory_allocated() / 2**30 if dev.type == "cuda" else None
    return UpdateSpeed(
        rows=rows,
        prompt_tokens=prompt,
        response_tokens=response,
        old_log_prob_s=old_s,
        update_s=update_s,
        tokens_per_s=rows * (prompt + response) / update_s,
        update_tflops=update_tflops,
        old_log_prob_tflops=fwd_flops * rows / old_s / 1e12,
        mfu=update_tflops / peak_tflops if peak_tflops else None,
        peak_tflops=peak_tflops,
        peak_memory_gib=memory,
    )


@dataclass(frozen=True)
class GenerateSpeed:
    """Rollout generation against the trainer's forward pass, same model, same sequences."""

    rows: int
    prompt_tokens: int
    new_tokens: int
    generate_s: float
    generate_tokens_per_s: float
    """Generated tokens of every row over the generation's time."""
    forward_s: float
    forward_tokens_per_s: float
    """(prompt + generated) tokens of every row over the old-log-prob pass's time."""
    forward_over_generate: float
    """``forward_tokens_per_s / generate_tokens_per_s``."""
    peak_memory_gib: float | None


def generate_speed(
    shape: ModelShape,
    *,
    device: str = "cuda",
    rows: int = 64,
    prompt: int = 1024,
    new_tokens: int = 256,
    micro_batch_size: int = 8,
    precision: str = "bf16",
    seed: int = 0,
) -> GenerateSpeed:
    """Time ``generate`` of ``new_tokens`` tokens for ``rows`` random prompts of ``prompt``
    tokens, then the old-log-prob pass over the generated sequences (after a warm-up of each)."""
    import torch

    from agentenvs.train.device import autocast_context

    dev = torch.device(device)
    model = _random_model(shape, dev, seed)
    model.eval()
    generator = torch.Generator().manual_seed(seed)
    prompts = torch.randint(10, shape.vocab_size, (rows, prompt), generator=generator).to(dev)

    def generate(count: int) -> torch.Tensor:
        _sync(dev)
        with torch.inference_mode(), autocast_context(dev, precision):
            out = model.generate(
                input_ids=prompts,
                attention_mask=torch.ones_like(prompts),
                max_new_tokens=count,
                min_new_tokens=count,  # a random model rarely stops; make sure it never does
                do_sample=True,
                temperature=1.0,
                top_p=1.0,
                top_k=0,
                pad_token_id=0,
            )
        _sync(dev)
        return out

    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    generate(4)  # warm-up
    t0 = time.perf_counter()
    sequences = generate(new_tokens).cpu()
    generate_s = time.perf_counter() - t0
    data = _synthetic_rows(rows, prompt, new_tokens, shape.vocab_size, seed)
    for row, ids in zip(data, sequences.tolist(), strict=True):
        row.prompt_ids, row.response_ids = ids[:prompt], ids[prompt:]

    _timed_old_log_probs(model, data, micro_batch_size, dev, precision)  # warm-up
    forward_s = _timed_old_log_probs(model, data, micro_batch_size, dev, precision)
    generated = rows * new_tokens
    generate_tps = generated / generate_s
    forward_tps = rows * (prompt + new_tokens) / forward_s
    memory = torch.cuda.max_memory_allocated() / 2**30 if dev.type == "cuda" else None
    return GenerateSpeed(
        rows=rows,
        prompt_tokens=prompt,
        new_tokens=new_tokens,
        generate_s=generate_s,
        generate_tokens_per_s=generate_tps,
        forward_s=forward_s,
        forward_tokens_per_s=forward_tps,
        forward_over_generate=forward_tps / generate_tps,
        peak_memory_gib=memory,
    )


def loop_speed(out_dir: str | Path, *, iterations: int = 4, algo: str = "ptgpo") -> dict[str, Any]:
    """The RL loop on CPU with the tiny model; medians over the iterations after the first."""
    from agentenvs.agents.tiny_model import build_tiny_model
    from agentenvs.train.config import load_config
    from agentenvs.train.rl import RLConfig, RLTrainer

    out = Path(out_dir)
    model = build_tiny_model(out / "tiny")
    values = {
        "algo": algo,
        "model": model,
        "out_dir": out / "run",
        "iterations": iterations,
        "prompts_per_iteration": 4,
        "samples_per_prompt": 4,
        "rollout.max_turns": 3,
        "rollout.max_new_tokens": 32,
        "micro_batch_size": 16,
        "save_every": 10_000,
        "tensorboard": "false",
        "device": "cpu",
        "data.tasks": "agentgym/0,agentgym/1,agentgym/2,agentgym/3",
    }
    config = load_config(RLConfig, None, [f"{k}={v}" for k, v in values.items()])
    RLTrainer(config, progress=False).train()
    lines = [json.loads(x) for x in (out / "run" / "metrics.jsonl").read_text().splitlines()]
    timed = lines[1:] or lines
    keys = (
        "perf/train_tokens_per_s",
        "perf/tokens_per_s",
        "perf/generate_tokens_per_s",
        "time_share/rollout",
        "time_share/advantage",
        "time_share/old_log_prob",
        "time_share/update",
        "time/iteration_s",
        "batch/tokens",
        "batch/rows",
    )
    return {k: statistics.median(m.get(k, 0.0) for m in timed) for k in keys}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("cpu", "gpu", "generate", "both"), default="cpu")
    parser.add_argument("--out", default="results/train-speed")
    parser.add_argument("--iterations", type=int, default=4, help="cpu mode: loop iterations")
    parser.add_argument("--device", default="cuda", help="gpu mode: device (cpu: check the path)")
    parser.add_argument("--shape", choices=("qwen3-1.7b", "small"), default="qwen3-1.7b")
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--prompt", type=int, default=1536)
    parser.add_argument("--response", type=int, default=512)
    parser.add_argument("--micro-batch-size", type=int, default=8)
    parser.add_argument("--gen-rows", type=int, default=64, help="generate: prompts")
    parser.add_argument("--gen-prompt", type=int, default=1024, help="generate: prompt tokens")
    parser.add_argument("--new-tokens", type=int, default=256, help="generate: tokens per row")
    parser.add_argument("--peak-tflops", type=float, default=None)
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {}
    if args.mode in ("cpu", "both"):
        report["cpu_loop"] = loop_speed(out, iterations=args.iterations)
        print("## RL loop on CPU (tiny model, PTGPO, TextCraft)\n")
        print("| metric | value |\n|---|---|")
        for key, value in report["cpu_loop"].items():
            print(f"| {key} | {value:.3f} |")
    if args.mode in ("gpu", "generate", "both"):
        import torch

        if args.device.startswith("cuda") and not torch.cuda.is_available():
            print(
                "gpu mode: no CUDA device here; skipped (use --device cpu --shape small to "
                "check the code path)"
            )
        else:
            report.update(_device_report(args))
    (out / "train_speed.json").write_text(json.dumps(report, indent=2))
    return 0


def _device_report(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    report: dict[str, Any] = {}
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    precision = "bf16" if args.device.startswith("cuda") else "fp32"
    shape = QWEN3_1P7B if args.shape == "qwen3-1.7b" else SMALL_SHAPE
    if args.mode in ("gpu", "both"):
        speed = update_speed(
            shape,
            device=args.device,
            rows=args.rows,
            prompt=args.prompt,
            response=args.response,
            micro_batch_size=args.micro_batch_size,
            precision=precision,
            peak_tflops=args.peak_tflops or peak_tflops_for(name),
        )
        report["gpu_update"] = {"device": name, "shape": args.shape, **asdict(speed)}
        _print_table(f"Update path, {args.shape} shape on {name}", report["gpu_update"])
    gen = generate_speed(
        shape,
        device=args.device,
        rows=args.gen_rows,
        prompt=args.gen_prompt,
        new_tokens=args.new_tokens,
        micro_batch_size=args.micro_batch_size,
        precision=precision,
    )
    report["generate"] = {"device": name, "shape": args.shape, **asdict(gen)}
    _print_table(
        f"Rollout generate vs the trainer's forward, {args.shape} shape on {name}",
        report["generate"],
    )
    return report


def _print_table(title: str, values: dict[str, Any]) -> None:
    print(f"\n## {title}\n")
    print("| metric | value |\n|---|---|")
    for key, value in values.items():
        print(f"| {key} | {value} |")


if __name__ == "__main__":
    raise SystemExit(main())
