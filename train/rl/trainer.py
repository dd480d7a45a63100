"""The RL loop: rollout -> rewards and advantages -> old log-probs -> PPO epochs -> weight sync.

:class:`RLTrainer` keeps each part a separate method over plain data (episodes, rows), so a
distributed or vLLM-backed trainer can run them in other places: :meth:`RLTrainer.rollout_step`
(episodes from the current policy, turned into rows; DAPO's dynamic sampling draws more
prompts here), :meth:`RLTrainer.advantage_step`, :meth:`RLTrainer.old_log_prob_step`,
:meth:`RLTrainer.update_step` and :meth:`RLTrainer.sync_weights` (the hook the vLLM engine,
:mod:`agentenvs.train.rl.vllm_engine`, plugs into; with the in-process transformers policy, which
shares the trainer's model object, there is nothing to copy). The class is assembled from its
parts: :mod:`~agentenvs.train.rl.engine` (model, initial policy, rollout engine),
:mod:`~agentenvs.train.rl.rollout_step`, :mod:`~agentenvs.train.rl.steps` (the rest of an
iteration) and :mod:`~agentenvs.train.rl.run_files` (checkpoints, logs, failure stops).

Diagnostics: every iteration logs, beside the rollout, advantage and loss metrics,
``actor/kl_to_initial`` (the exact per-token KL from the policy that played the iteration to the
initial weights, a frozen copy of ``model``, on a sample of the iteration's rows:
:mod:`~agentenvs.train.rl.reference_kl`), ``actor/entropy`` and ``actor/clipfrac`` (the share of
reply tokens whose ratio was clipped).

Robustness: a checkpoint every ``save_every`` iterations and at the end (model, optimizer,
scheduler, RNG states, iteration, data position); ``resume`` continues exactly (the data order,
the rollout sampling seeds and the mini-batch shuffles derive from the seed and the iteration,
never from state lost in a restart). A NaN or infinite loss or gradient norm stops the run with
:class:`~agentenvs.train.runtime.NonFiniteLossError` before the optimizer step, naming the last good
checkpoint (nothing is saved after it). Failure policy (:mod:`agentenvs.train.rl.rollout`): an
episode that ended on an error is played again on a new environment, same task, start and prompt,
up to ``rollout.episode_retries`` times; one that still fails takes its whole group out of the
update (never trained as a failure), counted in ``rollout/failed_episodes`` and
``rollout/dropped_groups`` and reported once per distinct message. More than
``rollout.max_failed_fraction`` of an iteration's episodes failing, or environment workers gone
for good, stop the run with :class:`~agentenvs.train.rl.rollout.RolloutFailureError` after a
checkpoint: the first error and its fix, and ``--resume`` continues where it stopped.

Rollout engines (``engine.kind``, :data:`~agentenvs.train.rl.engine.POLICY_FACTORIES`):
``transformers`` generates with the trainer's own model; ``vllm``
(:mod:`agentenvs.train.rl.vllm_engine`) is a colocated vLLM engine, put to sleep during the update
and given the new weights (and checked on a fixed probe) by :meth:`RLTrainer.sync_weights`. A policy
from ``policy_factory`` that has ``sleep()`` and ``sync_weights(model, iteration)`` gets the same
treatment.

Many processes (``torchrun``; :mod:`agentenvs.train.distributed`): the policy is sharded with FSDP2;
every rank draws the same starts and plays its share of them (whole groups stay on one rank, so the
advantages need no exchange), the update's denominators and metrics cover all ranks, rank 0 logs and
writes the checkpoints (full tensors: they resume on any number of processes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentenvs.agents.envworkers import EnvWorkerPool
from agentenvs.agents.rollout import make_rollout_pool
from agentenvs.train.distributed import DistContext, init_distributed
from agentenvs.train.rl.config import RLConfig
from agentenvs.train.rl.engine import (
    PolicyFactory,
    WeightSync,
    load_model,
    load_reference,
    transformers_policy,
    update_settings,
)
from agentenvs.train.rl.engine import (
    policy_factory as engine_policy_factory,
)
from agentenvs.train.rl.rollout_step import RolloutStep
from agentenvs.train.rl.run_files import RunFiles
from agentenvs.train.rl.starts import StartStream, episode_starts
from agentenvs.train.rl.steps import IterationSteps
from agentenvs.train.runtime import latest_checkpoint, seed_everything

__all__ = ["RLTrainer", "WeightSync", "train_rl", "transformers_policy"]


class RLTrainer(RolloutStep, IterationSteps, RunFiles):
    """One RL run (see the module docstring). Call :meth:`train`, or :meth:`setup` and then
    :meth:`iteration` step by step."""

    def __init__(
        self,
        config: RLConfig,
        *,
        progress: bool = True,
        policy_factory: PolicyFactory | None = None,
        weight_sync: WeightSync | None = None,
    ) -> None:
        self.config = config
        self.progress = progress
        self.policy_factory = policy_factory or engine_policy_factory(config)
        self.weight_sync = weight_sync
        self.dist = DistContext()
        self.out_dir = Path(config.out_dir)
        self._warned: set[str] = set()
        self.last_checkpoint: Path | None = None
        self.env_pool: EnvWorkerPool | None = None
        self.reference: Any | None = None
        self.failures: list[str] = []  # the last rollout step's episodes' errors, after retries

    def setup(self, resume: bool = False) -> None:
        """Load the model (from the latest checkpoint when resuming), the frozen initial policy,
        optimizer, data, logger."""
        cfg = self.config
        checkpoint = latest_checkpoint(self.out_dir) if resume else None
        if resume and checkpoint is None:
            self._warn(f"no checkpoint under {self.out_dir}; starting from {cfg.model}")
        if not cfg.model and checkpoint is None:
            raise ValueError("no model: set model=<directory or hub id> (usually the SFT model)")
        self.dist = init_distributed(cfg.device)
        self.device = self.dist.device
        seed_everything(cfg.seed)
        source = str(checkpoint / "model") if checkpoint else cfg.model
        self.tokenizer, self.model, self.pad_id = load_model(source, cfg, self.dist)
        self.reference = load_reference(cfg, self.dist)
        if cfg.reference_kl_rows and self.reference is None:
            self._warn("no initial model (model= is unset): actor/kl_to_initial is not logged")
        self._load_optimizer(checkpoint)
        self.last_checkpoint = checkpoint
        self.stream = StartStream(
            episode_starts(cfg, self._warn), cfg.seed, self.state.extra.get("position", 0)
        )
        self.policy = self.policy_factory(self.model, self.tokenizer, cfg)
        if self.weight_sync is None:  # an engine with its own copy of the weights
            self.weight_sync = getattr(self.policy, "sync_weights", None)
        self._open_logs()
        self.update_settings = update_settings(cfg)
        # one environment pool for the whole run (closed by close(), which train() calls)
        self.env_pool = make_rollout_pool(cfg.data.env_id, self.rollout_config(self.state.step, 0))

    def close(self) -> None:
        """Close the run's environment pool (after stepping with :meth:`iteration`)."""
        if self.env_pool is not None:
            self.env_pool.close()
            self.env_pool = None
        policy = getattr(self, "policy", None)
        if callable(getattr(policy, "sync_weights", None)):  # a rollout engine (vLLM): free it
            policy.close()

    def train(self, resume: bool = False, stop_at: int | None = None) -> Path:
        """Run to ``config.iterations`` (or ``stop_at`` iterations in all, with a checkpoint);
        returns the last checkpoint directory (its ``model/`` reloads with transformers)."""
        from tqdm.auto import tqdm

        self.setup(resume)
        cfg = self.config
        end = cfg.iterations if stop_at is None else min(cfg.iterations, stop_at)
        bar = tqdm(
            total=cfg.iterations,
            initial=self.state.step,
            desc=f"rl {cfg.algo}",
            disable=not (self.progress and self.dist.is_main),
        )
        try:
            while self.state.step < end:
                metrics = self.iteration()
                self.logger.log(self.state.step, metrics)
                bar.update(1)
                bar.set_postfix(
                    reward=f"{metrics['rollout/reward_mean']:.3f}",
                    success=f"{metrics['rollout/success_rate']:.2f}",
                )
                if self.state.step % cfg.save_every == 0 or self.state.step == end:
                    self._save()
        finally:
            bar.close()
            self.logger.close()
            self.close()
        if not self._saved_this_step():
            self._save()
        return self.last_checkpoint  # type: ignore[return-value]


def train_rl(
    config: RLConfig, *, resume: bool = False, progress: bool = True, stop_at: int | None = None
) -> Path:
    """Run RL with ``config``; returns the last checkpoint (see :meth:`RLTrainer.train`).
    Under torchrun every process calls it (:mod:`agentenvs.train.distributed`)."""
    trainer = RLTrainer(config, progress=progress)
    finished = False
    try:
        final = trainer.train(resume=resume, stop_at=stop_at)
        finished = True
        return final
    finally:
        trainer.dist.close(wait=finished)
