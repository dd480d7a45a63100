"""The page of :mod:`agentenvs.benchmarks.speed.learning_loop`: its result record and the
Markdown tables (phases against the FLOP bound, the rollout's breakdown, the profile and the
before/after rollout)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "MODEL_GEMM_ROWS",
    "PEAK_SIZE",
    "PHASES",
    "PRECISION_ROWS",
    "LoopResult",
    "format_report",
]

PHASES = ("rollout", "old_log_prob", "reference_kl", "update")
PEAK_SIZE = 1024
"""Side of the square fp32 product whose rate is the FLOP bound (large enough that the kernel,
not the call, sets the rate on a CPU core)."""
PRECISION_ROWS = 256
"""Rows of the fp32-against-bf16 old-log-prob comparison (enough micro-batches for a stable
time, few enough to keep the check short)."""
MODEL_GEMM_ROWS = 4096
"""Rows of the model-shaped product (tokens x width @ width x MLP width): the rate a matrix as
thin as the model's can reach."""


@dataclass
class LoopResult:
    """One preset's figures (``phases``: per phase, summed over the timed iterations)."""

    preset: str
    env_id: str
    model: str
    parameters: int
    nonembedding_parameters: int
    iterations: int
    episodes: int
    generated_tokens: int
    rollout_breakdown: dict[str, float]
    phases: dict[str, dict[str, float]]
    call_floor_s: float
    ab: dict[str, Any] = field(default_factory=dict)
    precision: dict[str, Any] = field(default_factory=dict)
    profile: dict[str, Any] = field(default_factory=dict)


def _phase_row(r: LoopResult, phase: str) -> str:
    f = r.phases[phase]
    secs = f["seconds"]
    if phase == "rollout":
        rate = f"{r.episodes / secs:.2f} episodes/s" if secs else ""
        tokens = f"{r.generated_tokens / secs:,.0f} generated" if secs else ""
    else:
        rate = f"{f['rows_per_s']:.1f} rows/s"
        tokens = f"{f['tokens_per_s']:,.0f}"
    return (
        f"| {r.preset} | {phase} | {secs:.1f} | {rate} | {tokens} | {f['calls']:,} | "
        f"{f['gflop_per_s']:.2f} | {100 * f['of_peak']:.2f}% | {100 * f['forward_share']:.0f}% | "
        f"{100 * f['call_floor_share']:.0f}% | {f['load_average']:.1f} |"
    )


def _preset_line(r: LoopResult) -> str:
    total = sum(r.phases[p]["seconds"] for p in PHASES)
    shares = ", ".join(f"{p} {100 * r.phases[p]['seconds'] / total:.0f}%" for p in PHASES if total)
    return (
        f"- {r.preset} ({r.env_id}): model `{r.model}`, {r.parameters / 1e6:.2f}M parameters "
        f"({r.nonembedding_parameters / 1e6:.2f}M outside the embedding); {r.episodes} "
        f"episodes, {r.generated_tokens:,} generated tokens, {r.phases['update']['rows']:,} "
        f"row passes in the update. Time per iteration {total / max(r.iterations, 1):.1f} s: "
        f"{shares}."
    )


def format_report(report: dict[str, Any]) -> str:
    """The Markdown page of a run's figures."""
    m = report["machine"]
    peak, thin = report["peak_flops"], report["model_shape_flops"]
    lines = [
        "# Throughput of the learning benchmark's loop",
        "",
        f"Measured by `{report['command']}` on {m['date']}: {m['cpu']}, {m['cores']} cores "
        f"(shared with other work), {m['threads']} torch threads, torch {m['torch']}; "
        f"load average {m['load_average']} at the start, {report['load_after']} at the end.",
        "",
        f"FLOP bound: an fp32 {PEAK_SIZE}^3 matrix product ran at {peak / 1e9:.1f} GFLOP/s on "
        f"{m['threads']} threads in this run; a product of the model's own shape "
        f"({MODEL_GEMM_ROWS} x {report['width']} @ {report['width']} x "
        f'{report["mlp_width"]}) at {thin / 1e9:.1f} GFLOP/s. "of peak" divides each phase\'s '
        "FLOP/s by the first. FLOPs per token: 2 x non-embedding parameters, plus 2 x width x "
        "vocabulary per logit row and 4 x layers x attention width per attended pair (the "
        "update: 3 x its forward). Each phase sums "
        f"{_count(report['iterations'], 'iteration')} of the benchmark's `grpo` arm (seed 0) "
        "from an SFT "
        "model; the rollout's time includes the environment steps.",
        "",
        "| preset | phase | time (s) | rate | tokens/s | forward calls | GFLOP/s | of peak | "
        "time in forward | calls x call floor | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    results = report["results"]
    lines[-2:-2] = [_preset_line(r) for r in results] + [""]
    lines += [_phase_row(r, phase) for r in results for phase in PHASES]
    lines += ["", "Where the rollout's time goes (seconds over the timed iterations):", ""]
    lines += ["| preset | rollout | generate | model forward | environment | other | call floor |"]
    lines += ["|---|---|---|---|---|---|---|"]
    for r in results:
        b = r.rollout_breakdown
        lines.append(
            f"| {r.preset} | {r.phases['rollout']['seconds']:.1f} | {b['generate_s']:.1f} | "
            f"{b['model_forward_s']:.1f} | {b['env_s']:.1f} | {b['other_s']:.1f} | "
            f"{1e3 * r.call_floor_s:.2f} ms |"
        )
    lines += _profile_lines(results) + _ab_lines(results) + _precision_lines(results)
    return "\n".join(lines) + "\n"


def _profile_lines(results: Sequence[LoopResult]) -> list[str]:
    rows = [r for r in results if r.profile]
    if not rows:
        return []
    lines = ["", "One more iteration with each phase under `torch.profiler` (operators' own time; "]
    lines += ["the rest of the wall time is Python):", ""]
    lines += ["| preset | part | wall (s) | in torch operators | top operators (own s) |"]
    lines += ["|---|---|---|---|---|"]
    for r in rows:
        for part, p in r.profile.items():
            top = ", ".join(
                f"{o['op'].removeprefix('aten::')} {o['seconds']:.2f}" for o in p["top_ops"]
            )
            lines.append(
                f"| {r.preset} | {part} | {p['wall_s']:.1f} | {100 * p['torch_ops_share']:.0f}% "
                f"| {top} |"
            )
    return lines


def _precision_lines(results: Sequence[LoopResult]) -> list[str]:
    rows = [r for r in results if r.precision]
    if not rows:
        return []
    lines = ["", "The trainer's opt-in `precision=bf16` (bf16 autocast: other numbers, so not the"]
    lines += ["benchmark's setting) on the old-log-prob pass over the same rows (best of two):", ""]
    lines += ["| preset | rows | fp32 (s) | bf16 (s) | fp32 / bf16 | largest log-prob gap |"]
    lines += ["|---|---|---|---|---|---|"]
    for r in rows:
        p = r.precision
        lines.append(
            f"| {r.preset} | {p['rows']} | {p['fp32_s']:.2f} | {p['bf16_s']:.2f} | "
            f"{p['ratio']:.2f}x | {p['max_gap']:.3g} |"
        )
    return lines


def _ab_lines(results: Sequence[LoopResult]) -> list[str]:
    rows = [r for r in results if r.ab]
    if not rows:
        return []
    lines = ["", "Before/after in the same run: one iteration's starts played twice from the same"]
    lines += ["weights and sampling seed, the prefill's duplicate-row sharing off, then on:", ""]
    lines += [
        "| preset | episodes | off (s) | on (s) | off / on | identical outputs | rows sharing |"
    ]
    lines += ["|---|---|---|---|---|---|---|"]
    for r in rows:
        a = r.ab
        lines.append(
            f"| {r.preset} | {a['episodes']} | {a['before_s']:.1f} | {a['after_s']:.1f} | "
            f"{a['ratio']:.2f}x | {'yes' if a['identical_outputs'] else 'no'} | "
            f"{a['rows_shared']:,} |"
        )
    return lines


def _count(n: int, noun: str) -> str:
    """``n noun`` with the noun in the plural unless n is 1."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
