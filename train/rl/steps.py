"""One RL iteration as separable steps (a part of :class:`agentenvs.train.rl.trainer.RLTrainer`).

After the rollout step (:class:`agentenvs.train.rl.rollout_step.RolloutStep`):
:meth:`IterationSteps.advantage_step`, :meth:`~IterationSteps.old_log_prob_step`,
:meth:`~IterationSteps.reference_kl_step` (the KL to the initial policy),
:meth:`~IterationSteps.update_step` and
:meth:`~IterationSteps.sync_weights`, each on plain data (rows), so a distributed or
vLLM-backed trainer can run them in other places; :meth:`~IterationSteps.iteration` runs the
rollout and these in order, times them and reduces the metrics over the ranks.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentenvs.agents.envworkers import EnvWorkerError
from agentenvs.agents.policy import Policy
from agentenvs.train.distributed import DistContext, gathered, reduce_metrics
from agentenvs.train.rl.batch import StepRow, compute_advantages
from agentenvs.train.rl.config import RLConfig
from agentenvs.train.rl.engine import WeightSync
from agentenvs.train.rl.reference_kl import kl_sample, reference_kl
from agentenvs.train.rl.update import (
    UpdateSettings,
    apply_correction,
    ppo_update,
    recompute_old_log_probs,
    zero_advantage_rows,
)
from agentenvs.train.runtime import TrainState

__all__ = ["IterationSteps", "throughput"]


class IterationSteps:
    """The steps of one iteration (module docstring). The trainer sets the attributes below; its
    other parts give ``rollout_step`` (:class:`~agentenvs.train.rl.rollout_step.RolloutStep`),
    ``_warn``, ``_check_failures`` and ``_stop_on_failures``
    (:class:`~agentenvs.train.rl.run_files.RunFiles`)."""

    config: RLConfig
    dist: DistContext
    model: Any
    reference: Any | None = None
    """The frozen initial policy (``reference_kl_rows`` > 0), or None."""
    pad_id: int
    device: Any
    optimizer: Any
    scheduler: Any
    policy: Policy
    weight_sync: WeightSync | None
    update_settings: UpdateSettings
    stream: Any
    state: TrainState
    last_checkpoint: Path | None
    failures: list[str]

    def advantage_step(self, rows: list[StepRow]) -> dict[str, float]:
        """Set every row's advantages with the algorithm's registered estimator."""
        return compute_advantages(
            rows, self.config.spec.estimator, self.config.estimator_settings()
        )

    def old_log_prob_step(self, rows: list[StepRow]) -> dict[str, float]:
        """The trainer's log-probs of the replies before the update, and the TIS/MIS weights.
        Rows that cannot change a weight (:func:`~agentenvs.train.rl.update.zero_advantage_rows`)
        are left out unless a correction needs their old log-probs (its keep mask is in the loss
        denominators); the entropy and engine-gap metrics are over the rows that ran."""
        zero = zero_advantage_rows(rows, self.update_settings)
        needed = rows
        if self.update_settings.correction is None:
            needed = [r for r, z in zip(rows, zero, strict=True) if not z]
        metrics: dict[str, float] = {"batch/zero_advantage_rows": float(sum(zero))}
        if not self.dist.sum([len(needed)])[0]:  # no rank has a row that can move a weight
            return metrics
        metrics |= recompute_old_log_probs(
            self.model,
            needed,
            micro_batch_size=self.config.micro_batch_size,
            pad_id=self.pad_id,
            device=self.device,
            precision=self.config.precision,
            ctx=self.dist,
        )
        if rows:
            metrics.update(apply_correction(rows, self.update_settings.correction))
        return metrics

    def reference_kl_step(self, rows: list[StepRow], iteration: int) -> dict[str, float]:
        """``actor/kl_to_initial`` and ``actor/entropy_sampled`` of the policy before the update
        on a seeded sample of ``rows`` (:mod:`agentenvs.train.rl.reference_kl`); nothing without
        the frozen initial policy."""
        if self.reference is None:
            return {}
        seed = (self.config.seed * 1_000_003 + iteration) * 64 + self.dist.rank
        return reference_kl(
            self.model,
            self.reference,
            kl_sample(rows, self.config.reference_kl_rows, seed),
            micro_batch_size=self.config.micro_batch_size,
            pad_id=self.pad_id,
            device=self.device,
            precision=self.config.precision,
            ctx=self.dist,
        )

    def update_step(self, rows: list[StepRow], iteration: int) -> dict[str, float]:
        """PPO epochs of clipped updates over ``rows``."""
        return ppo_update(
            self.model,
            self.optimizer,
            self.scheduler,
            rows,
            self.update_settings,
            iteration=iteration,
            pad_id=self.pad_id,
            device=self.device,
            last_checkpoint=self.last_checkpoint,
            ctx=self.dist,
        )

    def sync_weights(self, iteration: int) -> dict[str, float]:
        """Push the new weights to the rollout engine (no-op for the in-process policy);
        returns the hook's metrics (the vLLM engine: ``rollout/vllm_logprob_gap`` and more)."""
        if self.weight_sync is None:
            return {}
        return dict(self.weight_sync(self.model, iteration) or {})

    def iteration(self) -> dict[str, float]:
        """Run one iteration; returns its metrics (also logged)."""
        it = self.state.step
        times: dict[str, float] = {}
        clock = time.perf_counter()
        generates_with_model = getattr(self.policy, "model", None) is self.model
        try:
            with gathered(self.model) if generates_with_model else contextlib.nullcontext():
                rows, metrics = self.rollout_step(it)
        except EnvWorkerError as exc:  # the pool cannot run at all (no server left, ...)
            self._stop_on_failures(
                f"iteration {it}: the environment workers failed: {exc}", str(exc), exc
            )
        self._check_failures(it, metrics["rollout/episodes"])
        sleep = getattr(self.policy, "sleep", None)
        if callable(sleep):  # a colocated engine gives its memory to the update
            sleep()
        times["rollout"], clock = time.perf_counter() - clock, time.perf_counter()
        if rows:
            metrics.update(self.advantage_step(rows))
        times["advantage"], clock = time.perf_counter() - clock, time.perf_counter()
        rows, dropped = self._length_filter(rows)
        metrics["batch/dropped_long_rows"] = float(dropped)
        if self.dist.sum([len(rows)])[0] > 0:  # any rank's rows: all ranks run the update
            metrics.update(self.old_log_prob_step(rows))
            times["old_log_prob"], clock = time.perf_counter() - clock, time.perf_counter()
            metrics.update(self.reference_kl_step(rows, it))
            times["reference_kl"], clock = time.perf_counter() - clock, time.perf_counter()
            metrics.update(self.update_step(rows, it))
            times["update"], clock = time.perf_counter() - clock, time.perf_counter()
            metrics.update(self.sync_weights(it))
            times["sync"] = time.perf_counter() - clock
        else:
            self._warn(f"iteration {it}: no trainable rows (every episode failed or was filtered)")
        self.state.step += 1
        self.state.extra["position"] = self.stream.position
        metrics.update(throughput(rows, times, metrics, ppo_epochs=self.config.ppo_epochs))
        episodes = metrics.get("rollout/episodes", 0.0)
        return reduce_metrics(self.dist, metrics, {"": len(rows), "rollout/": episodes})

    def _length_filter(self, rows: list[StepRow]) -> tuple[list[StepRow], int]:
        limit = self.config.max_seq_len
        if limit is None:
            return rows, 0
        kept = [r for r in rows if r.length <= limit]
        return kept, len(rows) - len(kept)


def throughput(
    rows: Sequence[StepRow], times: dict[str, float], metrics: dict[str, float], *, ppo_epochs: int
) -> dict[str, float]:
    """Time per step (``time/*_s``, ``time_share/*``), the batch's size and the token rates."""
    total = sum(times.values())
    tokens = sum(r.length for r in rows)
    out = {f"time/{k}_s": v for k, v in times.items()}
    out["time/iteration_s"] = total
    for key, value in times.items():
        out[f"time_share/{key}"] = value / total if total else 0.0
    out["batch/rows"] = float(len(rows))
    out["batch/tokens"] = float(tokens)
    out["batch/response_tokens"] = float(sum(len(r.response_ids) for r in rows))
    update_s = times.get("update", 0.0)
    out["perf/train_tokens_per_s"] = tokens * ppo_epochs / update_s if update_s else 0.0
    out["perf/tokens_per_s"] = tokens / total if total else 0.0
    gen_s = metrics.get("time/generate_s", 0.0)
    out["perf/generate_tokens_per_s"] = (
        metrics.get("rollout/generated_tokens", 0.0) / gen_s if gen_s else 0.0
    )
    return {k: (v if math.isfinite(v) else 0.0) for k, v in out.items()}
