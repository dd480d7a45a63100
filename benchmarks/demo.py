"""``make demo``: the expert and the random agent on every registered environment's test split.

    python -m agentenvs.benchmarks.demo                       # all registered environments
    # one, Avg@8 / Pass@8 for the random agent
    python -m agentenvs.benchmarks.demo TextCraft-v0 --k 8

For each id in ``agentenvs.registration.ENVIRONMENTS`` (looked up when it runs, so environments
that land later are picked up) that can be made here (an optional extra may be missing: it is
skipped with the error naming the extra), it evaluates

* ``expert`` (one sample a task; where the environment has an expert in
  ``agentenvs.expert.EXPERTS``), and
* ``random`` (``k`` samples a task, fewer where :data:`DEMO_RANDOM_SAMPLES` says: a uniformly
  random admissible or well-formed action),

on the test split, or its first :data:`DEMO_TASK_LIMITS` tasks where a split is slow, and prints
the Avg@k / Pass@k tables per family and a summary. Runs go to ``results/demo/<env>/<agent>/``
(trajectories, tables, plots), started afresh unless ``--resume``.

Then the main job (:func:`learning_demo`, a few minutes on 2 CPU cores; ``--no-learning`` skips
it): the whole pipeline on TextCraft with a small model trained from scratch
(:mod:`agentenvs.benchmarks.learning`, preset ``demo``): the expert's teacher trajectories of
training tasks, cut-state queries cut from them, replay validation, SFT, Prefix-GRPO, and the
Avg@8 / Pass@8 table and curve of Prefix-GRPO against SFT on held-out test tasks
(``results/demo/learning/``), its bars moving per SFT step, RL iteration and evaluation episode.
One seed on 12 tasks is a smoke run of the pipeline, not a measurement of whether RL helps, and
the demo says so: it prints its paired difference with its standard error, then the committed
benchmark's tables (``make learning-check``: 3 seeds, 24 held-out tasks;
``docs/learning-check/summary.json`` for TextCraft, ``docs/learning-check/sokoban/summary.json``
for Sokoban) beside it.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from agentenvs.benchmarks.eval.evaluate import evaluate
from agentenvs.benchmarks.eval.metrics import OVERALL, MetricRow
from agentenvs.benchmarks.eval.settings import EvalSettings
from agentenvs.benchmarks.eval.writers import format_markdown

__all__ = [
    "COMMITTED_BENCHMARK",
    "COMMITTED_BENCHMARKS",
    "DEMO_RANDOM_SAMPLES",
    "DEMO_TASK_LIMITS",
    "DemoRow",
    "available_envs",
    "committed_benchmark",
    "learning_verdict",
    "main",
    "run_demo",
]

# the learning benchmark's published runs (make learning-check), in a source checkout
COMMITTED_BENCHMARK = (
    Path(__file__).resolve().parents[1] / "docs" / "learning-check" / "summary.json"
)
COMMITTED_BENCHMARKS = (
    COMMITTED_BENCHMARK,
    COMMITTED_BENCHMARK.parent / "sokoban" / "summary.json",
)

# Environments whose test split is slow to play in full: evaluate only the first N tasks
# (ALFWorld's TextWorld engine takes about 5 s a reset and 0.1-0.3 s a step here).
DEMO_TASK_LIMITS: dict[str, int] = {"ALFWorld-v0": 4, "WebShop-v0": 50}
# Fewer random-agent samples per task where episodes are slow (the random agent uses every turn).
DEMO_RANDOM_SAMPLES: dict[str, int] = {"ALFWorld-v0": 2}


@dataclass(frozen=True)
class DemoRow:
    env_id: str
    agent: str
    overall: MetricRow | None
    note: str = ""


def available_envs(requested: list[str] | None = None) -> tuple[list[str], dict[str, str]]:
    """The registered ids whose environment can be made here, and why the others cannot (a
    missing dependency: its error, naming the extra to install)."""
    from agentenvs.registration import ENVIRONMENTS, MissingDependencyError, build_env

    ids = requested or list(ENVIRONMENTS)
    ok, skipped = [], {}
    for env_id in ids:
        if env_id not in ENVIRONMENTS:
            skipped[env_id] = f"not registered (registered: {sorted(ENVIRONMENTS)})"
            continue
        try:
            build_env(env_id).close()
        except MissingDependencyError as exc:  # an optional extra that is not installed
            skipped[env_id] = str(exc)
            continue
        except Exception as exc:  # data not present, ...
            skipped[env_id] = f"{type(exc).__name__}: {exc}"
            continue
        ok.append(env_id)
    return ok, skipped


def run_demo(
    env_ids: list[str] | None = None,
    *,
    k: int = 4,
    out_root: str | Path = "results/demo",
    resume: bool = False,
    progress: bool = True,
) -> list[DemoRow]:
    """Evaluate the expert and the random agent on each environment; print and return the rows."""
    from agentenvs.expert import EXPERTS

    envs, skipped = available_envs(env_ids)
    for env_id, why in skipped.items():
        print(f"skipping {env_id}: {why}\n")
    summary: list[DemoRow] = []
    for env_id in envs:
        limit = DEMO_TASK_LIMITS.get(env_id)
        plans = [("random", min(k, DEMO_RANDOM_SAMPLES.get(env_id, k)))]
        if env_id in EXPERTS:
            plans.insert(0, ("expert", 1))
        for agent, samples in plans:
            settings = EvalSettings(
                env_id=env_id, agent=agent, split="test", k=samples, limit=limit
            )
            out = Path(out_root) / env_id / agent
            try:
                result = evaluate(settings, out, fresh=not resume, progress=progress)
            except Exception as exc:  # report and go on with the other environments
                summary.append(DemoRow(env_id, agent, None, f"{type(exc).__name__}: {exc}"))
                print(f"{env_id} / {agent}: failed: {type(exc).__name__}: {exc}\n")
                continue
            what = f"first {limit} tasks of test" if limit else "test"
            print(format_markdown(result.rows, f"{env_id} / {agent} / {what}") + "\n")
            overall = next((r for r in result.rows if r.family == OVERALL), None)
            summary.append(DemoRow(env_id, agent, overall, what))
    print(format_summary(summary))
    return summary


def learning_demo(
    out: str | Path = "results/demo/learning", *, settings=None, progress: bool = True
) -> dict:
    """The pipeline's main job (module docstring); prints each stage and returns the summary."""
    import json

    from agentenvs.benchmarks.learning.report import format_summary as learning_summary
    from agentenvs.benchmarks.learning.run import run_benchmark
    from agentenvs.benchmarks.learning.settings import preset

    settings = settings or preset("demo")
    out = Path(out)
    summary = run_benchmark(settings, out, progress=progress)
    data = json.loads((out / "data.json").read_text())
    print("### Learning: SFT -> Prefix-GRPO on held-out TextCraft tasks\n")
    print(
        f"teacher trajectories: {data['expert_episodes']} expert episodes of "
        f"{len(summary['train_task_ids'])} training tasks ({data['expert_won']} won)"
    )
    if settings.rl_name_permutations:
        limit = settings.rl_max_commands
        which = f" (at most {limit} recipes)" if limit is not None else ""
        print(
            f"RL tasks: {len(summary['rl_task_ids'])} of them{which}, each under "
            f"{settings.rl_name_permutations} permutations of the item names; Prefix-GRPO's "
            "teacher trajectories: the expert's episodes of those"
        )
    for seed in settings.seeds:
        replay = json.loads((out / "replay" / f"seed-{seed}" / "result.json").read_text())
        print(
            f"cut-state queries (seed {seed}): {replay['queries']}; replay validation: "
            f"{replay['validated_ratio']:.0%} validated; {replay['sidecar_rows']} training "
            f"samples with prefix sidecars ({replay['sidecar_violations']} violations)"
        )
    for arm, seeds in summary["seconds"].items():
        print(f"{arm}: {', '.join(f'seed {s}: {v}' for s, v in seeds.items())} (seconds)")
    print()
    print(learning_summary(summary))
    print(f"curve: {summary['curve']}\n")
    print(learning_verdict(summary) + "\n")
    for path in COMMITTED_BENCHMARKS:
        committed = committed_benchmark(path)
        if committed is None:
            where = path.parent.relative_to(COMMITTED_BENCHMARK.parents[2])
            print(
                f"(the committed benchmark's table is {where}/summary.md in a source "
                "checkout of agentenvs; not found here)"
            )
        else:
            print(committed + "\n")
    return summary


def learning_verdict(summary: dict) -> str:
    """What the demo's learning run shows: each RL arm against SFT (paired over the held-out
    tasks, with its standard error) and, with fewer than 3 seeds, that it is a smoke run."""
    seeds = list(summary["settings"]["seeds"])
    tasks = len(summary["eval_task_ids"])
    lines = []
    for arm, row in summary["paired"].items():
        diff, se = row["mean_diff"], row["se"]
        if diff is None:
            continue
        size = (
            "n/a"
            if se is None
            else f"{se:.3f}; the difference is {'larger' if abs(diff) > se else 'not larger'} "
            "than its standard error"
        )
        lines.append(
            f"{arm} vs sft on {tasks} held-out tasks x {len(seeds)} seed(s): {diff:+.3f} success "
            f"rate (SE {size}; {row['better']} of {row['pairs']} pairs better, {row['worse']} "
            "worse)."
        )
    if len(seeds) < 3:
        lines.append(
            f"{len(seeds)} seed{'s' if len(seeds) != 1 else ''} on {tasks} tasks is a smoke run: "
            "it shows every stage of the pipeline working end to end, not whether RL beats "
            "SFT (its standard error counts the tasks' noise, not the seeds'). The committed "
            "benchmark measures that (make learning-check: several seeds, more held-out tasks, "
            "paired differences with their z):"
        )
    return "\n".join(lines)


def committed_benchmark(path: Path = COMMITTED_BENCHMARK) -> str | None:
    """The committed learning benchmark's table (its ``summary.json`` formatted), or None when
    the file is not there (an installed package has no docs/)."""
    import json

    from agentenvs.benchmarks.learning.report import format_summary as learning_summary

    if not path.is_file():
        return None
    text = learning_summary(json.loads(path.read_text()), diagnostics=False)
    text = text.replace("# Learning benchmark:", "### The committed learning benchmark:", 1)
    text = text.replace(
        "wall time of this invocation", "wall time of the invocation that wrote it", 1
    )
    return f"{text}\n(from {path}; how it was run: {COMMITTED_BENCHMARK.parent / 'README.md'})"


def format_summary(rows: list[DemoRow]) -> str:
    lines = [
        "### Summary",
        "",
        "| env | agent | tasks | samples | Avg@k | Pass@k | k | note |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        r = row.overall
        if r is None:
            lines.append(f"| {row.env_id} | {row.agent} |  |  |  |  |  | {row.note} |")
        else:
            avg = "-" if r.avg_at_k is None else f"{100 * r.avg_at_k:.2f}"
            pas = "-" if r.pass_at_k is None else f"{100 * r.pass_at_k:.2f}"
            note = f"{row.note}; {r.errors} errored" if r.errors else row.note
            lines.append(
                f"| {row.env_id} | {row.agent} | {r.tasks} | {r.samples} | {avg} | {pas} | "
                f"{r.k} | {note} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("env_ids", nargs="*", help="default: every registered environment")
    parser.add_argument(
        "--k", type=int, default=4, help="samples per task for the random agent (default 4)"
    )
    parser.add_argument("--out", type=Path, default=Path("results/demo"))
    parser.add_argument(
        "--resume", action="store_true", help="keep finished episodes of a previous demo"
    )
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument(
        "--no-learning", action="store_true", help="skip the SFT -> Prefix-GRPO main job"
    )
    args = parser.parse_args(argv)
    rows = run_demo(
        args.env_ids or None,
        k=args.k,
        out_root=args.out,
        resume=args.resume,
        progress=not args.no_progress,
    )
    if not args.no_learning:
        learning = args.out / "learning"
        if not args.resume and learning.exists():
            import shutil

            shutil.rmtree(learning)
        learning_demo(learning, progress=not args.no_progress)
    return 1 if any(r.overall is None for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
