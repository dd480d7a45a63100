"""The RL loop: rollout -> rewards and advantages -> old log-probs -> PPO epochs -> weight sync.

:class:`RLTrainer` keeps each part a separate method over plain data (episodes, rows), so a
distributed or vLLM-backed trainer can run them in other places: :meth:`RLTrainer.rollout_step`
(episodes from the current policy, turned into rows; DAPO's dynamic sampling draws more
prompts here), :meth:`RLTrainer.advantage_step`, :meth:`RLTrainer.old_log_prob_step`,
:meth:`RLTrainer.update_step` and :meth:`RLTrainer.sync_weights` (the hook the vLLM engine,
:mod:`agentenvs.train.rl.vllm_engine`, plugs into; with the in-process transformers policy, which
shares the trainer's model object, there is nothing to copy).

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

Rollout engines (``engine.kind``): ``transformers`` generates with the trainer's own model; ``vllm``
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

import contextlib
import gzip
import json
import math
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from agentenvs.agents.envworkers import EnvWorkerError, EnvWorkerPool
from agentenvs.agents.policy import Policy, SamplingParams
from agentenvs.agents.rollout import RolloutConfig, RolloutStats, make_rollout_pool
from agentenvs.train.config import config_to_dict
from agentenvs.train.distributed import (
    DistContext,
    gathered,
    init_distributed,
    reduce_metrics,
    shard_model,
)
from agentenvs.train.rl.batch import (
    StepRow,
    build_rows,
    compute_advantages,
    dynamic_sampling_filter,
    episode_metrics,
)
from agentenvs.train.rl.config import RLConfig
from agentenvs.train.rl.rollout import (
    Episode,
    RolloutFailureError,
    collect_episodes,
    failed_groups,
    failure_fix,
    failure_metrics,
)
from agentenvs.train.rl.starts import StartStream, episode_starts
from agentenvs.train.rl.update import (
    UpdateSettings,
    apply_correction,
    ppo_update,
    recompute_old_log_probs,
    zero_advantage_rows,
)
from agentenvs.train.runtime import (
    MetricsLogger,
    TrainState,
    latest_checkpoint,
    load_checkpoint,
    make_optimizer,
    make_scheduler,
    save_checkpoint,
    seed_everything,
)

__all__ = ["RLTrainer", "WeightSync", "train_rl"]

WeightSync = Callable[[Any, int], "Mapping[str, float] | None"]
"""``sync(model, iteration)``: push the updated weights to the rollout engine; may return
metrics (the vLLM engine's probe gap), which join the iteration's."""
PolicyFactory = Callable[[Any, Any, RLConfig], Policy]


def transformers_policy(model: Any, tokenizer: Any, config: RLConfig, **options: Any) -> Policy:
    """The default rollout policy: the transformers backend over the trainer's own model
    (``options``: further backend options)."""
    from agentenvs.agents.backends.transformers_backend import TransformersPolicy

    return TransformersPolicy.from_model(
        model,
        tokenizer,
        max_batch_size=config.rollout.max_batch_size,
        chat_template_kwargs=config.rollout.chat_template_kwargs,
        spec=f"hf:{config.model}",
        **options,
    )


def _policy_factory(config: RLConfig) -> PolicyFactory:
    if config.engine.kind == "vllm":
        from agentenvs.train.rl.vllm_engine import vllm_policy_factory

        return vllm_policy_factory
    return transformers_policy


def _update_settings(cfg: RLConfig) -> UpdateSettings:
    """What the optimizer step needs of the run's settings: the algorithm's losses, the
    correction, the epochs and batches, clipping, precision and seed."""
    return UpdateSettings(
        policy=cfg.policy_loss_config(),
        prefix=cfg.prefix_config(),
        correction=cfg.correction_config(),
        ppo_epochs=cfg.ppo_epochs,
        mini_batches=cfg.mini_batches,
        micro_batch_size=cfg.micro_batch_size,
        max_grad_norm=cfg.optim.max_grad_norm,
        precision=cfg.precision,
        seed=cfg.seed,
        loss=cfg.spec.loss,
    )


class _NoLogger:
    """The metrics logger of ranks other than 0: they log nothing."""

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        pass

    def truncate_after(self, step: int) -> None:
        pass

    def close(self) -> None:
        pass


class RLTrainer:
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
        self.policy_factory = policy_factory or _policy_factory(config)
        self.weight_sync = weight_sync
        self.dist = DistContext()
        self.out_dir = Path(config.out_dir)
        self._warned: set[str] = set()
        self.last_checkpoint: Path | None = None
        self.env_pool: EnvWorkerPool | None = None
        self.failures: list[str] = []  # the last rollout step's episodes' errors, after retries

    # ----- setup ----------------------------------------------------------------------------

    def setup(self, resume: bool = False) -> None:
        """Load the model (from the latest checkpoint when resuming), optimizer, data, logger."""
        cfg = self.config
        checkpoint = latest_checkpoint(self.out_dir) if resume else None
        if resume and checkpoint is None:
            self._warn(f"no checkpoint under {self.out_dir}; starting from {cfg.model}")
        if not cfg.model and checkpoint is None:
            raise ValueError("no model: set model=<directory or hub id> (usually the SFT model)")
        self.dist = init_distributed(cfg.device)
        self.device = self.dist.device
        seed_everything(cfg.seed)
        self._load_model(str(checkpoint / "model") if checkpoint else cfg.model)
        self._load_optimizer(checkpoint)
        self.last_checkpoint = checkpoint
        self.stream = StartStream(self._starts(), cfg.seed, self.state.extra.get("position", 0))
        self.policy = self.policy_factory(self.model, self.tokenizer, cfg)
        if self.weight_sync is None:  # an engine with its own copy of the weights
            self.weight_sync = getattr(self.policy, "sync_weights", None)
        self._open_logs()
        self.update_settings = _update_settings(cfg)
        # one environment pool for the whole run (closed by close(), which train() calls)
        self.env_pool = make_rollout_pool(cfg.data.env_id, self.rollout_config(self.state.step, 0))

    def _load_model(self, source: str) -> None:
        """The tokenizer and the float32 model, on the device or sharded over the ranks."""
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        cfg = self.config
        self.tokenizer = AutoTokenizer.from_pretrained(source)
        self.model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
        if cfg.gradient_checkpointing:
            self.model.gradient_checkpointing_enable()
        if self.dist.is_distributed:
            shard_model(self.model, self.dist, cfg.fsdp, cfg.precision)
        else:
            self.model.to(self.device)
        self.pad_id = self.tokenizer.pad_token_id
        if self.pad_id is None:
            self.pad_id = self.tokenizer.eos_token_id or 0

    def _load_optimizer(self, checkpoint: Path | None) -> None:
        """The optimizer, its schedule over every update of the run, and the training state
        (restored with the model's from ``checkpoint`` when resuming)."""
        cfg, o = self.config, self.config.optim
        steps = cfg.iterations * cfg.ppo_epochs * cfg.mini_batches
        self.optimizer = make_optimizer(
            self.model,
            o.lr,
            o.weight_decay,
            tuple(o.betas),
            name=o.name,
            eps=o.eps,
            momentum=o.momentum,
        )
        self.scheduler = make_scheduler(self.optimizer, steps, o.warmup_ratio, o.schedule)
        self.state = (
            load_checkpoint(
                checkpoint, self.optimizer, self.scheduler, model=self.model, ctx=self.dist
            )
            if checkpoint
            else TrainState()
        )

    def _open_logs(self) -> None:
        """The metric log (main rank; cut back to the resumed step) and ``protocol.json``: the
        protocol and every setting it fixed, next to the metrics."""
        cfg = self.config
        self.logger = (
            MetricsLogger(
                self.out_dir,
                tensorboard=cfg.tensorboard,
                wandb_project=cfg.wandb_project,
                config=config_to_dict(cfg),
            )
            if self.dist.is_main
            else _NoLogger()
        )
        self.logger.truncate_after(self.state.step)
        if self.dist.is_main:
            protocol = {"protocol": cfg.protocol, "settings": cfg.protocol_settings()}
            if cfg.data.limit is not None:  # the sampled training tasks
                protocol["task_ids"] = [getattr(s, "task_id", None) for s in self.stream.starts]
            self.out_dir.mkdir(parents=True, exist_ok=True)
            (self.out_dir / "protocol.json").write_text(json.dumps(protocol, indent=2) + "\n")

    def close(self) -> None:
        """Close the run's environment pool (after stepping with :meth:`iteration`)."""
        if self.env_pool is not None:
            self.env_pool.close()
            self.env_pool = None
        policy = getattr(self, "policy", None)
        if callable(getattr(policy, "sync_weights", None)):  # a rollout engine (vLLM): free it
            policy.close()

    # ----- the separable steps ------------------------------------------------------------------

    def rollout_config(self, iteration: int, round_: int) -> RolloutConfig:
        r = self.config.rollout
        base = ((self.config.seed * 100_003 + iteration) * 16 + round_) * 10_000
        seed = (base + self.dist.rank * 1_000_003_999) % 2**62  # ranks sample apart
        sampling = SamplingParams(
            temperature=r.temperature, top_p=r.top_p, max_new_tokens=r.max_new_tokens, seed=seed
        )
        return RolloutConfig(
            max_turns=r.max_turns,
            history=r.history,
            sampling=sampling,
            max_active=r.max_active,
            workers=r.env_workers,
            protocol=self.config.protocol,
            env_timeout=r.env_timeout,
        )

    def rollout_step(self, iteration: int) -> tuple[list[StepRow], dict[str, float]]:
        """Play this iteration's episodes and turn them into rows (DAPO: informative groups).
        Distributed: every rank draws the same starts and plays its share; under FSDP call it
        inside :func:`agentenvs.train.distributed.gathered` (as :meth:`iteration` does)."""
        cfg = self.config
        self.model.eval()
        stats = RolloutStats()
        rows: list[StepRow] = []
        episodes: list[Episode] = []
        kept_groups: list[str] = []
        sampled_groups = dropped_groups = 0
        rounds = cfg.dynamic_sampling.max_rounds if cfg.dynamic_sampling_enabled else 1
        kept_total = 0  # over all ranks
        for round_ in range(rounds):
            need = cfg.prompts_per_iteration - kept_total
            starts = self.dist.shard(self.stream.take(need))
            new = collect_episodes(
                self.policy,
                cfg.data.env_id,
                starts,
                cfg.samples_per_prompt,
                self.rollout_config(iteration, round_),
                group_prefix=f"{round_}.",
                stats=stats,
                env_pool=self.env_pool,
                retries=cfg.rollout.episode_retries,
            )
            episodes.extend(new)
            dropped = failed_groups(new)
            dropped_groups += len(dropped)
            new_rows, _ = build_rows(
                [ep for ep in new if ep.group_id not in dropped],
                self.tokenizer,
                chat_template_kwargs=cfg.rollout.chat_template_kwargs,
                invalid_penalty=cfg.invalid_penalty,
                overlong=self._overlong(),
            )
            sampled_groups += len(starts)
            if cfg.dynamic_sampling_enabled:
                informative, _ = dynamic_sampling_filter(new_rows)
                keep = set(informative)
                new_rows = [r for r in new_rows if r.group_id in keep]
                kept_groups.extend(informative)
            else:
                kept_groups.extend(dict.fromkeys(r.group_id for r in new_rows))
            rows.extend(new_rows)
            kept_total = int(self.dist.sum([len(kept_groups)])[0])
            if kept_total >= cfg.prompts_per_iteration:
                break
        self.failures = [ep.error for ep in episodes if ep.error is not None]
        for error in self.failures:
            self._warn(f"an episode failed after its retries (its group left out): {error}")
        if cfg.save_episodes:
            self._save_episodes(iteration, episodes)
        metrics = episode_metrics(episodes)
        metrics.update(
            {
                **failure_metrics(episodes, dropped_groups),
                "rollout/rounds": float(round_ + 1),
                "rollout/groups_trained": float(len(kept_groups)),
                "rollout/generated_tokens": float(stats.generated_tokens),
                "time/generate_s": stats.generate_seconds,
                "time/env_s": stats.env_seconds,
                "rollout/env_worker_restarts": float(stats.env_worker_restarts),
            }
        )
        if cfg.dynamic_sampling_enabled:
            metrics["dapo/kept_group_frac"] = len(kept_groups) / max(sampled_groups, 1)
        return rows, metrics

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

    # ----- one iteration, the loop -----------------------------------------------------------

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
            metrics.update(self.update_step(rows, it))
            times["update"], clock = time.perf_counter() - clock, time.perf_counter()
            metrics.update(self.sync_weights(it))
            times["sync"] = time.perf_counter() - clock
        else:
            self._warn(f"iteration {it}: no trainable rows (every episode failed or was filtered)")
        self.state.step += 1
        self.state.extra["position"] = self.stream.position
        metrics.update(self._throughput(rows, times, metrics))
        episodes = metrics.get("rollout/episodes", 0.0)
        return reduce_metrics(self.dist, metrics, {"": len(rows), "rollout/": episodes})

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
        if self.last_checkpoint is None or not self.last_checkpoint.name.endswith(
            f"{self.state.step:07d}"
        ):
            self._save()
        return self.last_checkpoint  # type: ignore[return-value]

    # ----- helpers ------------------------------------------------------------------------------

    def _starts(self) -> list[Any]:
        return episode_starts(self.config, self._warn)

    def _check_failures(self, iteration: int, episodes: float) -> None:
        """Stop the run when more than ``rollout.max_failed_fraction`` of the iteration's
        ``episodes`` (over all ranks) failed (:attr:`failures`, set by :meth:`rollout_step`)."""
        failed = self.failures
        n_failed, n_total = (int(x) for x in self.dist.sum([len(failed), int(episodes)]))
        limit = self.config.rollout.max_failed_fraction
        if n_total and n_failed / n_total > limit:
            first = failed[0] if failed else "(on another rank)"
            self._stop_on_failures(
                f"iteration {iteration}: {n_failed} of {n_total} episodes failed after "
                f"{self.config.rollout.episode_retries} retries each, more than "
                f"rollout.max_failed_fraction={limit:g}; the first: {first}",
                first,
            )

    def _stop_on_failures(self, what: str, error: str, cause: BaseException | None = None) -> None:
        """Checkpoint (unless this step's is on disk already) and stop with ``what``, the fix
        of ``error`` and how to resume."""
        saved = self.last_checkpoint is not None and self.last_checkpoint.name.endswith(
            f"{self.state.step:07d}"
        )
        if not saved:
            self._save()
        raise RolloutFailureError(
            f"{what}. Fix: {failure_fix(error)}. The run stopped at {self.last_checkpoint}; "
            "continue it with the same command and --resume"
        ) from cause

    def _save(self) -> None:
        self.last_checkpoint = save_checkpoint(
            self.out_dir,
            self.model,
            self.tokenizer,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            state=self.state,
            config=config_to_dict(self.config),
            keep_last=self.config.keep_checkpoints,
            ctx=self.dist,
        )

    def _save_episodes(self, iteration: int, episodes: list[Episode]) -> None:
        """The iteration's sampled episodes, gzipped, as metrics.jsonl numbers it (step + 1)."""
        rank = f".rank{self.dist.rank}" if self.dist.is_distributed else ""
        path = self.out_dir / "episodes" / f"step-{iteration + 1:07d}{rank}.jsonl.gz"
        path.parent.mkdir(parents=True, exist_ok=True)
        text = "".join(ep.trajectory.to_json() + "\n" for ep in episodes)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(gzip.compress(text.encode("utf-8"), mtime=0))
        tmp.replace(path)

    def _overlong(self) -> tuple[int, int, float] | None:
        ds = self.config.dynamic_sampling
        if ds.overlong_buffer <= 0:
            return None
        return (self.config.rollout.max_new_tokens, ds.overlong_buffer, ds.overlong_penalty)

    def _length_filter(self, rows: list[StepRow]) -> tuple[list[StepRow], int]:
        limit = self.config.max_seq_len
        if limit is None:
            return rows, 0
        kept = [r for r in rows if r.length <= limit]
        return kept, len(rows) - len(kept)

    def _throughput(self, rows, times, metrics) -> dict[str, float]:
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
        out["perf/train_tokens_per_s"] = (
            tokens * self.config.ppo_epochs / update_s if update_s else 0.0
        )
        out["perf/tokens_per_s"] = tokens / total if total else 0.0
        gen_s = metrics.get("time/generate_s", 0.0)
        out["perf/generate_tokens_per_s"] = (
            metrics.get("rollout/generated_tokens", 0.0) / gen_s if gen_s else 0.0
        )
        return {k: (v if math.isfinite(v) else 0.0) for k, v in out.items()}

    def _warn(self, message: str) -> None:
        if message in self._warned:
            return
        self._warned.add(message)
        where = f" [rank {self.dist.rank}]" if self.dist.is_distributed else ""
        print(f"agentenvs train rl{where}: {message}", file=sys.stderr)


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
