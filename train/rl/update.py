"""The trainer's side of an iteration: old log-probs, then PPO epochs of clipped updates.

:func:`token_log_probs` runs the model on a collated micro-batch and returns the log-probs of the
reply tokens (B, L), of the prefix tokens (B, W) when the rows carry sidecars, and optionally the
policy entropy at the reply positions. Logits are computed only where a log-prob is needed
(``logits_to_keep`` with a boolean position mask, where the model takes it), so a long prompt
costs its transformer pass but not a ``length x vocab`` logit matrix.

:func:`recompute_old_log_probs` is the "old policy" pass before the update (no gradient; the
rollout engine's own log-probs stay on the rows for TIS/MIS). :func:`ppo_update` runs
``ppo_epochs`` epochs; each epoch shuffles the rows with a generator seeded by (seed, iteration,
epoch) and splits them into ``mini_batches`` optimizer steps; each step accumulates gradients over
micro-batches whose losses are divided by the whole mini-batch's token (or row) count, so the
sum is exactly the mini-batch's token-mean loss whatever the micro-batch size.

No wasted passes (:func:`zero_advantage_rows`): the surrogate is ``-A * ratio`` (clipped), with
no KL or entropy term, so a row whose every reply token has advantage 0 and whose prefix tokens
(if it trains any) have prefix advantage 0 has loss 0 and gradient 0, whatever the weights. Such
rows skip the old-log-prob pass (unless a TIS/MIS correction needs their old log-probs for its
keep mask) and every forward and backward pass of the update, but stay in the mini-batch
shuffle and in every denominator, so each step's loss, gradient and metrics of the other rows
are those of the full batch (only the entropy, KL and clip statistics are over the rows that
ran). A mini-batch with no such row anywhere skips its optimizer step (``actor/skipped_steps``;
the lr schedule still advances, so the schedule and a resume stay tied to the iteration): with
SGD this is the same run as stepping on a zero gradient; with AdamW it differs (no momentum or
weight-decay drift on a step with no signal). ``UpdateSettings.skip_zero_advantage=False``
restores the full passes.

Distributed (``ctx``: a :class:`~agentenvs.train.distributed.DistContext` of several ranks, the
model FSDP-sharded): each rank holds its own rows (whole groups), the denominators are the counts
over every rank's mini-batch, the gradients add up over ranks, a rank with fewer micro-batches pads
with zero-loss passes, and the metrics are those of the whole mini-batch on every rank. One rank's
rows and a one-process run of all the rows give the same update (up to float sums).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from agentenvs.train.device import autocast_context
from agentenvs.train.distributed import DistContext, full_tensor, micro_batch_rounds, pad_passes
from agentenvs.train.logits import logits_at
from agentenvs.train.loss_registry import LossInputs, get_policy_loss
from agentenvs.train.losses import (
    PolicyLossConfig,
    RolloutCorrection,
    RolloutCorrectionConfig,
    agg_denominator,
    rollout_correction,
)
from agentenvs.train.prefix_loss import (
    PrefixConfig,
    PrefixSignals,
    first_token_offsets,
    gather_prefix_log_probs,
    prefix_advantages,
)
from agentenvs.train.rl.batch import StepRow, collate, prefix_lift
from agentenvs.train.runtime import check_finite

__all__ = [
    "UpdateSettings",
    "apply_correction",
    "ppo_update",
    "recompute_old_log_probs",
    "reply_statistics",
    "token_log_probs",
    "zero_advantage_rows",
]


@dataclass(frozen=True)
class UpdateSettings:
    """What one update needs besides the model and the rows."""

    policy: PolicyLossConfig
    prefix: PrefixConfig | None
    """The prefix branch's settings, exactly when ``loss`` trains a prefix."""
    correction: RolloutCorrectionConfig | None
    ppo_epochs: int
    mini_batches: int
    micro_batch_size: int
    max_grad_norm: float
    precision: str
    seed: int
    skip_zero_advantage: bool = True
    """Skip the passes of rows that cannot change a weight (module docstring)."""
    loss: str = "clipped"
    """The registered policy loss (:func:`agentenvs.train.loss_registry.get_policy_loss`)."""

    def __post_init__(self) -> None:
        get_policy_loss(self.loss).check(self.prefix)


def zero_advantage_rows(rows: Sequence[StepRow], settings: UpdateSettings) -> list[bool]:
    """Per row: True when it cannot change a weight (every reply token's advantage is 0 and no
    prefix token it trains has a non-zero prefix advantage); all False when skipping is off."""
    if not settings.skip_zero_advantage or not rows:
        return [False] * len(rows)
    zero = [r.advantages is not None and not bool(r.advantages.ne(0).any()) for r in rows]
    prefix = settings.prefix
    trains_prefix = [bool(r.prefix) and sum(r.prefix.get("prefix_mask", ())) > 0 for r in rows]
    if prefix is not None and any(z and t for z, t in zip(zero, trains_prefix, strict=True)):
        zero = _prefix_zero(rows, zero, trains_prefix, prefix)
    policy = settings.policy
    if policy.agg_mode == "seq-mean-token-sum-norm" and policy.loss_scale_factor is None:
        # this loss divides by each micro-batch's padded width: leaving a row out could change
        # it, so rows are skipped only when none has a signal
        return zero if all(zero) else [False] * len(rows)
    return zero


def _prefix_zero(rows, zero, trains_prefix, prefix: PrefixConfig) -> list[bool]:
    """``zero`` with the rows whose prefix tokens get a non-zero prefix advantage set False."""
    width = max(len(r.response_ids) for r in rows)
    adv = torch.zeros(len(rows), width)
    mask = torch.zeros(len(rows), width)
    for i, r in enumerate(rows):
        if r.advantages is not None:
            adv[i, : len(r.advantages)] = r.advantages
        mask[i, : len(r.response_ids)] = 1.0
    lift = prefix_lift(rows) if prefix.advantage_mode == "family_lift" else None
    signals = PrefixSignals(success=torch.tensor([r.episode_won for r in rows]), lift=lift)
    pre_adv = prefix_advantages(adv, mask, prefix, signals)
    return [
        z and not (t and float(a) != 0.0)
        for z, t, a in zip(zero, trains_prefix, pre_adv.tolist(), strict=True)
    ]


def token_log_probs(
    model: Any, batch: dict[str, Any], *, entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """(reply log-probs (B, L), prefix log-probs (B, W) or None, entropy (B, L) or None)."""
    targets, keep, offsets = _target_positions(batch)
    logits = logits_at(model, batch, keep).float()
    log_norm = torch.logsumexp(logits, dim=-1)
    picked = logits.gather(-1, _next_ids(batch, keep)[:, None]).squeeze(-1)
    full = _scatter(targets, picked - log_norm)
    reply = _reply_columns(full, batch)
    prefix = batch["prefix"]
    prefix_lp = gather_prefix_log_probs(full, prefix, offsets) if prefix is not None else None
    ent = None
    if entropy:
        with torch.no_grad():
            flat = log_norm - (torch.softmax(logits, dim=-1) * logits).sum(-1)
            ent = _reply_columns(_scatter(targets, flat), batch)
    return reply, prefix_lp, ent


def reply_statistics(
    model: Any, batch: dict[str, Any], reference: Any | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """No gradient, reply tokens only: (log-probs (B, L), entropy (B, L), KL (B, L) or None).

    The KL is exact at each reply position: KL(pi || pi_ref) = sum over the vocabulary of
    p(v) (log p(v) - log p_ref(v)), ``reference`` the frozen initial policy, at the contexts the
    rollout visited (averaged over them it estimates the sequence KL without the variance of a
    one-sample k1/k3 estimate)."""
    targets, keep, _ = _target_positions({**batch, "prefix": None})
    with torch.no_grad():
        logits = logits_at(model, batch, keep).float()
        log_norm = torch.logsumexp(logits, dim=-1)  # as token_log_probs: the same old log-probs
        picked = logits.gather(-1, _next_ids(batch, keep)[:, None]).squeeze(-1)
        p = torch.softmax(logits, dim=-1)
        reply = _reply_columns(_scatter(targets, picked - log_norm), batch)
        ent = _reply_columns(_scatter(targets, log_norm - (p * logits).sum(-1)), batch)
        kl = None
        if reference is not None:
            log_ref = torch.log_softmax(logits_at(reference, batch, keep).float(), dim=-1)
            log_p = logits - log_norm[:, None]
            kl = _reply_columns(_scatter(targets, (p * (log_p - log_ref)).sum(-1)), batch)
    return reply, ent, kl


def _target_positions(batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(targets, keep, offsets): the (B, S) tokens whose log-prob is wanted (reply, and the
    prefix span when the batch has one), the logit columns that predict them (column c predicts
    token c + 1), and each row's first real token."""
    input_ids = batch["input_ids"]
    rows, seq_len = input_ids.shape
    width_p = batch["prompt_width"]
    width_l = batch["response_mask"].shape[1]
    targets = torch.zeros_like(input_ids, dtype=torch.bool)
    targets[:, width_p : width_p + width_l] = batch["response_mask"] > 0
    prefix = batch["prefix"]
    offsets = first_token_offsets(batch["attention_mask"])
    if prefix is not None:
        step = torch.arange(prefix.mask.shape[1], device=offsets.device)
        positions = (offsets + prefix.span_start)[:, None] + step
        wanted = prefix.mask > 0
        if bool(wanted.any()) and int(positions[wanted].max()) >= seq_len:
            raise ValueError(
                "a prefix span plus its padding offset runs past the sequence; check the "
                "sidecar span against the prompt tokens"
            )
        row_index = torch.arange(rows, device=offsets.device)[:, None].expand_as(positions)
        targets[row_index[wanted], positions[wanted]] = True
    targets[:, 0] = False  # token 0 has no predecessor
    keep = torch.zeros_like(targets)
    keep[:, :-1] = targets[:, 1:]
    return targets, keep, offsets


def _next_ids(batch: dict[str, Any], keep: torch.Tensor) -> torch.Tensor:
    """(N,) the token each kept logit column predicts."""
    return batch["input_ids"][:, 1:][keep[:, :-1]]


def _scatter(targets: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """(B, S) float32 zeros with ``values`` (N,) at the True positions of ``targets``."""
    full = torch.zeros(targets.shape, dtype=torch.float32, device=targets.device)
    return full.masked_scatter(targets, values.float())


def _reply_columns(full: torch.Tensor, batch: dict[str, Any]) -> torch.Tensor:
    width_p = batch["prompt_width"]
    return full[:, width_p : width_p + batch["response_mask"].shape[1]]


def recompute_old_log_probs(
    model: Any,
    rows: Sequence[StepRow],
    *,
    micro_batch_size: int,
    pad_id: int,
    device: torch.device,
    precision: str,
    ctx: DistContext | None = None,
) -> dict[str, float]:
    """Set ``row.old_log_probs`` with the current model; returns entropy and engine-gap metrics
    (over every rank's rows when ``ctx`` is distributed)."""
    ctx = ctx or DistContext()
    model.eval()
    ent_sum = gap_sum = 0.0
    tokens = 0
    chunks = _micro_batches(list(range(len(rows))), rows, micro_batch_size)
    extra = micro_batch_rounds(ctx, len(chunks)) - len(chunks)  # before any FSDP collective
    with torch.no_grad():
        for chunk in chunks:
            micro = [rows[i] for i in chunk]
            batch = collate(micro, pad_id, device)
            batch["prefix"] = None  # prefix old log-probs come from the sidecar (SFT model)
            with autocast_context(device, precision):
                reply, ent, _ = reply_statistics(model, batch)
            mask = batch["response_mask"]
            for j, row in enumerate(micro):
                row.old_log_probs = reply[j, : len(row.response_ids)].float().cpu()
            ent_sum += float((ent * mask).sum())
            gap_sum += float(((reply - batch["rollout_log_probs"]).abs() * mask).sum())
            tokens += int(mask.sum())
        pad_passes(model, extra, pad_id=pad_id, device=device, precision=precision, backward=False)
    ent_sum, gap_sum, tokens = ctx.sum([ent_sum, gap_sum, tokens])
    return {
        "actor/entropy": ent_sum / max(tokens, 1),
        "rollout/trainer_logprob_gap": gap_sum / max(tokens, 1),
    }


def apply_correction(
    rows: Sequence[StepRow], config: RolloutCorrectionConfig | None
) -> dict[str, float]:
    """Set each row's TIS/MIS ``correction`` (weights, keep mask); returns the metrics."""
    if config is None:
        for row in rows:
            row.correction = None
        return {}
    width = max(len(r.response_ids) for r in rows)
    old = torch.zeros(len(rows), width)
    engine = torch.zeros(len(rows), width)
    mask = torch.zeros(len(rows), width)
    for i, r in enumerate(rows):
        m = len(r.response_ids)
        old[i, :m] = r.old_log_probs
        engine[i, :m] = torch.tensor(r.rollout_log_probs)
        mask[i, :m] = 1.0
    result = rollout_correction(old, engine, mask, config)
    for i, r in enumerate(rows):
        m = len(r.response_ids)
        r.correction = (result.weights[i, :m].clone(), result.mask[i, :m].clone())
    return dict(result.metrics)


def ppo_update(
    model: Any,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    rows: Sequence[StepRow],
    settings: UpdateSettings,
    *,
    iteration: int,
    pad_id: int,
    device: torch.device,
    last_checkpoint: Path | None,
    ctx: DistContext | None = None,
) -> dict[str, float]:
    """PPO epochs over ``rows`` (module docstring); metrics averaged over optimizer steps."""
    ctx = ctx or DistContext()
    model.train()
    lift = None
    if settings.prefix is not None and settings.prefix.advantage_mode == "family_lift":
        lift = prefix_lift(rows)
    zero = zero_advantage_rows(rows, settings)
    step_metrics: list[dict[str, float]] = []
    skipped = 0
    for epoch in range(settings.ppo_epochs):
        generator = torch.Generator().manual_seed(
            (settings.seed * 1_000_003 + iteration) * 64 + epoch
        )
        order = torch.randperm(len(rows), generator=generator).tolist()
        for part in _split(order, settings.mini_batches):
            active = [i for i in part if not zero[i]]
            size, live = ctx.sum([len(part), len(active)])
            if not size:
                continue
            if not live:  # no row anywhere can change a weight: no passes, no optimizer step
                _advance(scheduler)
                skipped += 1
                continue
            metrics = _optimizer_step(
                model,
                optimizer,
                rows,
                part=part,
                active=active,
                settings=settings,
                lift=lift,
                pad_id=pad_id,
                device=device,
                ctx=ctx,
            )
            check_finite(metrics["actor/total_loss"], "the policy loss", iteration, last_checkpoint)
            check_finite(
                metrics["actor/grad_norm"], "the gradient norm", iteration, last_checkpoint
            )
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step_metrics.append(metrics)
    out = _mean_metrics(step_metrics)
    out["actor/optimizer_steps"] = float(len(step_metrics))
    out["actor/skipped_steps"] = float(skipped)
    out["actor/lr"] = float(scheduler.get_last_lr()[0])
    return out


def _advance(scheduler: Any) -> None:
    """Step the lr schedule without an optimizer step (torch warns about that order once)."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*lr_scheduler.step.*")
        scheduler.step()


def _optimizer_step(
    model: Any,
    optimizer: torch.optim.Optimizer,
    rows: Sequence[StepRow],
    *,
    part: list[int],
    active: list[int],
    settings: UpdateSettings,
    lift: torch.Tensor | None,
    pad_id: int,
    device: torch.device,
    ctx: DistContext,
) -> dict[str, float]:
    """Accumulate the gradient of one mini-batch (the passes of its ``active`` rows, the
    denominators of all of ``part``); returns its metrics (no optimizer step)."""
    optimizer.zero_grad(set_to_none=True)
    denominators = _denominators([rows[i] for i in part], settings, ctx)
    loss_fn = get_policy_loss(settings.loss)
    acc = _Accumulator()
    chunks = _micro_batches(active, rows, settings.micro_batch_size)
    extra = micro_batch_rounds(ctx, len(chunks)) - len(chunks)  # before any FSDP collective
    for chunk in chunks:
        micro = [rows[i] for i in chunk]
        batch = collate(micro, pad_id, device)
        with autocast_context(device, settings.precision):
            reply, prefix_lp, _ = token_log_probs(model, batch)
        inputs = LossInputs(
            log_prob=reply,
            old_log_prob=batch["old_log_probs"],
            advantages=batch["advantages"],
            response_mask=batch["response_mask"],
            correction=_collate_correction(micro, batch["response_mask"]),
            denominator=denominators[0],
            prefix_log_prob=prefix_lp,
            prefix=batch["prefix"],
            prefix_signals=(
                _prefix_signals(micro, lift, chunk, device) if batch["prefix"] is not None else None
            ),
            prefix_denominator=denominators[1],
        )
        loss, metrics = loss_fn(inputs, settings.policy, settings.prefix)
        loss.backward()
        acc.add(
            metrics,
            cont=float(batch["response_mask"].sum()),
            pre=float(batch["prefix"].mask.sum()) if batch["prefix"] is not None else 0.0,
        )
    pad_passes(
        model, extra, pad_id=pad_id, device=device, precision=settings.precision, backward=True
    )
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), settings.max_grad_norm)
    if ctx.is_distributed:
        acc = _Accumulator.combined(ctx.gather_objects(acc))
    out = acc.result()
    out["actor/grad_norm"] = float(full_tensor(grad_norm))
    if settings.prefix is not None:  # the mini-batch's, skipped rows included (as without a skip)
        pre = sum(sum(rows[i].prefix["prefix_mask"]) for i in part if rows[i].prefix)
        pre = ctx.sum([float(pre)])[0]
        if pre:
            out["prefix/token_count"] = pre
    return out


def _prefix_signals(
    micro: Sequence[StepRow], lift: torch.Tensor | None, chunk: list[int], device: torch.device
) -> PrefixSignals:
    """The micro-batch's per-row success and (when computed) family lift."""
    return PrefixSignals(
        success=torch.tensor([r.episode_won for r in micro], device=device),
        lift=lift[chunk].to(device) if lift is not None else None,
    )


def _denominators(
    rows: Sequence[StepRow], settings: UpdateSettings, ctx: DistContext
) -> tuple[float, float | None, float]:
    """(continuation, prefix, joint) counts of a mini-batch for ``agg_loss`` (over every rank's
    part of it)."""
    mode = settings.policy.agg_mode
    width = max((len(r.response_ids) for r in rows), default=1)
    cont = torch.zeros(len(rows), width)
    for i, r in enumerate(rows):
        cont[i, : len(r.response_ids)] = r.correction[1] if r.correction is not None else 1.0
    pre_width = max((len(r.prefix["prefix_mask"]) for r in rows if r.prefix), default=0)
    pre = torch.zeros(len(rows), max(pre_width, 1))
    for i, r in enumerate(rows):
        if r.prefix:
            pre[i, : len(r.prefix["prefix_mask"])] = torch.tensor(
                r.prefix["prefix_mask"], dtype=torch.float32
            )
    counts = ctx.sum(
        [
            agg_denominator(cont, mode),
            agg_denominator(pre, mode),
            agg_denominator(torch.cat([pre, cont], dim=1), mode),
        ]
    )
    cont_d, pre_d, joint_d = (max(c, 1.0) for c in counts)
    if settings.prefix is not None and settings.prefix.objective == "joint":
        return joint_d, None, joint_d
    return cont_d, pre_d, joint_d


def _collate_correction(
    micro: Sequence[StepRow], response_mask: torch.Tensor
) -> RolloutCorrection | None:
    if micro[0].correction is None:
        return None
    weights = torch.zeros_like(response_mask)
    keep = torch.zeros_like(response_mask)
    for i, r in enumerate(micro):
        w, k = r.correction
        weights[i, : len(w)] = w.to(weights.device)
        keep[i, : len(k)] = k.to(keep.device)
    return RolloutCorrection(weights=weights, mask=keep)


def _micro_batches(indices: Sequence[int], rows: Sequence[StepRow], size: int) -> list[list[int]]:
    """``indices`` sorted by row length (less padding), in chunks of ``size``."""
    ordered = sorted(indices, key=lambda i: (rows[i].length, i))
    return [ordered[k : k + size] for k in range(0, len(ordered), size)]


def _split(order: list[int], parts: int) -> list[list[int]]:
    size, extra = divmod(len(order), parts)
    out, start = [], 0
    for k in range(parts):
        end = start + size + (1 if k < extra else 0)
        out.append(order[start:end])
        start = end
    return out


_SUMMED = ("pg_loss", "total_loss")


class _Accumulator:
    """Combines micro-batch metrics into the mini-batch's: partial losses add up, min/max stay
    min/max, the rest are token-weighted means (prefix/* by prefix tokens)."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = defaultdict(float)
        self.weights: dict[str, float] = defaultdict(float)
        self.extreme: dict[str, float] = {}

    def add(self, metrics: dict[str, float], *, cont: float, pre: float) -> None:
        for key, value in metrics.items():
            if key.endswith(_SUMMED):
                self.sums[key] += value
                self.weights[key] = 1.0
            elif key.endswith("_min") or key.endswith("_max"):
                pick = min if key.endswith("_min") else max
                self.extreme[key] = pick(self.extreme.get(key, value), value)
            else:
                weight = pre if key.startswith("prefix/") else cont
                if key in ("prefix/token_count",):
                    self.sums[key] += value
                    self.weights[key] = 1.0
                    continue
                self.sums[key] += value * weight
                self.weights[key] += weight

    def result(self) -> dict[str, float]:
        out = {k: self.sums[k] / self.weights[k] for k in self.sums if self.weights[k] > 0}
        out.update(self.extreme)
        return out

    @classmethod
    def combined(cls, parts: Sequence[_Accumulator]) -> _Accumulator:
        """One accumulator over several ranks' (in rank order): the partial losses (whose
        denominators were global) add up, the weighted sums and weights add up."""
        out = cls()
        for part in parts:
            for key, value in part.sums.items():
                out.sums[key] += value
                fixed = key.endswith(_SUMMED) or key == "prefix/token_count"
                out.weights[key] = 1.0 if fixed else out.weights[key] + part.weights[key]
            for key, value in part.extreme.items():
                pick = min if key.endswith("_min") else max
                out.extreme[key] = pick(out.extreme.get(key, value), value)
        return out


def _mean_metrics(steps: list[dict[str, float]]) -> dict[str, float]:
    keys = sorted({k for m in steps for k in m})
    out = {}
    for key in keys:
        values = [m[key] for m in steps if key in m]
        if key.endswith("_max"):
            out[key] = max(values)
        elif key.endswith("_min"):
            out[key] = min(values)
        else:
            out[key] = sum(values) / len(values)
    return out
