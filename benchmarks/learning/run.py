"""Run the learning benchmark (or resume it) and write its summary.

    python -m agentenvs.benchmarks.learning.check --preset textcraft --out docs/learning-check
    python -m agentenvs.benchmarks.learning.check --preset sokoban --out results/learning/sokoban
    python -m agentenvs.benchmarks.learning.check --preset smoke --out /tmp/smoke  # a minute or two

Stages, each (arm, seed) unit announced by a line and its work shown by bars that move per SFT
step, RL iteration, replay query and evaluation episode: data (expert episodes of the training
tasks, the base model), SFT per seed (with its held-out evaluation), Prefix-GRPO's replay per
seed (when that arm runs), then every RL arm per seed (``--jobs 2``: units in subprocesses, one
bar over the units). A finished unit is a
``result.json`` under ``OUT/<arm>/seed-<s>/``; a rerun skips it, so an interrupted run resumes
where it stopped (an RL arm also resumes from its last evaluation point). ``--only`` limits a
run to some arms (the others' finished files still count in the summary); ``summary.json``,
``summary.md`` and ``curve.png`` are rewritten at the end from whatever is finished, listing
what is not.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from agentenvs.benchmarks.learning.report import (
    arm_table,
    arms_vs_sft,
    contrasts,
    diagnostics,
    format_summary,
    machine,
    plot_curve,
)
from agentenvs.benchmarks.learning.settings import (
    PRESETS,
    SCHEMA_VERSION,
    BenchSettings,
    eval_task_ids,
    preset,
    rl_task_ids,
    train_task_ids,
    validation_task_ids,
)
from agentenvs.benchmarks.learning.stages import (
    data_stage,
    random_stage,
    replay_stage,
    rl_stage,
    rl_teacher_stage,
    sft_stage,
)

__all__ = ["main", "parse_overrides", "run_benchmark"]

NO_SFT_ARMS = ("sft", "random")
"""Arms whose unit does not start from the seed's SFT model."""


def _bar(total: int, desc: str, enabled: bool) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, disable=not enabled, dynamic_ncols=True)


def _stage(text: str, enabled: bool) -> None:
    """Announce a unit (above any bar that is drawing)."""
    if enabled:
        from tqdm.auto import tqdm

        tqdm.write(text)


def _tasks(settings: BenchSettings, out: Path) -> tuple[list[str], list[str]]:
    """(train ids, eval ids), cached in ``OUT/tasks.json`` (the expert decides eligibility)."""
    path = out / "tasks.json"
    if path.is_file():
        saved = json.loads(path.read_text())
        if saved["settings"] == _task_key(settings):
            return saved["train"], saved["eval"]
    train, evals = train_task_ids(settings), eval_task_ids(settings)
    if set(train) & set(evals):
        raise AssertionError("training and evaluation tasks overlap")
    if settings.validation_tasks and set(validation_task_ids(settings)) & (
        set(train) | set(eval_task_ids(replace(settings, eval_split="test")))
    ):
        raise AssertionError("the validation tasks overlap the training or the test tasks")
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps({"settings": _task_key(settings), "train": train, "eval": evals}, indent=1)
    )
    return train, evals


def _rl_base_ids(rl_ids: list[str]) -> list[str]:
    """The original tasks behind RL's tasks (``<task>/names-<k>`` -> ``<task>``)."""
    from agentenvs.textcraft.renaming import original_task_id

    return list(dict.fromkeys(map(original_task_id, rl_ids)))


def _task_key(settings: BenchSettings) -> dict[str, Any]:
    return {
        "env_id": settings.env_id,
        "train_tasks": settings.train_tasks,
        "eval_per_family": settings.eval_per_family,
        "max_expert_turns": settings.max_expert_turns,
        "validation_tasks": settings.validation_tasks,
        "eval_split": settings.eval_split,
    }


def _check_settings(settings: BenchSettings, out: Path) -> None:
    """Refuse to mix finished units of different settings in one directory."""
    path = out / "settings.json"
    mine = {k: v for k, v in settings.to_json().items() if k not in ("arms", "seeds", "threads")}
    if path.is_file():
        # a field added later, missing from an older run's file, had its default's behaviour
        defaults = json.loads(json.dumps(BenchSettings().to_json()))
        theirs = {k: v for k, v in defaults.items() if k in mine} | json.loads(path.read_text())
        if theirs != json.loads(json.dumps(mine)):
            diff = sorted(k for k in mine if theirs.get(k) != json.loads(json.dumps(mine[k])))
            raise SystemExit(
                f"{out} holds a run with other settings ({', '.join(diff)}); "
                "use another --out or remove it"
            )
    else:
        out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(mine, indent=1))


def _run_units(
    preset_name: str,
    out: Path,
    units: list[tuple[str, int]],
    *,
    jobs: int,
    desc: str,
    show: bool,
    overrides: Sequence[str] = (),
) -> None:
    """Run (arm, seed) units, ``jobs`` at a time, each in its own process (one thread each);
    a unit's output goes to ``OUT/logs/<arm>-seed-<s>.log``. An RL unit starts once its seed's
    SFT unit is finished (the next ready unit in order takes a free slot, so no core waits for
    a whole stage to end)."""
    import subprocess
    import sys

    todo = [u for u in units if not (out / u[0] / f"seed-{u[1]}" / "result.json").is_file()]
    bar = _bar(len(units), desc, show)
    bar.update(len(units) - len(todo))
    (out / "logs").mkdir(parents=True, exist_ok=True)
    running: list[tuple[Any, Any, tuple[str, int]]] = []
    failed = []

    def ready(unit: tuple[str, int]) -> bool:
        return unit[0] in NO_SFT_ARMS or (out / "sft" / f"seed-{unit[1]}" / "result.json").is_file()

    while todo or running:
        while len(running) < jobs and any(ready(u) for u in todo):
            arm, seed = todo.pop(next(i for i, u in enumerate(todo) if ready(u)))
            log = (out / "logs" / f"{arm}-seed-{seed}.log").open("w")
            cmd = [
                sys.executable,
                "-m",
                "agentenvs.benchmarks.learning.check",
                "--preset",
                preset_name,
            ]
            cmd += ["--out", str(out), "--only", arm, "--seeds", str(seed), "--no-progress"]
            cmd += ["--no-summary", *(f"--set={item}" for item in overrides)]
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
            running.append((proc, log, (arm, seed)))
        if not running and todo:  # what is left waits on an SFT unit that failed or not ran
            failed += [
                f"{arm}/seed-{seed} (its seed's SFT unit did not finish)" for arm, seed in todo
            ]
            break
        time.sleep(1.0)
        for item in list(running):
            proc, log, unit = item
            if proc.poll() is None:
                continue
            log.close()
            running.remove(item)
            bar.update(1)
            if proc.returncode:
                failed.append(f"{unit[0]}/seed-{unit[1]} (see {log.name})")
    bar.close()
    if failed:
        raise RuntimeError(f"units failed: {', '.join(failed)}")


def run_benchmark(
    settings: BenchSettings,
    out_dir: str | Path,
    *,
    only: Sequence[str] | None = None,
    progress: bool = True,
    jobs: int = 1,
    preset_name: str | None = None,
    preset_overrides: Sequence[str] = (),
    write_summary: bool = True,
) -> dict[str, Any]:
    """Run (or resume) every unfinished (arm, seed) of ``settings``; write and return the
    summary of everything finished. ``jobs`` > 1 (needs ``preset_name`` and the
    ``preset_overrides`` ``key=value`` strings that make ``settings`` from that preset): SFT
    and RL units run that many at a time in their own processes."""
    import torch

    from agentenvs.benchmarks.learning.plugins import register_benchmark_envs

    register_benchmark_envs()  # KeyDoor-v0 and Sokoban-oracle-v0, in this process
    torch.set_num_threads(settings.threads)
    out = Path(out_dir)
    start = time.perf_counter()
    _check_settings(settings, out)
    run_arms = [a for a in settings.arms if only is None or a in only]
    train_ids, eval_ids = _tasks(settings, out)
    rl_ids = rl_task_ids(settings, train_ids)
    if set(_rl_base_ids(rl_ids)) & set(eval_ids):
        raise AssertionError("RL and evaluation tasks overlap")
    data = data_stage(settings, out, train_ids)
    if only is not None and not only:  # report only: nothing runs
        return _write_summary(settings, out, train_ids, eval_ids, start, write_summary)
    if "prefix-grpo" in run_arms:  # before the units, which all read it
        teacher = rl_teacher_stage(settings, out, data, rl_ids)
    if jobs > 1:
        if preset_name is None:
            raise ValueError("jobs > 1 runs the units by preset name: pass preset_name")
        seeds = settings.seeds
        units = [(a, s) for a in NO_SFT_ARMS for s in seeds if a in run_arms]
        units += [(a, s) for s in seeds for a in run_arms if a not in NO_SFT_ARMS]
        _run_units(
            preset_name,
            out,
            units,
            jobs=jobs,
            desc="sft, rl arms + eval",
            show=progress,
            overrides=preset_overrides,
        )
    if "random" in run_arms:
        for seed in settings.seeds:
            _stage(f"random agent, seed {seed}", progress)
            random_stage(settings, out, eval_ids, seed, progress=progress)
    sft: dict[int, dict[str, Any]] = {}
    for seed in settings.seeds if set(run_arms) - {"random"} else ():
        _stage(f"sft + eval, seed {seed}", progress)
        sft[seed] = sft_stage(settings, out, data, eval_ids, seed, progress=progress)
    queries: dict[int, str] = {}
    if "prefix-grpo" in run_arms:
        for seed in settings.seeds:
            _stage(f"prefix-grpo's queries (cut, validate, sidecar), seed {seed}", progress)
            queries[seed] = replay_stage(out, teacher, sft[seed], seed, progress=progress)[
                "samples"
            ]
    for arm in run_arms:
        if arm in NO_SFT_ARMS:
            continue
        for seed in settings.seeds:
            _stage(f"rl {arm} + eval, seed {seed}", progress)
            source = queries[seed] if arm == "prefix-grpo" else rl_ids
            rl_stage(settings, out, arm, sft[seed], source, eval_ids, seed, progress=progress)
    return _write_summary(settings, out, train_ids, eval_ids, start, write_summary)


def _write_summary(settings, out, train_ids, eval_ids, start, write: bool) -> dict[str, Any]:
    summary = summarize(settings, out, train_ids, eval_ids)
    summary["wall_seconds"] = round(time.perf_counter() - start, 1)
    if write:
        (out / "summary.json").write_text(json.dumps(summary, indent=1, allow_nan=False))
        (out / "summary.md").write_text(format_summary(summary))
    return summary


def summarize(
    settings: BenchSettings, out: Path, train_ids: list[str], eval_ids: list[str]
) -> dict[str, Any]:
    """The summary of every finished (arm, seed) under ``out`` (and the curve PNG)."""
    per_task: dict[str, dict[str, Any]] = {}
    curves: dict[str, dict[str, Any]] = {}
    seconds: dict[str, dict[str, Any]] = {}
    training: dict[str, dict[str, Any]] = {}
    missing = []
    for arm in settings.arms:
        for seed in settings.seeds:
            path = out / arm / f"seed-{seed}" / "result.json"
            if not path.is_file():
                missing.append(f"{arm}/seed-{seed}")
                continue
            result = json.loads(path.read_text())
            per_task.setdefault(arm, {})[str(seed)] = result["per_task"]
            curves.setdefault(arm, {})[str(seed)] = result["curve"]
            seconds.setdefault(arm, {})[str(seed)] = result["seconds"]
            if "training" in result:
                training.setdefault(arm, {})[str(seed)] = result["training"]
    k = settings.eval_k
    title = (
        f"{settings.env_id}: {len(eval_ids)} held-out tasks, seeds {list(settings.seeds)}, "
        f"{settings.model.hidden_size}-wide model"
    )
    curve = plot_curve(curves, k, title, out / "curve.png") if curves else None
    return {
        "schema_version": SCHEMA_VERSION,
        "env_id": settings.env_id,
        "train_task_ids": train_ids,
        "rl_task_ids": _rl_base_ids(rl_task_ids(settings, train_ids)),
        "rl_name_permutations": settings.rl_name_permutations,
        "eval_task_ids": eval_ids,
        "eval_split": settings.eval_split,
        "validation_task_ids": validation_task_ids(settings) if settings.validation_tasks else [],
        "settings": settings.to_json(),
        "machine": machine(settings.threads),
        "per_task": per_task,
        "results": arm_table(per_task, k),
        "paired": arms_vs_sft(per_task),
        "contrasts": contrasts(per_task),
        "curves": curves,
        "diagnostics": diagnostics(training),
        "training": training,
        "seconds": seconds,
        "missing": missing,
        "curve": str(curve) if curve else None,
    }


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """``["key=value", ...]`` as BenchSettings fields (value as JSON, else the string; a JSON
    list becomes a tuple where the field is one); an unknown key is an error naming them."""
    from dataclasses import fields

    known = {f.name: f for f in fields(BenchSettings)}
    defaults = BenchSettings()
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or key not in known:
            raise SystemExit(f"--set {item!r}: expected KEY=VALUE with KEY one of {sorted(known)}")
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = text
        if isinstance(value, list) and isinstance(getattr(defaults, key), tuple):
            value = tuple(value)
        out[key] = value
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--preset", default="textcraft", choices=sorted(PRESETS))
    parser.add_argument("--out", default=None, help="default: results/learning/<preset>")
    parser.add_argument("--seeds", type=int, nargs="+", default=None)
    parser.add_argument("--only", nargs="+", default=None, help="run only these arms")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--jobs", type=int, default=1, help="(arm, seed) units run at once")
    parser.add_argument(
        "--publish", default=None, help="copy summary.json, summary.md, curve.png here"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="replace a preset's setting (a BenchSettings field; VALUE in JSON, or a string), "
        "e.g. --set rl_lr=0.001 --set eval_split=validation",
    )
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--no-summary", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--report", action="store_true", help="only write the summary of the finished units"
    )
    args = parser.parse_args(argv)
    overrides: dict[str, Any] = parse_overrides(args.set)
    if args.seeds:
        overrides["seeds"] = tuple(args.seeds)
    if args.threads:
        overrides["threads"] = args.threads
    settings = preset(args.preset, **overrides)
    out = args.out or f"results/learning/{args.preset}"
    summary = run_benchmark(
        settings,
        out,
        only=() if args.report else args.only,
        progress=not args.no_progress,
        jobs=args.jobs,
        preset_name=args.preset,
        preset_overrides=args.set,
        write_summary=not args.no_summary,
    )
    if args.no_summary:
        return 0
    print(format_summary(summary))
    if args.publish:
        import shutil

        target = Path(args.publish)
        target.mkdir(parents=True, exist_ok=True)
        for name in ("summary.json", "summary.md", "curve.png"):
            if (Path(out) / name).is_file():
                shutil.copy2(Path(out) / name, target / name)
    return 0
