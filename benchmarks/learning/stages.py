"""The benchmark's stages, each over one seed, each finished by one JSON file that a rerun reads
instead of running it again (the resume points of ``make learning-check``).

* :func:`data_stage`: the expert's episodes of the training tasks (SFT data, teacher
  trajectories) and the base model (shared by every seed).
* :func:`sft_stage`: SFT from the base model with this seed's data order, then its held-out
  evaluation (the ``sft`` arm).
* :func:`replay_stage`: Prefix-GRPO's queries (entropy-change cuts under this seed's SFT model,
  replay validation, sidecars) over the teacher trajectories.
* :func:`rl_stage`: one RL arm from this seed's SFT model, evaluated every ``eval_every``
  iterations and at the end (the run is cut into segments and resumed exactly between them).
  The ``oracle`` arm trains on the environment whose steps report the expert's credit
  (:func:`agentenvs.benchmarks.learning.settings.rl_env_id`), as ``grpo`` otherwise.
* :func:`random_stage`: the random agent (``random:<seed>``) on the evaluation tasks, the floor
  that SFT must clearly beat (the ``random`` arm).

Evaluations play every held-out task ``eval_n`` times at temperature 1 with a seed derived from
the run's seed (the same episodes' sampling seeds for every arm of one seed) and record
``{task_id: [successes, samples]}``.

With ``progress``, every stage shows bars that move as it works: SFT per step, RL per
iteration, the replay stages per query, evaluations per episode.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from agentenvs.benchmarks.learning.settings import BenchSettings

__all__ = [
    "data_stage",
    "evaluate_tasks",
    "replay_stage",
    "rl_stage",
    "random_stage",
    "rl_teacher_stage",
    "sft_stage",
]


TRAINING_METRICS = (
    "rollout/success_rate",
    "rollout/reward_mean",
    "rollout/turns_mean",
    "rollout/invalid_format_frac",
    "actor/skipped_steps",
    "adv/abs_mean",
    "adv/step_credit_abs_mean",
    "adv/step_credit_nonzero_frac",
    "adv/step_credit_flat_group_share",
    "adv/zero_std_group_frac",
    "adv/grouped_step_frac",
    "adv/step_group_size_mean",
    "adv/step_group_zero_spread_frac",
    "adv/trees",
    "adv/tree_nodes_per_tree",
    "adv/tree_depth_max",
    "adv/tree_branching",
    "adv/tree_split_frac",
    "actor/entropy",
)
"""Per-iteration metrics of an RL unit kept in its ``result.json`` (``training``) and
summarised per arm: training success, replies off the prompt's format, how often anchor states
coincide, how much of the advantage is step credit, how many groups give no signal, and PTGPO's
trees (None where an estimator does not report one)."""

MOVEMENT_PREFIXES = ("actor/kl", "actor/clip", "actor/entropy")
"""How far an arm moved from its SFT model (KL to it, clip fraction, entropy): every
per-iteration metric whose name starts with one of these is kept beside
:data:`TRAINING_METRICS`, whatever the trainer calls it."""


def _done(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.is_file() else None


def _finish(path: Path, result: dict[str, Any]) -> dict[str, Any]:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1))
    tmp.replace(path)  # a finished file is complete or absent
    return result


def data_stage(settings: BenchSettings, out: Path, train_ids: list[str]) -> dict[str, Any]:
    """Expert episodes of ``train_ids`` (``out/expert.jsonl``) and the base model."""
    from agentenvs.agents.trajectory import read_trajectories, write_trajectories
    from agentenvs.benchmarks.learning.model import (
        build_env_model,
        expert_trajectories,
        renamed_copies,
        textcraft_item_names,
    )

    done = _done(out / "data.json")
    if done is not None:
        return done
    clock = time.perf_counter()
    expert = out / "expert.jsonl"
    trajs = expert_trajectories(settings.env_id, train_ids)
    write_trajectories(expert, trajs)
    # the tokenizer learns the training tasks' text only (nothing of the held-out tasks)
    items = textcraft_item_names() if settings.item_names == "recipe-database" else []
    base = build_env_model(out / "base", settings.model, settings.env_id, trajs, words=items)
    sft_data = out / "sft-data.jsonl"
    copies = renamed_copies(trajs, settings.sft_renamed_copies, pool=items or None)
    write_trajectories(sft_data, trajs + copies)
    won = sum(t.won for t in read_trajectories(expert))
    return _finish(
        out / "data.json",
        {
            "expert": str(expert),
            "sft_data": str(sft_data),
            "base": str(base),
            "expert_episodes": len(trajs),
            "expert_won": won,
            "seconds": round(time.perf_counter() - clock, 1),
        },
    )


def rl_teacher_stage(
    settings: BenchSettings, out: Path, data: dict[str, Any], rl_ids: list[str]
) -> Path:
    """Prefix-GRPO's teacher trajectories: the expert's episodes of RL's tasks (the data
    stage's file when RL plays the training tasks themselves, else ``out/rl-expert.jsonl``)."""
    from agentenvs.agents.trajectory import read_trajectories, write_trajectories
    from agentenvs.benchmarks.learning.model import expert_trajectories

    if [t.task_id for t in read_trajectories(data["expert"])] == rl_ids:
        return Path(data["expert"])
    path = out / "rl-expert.jsonl"
    if not path.is_file():  # (two units may write it at once: each its own partial file)
        partial = path.with_suffix(f".{os.getpid()}.partial")
        write_trajectories(partial, expert_trajectories(settings.env_id, rl_ids))
        partial.replace(path)
    return path


def evaluate_tasks(
    settings: BenchSettings,
    model: Path | str,
    task_ids: list[str],
    seed: int,
    out: Path,
    *,
    progress: bool = False,
    label: str = "eval",
) -> dict[str, list[int]]:
    """``{task_id: [successes, samples]}`` of ``model`` (a model directory, or a policy spec
    such as ``random:0``) on ``task_ids`` (``eval_n`` episodes each); the trajectories go to
    ``out/trajectories.jsonl``. ``progress``: a bar per episode."""
    from tqdm.auto import tqdm

    from agentenvs.agents.policy import SamplingParams
    from agentenvs.agents.registry import make_policy
    from agentenvs.agents.rollout import RolloutConfig, plan_episodes, run_rollouts
    from agentenvs.agents.trajectory import write_trajectories

    config = RolloutConfig(
        max_turns=settings.max_turns,
        history="default",
        sampling=SamplingParams(1.0, 1.0, settings.max_new_tokens, 1_000_003 * (seed + 1)),
    )
    spec = model if isinstance(model, str) and ":" in model else f"hf:{model}"
    policy = make_policy(spec)
    plan = plan_episodes(task_ids, settings.eval_n)
    bar = tqdm(total=len(plan), desc=label, unit="ep", disable=not progress, dynamic_ncols=True)
    try:
        trajs = run_rollouts(
            policy, settings.env_id, plan, config, on_episode=lambda _: bar.update(1)
        )
    finally:
        bar.close()
        policy.close()
    out.mkdir(parents=True, exist_ok=True)
    write_trajectories(out / "trajectories.jsonl", trajs)
    counts = {t: [0, 0] for t in task_ids}
    for traj in trajs:
        counts[traj.task_id][0] += int(bool(traj.won))
        counts[traj.task_id][1] += 1
    return counts


def sft_stage(
    settings: BenchSettings,
    out: Path,
    data: dict[str, Any],
    eval_ids: list[str],
    seed: int,
    *,
    progress: bool = False,
) -> dict[str, Any]:
    """SFT (this seed's data order and init of the update) and its evaluation."""
    from agentenvs.train.config import load_config
    from agentenvs.train.sft import SFTConfig, train_sft

    run = out / "sft" / f"seed-{seed}"
    done = _done(run / "result.json")
    if done is not None:
        return done
    clock = time.perf_counter()
    values = {
        "model": data["base"],
        "data": data["sft_data"],
        "out_dir": run,
        "epochs": 100_000,
        "max_steps": settings.sft_steps,
        "batch_size": settings.sft_batch_size,
        "micro_batch_size": settings.sft_batch_size,
        "lr": settings.sft_lr,
        "warmup_ratio": 0.05,
        "save_every": 100_000,
        "tensorboard": "false",
        "seed": seed,
    }
    config = load_config(SFTConfig, None, [f"{k}={v}" for k, v in values.items()])
    model = train_sft(config, progress=progress) / "model"
    train_s = time.perf_counter() - clock
    per_task = evaluate_tasks(
        settings, model, eval_ids, seed, run / "eval", progress=progress, label="eval sft"
    )
    return _finish(
        run / "result.json",
        {
            "arm": "sft",
            "seed": seed,
            "model": str(model),
            "per_task": per_task,
            "curve": {"0": per_task},
            "seconds": {"train": round(train_s, 1), "total": round(time.perf_counter() - clock, 1)},
        },
    )


def random_stage(
    settings: BenchSettings, out: Path, eval_ids: list[str], seed: int, *, progress: bool = False
) -> dict[str, Any]:
    """The random agent (a uniformly random admissible action each turn, ``random:<seed>``) on
    the evaluation tasks, under the same turn limit and episode count as every arm."""
    run = out / "random" / f"seed-{seed}"
    done = _done(run / "result.json")
    if done is not None:
        return done
    clock = time.perf_counter()
    per_task = evaluate_tasks(
        settings, f"random:{seed}", eval_ids, seed, run / "eval", progress=progress,
        label="eval random",
    )  # fmt: skip
    return _finish(
        run / "result.json",
        {
            "arm": "random",
            "seed": seed,
            "policy": f"random:{seed}",
            "per_task": per_task,
            "curve": {"0": per_task},
            "seconds": {"total": round(time.perf_counter() - clock, 1)},
        },
    )


def replay_stage(
    out: Path, expert: Path, sft: dict[str, Any], seed: int, *, progress: bool = False
) -> dict[str, Any]:
    """Prefix-GRPO's queries for one seed (cuts under that seed's SFT model)."""
    from agentenvs.replay import CutConfig, run_cuts, run_sidecar, run_validate

    run = out / "replay" / f"seed-{seed}"
    done = _done(run / "result.json")
    if done is not None:
        return done
    run.mkdir(parents=True, exist_ok=True)
    model = sft["model"]
    cuts = run_cuts(
        [expert], run / "queries.jsonl", [CutConfig()], model_path=model, progress=progress
    )
    validated = run_validate(run / "queries.jsonl", run / "validated.jsonl", progress=progress)
    sidecar = run_sidecar(
        run / "validated.jsonl", run / "samples.jsonl", model_path=model, progress=progress
    )
    return _finish(
        run / "result.json",
        {
            "samples": str(run / "samples.jsonl"),
            "queries": {f"{e}/{s}": n for (e, s), n in cuts.queries.items()},
            "validated_ratio": validated.validated_ratio("TextCraft-v0"),
            "sidecar_rows": sum(sidecar.samples.values()),
            "sidecar_violations": sidecar.violation_rows,
        },
    )


def _rl_config(
    settings: BenchSettings, arm: str, sft: dict[str, Any], run: Path, seed: int, data: Any
) -> Any:
    from agentenvs.benchmarks.learning.settings import rl_env_id
    from agentenvs.train.config import load_config
    from agentenvs.train.rl import RLConfig

    values: dict[str, Any] = {
        "algo": arm,
        "model": sft["model"],
        "out_dir": run,
        "iterations": settings.rl_iterations,
        "prompts_per_iteration": settings.rl_prompts,
        "samples_per_prompt": settings.rl_samples,
        "ppo_epochs": settings.ppo_epochs,
        "mini_batches": settings.rl_mini_batches,
        "optim.warmup_ratio": 0.0,
        "optim.schedule": settings.rl_schedule,
        "optim.lr": settings.rl_lr,
        "optim.name": settings.rl_optimizer,
        "rollout.max_turns": settings.max_turns,
        "rollout.max_new_tokens": settings.max_new_tokens,
        "micro_batch_size": 32,
        "save_every": settings.rl_iterations,
        "tensorboard": "false",
        "seed": seed,
        "data.env_id": rl_env_id(settings, arm),
    }
    for key, value in settings.arm_advantage.get(arm, {}).items():
        values[f"advantage.{key}"] = value
    if arm == "prefix-grpo":
        values["data.queries"] = data
    else:
        values["data.tasks"] = ",".join(data)
    return load_config(RLConfig, None, [f"{k}={v}" for k, v in values.items()])


def rl_stage(
    settings: BenchSettings,
    out: Path,
    arm: str,
    sft: dict[str, Any],
    data: Any,
    eval_ids: list[str],
    seed: int,
    *,
    progress: bool = False,
) -> dict[str, Any]:
    """One RL arm for one seed; ``data``: the training task ids, or Prefix-GRPO's samples file."""
    from agentenvs.train.rl import RLTrainer
    from agentenvs.train.runtime import latest_checkpoint

    run = out / arm / f"seed-{seed}"
    done = _done(run / "result.json")
    if done is not None:
        return done
    config = _rl_config(settings, arm, sft, run, seed, data)
    curve = {"0": sft["per_task"]}
    train_s = eval_s = 0.0
    stops = list(range(settings.eval_every, settings.rl_iterations, settings.eval_every))
    for stop in [*stops, settings.rl_iterations]:
        point = run / f"eval-{stop:03d}.json"
        if point.is_file():  # a finished segment of an interrupted run
            curve[str(stop)] = json.loads(point.read_text())
            continue
        clock = time.perf_counter()
        resume = latest_checkpoint(run) is not None  # exact: the same run as an unbroken one
        final = RLTrainer(config, progress=progress).train(resume=resume, stop_at=stop)
        train_s += time.perf_counter() - clock
        clock = time.perf_counter()
        curve[str(stop)] = evaluate_tasks(
            settings,
            final / "model",
            eval_ids,
            seed,
            run / "eval",
            progress=progress,
            label=f"eval {arm} @{stop}",
        )
        _finish(point, curve[str(stop)])
        eval_s += time.perf_counter() - clock
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    kept = list(TRAINING_METRICS)
    kept += sorted({k for m in lines for k in m if k.startswith(MOVEMENT_PREFIXES)} - set(kept))
    training = {k: [m.get(k) for m in lines] for k in kept}
    return _finish(
        run / "result.json",
        {
            "arm": arm,
            "seed": seed,
            "per_task": curve[str(settings.rl_iterations)],
            "curve": curve,
            "training": training,
            "seconds": {"train": round(train_s, 1), "eval": round(eval_s, 1)},
        },
    )
