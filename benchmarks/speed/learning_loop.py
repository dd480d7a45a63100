"""Throughput of the learning benchmark's loop, against the model's FLOP bound on this CPU.

    python -m agentenvs.benchmarks.speed.learning_loop --preset keydoor --preset sokoban \\
        --out docs/learning-check/throughput.md

For each preset (the learning benchmark's settings, :mod:`agentenvs.benchmarks.learning.settings`;
its own environments registered in this process as the benchmark registers them) it takes the
benchmark's model (``--model PRESET=DIR``: an SFT model of that preset; else the preset's data
stage and SFT are run into ``--work``, ``--sft-steps`` steps) and runs the ``grpo`` arm's RL
iterations exactly as the benchmark configures them (:func:`agentenvs.benchmarks.learning.stages.
_rl_config`), timing each step of an iteration:

* **rollout**: episodes/s and generated tokens/s (the iteration's episodes over the rollout
  step's wall time, environment steps included);
* **old_log_prob** and **update**: rows/s and tokens/s of the model's passes (a row counts once
  per pass, so the update's PPO epochs count each); the KL-to-initial pass is reported too.

Every forward pass of the model is counted by a hook (rows, real tokens, logit rows, attention
pairs, time inside it), so each phase's FLOPs follow from the model's shape with the terms of
:func:`agentenvs.benchmarks.speed.model_shapes.update_flops` (2 x non-embedding parameters per
token, 2 x width x vocabulary per logit row, 4 x layers x attention width per attended
(query, key) pair; the update's backward pass twice its forward). The bound: this CPU's fp32
matrix-product rate measured in the same run with the same threads (a 1024^3 product, and one of
the model's own shapes); each phase reports achieved FLOP/s over it.

Where the time goes: per phase, the share inside the model's forward calls, their number, and
the fixed cost of a call (a one-token forward, measured) times that number; then (unless
``--no-profile``) one more iteration with each phase under ``torch.profiler``: the share of time
in torch operators (the rest is Python: the model's module code, the generator's and trainer's
own) and the top operators.

Before/after (``--ab-repeats`` times each way): the rollout of one set of starts is played from
the same weights and sampling seed with the prefill's duplicate-row sharing off
(``TransformersPolicy.share_identical_rows``) and on; the ratio of their median times is
reported and the two rollouts' token ids and log-probs must be equal (the run fails otherwise).

Results go to ``--out`` (Markdown, with machine, date and load average) and the same path with
``.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agentenvs.benchmarks.speed.learning_loop_report import (
    MODEL_GEMM_ROWS,
    PEAK_SIZE,
    PHASES,
    PRECISION_ROWS,
    LoopResult,
    format_report,
)
from agentenvs.benchmarks.speed.model_shapes import ModelShape, nonembedding_parameters

__all__ = [
    "ForwardCounter",
    "PhaseCount",
    "forward_flops",
    "main",
    "matmul_rate",
    "measure_preset",
    "model_shape",
]


@dataclass
class PhaseCount:
    """What the model's forward passes of one phase did."""

    calls: int = 0
    rows: int = 0
    tokens: int = 0
    """Real (unpadded) tokens fed."""
    padded_tokens: int = 0
    """Token positions computed, padding included."""
    logit_rows: int = 0
    attention_pairs: int = 0
    """Attended (query, key) pairs of real tokens (causal)."""
    forward_s: float = 0.0


class ForwardCounter:
    """Forward hooks on ``models`` (the policy, and the frozen initial one where there is one)
    that add each call to the current phase's :class:`PhaseCount`."""

    def __init__(self, *models: Any) -> None:
        self.counts: dict[str, PhaseCount] = {}
        self.load: dict[str, float] = {}
        """The 1-minute load average at the end of each phase (its last run)."""
        self.current: str | None = None
        self._started = 0.0
        self._handles = []
        for model in models:
            if model is not None:
                self._handles.append(
                    model.register_forward_pre_hook(self._before, with_kwargs=True)
                )
                self._handles.append(model.register_forward_hook(self._after, with_kwargs=True))

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[PhaseCount]:
        previous, self.current = self.current, name
        try:
            yield self.counts.setdefault(name, PhaseCount())
        finally:
            self.current = previous

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()

    def _before(self, module: Any, args: tuple, kwargs: dict[str, Any]) -> None:
        if self.current is None:
            return
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            return
        count = self.counts.setdefault(self.current, PhaseCount())
        count.calls += 1
        count.rows += int(ids.shape[0])
        count.padded_tokens += int(ids.numel())
        real, pairs = _real_tokens(ids, kwargs.get("attention_mask"), kwargs.get("position_ids"))
        count.tokens += real
        count.attention_pairs += pairs
        count.logit_rows += _logit_rows(ids, kwargs.get("logits_to_keep"))
        self._started = time.perf_counter()

    def _after(self, module: Any, args: tuple, kwargs: dict[str, Any], output: Any) -> None:
        if self.current is not None and self._started:
            self.counts[self.current].forward_s += time.perf_counter() - self._started
            self._started = 0.0


def _real_tokens(ids: Any, mask: Any, positions: Any) -> tuple[int, int]:
    """(real tokens, attended pairs): each real token attends its own position and those before.
    The mask's last ``ids.shape[1]`` columns are the fed tokens' (it may cover cached ones)."""
    import torch

    width = ids.shape[1]
    real = torch.ones_like(ids, dtype=torch.bool) if mask is None else mask[:, -width:].bool()
    if positions is None:
        positions = (real.long().cumsum(-1) - 1).clamp(min=0)
    positions = positions.expand_as(ids)
    return int(real.sum()), int((positions + 1)[real].sum())


def _logit_rows(ids: Any, keep: Any) -> int:
    """Logit rows computed: ``logits_to_keep`` as an int (0: all), a boolean mask or columns."""
    import torch

    if keep is None:
        return int(ids.numel())
    if isinstance(keep, int):
        return int(ids.numel()) if keep == 0 else int(ids.shape[0]) * keep
    if keep.dtype == torch.bool:
        return int(keep.sum())
    return int(ids.shape[0]) * int(keep.numel())


def model_shape(model: Any) -> ModelShape:
    """The :class:`ModelShape` of a loaded ``transformers`` model."""
    c = model.config
    return ModelShape(
        hidden_size=c.hidden_size,
        intermediate_size=c.intermediate_size,
        num_hidden_layers=c.num_hidden_layers,
        num_attention_heads=c.num_attention_heads,
        num_key_value_heads=c.num_key_value_heads,
        head_dim=getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads,
        vocab_size=c.vocab_size,
        name="check-model",
    )


def forward_flops(shape: ModelShape, n_body: int, count: PhaseCount) -> float:
    """Forward FLOPs of ``count``'s passes, with the terms of
    :func:`~agentenvs.benchmarks.speed.model_shapes.update_flops`: 2 x non-embedding parameters
    per real token, 2 x width x vocabulary per logit row, 4 x layers x heads x head_dim per
    attended pair (``update_flops``' 2 L d S^2 is the same for a causal row's S^2 / 2 pairs)."""
    d_attn = shape.num_attention_heads * shape.head_dim
    return (
        2.0 * n_body * count.tokens
        + 2.0 * shape.hidden_size * shape.vocab_size * count.logit_rows
        + 4.0 * shape.num_hidden_layers * d_attn * count.attention_pairs
    )


def matmul_rate(rows: int, inner: int, cols: int, *, repeats: int = 7) -> float:
    """FLOP/s of an fp32 ``rows x inner @ inner x cols`` product (median of ``repeats``), with
    torch's current thread count."""
    import torch

    generator = torch.Generator().manual_seed(0)
    a = torch.randn(rows, inner, generator=generator)
    b = torch.randn(inner, cols, generator=generator)
    number = max(1, int(2e9 / (2 * rows * inner * cols)))
    torch.mm(a, b)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            torch.mm(a, b)
        times.append((time.perf_counter() - start) / number)
    return 2.0 * rows * inner * cols / statistics.median(times)


def call_floor(model: Any, *, repeats: int = 30) -> float:
    """Seconds of a one-token forward (no cache): the fixed cost of one model call."""
    import torch

    ids = torch.tensor([[0]])
    with torch.inference_mode():
        model(input_ids=ids, use_cache=False)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            model(input_ids=ids, use_cache=False)
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def prepare_model(settings: Any, work: Path, sft_steps: int | None) -> Path:
    """The preset's SFT model, built under ``work`` (reused when there): its data stage (the
    expert's episodes of the training tasks and the base model), then SFT for ``sft_steps``
    (None: the preset's ``sft_steps``; 0: the base model itself)."""
    from agentenvs.benchmarks.learning.settings import train_task_ids
    from agentenvs.benchmarks.learning.stages import data_stage

    data = data_stage(settings, work, train_task_ids(settings))
    steps = settings.sft_steps if sft_steps is None else sft_steps
    if steps == 0:
        return Path(data["base"])
    done = work / f"sft-{steps}" / "model-path.txt"
    if done.is_file():
        return Path(done.read_text().strip())
    from agentenvs.train.config import load_config
    from agentenvs.train.sft import SFTConfig, train_sft

    values = {
        "model": data["base"],
        "data": data["sft_data"],
        "out_dir": done.parent,
        "epochs": 100_000,
        "max_steps": steps,
        "batch_size": settings.sft_batch_size,
        "micro_batch_size": settings.sft_batch_size,
        "lr": settings.sft_lr,
        "warmup_ratio": 0.05,
        "save_every": 100_000,
        "tensorboard": "false",
        "seed": 0,
    }  # as the benchmark's SFT stage (seed 0), without its evaluation
    config = load_config(SFTConfig, None, [f"{k}={v}" for k, v in values.items()])
    model = train_sft(config, progress=False) / "model"
    done.write_text(str(model))
    return model


def _trainer(settings: Any, model: Path, run: Path) -> Any:
    """The benchmark's ``grpo`` arm for seed 0 on ``model``, set up fresh in ``run``."""
    from agentenvs.benchmarks.learning.settings import rl_task_ids, train_task_ids
    from agentenvs.benchmarks.learning.stages import _rl_config
    from agentenvs.train.rl import RLTrainer

    shutil.rmtree(run, ignore_errors=True)
    rl_ids = rl_task_ids(settings, train_task_ids(settings))
    config = _rl_config(settings, "grpo", {"model": str(model)}, run, 0, rl_ids)
    trainer = RLTrainer(config, progress=False)
    trainer.setup()
    return trainer


def _iteration(
    trainer: Any,
    counter: ForwardCounter,
    wall: dict[str, float],
    around: Callable[[str], Any] = lambda name: contextlib.nullcontext(),
) -> dict[str, float]:
    """One iteration of :meth:`RLTrainer.iteration`'s steps, each phase timed and counted (and
    run inside ``around(phase)``)."""
    it = trainer.state.step
    clock = time.perf_counter()
    with counter.phase("rollout"), around("rollout"):
        rows, metrics = trainer.rollout_step(it)
    wall["rollout"] += time.perf_counter() - clock
    counter.load["rollout"] = os.getloadavg()[0]
    if rows:
        metrics.update(trainer.advantage_step(rows))
    rows, _ = trainer._length_filter(rows)
    steps = (
        ("old_log_prob", lambda: trainer.old_log_prob_step(rows)),
        ("reference_kl", lambda: trainer.reference_kl_step(rows, it)),
        ("update", lambda: trainer.update_step(rows, it)),
    )
    for name, step in steps if rows else ():
        clock = time.perf_counter()
        with counter.phase(name), around(name):
            metrics.update(step())
        wall[name] += time.perf_counter() - clock
        counter.load[name] = os.getloadavg()[0]
    trainer.state.step += 1
    metrics["batch/rows"] = float(len(rows))
    trainer.last_rows = rows
    return metrics


def precision_check(trainer: Any, rows: Sequence[Any]) -> dict[str, Any]:
    """The old-log-prob pass over the same ``rows`` in fp32 (what the benchmark runs) and under
    the trainer's opt-in ``precision=bf16`` (bf16 autocast; it changes the numbers): both times,
    their ratio and the largest log-prob difference."""
    from agentenvs.train.rl.update import recompute_old_log_probs

    rows = list(rows)[:PRECISION_ROWS]
    times, values = {}, {}
    for precision in ("fp32", "bf16", "fp32", "bf16"):
        clock = time.perf_counter()
        recompute_old_log_probs(
            trainer.model,
            rows,
            micro_batch_size=trainer.config.micro_batch_size,
            pad_id=trainer.pad_id,
            device=trainer.device,
            precision=precision,
        )
        times.setdefault(precision, []).append(time.perf_counter() - clock)
        values[precision] = [r.old_log_probs.clone() for r in rows]
    fp32, bf16 = min(times["fp32"]), min(times["bf16"])
    gap = max(
        (float((a - b).abs().max()) for a, b in zip(values["fp32"], values["bf16"], strict=True)),
        default=0.0,
    )
    return {"rows": len(rows), "fp32_s": fp32, "bf16_s": bf16, "ratio": fp32 / bf16, "max_gap": gap}


def _phase_figures(
    count: PhaseCount, seconds: float, flops: float, peak: float, floor: float
) -> dict[str, float]:
    return {
        "seconds": seconds,
        "calls": count.calls,
        "rows": count.rows,
        "tokens": count.tokens,
        "padded_tokens": count.padded_tokens,
        "rows_per_s": count.rows / seconds if seconds else 0.0,
        "tokens_per_s": count.tokens / seconds if seconds else 0.0,
        "gflop": flops / 1e9,
        "gflop_per_s": flops / seconds / 1e9 if seconds else 0.0,
        "of_peak": flops / seconds / peak if seconds else 0.0,
        "forward_share": count.forward_s / seconds if seconds else 0.0,
        "call_floor_share": count.calls * floor / seconds if seconds else 0.0,
        "at_peak_s": flops / peak,
    }


def _rollout_signature(rows: Sequence[Any]) -> list[tuple[Any, ...]]:
    return [
        (r.episode_id, r.step_index, list(r.response_ids), list(r.rollout_log_probs)) for r in rows
    ]


def before_after(trainer: Any, repeats: int) -> dict[str, Any]:
    """The same starts' rollout (same weights, same sampling seed) with the prefill's
    duplicate-row sharing off and on, ``repeats`` times each (off first, then on first, and so
    on): the median times, their ratio, and whether the replies' token ids and log-probs are
    equal (they must be)."""
    from agentenvs.agents.rollout import RolloutStats
    from agentenvs.train.rl.rollout import collect_episodes

    cfg = trainer.config
    starts = trainer.stream.take(cfg.prompts_per_iteration)
    times: dict[bool, list[float]] = {False: [], True: []}
    signatures: dict[bool, Any] = {}
    computed: dict[bool, int] = {}
    policy = trainer.policy
    for repeat in range(repeats):
        for share in (False, True) if repeat % 2 == 0 else (True, False):
            policy.share_identical_rows = share
            policy.shared_row_passes = 0
            stats = RolloutStats()
            clock = time.perf_counter()
            episodes = collect_episodes(
                policy,
                cfg.data.env_id,
                starts,
                cfg.samples_per_prompt,
                trainer.rollout_config(trainer.state.step, 0),
                stats=stats,
                env_pool=trainer.env_pool,
            )
            times[share].append(time.perf_counter() - clock)
            signatures[share] = _rollout_signature(trainer._rows(episodes))
            computed[share] = policy.shared_row_passes
    policy.share_identical_rows = True
    before, after = statistics.median(times[False]), statistics.median(times[True])
    identical = signatures[False] == signatures[True]
    if not identical:
        raise AssertionError("the rollout with duplicate-row sharing differs from the one without")
    return {
        "change": "prefill: a row whose prompt and base equal an earlier row's copies its pass",
        "episodes": len(starts) * cfg.samples_per_prompt,
        "before_s": before,
        "after_s": after,
        "ratio": before / after,
        "repeats": repeats,
        "identical_outputs": identical,
        "rows_shared": computed[True],
    }


def profile_iteration(trainer: Any, top: int = 6) -> dict[str, Any]:
    """One more iteration, each phase under its own ``torch.profiler``: per part (``rollout``,
    ``training``: the old-log-prob, KL and update passes), its wall time under the profiler,
    the share of it in torch operators' own time (the rest is Python: module code, the
    generator's and the trainer's own) and the ``top`` operators by own time."""
    from torch.profiler import ProfilerActivity, profile

    profilers: dict[str, Any] = {}

    def around(name: str) -> Any:
        profilers[name] = profile(activities=[ProfilerActivity.CPU])
        return profilers[name]

    counter = ForwardCounter(trainer.model, trainer.reference)
    wall = dict.fromkeys(PHASES, 0.0)
    try:
        _iteration(trainer, counter, wall, around)
    finally:
        counter.close()
    parts = {"rollout": ("rollout",), "training": PHASES[1:]}
    out: dict[str, Any] = {}
    for part, names in parts.items():
        events: dict[str, list[float]] = {}
        for name in names:
            if name not in profilers:
                continue
            for e in profilers[name].key_averages():
                if e.key.startswith("aten::"):
                    seen = events.setdefault(e.key, [0.0, 0])
                    seen[0] += e.self_cpu_time_total / 1e6
                    seen[1] += e.count
        seconds = sum(wall[n] for n in names)
        own = sum(v[0] for v in events.values())
        ranked = sorted(events.items(), key=lambda kv: kv[1][0], reverse=True)[:top]
        out[part] = {
            "wall_s": seconds,
            "torch_ops_s": own,
            "torch_ops_share": own / seconds if seconds else 0.0,
            "top_ops": [{"op": k, "seconds": v[0], "calls": int(v[1])} for k, v in ranked],
        }
    return out


def measure_preset(
    name: str,
    settings: Any,
    model: Path,
    work: Path,
    *,
    iterations: int,
    peak: float,
    ab_repeats: int,
    profile: bool,
) -> LoopResult:
    """The figures of one preset (module docstring)."""
    trainer = _trainer(settings, model, work / "rl")
    try:
        shape = model_shape(trainer.model)
        n_body = nonembedding_parameters(trainer.model)
        floor = call_floor(trainer.model)
        counter = ForwardCounter(trainer.model, trainer.reference)
        wall = dict.fromkeys(PHASES, 0.0)
        episodes = generated = 0
        breakdown = {"generate_s": 0.0, "env_s": 0.0}
        try:
            for _ in range(iterations):
                metrics = _iteration(trainer, counter, wall)
                episodes += int(metrics["rollout/episodes"])
                generated += int(metrics["rollout/generated_tokens"])
                breakdown["generate_s"] += metrics["time/generate_s"]
                breakdown["env_s"] += metrics["time/env_s"]
        finally:
            counter.close()
        phases = {}
        for phase in PHASES:
            count = counter.counts.get(phase, PhaseCount())
            flops = forward_flops(shape, n_body, count) * (3.0 if phase == "update" else 1.0)
            phases[phase] = _phase_figures(count, wall[phase], flops, peak, floor)
            phases[phase]["load_average"] = counter.load.get(phase, 0.0)
        breakdown["other_s"] = wall["rollout"] - breakdown["generate_s"] - breakdown["env_s"]
        breakdown["model_forward_s"] = counter.counts.get("rollout", PhaseCount()).forward_s
        result = LoopResult(
            preset=name,
            env_id=settings.env_id,
            model=str(model),
            parameters=sum(p.numel() for p in trainer.model.parameters()),
            nonembedding_parameters=n_body,
            iterations=iterations,
            episodes=episodes,
            generated_tokens=generated,
            rollout_breakdown=breakdown,
            phases=phases,
            call_floor_s=floor,
        )
        if getattr(trainer, "last_rows", None):
            result.precision = precision_check(trainer, trainer.last_rows)
        if ab_repeats:
            result.ab = before_after(trainer, ab_repeats)
        if profile:
            result.profile = profile_iteration(trainer)
        return result
    finally:
        trainer.logger.close()
        trainer.close()


def machine_line(threads: int) -> dict[str, Any]:
    """The machine, the date and the load average (1, 5, 15 minutes) at this moment."""
    from agentenvs.benchmarks.machine import cpu_model

    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "threads": threads,
        "python": platform.python_version(),
        "torch": __import__("torch").__version__,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def _parse_models(items: Sequence[str]) -> dict[str, Path]:
    out = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep:
            raise SystemExit(f"--model {item!r}: expected PRESET=DIR")
        out[name] = Path(path)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    import sys

    import torch

    from agentenvs.benchmarks.learning.plugins import register_benchmark_envs
    from agentenvs.benchmarks.learning.run import parse_overrides
    from agentenvs.benchmarks.learning.settings import preset

    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--preset", action="append", default=None, help="(repeatable)")
    parser.add_argument("--model", action="append", default=[], metavar="PRESET=DIR")
    parser.add_argument("--work", default="results/learning-loop")
    parser.add_argument("--sft-steps", type=int, default=None)
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ab-repeats", type=int, default=2, help="0: no before/after")
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--out", default="docs/learning-check/throughput.md")
    args = parser.parse_args(argv)
    register_benchmark_envs()  # KeyDoor-v0 and the oracle environments, as the benchmark does
    torch.set_num_threads(args.threads)
    models = _parse_models(args.model)
    overrides = parse_overrides(args.set)
    report: dict[str, Any] = {
        "command": " ".join(["python -m agentenvs.benchmarks.speed.learning_loop", *sys.argv[1:]])
        if argv is None
        else " ".join(["python -m agentenvs.benchmarks.speed.learning_loop", *argv]),
        "machine": machine_line(args.threads),
        "iterations": args.iterations,
        "peak_flops": matmul_rate(PEAK_SIZE, PEAK_SIZE, PEAK_SIZE),
    }
    results = []
    for name in args.preset or ["keydoor", "sokoban"]:
        settings = preset(name, **{**overrides, "threads": args.threads})
        work = Path(args.work) / name
        model = models.get(name) or prepare_model(settings, work, args.sft_steps)
        report["width"] = settings.model.hidden_size
        report["mlp_width"] = settings.model.intermediate_size
        results.append(
            measure_preset(
                name,
                settings,
                model,
                work,
                iterations=args.iterations,
                peak=report["peak_flops"],
                ab_repeats=args.ab_repeats,
                profile=not args.no_profile,
            )
        )
    report["model_shape_flops"] = matmul_rate(MODEL_GEMM_ROWS, report["width"], report["mlp_width"])
    report["load_after"] = [round(x, 2) for x in os.getloadavg()]
    report["results"] = results
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(format_report(report))
    data = {**report, "results": [asdict(r) for r in results]}
    out.with_suffix(".json").write_text(json.dumps(data, indent=1))
    print(out.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
