"""A ``train rl`` run for ``agentenvs view``: curves per iteration, sampled episodes, and the
evaluation points a learning-benchmark unit adds.

The curves are the iteration metrics of ``metrics.jsonl`` that the run recorded, grouped by what
they say (:data:`CURVES`): success and reward of the sampled episodes, the losses, the KL and
log-prob gaps, the advantage statistics, entropy and clipping. A series the run did not record
is left out, a chart with none is left out. The sampled episodes of iteration ``s`` are
``episodes/step-<s>.jsonl.gz`` (:attr:`agentenvs.train.rl.config.RLConfig.save_episodes`). A
learning-benchmark unit (``agentenvs.benchmarks.learning``) also holds its evaluation points
(``result.json``'s curve, else ``eval-<s>.json``: successes and samples per held-out task; 0 is
the SFT model it started from) and the last point's episodes (``eval/trajectories.jsonl``).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from agentenvs.benchmarks.view.runs import (
    Run,
    RunFormatError,
    add_eval_episodes,
    finish_meta,
    learning_unit_settings,
    scan_trajectories,
)

__all__ = ["CURVES", "eval_points", "load_train", "metric_curves", "step_of"]

# chart title -> the metrics.jsonl keys drawn in it, where recorded
CURVES: dict[str, tuple[str, ...]] = {
    "success (sampled episodes)": ("rollout/success_rate",),
    "reward (sampled episodes)": ("rollout/reward_mean",),
    "loss": ("actor/pg_loss", "actor/total_loss", "prefix/pg_loss"),
    "KL and log-prob gaps": (
        "actor/kl",
        "actor/approx_kl",
        "prefix/kl",
        "rollout/kl",
        "rollout/trainer_logprob_gap",
        "rollout/vllm_logprob_gap",
    ),
    "advantages": ("adv/mean", "adv/std", "adv/abs_mean", "adv/zero_frac"),
    "entropy and clipping": ("actor/entropy", "actor/clipfrac", "actor/grad_norm"),
}


_STEP_FILE = re.compile(r"step-(\d+)(?:\.rank(\d+))?\.jsonl(?:\.gz)?$")


def step_of(path: Path) -> int | None:
    """The iteration of a sampled-episodes file name (``step-0000003.jsonl.gz`` -> 3)."""
    m = _STEP_FILE.match(path.name)
    return int(m[1]) if m else None


def metric_curves(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``[{title, series: [{name, points: [[step, value], ...]}]}]`` over the recorded keys."""
    charts = []
    for title, keys in CURVES.items():
        series = []
        for key in keys:
            points = [
                [line["step"], line[key]]
                for line in lines
                if isinstance(line.get(key), (int, float)) and math.isfinite(line[key])
            ]
            if points:
                series.append({"name": key, "points": points})
        if series:
            charts.append({"title": title, "series": series})
    return charts


def eval_points(folder: Path) -> dict[str, dict[str, list[int]]]:
    """``{iteration: {task_id: [successes, samples]}}`` of a learning-benchmark unit (empty
    for a plain ``train rl`` run)."""
    result = folder / "result.json"
    if result.is_file():
        curve = json.loads(result.read_text()).get("curve")
        if isinstance(curve, dict):
            return {str(k): v for k, v in curve.items()}
    points = {}
    for path in sorted(folder.glob("eval-*.json")):
        step = path.stem.removeprefix("eval-")
        if step.isdigit():
            points[str(int(step))] = json.loads(path.read_text())
    return points


def _avg(per_task: dict[str, list[int]]) -> float | None:
    """Avg@k over tasks: the mean of c / n (tasks with no sample left out)."""
    rates = [c / n for c, n in per_task.values() if n]
    return sum(rates) / len(rates) if rates else None


def _recorded(folder: Path) -> dict[str, Any]:
    """What the run's files say about it: protocol.json, and the last checkpoint's config."""
    protocol = json.loads((folder / "protocol.json").read_text())
    recorded: dict[str, Any] = {
        "protocol": protocol.get("protocol"),
        "protocol_settings": protocol.get("settings"),
        **learning_unit_settings(folder),
    }
    configs = sorted((folder / "checkpoints").glob("step-*/config.json"))
    if configs:
        config = json.loads(configs[-1].read_text())
        recorded["algo"] = config.get("algo")
        recorded["model"] = config.get("model")
        recorded["env_id"] = (config.get("data") or {}).get("env_id")
    return recorded


def load_train(folder: Path, name: str) -> Run:
    """The run of a ``train rl`` output folder (see the module docstring)."""
    try:
        lines = [
            json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines() if x.strip()
        ]
    except json.JSONDecodeError as exc:
        raise RunFormatError(f"{folder / 'metrics.jsonl'}: not JSON lines ({exc})") from exc
    run = Run(name, folder, "train", {})
    eval_file = folder / "eval" / "trajectories.jsonl"
    if eval_file.is_file():
        add_eval_episodes(run, eval_file)
    iterations = []
    files = sorted(
        (p for p in (folder / "episodes").glob("step-*.jsonl*") if step_of(p) is not None),
        key=lambda p: (step_of(p), p.name),
    )
    for path in files:
        step = step_of(path)
        ids = [run.add(s, ref) for s, ref in scan_trajectories(run, path, "train", step)]
        if iterations and iterations[-1]["step"] == step:  # another rank's share
            iterations[-1]["episodes"] += ids
        else:
            iterations.append({"step": step, "episodes": ids})
    for it in iterations:
        played = [run.episodes[i] for i in it["episodes"] if run.episodes[i]["error"] is None]
        it["success"] = sum(e["won"] for e in played) / len(played) if played else None
    points = eval_points(folder)
    curves = metric_curves(lines)
    held_out = [[int(s), _avg(t)] for s, t in points.items() if _avg(t) is not None]
    if held_out:
        held_out.sort()
        curves.insert(
            0, {"title": "held-out Avg@k", "series": [{"name": "eval", "points": held_out}]}
        )
    run.training = {
        "iterations": iterations,
        "curves": curves,
        "steps": len(lines),
        "eval_points": [
            {"step": int(s), "tasks": len(t), "avg": _avg(t)}
            for s, t in sorted(points.items(), key=lambda kv: int(kv[0]))
        ],
    }
    finish_meta(run, _recorded(folder))
    if not lines and not run.episodes:
        raise RunFormatError(f"{folder}: metrics.jsonl is empty and no episodes were saved yet")
    return run
