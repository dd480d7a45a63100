"""The benchmark's numbers: Avg@k / Pass@k per arm as mean +- SE over seeds, each RL arm against
SFT as a paired difference over (seed, eval task) with its z score, and the files
(``summary.json``, ``summary.md``, ``curve.png``).

Avg@k of one (arm, seed) is the mean over eval tasks of c / n (c successes in n episodes; the
unbiased estimate of the mean success of k samples); Pass@k the mean of the unbiased
1 - C(n - c, k) / C(n, k) (:mod:`agentenvs.benchmarks.eval.metrics`). The SE over seeds uses the
sample standard deviation (ddof 1). The paired difference of an arm is, for each (seed, task), its
success rate minus the SFT model's of the same seed on the same task; its SE is the standard
deviation of those differences over sqrt(pairs), z = mean / SE. Every contrast also has a
seed-clustered figure (``clustered``), which does not treat the tasks of one seed as independent
draws of the arms' training: the per-seed differences d_s (the mean over tasks of one seed's paired
differences), their mean over seeds, its SE (sd of d_s over sqrt(seeds), ddof 1) and t = mean / SE
with seeds - 1 degrees of freedom.

    python -m agentenvs.benchmarks.learning.report --rebuild docs/learning-check/summary.json \
        docs/learning-check/sokoban/summary.json --random

recomputes a saved summary's tables from its ``per_task`` counts (no arm is rerun) and
rewrites its ``summary.json`` and ``summary.md``; ``--random`` first adds the random agent's
arm where it is missing (it plays the evaluation tasks; seconds).
"""

from __future__ import annotations

import math
import platform
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentenvs.benchmarks.eval.metrics import pass_at_k
from agentenvs.benchmarks.machine import cpu_model

__all__ = [
    "DIAGNOSTIC_LABELS",
    "CONTRASTS",
    "arm_table",
    "arms_vs_sft",
    "contrasts",
    "diagnostics",
    "format_diagnostics",
    "format_summary",
    "machine",
    "paired",
    "plot_curve",
    "rebuild",
    "seed_clustered",
]

PerTask = Mapping[str, Mapping[str, list[int]]]  # seed -> task -> [successes, samples]


def _mean_se(values: list[float]) -> dict[str, Any]:
    """Mean and standard error of the mean; None where undefined (no value; one value's SE),
    so summary.json stays strict JSON (no NaN)."""
    n = len(values)
    mean = sum(values) / n if n else None
    if n < 2 or mean is None:
        return {"mean": mean, "se": None, "n": n}
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return {"mean": mean, "se": math.sqrt(var / n), "n": n}


def _fmt(value: float | None, spec: str) -> str:
    """``value`` formatted, or ``n/a`` where the statistic is undefined."""
    return "n/a" if value is None or value != value else format(value, spec)


def seed_scores(per_task: Mapping[str, list[int]], k: int) -> tuple[float, float]:
    """(Avg@k, Pass@k) of one (arm, seed) over its tasks."""
    avg = [c / n for c, n in per_task.values()]
    pas = [pass_at_k(n, c, min(k, n)) for c, n in per_task.values()]
    return sum(avg) / len(avg), sum(pas) / len(pas)


def arm_table(per_task: Mapping[str, PerTask], k: int) -> dict[str, dict[str, Any]]:
    """{arm: {avg_at_k: {mean, se, n}, pass_at_k: {...}, per_seed: {seed: [avg, pass]}}}."""
    out = {}
    for arm, seeds in per_task.items():
        scores = {seed: seed_scores(tasks, k) for seed, tasks in seeds.items()}
        out[arm] = {
            "avg_at_k": _mean_se([a for a, _ in scores.values()]),
            "pass_at_k": _mean_se([p for _, p in scores.values()]),
            "per_seed": {s: list(v) for s, v in scores.items()},
        }
    return out


def paired(per_task: Mapping[str, PerTask], base: str = "sft") -> dict[str, dict[str, Any]]:
    """{arm: {mean_diff, se, z, pairs, better, worse, clustered}} against ``base`` over
    (seed, task); ``clustered``: :func:`seed_clustered` of the same differences."""
    out = {}
    for arm, seeds in per_task.items():
        if arm == base:
            continue
        by_seed: dict[str, list[float]] = {}
        for seed, tasks in seeds.items():
            ref = per_task[base].get(seed, {})
            for task, (c, n) in tasks.items():
                if task in ref:
                    c0, n0 = ref[task]
                    by_seed.setdefault(seed, []).append(c / n - c0 / n0)
        diffs = [d for values in by_seed.values() for d in values]
        stats = _mean_se(diffs)
        se = stats["se"]
        out[arm] = {
            "mean_diff": stats["mean"],
            "se": se,
            "z": stats["mean"] / se if se else None,
            "pairs": len(diffs),
            "better": sum(d > 0 for d in diffs),
            "worse": sum(d < 0 for d in diffs),
            "clustered": seed_clustered(by_seed),
        }
    return out


def arms_vs_sft(per_task: Mapping[str, PerTask]) -> dict[str, dict[str, Any]]:
    """:func:`paired` of every trained arm against SFT (the random agent is compared the other
    way round, ``sft - random``, among the :data:`CONTRASTS`)."""
    if "sft" not in per_task:
        return {}
    return paired({arm: v for arm, v in per_task.items() if arm != "random"})


def seed_clustered(by_seed: Mapping[str, list[float]]) -> dict[str, Any]:
    """{mean, se, t, df, per_seed}: the per-seed mean differences d_s, their mean over seeds,
    its SE (ddof 1), t = mean / SE and df = seeds - 1 (None where undefined: one seed)."""
    per_seed = {seed: sum(v) / len(v) for seed, v in by_seed.items() if v}
    stats = _mean_se(list(per_seed.values()))
    se = stats["se"]
    return {
        "mean": stats["mean"],
        "se": se,
        "t": stats["mean"] / se if se else None,
        "df": len(per_seed) - 1 if len(per_seed) > 1 else None,
        "per_seed": per_seed,
    }


DIAGNOSTIC_LABELS = {
    "rollout/success_rate": "training success",
    "rollout/turns_mean": "turns per episode",
    "rollout/invalid_format_frac": "replies off the prompt's format",
    "adv/zero_std_group_frac": "task groups with zero reward spread",
    "adv/grouped_step_frac": "steps in anchor groups of >= 2",
    "adv/step_group_size_mean": "anchor group size (mean)",
    "adv/step_group_zero_spread_frac": "anchor groups of >= 2 with zero return spread",
    "adv/abs_mean": "mean abs(step advantage)",
    "adv/step_credit_abs_mean": "mean abs(step credit) (beyond the episode's)",
    "adv/step_credit_nonzero_frac": "steps with non-zero tree credit",
    "adv/step_credit_flat_group_share": "share of abs(step credit) in zero-spread task groups",
    "adv/trees": "trees (roots of >= tau_expand) per batch",
    "adv/tree_nodes_per_tree": "nodes per tree",
    "adv/tree_depth_max": "deepest tree level",
    "adv/tree_branching": "children per expanded node",
    "adv/tree_split_frac": "expanded nodes with >= 2 children",
    "actor/kl_to_initial": "KL to the SFT model (how far the arm moved)",
    "actor/entropy": "policy entropy per reply token",
    "actor/clipfrac": "clipped share of reply tokens",
}
"""The per-iteration diagnostics of the RL arms, in the order ``summary.md`` shows them."""


def diagnostics(
    training: Mapping[str, Mapping[str, Mapping[str, list[float | None]]]],
) -> dict[str, dict[str, list[float | None]]]:
    """{arm: {metric: [mean over seeds at iteration 1, 2, ...]}} from {arm: {seed: {metric:
    [value per iteration]}}}; None where no seed has the value (an estimator without it)."""
    out: dict[str, dict[str, list[float | None]]] = {}
    for arm, seeds in training.items():
        metrics = sorted({m for series in seeds.values() for m in series})
        out[arm] = {}
        for metric in metrics:
            runs = [series.get(metric) or [] for series in seeds.values()]
            length = max(len(r) for r in runs)
            means: list[float | None] = []
            for it in range(length):
                values = [r[it] for r in runs if it < len(r) and r[it] is not None]
                means.append(sum(values) / len(values) if values else None)
            out[arm][metric] = means
    return out


def _window_means(values: list[float | None], windows: int) -> list[float | None]:
    """Means of ``values`` over ``windows`` consecutive, near-equal slices (None: no value)."""
    n = len(values)
    out: list[float | None] = []
    for w in range(windows):
        chunk = [v for v in values[w * n // windows : (w + 1) * n // windows] if v is not None]
        out.append(sum(chunk) / len(chunk) if chunk else None)
    return out


def format_diagnostics(
    per_arm: Mapping[str, Mapping[str, list[float | None]]], windows: int = 4
) -> list[str]:
    """Markdown lines: per RL arm and diagnostic, the mean over seeds in ``windows`` slices of
    the iterations (first to last)."""
    arms = [a for a, m in per_arm.items() if m]
    if not arms:
        return []
    n = max(len(v) for a in arms for v in per_arm[a].values())
    bounds = [(w * n // windows + 1, (w + 1) * n // windows) for w in range(windows)]
    head = " | ".join(f"it {lo}-{hi}" for lo, hi in bounds)
    lines = [
        "",
        f"Diagnostics of RL's training batches (mean over seeds, over {windows} slices of the "
        "iterations; per iteration in summary.json, `diagnostics`):",
        "",
        f"| arm | diagnostic | {head} |",
        "|---|---|" + "---|" * windows,
    ]
    for arm in arms:
        for metric, label in DIAGNOSTIC_LABELS.items():
            values = per_arm[arm].get(metric)
            if not values or all(v is None for v in values):
                continue
            cells = " | ".join(_fmt(v, ".3f") for v in _window_means(values, windows))
            lines.append(f"| {arm} | {label} | {cells} |")
    return lines


CONTRASTS = (
    ("sft", "random"),
    ("oracle", "grpo"),
    ("ptgpo", "grpo"),
    ("gigpo", "grpo"),
    ("ptgpo", "gigpo"),
    ("ptgpo", "oracle"),
)
"""Arm pairs compared directly (paired over (seed, task), as each arm against SFT): SFT must
clearly beat the random agent; the oracle against GRPO says whether the testbed can show step
credit at all; the step-credit estimators against GRPO, each other and the oracle."""


def contrasts(per_task: Mapping[str, PerTask]) -> dict[str, dict[str, Any]]:
    """{"a - b": paired statistics of arm a against arm b} for the :data:`CONTRASTS` whose
    two arms both have results."""
    out = {}
    for a, b in CONTRASTS:
        if a in per_task and b in per_task:
            out[f"{a} - {b}"] = paired({a: per_task[a], b: per_task[b]}, base=b)[a]
    return out


def machine(threads: int) -> dict[str, Any]:
    """What decides bit-for-bit reproduction: CPU model, torch version, threads, platform."""
    import torch

    return {
        "cpu_model": cpu_model(),
        "torch_version": torch.__version__,
        "torch_threads": threads,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_capability": getattr(torch.backends.cpu, "get_cpu_capability", lambda: "")(),
    }


def format_summary(summary: Mapping[str, Any], *, diagnostics: bool = True) -> str:
    """``summary.md``: the arm table, the paired differences and (``diagnostics``) the RL
    arms' training diagnostics."""
    k = summary["settings"]["eval_k"]
    seeds = summary["settings"]["seeds"]
    lines = [
        f"# Learning benchmark: {summary['env_id']}",
        "",
        f"{len(summary['train_task_ids'])} training tasks (train split), "
        f"{len(summary['eval_task_ids'])} {_evaluated_on(summary)}, "
        f"seeds {list(seeds)}, {summary['settings']['eval_n']} episodes per eval task; "
        f"machine: {summary['machine']['cpu_model']}, torch {summary['machine']['torch_version']}"
        f", {summary['machine']['torch_threads']} thread(s).",
        "",
    ]
    train, rl_tasks = summary["train_task_ids"], summary.get("rl_task_ids")
    names = summary.get("rl_name_permutations") or 0
    if (rl_tasks is not None and rl_tasks != train) or names:
        which = "the training tasks" if rl_tasks in (None, train) else f"{len(rl_tasks)} of them"
        under = f", each under {names} permutations of the item names" if names else ""
        lines += [f"RL tasks: {which}{under}.", ""]
    lines += [
        f"| arm | Avg@{k} (mean +- SE over seeds) | Pass@{k} | per seed Avg@{k} |",
        "|---|---|---|---|",
    ]
    for arm, row in summary["results"].items():
        a, p = row["avg_at_k"], row["pass_at_k"]
        per_seed = ", ".join(f"{v[0]:.3f}" for v in row["per_seed"].values())
        lines.append(
            f"| {arm} | {_fmt(a['mean'], '.3f')} +- {_fmt(a['se'], '.3f')} | "
            f"{_fmt(p['mean'], '.3f')} +- {_fmt(p['se'], '.3f')} | "
            f"{per_seed} |"
        )
    lines += _contrast_table("arm - sft", {f"{a} - sft": r for a, r in summary["paired"].items()})
    between = summary.get("contrasts") or {}
    if between:
        lines += _contrast_table("contrast", between)
    if diagnostics:
        lines += format_diagnostics(summary.get("diagnostics") or {})
    missing = summary.get("missing", [])
    if missing:
        lines += ["", f"Not finished (rerun to resume): {', '.join(missing)}"]
    lines += ["", f"wall time of this invocation: {summary['wall_seconds']} s"]
    return "\n".join(lines) + "\n"


def _contrast_table(head: str, rows: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Markdown: per contrast the paired figures over (seed, task) and the seed-clustered ones."""
    lines = [
        "",
        f"| {head} | paired diff (seed x task) | SE | z | pairs | better / worse | "
        "per-seed diffs | over seeds: mean +- SE | t (df) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in rows.items():
        c = row.get("clustered") or {}
        per_seed = ", ".join(f"{v:+.3f}" for v in (c.get("per_seed") or {}).values())
        df = c.get("df")
        lines.append(
            f"| {name} | {_fmt(row['mean_diff'], '+.3f')} | {_fmt(row['se'], '.3f')} | "
            f"{_fmt(row['z'], '.2f')} | {row['pairs']} | {row['better']} / {row['worse']} | "
            f"{per_seed or 'n/a'} | {_fmt(c.get('mean'), '+.3f')} +- {_fmt(c.get('se'), '.3f')}"
            f" | {_fmt(c.get('t'), '.2f')} ({df if df is not None else 'n/a'}) |"
        )
    return lines


def rebuild(path: Path, *, random_arm: bool = False) -> dict[str, Any]:
    """Recompute a saved summary's results, paired differences and contrasts from its
    ``per_task`` counts; rewrite its ``summary.json`` and ``summary.md`` (no arm is rerun).
    ``random_arm``: where the summary has no ``random`` arm, play the random agent on its
    evaluation tasks first (:func:`random_counts`; seconds)."""
    import json

    summary = json.loads(path.read_text())
    per_task = summary["per_task"]
    if random_arm and "random" not in per_task:
        per_task["random"] = random_counts(summary)
    summary["results"] = arm_table(per_task, summary["settings"]["eval_k"])
    summary["paired"] = arms_vs_sft(per_task)
    summary["contrasts"] = contrasts(per_task)
    path.write_text(json.dumps(summary, indent=1, allow_nan=False))
    (path.parent / "summary.md").write_text(format_summary(summary))
    return summary


def random_counts(summary: Mapping[str, Any]) -> dict[str, dict[str, list[int]]]:
    """{seed: {task: [successes, samples]}} of the random agent (``random:<seed>``) on the
    summary's evaluation tasks, with its settings' episodes per task and turn limit (the
    ``random`` arm as :func:`agentenvs.benchmarks.learning.stages.random_stage` plays it)."""
    import tempfile
    from dataclasses import fields

    from agentenvs.benchmarks.learning.settings import BenchSettings
    from agentenvs.benchmarks.learning.stages import evaluate_tasks

    known = {f.name for f in fields(BenchSettings)} - {"model"}
    saved = summary["settings"]
    settings = BenchSettings(**{k: v for k, v in saved.items() if k in known})
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in saved["seeds"]:
            out[str(seed)] = evaluate_tasks(
                settings, f"random:{seed}", summary["eval_task_ids"], int(seed), Path(tmp)
            )
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="Rebuild a learning summary's tables.")
    parser.add_argument("--rebuild", type=Path, nargs="+", required=True, metavar="SUMMARY_JSON")
    parser.add_argument(
        "--random", action="store_true", help="add the random agent's arm where it is missing"
    )
    args = parser.parse_args(argv)
    for path in args.rebuild:
        rebuild(path, random_arm=args.random)
        print(f"rebuilt {path} and {path.parent / 'summary.md'}")
    return 0


def _evaluated_on(summary: Mapping[str, Any]) -> str:
    if summary.get("eval_split", "test") == "validation":
        if str(summary.get("env_id", "")).startswith("KeyDoor-"):
            return "validation tasks (the validation split; not the test split)"
        return "validation tasks (train split, after the training tasks; not the test split)"
    held_apart = len(summary.get("validation_task_ids") or [])
    apart = f"; {held_apart} validation tasks held apart in train" if held_apart else ""
    return f"held-out evaluation tasks (test split{apart})"


def plot_curve(
    curves: Mapping[str, Mapping[str, Mapping[str, Mapping[str, list[int]]]]],
    k: int,
    title: str,
    path: Path,
) -> Path:
    """Mean Avg@k over seeds (+- SE) against the RL iteration, one line per arm; SFT at 0."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for arm, seeds in curves.items():
        points: dict[int, list[float]] = {}
        for per_iteration in seeds.values():
            for it, tasks in per_iteration.items():
                points.setdefault(int(it), []).append(seed_scores(tasks, k)[0])
        xs = sorted(points)
        stats = [_mean_se(points[x]) for x in xs]
        means = [s["mean"] for s in stats]
        errs = [s["se"] or 0.0 for s in stats]
        if arm in ("sft", "random"):  # no RL iterations: a level line
            style = {"sft": ("gray", "--"), "random": ("black", ":")}[arm]
            ax.axhline(means[0], color=style[0], ls=style[1], lw=1.2, label=f"{arm} (Avg@{k})")
            continue
        ax.errorbar(xs, means, yerr=errs, marker="o", capsize=3, lw=1.8, label=arm)
    ax.set_xlabel("RL iteration (0: the SFT model)")
    ax.set_ylabel(f"held-out Avg@{k} (mean +- SE over seeds)")
    ax.set_ylim(0, 1.02)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


if __name__ == "__main__":
    raise SystemExit(main())
