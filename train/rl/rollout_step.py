"""The rollout step of an RL iteration (a part of :class:`agentenvs.train.rl.trainer.RLTrainer`).

:meth:`RolloutStep.rollout_step` plays the iteration's episodes with the current policy (every
start drawn from the run's :class:`~agentenvs.train.rl.starts.StartStream`, each rank its share,
``samples_per_prompt`` episodes a start, the sampling seed from the run's seed, the iteration,
the round and the rank) and turns them into training rows; a group with a failed episode is left
out whole, and DAPO's dynamic sampling keeps only groups whose rewards differ, drawing more
starts (rounds) until ``prompts_per_iteration`` groups are kept.
"""

from __future__ import annotations

from typing import Any

from agentenvs.agents.envworkers import EnvWorkerPool
from agentenvs.agents.policy import Policy, SamplingParams
from agentenvs.agents.rollout import RolloutConfig, RolloutStats
from agentenvs.train.distributed import DistContext
from agentenvs.train.rl.batch import (
    StepRow,
    build_rows,
    dynamic_sampling_filter,
    episode_metrics,
)
from agentenvs.train.rl.config import RLConfig
from agentenvs.train.rl.rollout import Episode, collect_episodes, failed_groups, failure_metrics

__all__ = ["RolloutStep"]


class RolloutStep:
    """The rollout step (module docstring). The trainer sets the attributes below, and
    :class:`~agentenvs.train.rl.run_files.RunFiles`, its other part, gives ``_warn`` and
    ``_save_episodes``."""

    config: RLConfig
    dist: DistContext
    model: Any
    tokenizer: Any
    policy: Policy
    stream: Any
    env_pool: EnvWorkerPool | None
    failures: list[str]

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
            starts = self.dist.shard(self.stream.take(cfg.prompts_per_iteration - kept_total))
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
            new_rows = self._rows([ep for ep in new if ep.group_id not in dropped])
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

    def _rows(self, episodes: list[Episode]) -> list[StepRow]:
        cfg = self.config
        rows, _ = build_rows(
            episodes,
            self.tokenizer,
            chat_template_kwargs=cfg.rollout.chat_template_kwargs,
            invalid_penalty=cfg.invalid_penalty,
            overlong=self._overlong(),
        )
        return rows

    def _overlong(self) -> tuple[int, int, float] | None:
        ds = self.config.dynamic_sampling
        if ds.overlong_buffer <= 0:
            return None
        return (self.config.rollout.max_new_tokens, ds.overlong_buffer, ds.overlong_penalty)
