"""The check's RL measurements: iterations of the native trainer with each iteration's time
split, the rollout/trainer log-prob gap and the update's TFLOP/s and MFU."""

from __future__ import annotations

import dataclasses
import functools
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentenvs.benchmarks.gpu_check.measure import check_device, peak_memory
from agentenvs.benchmarks.gpu_check.plan import CheckPlan
from agentenvs.benchmarks.speed.model_shapes import (
    ModelShape,
    nonembedding_parameters,
    update_flops,
)
from agentenvs.train.config import load_config
from agentenvs.train.rl import RLConfig, RLTrainer
from agentenvs.train.rl.trainer import transformers_policy

__all__ = [
    "ITERATION_KEYS",
    "MEDIAN_KEYS",
    "policy_factory",
    "rl_config",
    "run_rl",
    "update_tflops",
]

# the check's name of an iteration's figure -> the trainer's metric
ITERATION_KEYS = {
    "rollout_s": "time/rollout_s",
    "advantage_s": "time/advantage_s",
    "old_log_prob_s": "time/old_log_prob_s",
    "update_s": "time/update_s",
    "iteration_s": "time/iteration_s",
    "rollout_trainer_logprob_gap": "rollout/trainer_logprob_gap",
    "episodes": "rollout/episodes",
    "rows": "batch/rows",
    "tokens": "batch/tokens",
    "response_tokens": "batch/response_tokens",
    "generated_tokens": "rollout/generated_tokens",
    "generate_tokens_per_s": "perf/generate_tokens_per_s",
    "optimizer_steps": "actor/optimizer_steps",
}
# the figures summarised over the iterations after the first (which warms up)
MEDIAN_KEYS = (
    "rollout_s",
    "old_log_prob_s",
    "update_s",
    "iteration_s",
    "rollout_trainer_logprob_gap",
    "update_tflops",
    "mfu",
)


def rl_config(
    plan: CheckPlan,
    algo: str,
    model_dir: str,
    out: Path,
    *,
    iterations: int,
    prompts: int,
    samples: int,
    queries: Path | None = None,
    max_turns: int | None = None,
) -> RLConfig:
    """The ``agentenvs train rl`` settings of the check's runs (``max_turns``: default
    ``plan.rl_max_turns``; ``queries``: Prefix-GRPO's, else the plan's tasks)."""
    values = {
        "algo": algo,
        "model": model_dir,
        "out_dir": out,
        "iterations": iterations,
        "prompts_per_iteration": prompts,
        "samples_per_prompt": samples,
        "rollout.max_turns": max_turns or plan.rl_max_turns,
        "rollout.max_new_tokens": plan.rl_max_new_tokens,
        "rollout.max_batch_size": prompts * samples,
        "micro_batch_size": plan.micro_batch_size,
        "precision": plan.precision,
        "device": plan.device,
        "save_every": 1_000_000,
        "tensorboard": "false",
        "data.env_id": "TextCraft-v0",
    }
    if plan.ppo_epochs is not None:
        values["ppo_epochs"] = plan.ppo_epochs
    if queries is not None:
        values["data.queries"] = queries
    else:
        values["data.tasks"] = ",".join(plan.query_tasks)
    return load_config(RLConfig, None, [f"{k}={v}" for k, v in values.items()])


def policy_factory(plan: CheckPlan) -> Any:
    """The trainer's rollout policy with ``plan.policy_options`` (None: the trainer's own)."""
    if not plan.policy_options:
        return None
    return functools.partial(transformers_policy, **plan.policy_options)


class _Timed:
    """Mixin for :class:`agentenvs.train.rl.RLTrainer`: keeps the (prompt, reply) lengths of
    the rows each update trained on (for its FLOPs)."""

    def update_step(self, rows, iteration):  # type: ignore[no-untyped-def]
        self.update_lengths = [(len(r.prompt_ids), len(r.response_ids)) for r in rows]
        return super().update_step(rows, iteration)  # type: ignore[misc]


def update_tflops(
    shape: ModelShape, n_body: int, lengths: Sequence[tuple[int, int]], epochs: int, seconds: float
) -> float:
    """TFLOP/s of ``epochs`` update passes over rows of (prompt P, reply R) tokens, S = P + R.

    FLOPs/row/epoch = 6*N_nonembedding*S + 6*L*d_attn*S^2 + 6*d*V*R (model_shapes.update_flops)
    """
    flops = sum(update_flops(shape, n_body, p, r)[0] for p, r in lengths) * epochs
    return flops / seconds / 1e12 if seconds else 0.0


def start_trainer(trainer: RLTrainer) -> None:
    """Set the trainer up with every row's passes on: a random model earns no reward, and the
    passes of zero-advantage rows, which the trainer skips, are what the check times."""
    trainer.setup()
    trainer.update_settings = dataclasses.replace(
        trainer.update_settings, skip_zero_advantage=False
    )


def run_rl(
    plan: CheckPlan,
    algo: str,
    model_dir: str,
    out: Path,
    peak_tflops: float,
    *,
    queries: Path | None = None,
    max_turns: int | None = None,
) -> dict[str, Any]:
    """``plan.rl_iterations`` iterations of the native trainer; per-iteration split and MFU.
    An iteration that trained no row is an error (nothing was measured)."""
    device = check_device(plan)
    config = rl_config(
        plan,
        algo,
        model_dir,
        out,
        iterations=plan.rl_iterations,
        prompts=plan.rl_prompts,
        samples=plan.rl_samples,
        queries=queries,
        max_turns=max_turns,
    )
    trainer = type("CheckTrainer", (_Timed, RLTrainer), {})(
        config, progress=False, policy_factory=policy_factory(plan)
    )
    result: dict[str, Any] = {"algo": algo, "shape": plan.large.name, "peak_tflops": peak_tflops}
    with peak_memory(device, result):
        start_trainer(trainer)
        n_body = nonembedding_parameters(trainer.model)
        try:
            iterations = [
                _iteration(trainer, plan.large, n_body, peak_tflops, index)
                for index in range(plan.rl_iterations)
            ]
        finally:
            trainer.close()
            trainer.logger.close()
    timed = iterations[1:] or iterations  # the first iteration warms up kernels and allocator
    result.update(
        iterations=iterations,
        nonembedding_parameters=n_body,
        ppo_epochs=config.ppo_epochs,
        precision=config.precision,
        rollout_dtype=trainer.policy.run_metadata().get("dtype"),
        rollout_max_turns=config.rollout.max_turns,
        median_after_first={k: statistics.median(it[k] for it in timed) for k in MEDIAN_KEYS},
    )
    return result


def _iteration(
    trainer: Any, shape: ModelShape, n_body: int, peak_tflops: float, index: int
) -> dict[str, float]:
    """One iteration's figures (:data:`ITERATION_KEYS`, the update's TFLOP/s and MFU)."""
    metrics = trainer.iteration()
    row = {k: float(metrics.get(v, 0.0)) for k, v in ITERATION_KEYS.items()}
    if not row["rows"] or not row["optimizer_steps"]:
        raise RuntimeError(f"iteration {index} trained nothing: {metrics}")
    tflops = update_tflops(
        shape,
        n_body,
        getattr(trainer, "update_lengths", []),
        trainer.config.ppo_epochs,
        row["update_s"],
    )
    row["update_tflops"] = tflops
    row["mfu"] = tflops / peak_tflops
    return row
