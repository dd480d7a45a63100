"""What every trainer needs around its update: optimizer and schedule, checkpoints that resume
exactly, metric logs, and the non-finite-loss guard (the device and precision are
:mod:`agentenvs.train.device`'s).

Checkpoint layout (``<out>/checkpoints/step-<n>/``): ``model/`` (``save_pretrained`` of the
model and tokenizer: it reloads with plain transformers), ``optimizer.pt`` (the optimizer state
keyed by parameter name, unsharded), ``trainer_state.pt`` (scheduler, RNG states, step and data
position), ``config.json``. ``<out>/checkpoints/latest`` names the newest complete one; a
checkpoint is written to a temporary folder and renamed, so an interrupted save never leaves a
broken "latest". Every tensor is saved whole, so a checkpoint written by N ``torchrun``
processes (rank 0 writes; :mod:`agentenvs.train.distributed`) resumes on any number of processes.
Version 1 checkpoints (the optimizer state keyed by position, inside ``trainer_state.pt``)
still resume in one process.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agentenvs.train.distributed import (
    DistContext,
    full_model_state,
    full_optimizer_state,
    is_sharded,
    load_optimizer_state,
)

__all__ = [
    "CHECKPOINT_VERSION",
    "MetricsLogger",
    "NonFiniteLossError",
    "OPTIMIZERS",
    "TrainState",
    "check_finite",
    "latest_checkpoint",
    "load_checkpoint",
    "make_optimizer",
    "make_scheduler",
    "rng_state",
    "save_checkpoint",
    "seed_everything",
    "set_rng_state",
]

CHECKPOINT_VERSION = 2


class NonFiniteLossError(RuntimeError):
    """A loss or gradient norm was NaN or infinite; training stopped, the last checkpoint kept."""


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    """Every RNG a training step touches (Python, NumPy, torch CPU and CUDA)."""
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


OPTIMIZERS = ("adamw", "sgd")


def make_optimizer(
    model: torch.nn.Module,
    lr: float,
    weight_decay: float = 0.0,
    betas=(0.9, 0.999),
    *,
    name: str = "adamw",
    eps: float = 1e-8,
    momentum: float = 0.0,
) -> torch.optim.Optimizer:
    """AdamW (``betas``, ``eps``) or plain SGD (``momentum``) over the trainable parameters."""
    params = [p for p in model.parameters() if p.requires_grad]
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, betas=betas, eps=eps)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, weight_decay=weight_decay, momentum=momentum)
    raise ValueError(f"unknown optimizer {name!r}; choose from {list(OPTIMIZERS)}")


def make_scheduler(
    optimizer: torch.optim.Optimizer,
    total_steps: int,
    warmup_ratio: float,
    kind: str = "cosine",
    min_lr_ratio: float = 0.0,
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warmup over ``warmup_ratio`` of the steps, then cosine (or constant) decay.

    lr(s) = lr * s / W for s < W; cosine: lr * (m + (1 - m)(1 + cos(pi p)) / 2) with
    p = (s - W) / (S - W) and m = ``min_lr_ratio``.
    """
    if kind not in ("cosine", "constant"):
        raise ValueError(f"unknown lr schedule {kind!r}; choose 'cosine' or 'constant'")
    warmup = int(round(total_steps * warmup_ratio))

    def factor(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        if kind == "constant":
            return 1.0
        progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
        return min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def check_finite(value: torch.Tensor | float, what: str, step: int, last_checkpoint: Path | None):
    """Raise :class:`NonFiniteLossError` with a message saying what to do, if not finite."""
    v = float(value.detach().float().item() if isinstance(value, torch.Tensor) else value)
    if not math.isfinite(v):
        where = (
            f"the last good checkpoint is {last_checkpoint}"
            if last_checkpoint
            else ("no checkpoint was written yet")
        )
        raise NonFiniteLossError(
            f"{what} is {v} at step {step}; training stopped ({where}). Lower the learning rate, "
            "check the data, or resume from the checkpoint."
        )


@dataclass
class TrainState:
    """Where training is: optimizer steps done, and the data position to continue from."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def save_checkpoint(
    out_dir: Path,
    model: Any,
    tokenizer: Any,
    *,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    state: TrainState,
    config: Mapping[str, Any],
    keep_last: int = 3,
    ctx: Any = None,
) -> Path:
    """Write ``<out_dir>/checkpoints/step-<n>`` atomically and point ``latest`` at it.

    Distributed (``ctx``: a :class:`~agentenvs.train.distributed.DistContext` with several
    ranks): every rank calls it (the full tensors are gathered), rank 0 writes, all wait for
    it."""
    ctx = ctx or DistContext()
    root = Path(out_dir) / "checkpoints"
    final = root / f"step-{state.step:07d}"
    sharded = is_sharded(model)
    model_state = full_model_state(model, ctx) if sharded else None
    # an optimizer that never stepped has no state (and must not get one: see load_checkpoint)
    optimizer_state = full_optimizer_state(model, optimizer, ctx) if optimizer.state else None
    if ctx.is_main:
        tmp = root / f".tmp-step-{state.step:07d}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        (tmp / "model").mkdir(parents=True)
        getattr(model, "module", model).save_pretrained(tmp / "model", state_dict=model_state)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp / "model")
        if optimizer_state is not None:
            torch.save(optimizer_state, tmp / "optimizer.pt")
        torch.save(
            {
                "version": CHECKPOINT_VERSION,
                "optimizer_file": "optimizer.pt" if optimizer_state is not None else None,
                "scheduler": scheduler.state_dict() if scheduler is not None else None,
                "rng": rng_state(),
                "state": state.__dict__,
                "world_size": ctx.world_size,
            },
            tmp / "trainer_state.pt",
        )
        (tmp / "config.json").write_text(json.dumps(dict(config), indent=2, default=str))
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        (root / "latest.tmp").write_text(final.name)
        (root / "latest.tmp").replace(root / "latest")
        old = sorted(p for p in root.glob("step-*") if p.is_dir())[:-keep_last] if keep_last else []
        for path in old:
            shutil.rmtree(path, ignore_errors=True)
    ctx.barrier()
    return final


def latest_checkpoint(out_dir: Path) -> Path | None:
    """The newest complete checkpoint under ``out_dir``, or None."""
    pointer = Path(out_dir) / "checkpoints" / "latest"
    if not pointer.exists():
        return None
    path = pointer.parent / pointer.read_text().strip()
    return path if (path / "trainer_state.pt").exists() else None


def load_checkpoint(
    path: Path,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    *,
    model: Any = None,
    ctx: Any = None,
) -> TrainState:
    """Load optimizer, scheduler and RNG states (the model is loaded from ``path/'model'``).

    ``model`` (the one ``optimizer`` steps, sharded or not) is needed for version-2
    checkpoints, whose optimizer state is keyed by parameter name; distributed, every rank calls
    this and rank 0's copy of the optimizer state is broadcast and sharded."""
    ctx = ctx or DistContext()
    blob = torch.load(Path(path) / "trainer_state.pt", weights_only=False)
    version = blob.get("version")
    if version == 1:
        if ctx.is_distributed:
            raise ValueError(
                f"checkpoint {path} has version 1 (optimizer state by position); resume it in "
                "one process once (the next checkpoint is version 2), then on any number"
            )
        optimizer.load_state_dict(blob["optimizer"])
    elif version == CHECKPOINT_VERSION:
        if model is None:
            raise TypeError("load_checkpoint needs model= for a version-2 checkpoint")
        if blob.get("optimizer_file"):
            reads = ctx.is_main or not is_sharded(model)
            saved = (
                torch.load(Path(path) / blob["optimizer_file"], weights_only=False)
                if reads
                else None
            )
            load_optimizer_state(model, optimizer, saved, ctx)
    else:
        raise ValueError(
            f"checkpoint {path} has version {version}, expected {CHECKPOINT_VERSION} (or 1)"
        )
    if scheduler is not None and blob["scheduler"] is not None:
        scheduler.load_state_dict(blob["scheduler"])
        # the learning rate in effect (also where no optimizer state was saved: plain SGD)
        for group, lr in zip(optimizer.param_groups, scheduler.get_last_lr(), strict=True):
            group["lr"] = lr
    set_rng_state(blob["rng"])
    return TrainState(**blob["state"])


class MetricsLogger:
    """Per-step metrics to ``metrics.jsonl`` and TensorBoard (and Weights & Biases if asked)."""

    def __init__(
        self,
        out_dir: Path,
        *,
        tensorboard: bool = True,
        wandb_project: str | None = None,
        run_name: str | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        self.path = Path(out_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(Path(out_dir) / "tensorboard"))
            except ImportError:  # tensorboard not installed: JSONL only
                self._tb = None
        self._wandb = None
        if wandb_project:
            import wandb

            self._wandb = wandb.init(
                project=wandb_project, name=run_name, config=dict(config or {})
            )
        self._start = time.time()

    def truncate_after(self, step: int) -> None:
        """Drop records of steps after ``step`` (a resumed run logs them again)."""
        if not self.path.exists():
            return
        keep = [
            line
            for line in self.path.read_text().splitlines()
            if line.strip() and json.loads(line).get("step", 0) <= step
        ]
        self.path.write_text("".join(line + "\n" for line in keep))

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        record = {"step": step, "time": round(time.time() - self._start, 3), **metrics}
        with self.path.open("a") as fh:
            fh.write(json.dumps(record, default=float) + "\n")
        if self._tb is not None:
            for key, value in metrics.items():
                if isinstance(value, (int, float)) and math.isfinite(value):
                    self._tb.add_scalar(key, value, step)
        if self._wandb is not None:
            self._wandb.log(dict(metrics), step=step)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()
