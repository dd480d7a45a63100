"""Policy losses: one ``agg_loss``, the clipped surrogate, rollout correction, DAPO helpers.

Every loss returns ``(loss, metrics)``: a scalar tensor to backpropagate and a dict of floats
with prefixed keys (``actor/clipfrac``, ``rollout/rejected_frac``, ``prefix/kl``). Prefix-GRPO's
objectives build on these in :mod:`agentenvs.train.prefix_loss`.

Shapes: B rows, L response tokens. ``log_prob`` / ``old_log_prob`` / ``advantages`` / ``mask``
are (B, L); ``log_prob`` carries the gradient, the others are data.

Clipped surrogate (PPO, Schulman et al. 2017; dual clip, Ye et al. 2020; clip-higher, DAPO)::

    logratio = clamp(log_prob - old_log_prob, -20, 20)      ratio = exp(logratio)
    pg_loss1 = -A * ratio
    pg_loss2 = -A * clamp(ratio, 1 - clip_low, 1 + clip_high)
    pg_loss  = max(pg_loss1, pg_loss2)
    dual clip (A < 0 only): pg_loss = min(pg_loss, -A * c)          c = dual_clip = 3
    loss = agg_loss(pg_loss * w, mask * keep, agg_mode)             w, keep: rollout correction

Metrics: ``clipfrac`` (share of tokens where the clipped branch is taken), ``clipfrac_lower``
(dual clip taken), ``kl`` = mean(old - new) (k1), ``approx_kl`` = mean(ratio - 1 - logratio)
(k3, CleanRL), ``ratio_mean`` / ``ratio_min`` / ``ratio_max``.

Rollout-vs-trainer correction (the rollout engine's log-probs differ from the trainer's old
log-probs): rho = pi_old / pi_rollout per token (``level="token"``) or the product over the
sequence (``level="sequence"``, broadcast to its tokens), bounded to exp(+-20). TIS truncates:
w = min(rho, threshold). MIS masks: tokens (or whole sequences) with rho outside
[threshold_lower, threshold] leave the loss and its denominator; the rest keep w = rho.
"GRPO-MIS" is GRPO with ``RolloutCorrectionConfig.grpo_mis()`` (sequence-level MIS).

Aggregation (``agg_loss``): ``token-mean`` = sum(loss * mask) / sum(mask);
``seq-mean-token-mean`` = mean over rows of each row's token mean; ``seq-mean-token-sum`` = mean
over rows of each row's token sum; ``seq-mean-token-sum-norm`` (Dr.GRPO's normalisation, verl's
name) = ``seq-mean-token-sum`` divided by a constant, verl's ``loss_scale_factor``: by default
the mask's width (verl: the response horizon, ``max_response_length`` padded), or a fixed
number (Dr.GRPO: the generation budget) so that the scale does not change with the batch's
padding. Unlike verl, rows with no valid token (all padding, or
rejected by MIS) are left out of the sequence mean instead of counting as 0 (or NaN).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch

from agentenvs.train._groups import as_numpy, check_length, factorize

__all__ = [
    "AGG_MODES",
    "PolicyLossConfig",
    "RolloutCorrection",
    "RolloutCorrectionConfig",
    "SurrogateTerms",
    "agg_denominator",
    "agg_loss",
    "dynamic_sampling_mask",
    "masked_mean",
    "overlong_penalty",
    "policy_loss",
    "rollout_correction",
    "surrogate_metrics",
    "surrogate_terms",
]

AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
LOG_RATIO_BOUND = 20.0  # exp(20) ~ 5e8: keeps ratios and importance weights finite


@dataclass(frozen=True)
class PolicyLossConfig:
    """Settings of the clipped surrogate (defaults: Prefix-GRPO's 0.2 / 0.2, dual clip 3)."""

    clip_low: float = 0.2
    """epsilon_low: the ratio is clipped below at 1 - clip_low."""
    clip_high: float = 0.2
    """epsilon_high: the ratio is clipped above at 1 + clip_high (DAPO's clip-higher: 0.28)."""
    dual_clip: float | None = 3.0
    """c: for A < 0 the loss is capped at -A * c (None: no dual clip); must be > 1."""
    agg_mode: str = "token-mean"
    """How token losses become one number; one of AGG_MODES."""
    loss_scale_factor: float | None = None
    """``seq-mean-token-sum-norm`` only: the constant the loss is divided by (None: the mask's
    width, as verl does; Dr.GRPO sets the generation budget)."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.clip_low < 1.0:
            raise ValueError(f"clip_low must lie in [0, 1), got {self.clip_low}")
        if self.clip_high < 0.0:
            raise ValueError(f"clip_high must be >= 0, got {self.clip_high}")
        if self.dual_clip is not None and self.dual_clip <= 1.0:
            raise ValueError(f"dual_clip must be > 1 (or None to disable), got {self.dual_clip}")
        _check_agg_mode(self.agg_mode)
        if self.loss_scale_factor is not None and not self.loss_scale_factor > 0:
            raise ValueError(
                f"loss_scale_factor must be > 0 (or None), got {self.loss_scale_factor}"
            )

    @classmethod
    def dapo(cls, **overrides: object) -> PolicyLossConfig:
        """DAPO's clip-higher setting: clip_low 0.2, clip_high 0.28."""
        return cls(**{"clip_low": 0.2, "clip_high": 0.28, **overrides})


@dataclass(frozen=True)
class RolloutCorrectionConfig:
    """Importance correction from the rollout engine's log-probs to the trainer's old ones."""

    mode: Literal["tis", "mis"] = "tis"
    """``tis``: truncate the weights at ``threshold``; ``mis``: mask tokens/sequences outside."""
    level: Literal["token", "sequence"] = "token"
    """``token``: one weight per token; ``sequence``: the product over the row's tokens."""
    threshold: float = 2.0
    """Upper bound of the weights (TIS truncation point, MIS upper mask bound); > 1."""
    threshold_lower: float | None = None
    """MIS only: lower mask bound (None: 1 / threshold). TIS has no lower bound."""

    def __post_init__(self) -> None:
        if self.mode not in ("tis", "mis"):
            raise ValueError(f"mode must be 'tis' or 'mis', got {self.mode!r}")
        if self.level not in ("token", "sequence"):
            raise ValueError(f"level must be 'token' or 'sequence', got {self.level!r}")
        if self.threshold <= 1.0:
            raise ValueError(f"threshold must be > 1, got {self.threshold}")
        if self.threshold_lower is not None:
            if self.mode != "mis":
                raise ValueError("threshold_lower is a MIS setting; TIS only truncates above")
            if not 0.0 <= self.threshold_lower < 1.0:
                raise ValueError(f"threshold_lower must lie in [0, 1), got {self.threshold_lower}")

    @property
    def lower(self) -> float:
        """The MIS lower mask bound in effect."""
        return 1.0 / self.threshold if self.threshold_lower is None else self.threshold_lower

    @classmethod
    def grpo_mis(cls, threshold: float = 2.0) -> RolloutCorrectionConfig:
        """GRPO-MIS: sequence-level masked importance sampling."""
        return cls(mode="mis", level="sequence", threshold=threshold)


@dataclass(frozen=True)
class RolloutCorrection:
    """Per-token importance weights and keep mask from :func:`rollout_correction`."""

    weights: torch.Tensor
    """(B, L) detached weights multiplying each token's loss (0 where not kept)."""
    mask: torch.Tensor
    """(B, L) the input mask minus the tokens MIS rejected (equal to it for TIS)."""
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class SurrogateTerms:
    """The per-token pieces of the clipped surrogate (all (B, L))."""

    loss_mat: torch.Tensor
    logratio: torch.Tensor
    ratio: torch.Tensor
    clipped: torch.Tensor
    """bool: the clipped branch is taken (its gradient is 0 there)."""
    dual_clipped: torch.Tensor
    """bool: the dual-clip cap -A * c is taken (A < 0, ratio > c)."""


def agg_loss(
    loss_mat: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    *,
    denominator: float | None = None,
    scale_factor: float | None = None,
) -> torch.Tensor:
    """Aggregate a (B, L) token-loss matrix over ``mask`` into a scalar (see module docstring).

    ``denominator`` replaces this batch's own count (valid tokens for ``token-mean``, rows with a
    valid token for the sequence modes): a trainer that splits a mini-batch into micro-batches
    passes the whole mini-batch's count, so the micro-batch losses add up to the exact
    mini-batch loss (verl's global token count / global batch size).
    ``scale_factor``: ``seq-mean-token-sum-norm``'s constant (verl's ``loss_scale_factor``;
    None: the mask's width ``L``, verl's default); ignored by the other modes.
    """
    _check_agg_mode(mode)
    if denominator is not None and not denominator > 0:
        raise ValueError(f"denominator must be > 0 (or None), got {denominator}")
    if scale_factor is not None and not scale_factor > 0:
        raise ValueError(f"scale_factor must be > 0 (or None), got {scale_factor}")
    mask = mask.to(loss_mat.dtype)
    masked = loss_mat * mask
    if mode == "token-mean":
        count = mask.sum().clamp(min=1.0) if denominator is None else denominator
        return masked.sum() / count
    row_tokens = mask.sum(dim=-1)
    row_sum = masked.sum(dim=-1)
    if mode == "seq-mean-token-mean":
        row_sum = row_sum / row_tokens.clamp(min=1.0)
    n_rows = (row_tokens > 0).sum().clamp(min=1) if denominator is None else denominator
    loss = row_sum.sum() / n_rows
    if mode == "seq-mean-token-sum-norm":
        loss = loss / (mask.shape[-1] if scale_factor is None else scale_factor)
    return loss


def agg_denominator(mask: torch.Tensor, mode: str) -> float:
    """What :func:`agg_loss` divides by for ``mask`` (B, L): valid tokens or non-empty rows."""
    _check_agg_mode(mode)
    if mode == "token-mean":
        return float((mask > 0).sum())
    return float(((mask > 0).sum(dim=-1) > 0).sum())


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``values`` where ``mask`` is set (0 when nothing is)."""
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


def surrogate_terms(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    config: PolicyLossConfig,
) -> SurrogateTerms:
    """The clipped (and dual-clipped) surrogate per token, unaggregated."""
    logratio = torch.clamp(log_prob - old_log_prob, -LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    ratio = torch.exp(logratio)
    pg_loss1 = -advantages * ratio
    pg_loss2 = -advantages * torch.clamp(ratio, 1.0 - config.clip_low, 1.0 + config.clip_high)
    pg_loss = torch.maximum(pg_loss1, pg_loss2)
    clipped = pg_loss2 > pg_loss1
    if config.dual_clip is None:
        dual_clipped = torch.zeros_like(clipped)
    else:
        pg_loss3 = -advantages * config.dual_clip
        dual_clipped = (advantages < 0) & (pg_loss > pg_loss3)
        pg_loss = torch.where(dual_clipped, pg_loss3, pg_loss)
    return SurrogateTerms(pg_loss, logratio, ratio, clipped, dual_clipped)


def surrogate_metrics(terms: SurrogateTerms, mask: torch.Tensor, prefix: str) -> dict[str, float]:
    """clipfrac, clipfrac_lower, kl (k1), approx_kl (k3) and ratio statistics over ``mask``."""
    with torch.no_grad():
        valid = mask > 0
        ratio = terms.ratio.detach()
        logratio = terms.logratio.detach()
        any_valid = bool(valid.any())
        metrics = {
            "clipfrac": masked_mean(terms.clipped.to(ratio.dtype), mask),
            "clipfrac_lower": masked_mean(terms.dual_clipped.to(ratio.dtype), mask),
            "kl": masked_mean(-logratio, mask),
            "approx_kl": masked_mean((ratio - 1.0) - logratio, mask),
            "ratio_mean": masked_mean(ratio, mask) if any_valid else ratio.new_tensor(1.0),
            "ratio_min": ratio[valid].min() if any_valid else ratio.new_tensor(1.0),
            "ratio_max": ratio[valid].max() if any_valid else ratio.new_tensor(1.0),
        }
        return {f"{prefix}/{key}": float(value) for key, value in metrics.items()}


def policy_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    config: PolicyLossConfig,
    *,
    correction: RolloutCorrection | None = None,
    prefix: str = "actor",
    denominator: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The clipped-surrogate policy loss, aggregated with ``config.agg_mode``.

    ``correction`` (from :func:`rollout_correction`) multiplies each token's loss by its
    importance weight and drops the tokens MIS rejected from the mask. Metrics use ``prefix``.
    ``denominator``: see :func:`agg_loss` (count it on the mask after the correction).
    """
    terms = surrogate_terms(log_prob, old_log_prob, advantages, config)
    loss_mat = terms.loss_mat
    if correction is not None:
        loss_mat = loss_mat * correction.weights
        mask = mask * correction.mask
    loss = agg_loss(
        loss_mat,
        mask,
        config.agg_mode,
        denominator=denominator,
        scale_factor=config.loss_scale_factor,
    )
    metrics = surrogate_metrics(terms, mask, prefix)
    metrics[f"{prefix}/pg_loss"] = float(loss.detach())
    return loss, metrics


def rollout_correction(
    old_log_prob: torch.Tensor,
    rollout_log_prob: torch.Tensor,
    mask: torch.Tensor,
    config: RolloutCorrectionConfig,
) -> RolloutCorrection:
    """Importance weights pi_old / pi_rollout, truncated (TIS) or masked (MIS); all (B, L)."""
    with torch.no_grad():
        mask = mask.to(old_log_prob.dtype)
        token_log_w = (old_log_prob - rollout_log_prob) * mask
        if config.level == "token":
            log_w = token_log_w
        else:
            log_w = token_log_w.sum(dim=-1, keepdim=True).expand_as(token_log_w)
        raw = torch.exp(torch.clamp(log_w, -LOG_RATIO_BOUND, LOG_RATIO_BOUND))
        valid = mask > 0
        metrics = {
            "rollout/weight_mean": float(masked_mean(raw, mask)),
            "rollout/kl": float(masked_mean(-token_log_w, mask)),
        }
        if config.mode == "tis":
            weights = torch.clamp(raw, max=config.threshold) * mask
            keep = mask
            metrics["rollout/truncated_frac"] = float(masked_mean((raw > config.threshold), mask))
        else:
            outside = (raw > config.threshold) | (raw < config.lower)
            keep = mask * (~outside).to(mask.dtype)
            weights = raw * keep
            metrics["rollout/rejected_frac"] = float(masked_mean(outside, mask))
            rows = valid.any(dim=-1)
            rejected_rows = (outside & valid).any(dim=-1) & rows
            metrics["rollout/rejected_seq_frac"] = float(
                rejected_rows.sum() / rows.sum().clamp(min=1)
            )
        return RolloutCorrection(weights=weights, mask=keep, metrics=metrics)


# --------------------------------------------------------------------------------------------
# DAPO batch-level helpers
# --------------------------------------------------------------------------------------------
def dynamic_sampling_mask(
    rewards: torch.Tensor | Sequence[float], group_index: Sequence[Hashable]
) -> tuple[torch.Tensor, dict[str, float]]:
    """DAPO dynamic sampling: keep (B,) bool, False for every row of a group whose rewards are
    all equal (all solved or all failed: no GRPO signal). Give each row its episode's reward.

    The trainer keeps sampling groups until it has enough kept ones; this only says which.
    """
    values = as_numpy(rewards).reshape(-1)
    check_length("group_index", group_index, len(values))
    groups, n_groups = factorize(group_index)
    high = np.full(n_groups, -np.inf)
    low = np.full(n_groups, np.inf)
    np.maximum.at(high, groups, values)
    np.minimum.at(low, groups, values)
    informative = high > low
    keep = informative[groups]
    metrics = {
        "dapo/kept_group_frac": float(informative.mean()) if n_groups else 0.0,
        "dapo/kept_row_frac": float(keep.mean()) if len(keep) else 0.0,
    }
    return torch.as_tensor(keep), metrics


def overlong_penalty(
    response_lengths: torch.Tensor,
    *,
    max_length: int,
    buffer_length: int,
    penalty_factor: float = 1.0,
) -> torch.Tensor:
    """DAPO's soft overlong punishment (B,), added to the reward.

    0 up to ``max_length - buffer_length`` tokens, then falling linearly to ``-penalty_factor``
    at ``max_length``, and ``-penalty_factor`` beyond.
    """
    if not 0 < buffer_length <= max_length:
        raise ValueError(
            f"need 0 < buffer_length <= max_length, got buffer_length={buffer_length}, "
            f"max_length={max_length}"
        )
    lengths = torch.as_tensor(response_lengths, dtype=torch.float32)
    exceed = lengths - (max_length - buffer_length)
    return torch.clamp(-exceed / buffer_length * penalty_factor, min=-penalty_factor, max=0.0)


def _check_agg_mode(mode: str) -> None:
    if mode not in AGG_MODES:
        raise ValueError(f"unknown aggregation mode {mode!r}; choose from {list(AGG_MODES)}")
