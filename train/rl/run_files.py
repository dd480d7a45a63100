"""The RL trainer's run on disk: optimizer state and resume, checkpoints, logs, saved episodes,
and stopping on failed rollouts (a part of :class:`agentenvs.train.rl.trainer.RLTrainer`).

Checkpoints (``<out>/checkpoints/step-<n>``, every ``save_every`` iterations and at the end) hold
the model, optimizer, scheduler, RNG states, iteration and data position; a resumed run restores
them. ``protocol.json`` records the protocol and every setting it fixed, and the advantage
estimator with every one of its settings (defaults included, e.g. PTGPO's ``root_spread``).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentenvs.train.advantages import get_advantage_estimator
from agentenvs.train.config import config_to_dict
from agentenvs.train.distributed import DistContext
from agentenvs.train.rl.config import RLConfig
from agentenvs.train.rl.rollout import Episode, RolloutFailureError, failure_fix
from agentenvs.train.runtime import (
    MetricsLogger,
    TrainState,
    load_checkpoint,
    make_optimizer,
    make_scheduler,
    save_checkpoint,
)

__all__ = ["RunFiles"]


class _NoLogger:
    """The metrics logger of ranks other than 0: they log nothing."""

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        pass

    def truncate_after(self, step: int) -> None:
        pass

    def close(self) -> None:
        pass


class RunFiles:
    """Optimizer and training state, checkpoints, logs and failure stops of an RL run (a part
    of :class:`~agentenvs.train.rl.trainer.RLTrainer`, which sets the attributes below)."""

    config: RLConfig
    dist: DistContext
    out_dir: Path
    model: Any
    tokenizer: Any
    stream: Any
    state: TrainState
    last_checkpoint: Path | None
    failures: list[str]
    _warned: set[str]

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
        protocol and every setting it fixed, and the advantage estimator's settings, next to
        the metrics."""
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
            protocol = {
                "protocol": cfg.protocol,
                "settings": cfg.protocol_settings(),
                "advantage": _advantage_record(cfg),
            }
            if cfg.data.limit is not None:  # the sampled training tasks
                protocol["task_ids"] = [getattr(s, "task_id", None) for s in self.stream.starts]
            self.out_dir.mkdir(parents=True, exist_ok=True)
            (self.out_dir / "protocol.json").write_text(json.dumps(protocol, indent=2) + "\n")

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

    def _saved_this_step(self) -> bool:
        return self.last_checkpoint is not None and self.last_checkpoint.name.endswith(
            f"{self.state.step:07d}"
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

    def _check_failures(self, iteration: int, episodes: float) -> None:
        """Stop the run when more than ``rollout.max_failed_fraction`` of the iteration's
        ``episodes`` (over all ranks) failed (:attr:`failures`, set by the rollout step)."""
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
        if not self._saved_this_step():
            self._save()
        raise RolloutFailureError(
            f"{what}. Fix: {failure_fix(error)}. The run stopped at {self.last_checkpoint}; "
            "continue it with the same command and --resume"
        ) from cause

    def _warn(self, message: str) -> None:
        if message in self._warned:
            return
        self._warned.add(message)
        where = f" [rank {self.dist.rank}]" if self.dist.is_distributed else ""
        print(f"agentenvs train rl{where}: {message}", file=sys.stderr)


def _advantage_record(cfg: RLConfig) -> dict[str, Any]:
    """The estimator and every one of its settings as the run uses them."""
    estimator = get_advantage_estimator(cfg.spec.estimator)
    settings = estimator.make_config(**cfg.estimator_settings())
    return {"estimator": estimator.name, "settings": dataclasses.asdict(settings)}
