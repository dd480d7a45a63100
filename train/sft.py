"""Supervised fine-tuning on multi-turn trajectories, with the loss on assistant tokens only.

Each trajectory's message list is rendered with the tokenizer's chat template; the labels are
the assistant spans (each reply's content through its end-of-turn token, the same spans the
replay stage uses), everything else is masked. Batches pad on the right, micro-batches group
similar lengths, gradients accumulate to the global batch, and the loss is the token mean over
the global batch. The schedule is linear warmup then cosine; bf16 autocast where the device has
it. Checkpoints reload with plain transformers and resume exactly (model, optimizer, scheduler,
RNG states, data position). Under ``torchrun`` the same command trains on many processes
(FSDP2; :mod:`agentenvs.train.distributed`), with the same schedule and checkpoints.

    agentenvs train sft --model DIR --data trajectories.jsonl --out runs/sft [key=value ...]
    torchrun --nproc-per-node=8 -m agentenvs.cli train sft --model DIR --data T.jsonl --out D
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from agentenvs.agents.models import resolve_model
from agentenvs.agents.trajectory import Trajectory, read_trajectories
from agentenvs.replay.tokens import render_chat
from agentenvs.train.config import ConfigError, check_device, check_ranges, config_to_dict
from agentenvs.train.device import autocast_context
from agentenvs.train.distributed import (
    DistContext,
    FSDPSettings,
    full_tensor,
    init_distributed,
    pad_passes,
    shard_model,
)
from agentenvs.train.logits import logits_at
from agentenvs.train.runtime import (
    MetricsLogger,
    TrainState,
    check_finite,
    latest_checkpoint,
    load_checkpoint,
    make_optimizer,
    make_scheduler,
    save_checkpoint,
    seed_everything,
)

__all__ = ["SFTConfig", "SFTExample", "build_examples", "train_sft"]

IGNORE_INDEX = -100


@dataclass
class SFTConfig:
    """Settings of an SFT run (defaults: the Prefix-GRPO paper's SFT stage)."""

    model: str = ""
    """Model to start from: a local ``save_pretrained`` directory or a hub id."""
    data: list[str] = field(default_factory=list)
    """Trajectory JSONL files (from ``agentenvs eval`` or a rollout)."""
    out_dir: str = "runs/sft"
    """Where checkpoints, ``metrics.jsonl`` and TensorBoard logs go."""
    success_only: bool = True
    """Train only on won episodes."""
    skip_invalid_lines: bool = False
    """Skip corrupt trajectory lines (each reported) instead of stopping."""
    epochs: int = 20
    """Passes over the data (the paper: 20)."""
    max_steps: int | None = None
    """Stop after this many optimizer steps (overrides ``epochs`` when smaller)."""
    lr: float = 1e-5
    """Peak learning rate (the paper: 1e-5)."""
    warmup_ratio: float = 0.1
    """Fraction of the steps with linear warmup (the paper: 0.1)."""
    schedule: Literal["cosine", "constant"] = "cosine"
    """``cosine`` or ``constant`` after warmup."""
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    batch_size: int = 64
    """Examples per optimizer step (the paper: 64), over all ranks under torchrun."""
    micro_batch_size: int = 8
    """Examples per forward pass (per rank); gradients accumulate to ``batch_size``."""
    max_length: int = 8192
    """Tokens per example; longer conversations are cut at the end."""
    precision: str = "auto"
    """``auto`` (bf16 where the GPU has it), ``bf16`` or ``fp32``."""
    gradient_checkpointing: bool = False
    device: str = "auto"
    """``auto`` (CUDA when available), ``cpu`` or ``cuda``; under torchrun each process takes
    ``cuda:LOCAL_RANK``."""
    fsdp: FSDPSettings = field(default_factory=FSDPSettings)
    """FSDP2 settings, read under torchrun only
    (:class:`agentenvs.train.distributed.FSDPSettings`)."""
    seed: int = 0
    save_every: int = 0
    """Checkpoint every N steps (0: at the end of every epoch)."""
    keep_checkpoints: int = 3
    log_every: int = 1
    tensorboard: bool = True
    wandb_project: str | None = None

    def __post_init__(self) -> None:
        check_ranges(self, SFT_RANGES)
        if self.batch_size % self.micro_batch_size:
            raise ValueError(
                f"batch_size {self.batch_size} must be a multiple of micro_batch_size "
                f"{self.micro_batch_size}: set micro_batch_size to a divisor of it (e.g. "
                f"micro_batch_size={math.gcd(self.batch_size, self.micro_batch_size)}) or "
                f"batch_size to a multiple of {self.micro_batch_size}"
            )
        if self.precision not in ("auto", "bf16", "fp32"):
            raise ValueError(f"precision must be auto, bf16 or fp32, not {self.precision!r}")
        check_device(self.device)
        missing = [p for p in self.data if not Path(p).is_file()]
        if missing:
            raise ValueError(
                f"data: no trajectory file at {missing[0]}; give the JSONL files of "
                "'agentenvs eval' or a rollout (--data FILE ...)"
            )


# the numeric settings' ranges (agentenvs.train.config.RANGES)
SFT_RANGES = {
    "epochs": ">= 1",
    "max_steps": ">= 1",
    "lr": "> 0",
    "warmup_ratio": "in [0, 1)",
    "weight_decay": ">= 0",
    "max_grad_norm": "> 0",
    "batch_size": ">= 1",
    "micro_batch_size": ">= 1",
    "max_length": ">= 2",
    "save_every": ">= 0",
    "keep_checkpoints": ">= 1",
    "log_every": ">= 1",
}


@dataclass(frozen=True)
class SFTExample:
    """One tokenised conversation: ids and labels (``-100`` outside assistant spans)."""

    input_ids: tuple[int, ...]
    labels: tuple[int, ...]
    source: str

    @property
    def n_label_tokens(self) -> int:
        return sum(1 for t in self.labels if t != IGNORE_INDEX)


def training_conversations(traj: Trajectory) -> list[list[dict[str, str]]]:
    """The conversations SFT trains on for one episode: each reply after exactly the prompt the
    policy is given at that turn.

    With a chat-style prompt and the whole history that is the episode's message list (one
    conversation, every reply a label). A template-style prompt (Sokoban, WebShop, ALFWorld
    under ``ptgpo``: one user message per step that restates the recent history) or a history
    window gives each turn a prompt that is not a prefix of the next one: one conversation per
    reply (its prompt, then the reply).
    """
    from agentenvs.agents.prompts import UnknownPromptError, env_prompt, prompt_messages

    history, prompt = traj.metadata.get("history"), traj.metadata.get("prompt")
    try:
        template = env_prompt(traj.env_id, prompt).style == "template"
    except UnknownPromptError:
        return [traj.messages]
    if not template and history is None:
        return [traj.messages]
    out, users = [], 0
    for i, message in enumerate(traj.messages):
        users += message["role"] == "user"
        if message["role"] == "assistant" and i and traj.messages[i - 1]["role"] == "user":
            head = prompt_messages(traj.env_id, traj.messages, users - 1, history, prompt)
            out.append([*head, message])
    return out


def build_examples(
    trajectories: Sequence[Trajectory], tokenizer: Any, max_length: int
) -> list[SFTExample]:
    """Render, tokenise and mask each trajectory's conversations (:func:`training_conversations`;
    those without assistant tokens are dropped)."""
    examples = []
    for traj in trajectories:
        for messages in training_conversations(traj):
            chat = render_chat(tokenizer, messages)
            labels = [IGNORE_INDEX] * len(chat.token_ids)
            for span in chat.spans:
                labels[span.start : span.end] = chat.token_ids[span.start : span.end]
            ids, labels = chat.token_ids[:max_length], labels[:max_length]
            example = SFTExample(tuple(ids), tuple(labels), f"{traj.task_id}#{traj.sample_index}")
            if example.n_label_tokens:
                examples.append(example)
    return examples


def _collate(examples: Sequence[SFTExample], pad_id: int) -> dict[str, torch.Tensor]:
    width = max(len(e.input_ids) for e in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), width), IGNORE_INDEX, dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    for row, e in enumerate(examples):
        n = len(e.input_ids)
        ids[row, :n] = torch.tensor(e.input_ids)
        labels[row, :n] = torch.tensor(e.labels)
        mask[row, :n] = 1
    return {"input_ids": ids, "labels": labels, "attention_mask": mask}


def _token_loss_sum(model: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Summed cross-entropy of the label tokens; logits only where a label is predicted."""
    targets = batch["labels"][:, 1:]
    keep = torch.zeros_like(batch["labels"], dtype=torch.bool)
    keep[:, :-1] = targets != IGNORE_INDEX
    logits = logits_at(model, batch, keep).float()
    return torch.nn.functional.cross_entropy(logits, targets[keep[:, :-1]], reduction="sum")


def _load_data(config: SFTConfig) -> list[Trajectory]:
    """The trajectories to train on; a :class:`ConfigError` (with its fix) when there are none
    or a line is invalid and ``skip_invalid_lines`` is off."""
    if not config.data:
        raise ConfigError("no training data: give --data <trajectories.jsonl> [<more.jsonl>]")
    out: list[Trajectory] = []
    for path in config.data:
        errors: list[str] = []
        out.extend(read_trajectories(path, skip_invalid=True, errors=errors))
        if errors and not config.skip_invalid_lines:
            raise ConfigError(
                f"{len(errors)} invalid line(s), the first {errors[0]}; fix the file or skip "
                "such lines with skip_invalid_lines=true"
            )
        for message in errors:
            print(f"skipped corrupt line {message}", file=sys.stderr)
    if config.success_only:
        out = [t for t in out if t.won]
    if not out:
        fix = " (or set success_only=false)" if config.success_only else ""
        raise ConfigError(
            f"no usable trajectories in {config.data} (success_only={config.success_only}): give "
            f"files with {'won ' if config.success_only else ''}episodes{fix}"
        )
    return out


def train_sft(
    config: SFTConfig, *, resume: bool = False, progress: bool = True, stop_at: int | None = None
) -> Path:
    """Run SFT; returns the last checkpoint directory (its ``model/`` reloads with transformers).

    ``stop_at`` ends this session after that many optimizer steps in all (with a checkpoint),
    without changing the run's schedule: a later ``resume=True`` call continues it exactly, as
    after a preempted job. Under ``torchrun`` (``WORLD_SIZE`` > 1) the model is sharded with
    FSDP2 and each global batch is split over the ranks (:mod:`agentenvs.train.distributed`); the
    schedule, the data order and the checkpoints are the same as in one process.
    """
    ctx = init_distributed(config.device)
    finished = False
    try:
        final = _run_sft(config, ctx, resume=resume, progress=progress, stop_at=stop_at)
        finished = True
        return final
    finally:
        ctx.close(wait=finished)


def _run_sft(
    config: SFTConfig, ctx: DistContext, *, resume: bool, progress: bool, stop_at: int | None
) -> Path:
    from tqdm.auto import tqdm

    run = _start_run(config, ctx, resume=resume)
    run.model.train()
    state = run.state
    show = progress and ctx.is_main
    bar = tqdm(total=run.total, initial=state.step, desc="sft", disable=not show)
    end = min(run.total, stop_at) if stop_at is not None else run.total
    while state.step < end:
        _train_epoch(run, end, bar)
    bar.close()
    if run.logger is not None:
        run.logger.close()
    if run.last_saved is None or not run.last_saved.name.endswith(f"{state.step:07d}"):
        run.last_saved = run.save()
    return run.last_saved


@dataclass
class _SFTRun:
    """One SFT session: the model and its optimizer, the examples, where training stands
    (``state``), the metric log (main rank only) and the last checkpoint written."""

    config: SFTConfig
    ctx: DistContext
    model: Any
    tokenizer: Any
    optimizer: Any
    scheduler: Any
    state: TrainState
    logger: MetricsLogger | None
    examples: list[SFTExample]
    steps_per_epoch: int
    total: int
    last_saved: Path | None

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0

    def save(self) -> Path:
        return save_checkpoint(
            Path(self.config.out_dir),
            self.model,
            self.tokenizer,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            state=self.state,
            config=config_to_dict(self.config),
            keep_last=self.config.keep_checkpoints,
            ctx=self.ctx,
        )


def _start_run(config: SFTConfig, ctx: DistContext, *, resume: bool) -> _SFTRun:
    """Load the model (from the latest checkpoint when resuming), the examples, the optimizer
    and schedule, and the training state and metric log to continue from."""
    out_dir = Path(config.out_dir)
    checkpoint = latest_checkpoint(out_dir) if resume else None
    if resume and checkpoint is None and ctx.is_main:
        print(f"no checkpoint under {out_dir}; starting from {config.model}", file=sys.stderr)
    source = str(checkpoint / "model") if checkpoint else resolve_model(config.model)
    trajectories = _load_data(config)
    seed_everything(config.seed)
    tokenizer, model = _load_model(source, config, ctx)
    examples = build_examples(trajectories, tokenizer, config.max_length)
    steps_per_epoch = math.ceil(len(examples) / config.batch_size)
    total = steps_per_epoch * config.epochs
    total = min(total, config.max_steps) if config.max_steps else total
    optimizer = make_optimizer(model, config.lr, config.weight_decay)
    scheduler = make_scheduler(optimizer, total, config.warmup_ratio, config.schedule)
    state = (
        load_checkpoint(checkpoint, optimizer, scheduler, model=model, ctx=ctx)
        if checkpoint
        else TrainState()
    )
    logger = None
    if ctx.is_main:
        logger = MetricsLogger(
            out_dir,
            tensorboard=config.tensorboard,
            wandb_project=config.wandb_project,
            config=config_to_dict(config),
        )
        logger.truncate_after(state.step)
    return _SFTRun(
        config=config,
        ctx=ctx,
        model=model,
        tokenizer=tokenizer,
        optimizer=optimizer,
        scheduler=scheduler,
        state=state,
        logger=logger,
        examples=examples,
        steps_per_epoch=steps_per_epoch,
        total=total,
        last_saved=checkpoint,
    )


def _load_model(source: str, config: SFTConfig, ctx: DistContext) -> tuple[Any, Any]:
    """The tokenizer and the model, on the device or sharded over the ranks."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(source)
    model = AutoModelForCausalLM.from_pretrained(source)
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    if ctx.is_distributed:
        shard_model(model, ctx, config.fsdp, config.precision)
    else:
        model.to(ctx.device)
    return tokenizer, model


def _train_epoch(run: _SFTRun, end: int, bar: Any) -> None:
    """The rest of the current epoch (up to step ``end``): the epoch's seeded example order,
    one optimizer step per batch, metrics logged and checkpoints saved as configured."""
    config, state = run.config, run.state
    order = torch.randperm(
        len(run.examples),
        generator=torch.Generator().manual_seed(config.seed * 100_003 + state.epoch),
    ).tolist()
    while state.batch_in_epoch < run.steps_per_epoch and state.step < end:
        start = state.batch_in_epoch * config.batch_size
        batch = [run.examples[i] for i in order[start : start + config.batch_size]]
        metrics = _train_step(run, batch)
        state.step += 1
        state.batch_in_epoch += 1
        if run.logger is not None and state.step % config.log_every == 0:
            run.logger.log(state.step, {**metrics, "train/epoch": state.epoch})
        bar.update(1)
        bar.set_postfix(loss=f"{metrics['train/loss']:.4f}")
        if config.save_every and state.step % config.save_every == 0:
            run.last_saved = run.save()
    if state.batch_in_epoch >= run.steps_per_epoch:
        state.epoch += 1
        state.batch_in_epoch = 0
        if not config.save_every:
            run.last_saved = run.save()


def _train_step(run: _SFTRun, batch: list[SFTExample]) -> dict[str, float]:
    """One optimizer step over ``batch`` (the global batch: each rank takes its share of the
    length-sorted examples; the loss is divided by the whole batch's label tokens)."""
    started = time.perf_counter()
    config, ctx, model = run.config, run.ctx, run.model
    device, pad_id, step = ctx.device, run.pad_id, run.state.step
    n_tokens = sum(e.n_label_tokens for e in batch)
    ordered = sorted(batch, key=lambda e: len(e.input_ids))
    mine = ctx.shard(ordered)
    size = config.micro_batch_size
    chunks = [mine[i : i + size] for i in range(0, len(mine), size)]
    rounds = max(math.ceil(len(ordered[r :: ctx.world_size]) / size) for r in range(ctx.world_size))
    total_loss = 0.0
    for chunk in chunks:
        micro = {k: v.to(device) for k, v in _collate(chunk, pad_id).items()}
        with autocast_context(device, config.precision):
            loss_sum = _token_loss_sum(model, micro)
        (loss_sum / n_tokens).backward()
        total_loss += float(loss_sum.detach())
    pad_passes(
        model,
        rounds - len(chunks),
        pad_id=pad_id,
        device=device,
        precision=config.precision,
        backward=True,
    )
    (total_loss,) = ctx.sum([total_loss])
    loss = total_loss / n_tokens
    check_finite(loss, "the SFT loss", step, run.last_saved)
    grad_norm = full_tensor(
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
    )
    check_finite(grad_norm, "the gradient norm", step, run.last_saved)
    optimizer, scheduler = run.optimizer, run.scheduler
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    elapsed = time.perf_counter() - started
    return {
        "train/loss": loss,
        "train/grad_norm": float(grad_norm),
        "train/lr": scheduler.get_last_lr()[0],
        "train/label_tokens": n_tokens,
        "train/tokens_per_s": sum(len(e.input_ids) for e in batch) / elapsed,
    }
