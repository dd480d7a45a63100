"""Prefix-GRPO's objectives (the Prefix-GRPO paper, section 3.3 and appendix 8.1).

Two token groups are trained in one update: the continuation (tokens the student generated
after the replayed cut state, old log-probs from the rollout) and the prefix (the teacher's
assistant tokens inside the canonical prompt, old log-probs cached from the SFT model).

Shapes: B rows; L continuation tokens; W = the widest prefix span; S = the padded length of
the whole sequence (prompt + response) the trainer ran the model on.

Coordinates (where the reference code went wrong)
-------------------------------------------------
A sidecar gives the span [b, e) in *canonical-prompt* coordinates (the prompt's own tokens,
no padding), ``prefix_mask`` over the span and ``assistant_prefix_old_log_probs`` (element j =
log p(token b + j) under the SFT model). In a left-padded batch canonical token u of row i sits
at position ``offset_i + u``, ``offset_i = first_token_offsets(attention_mask)[i]``. Our
log-probs are aligned with the tokens: ``token_log_probs[i, s] = log pi(input_ids[i, s] |
input_ids[i, :s])`` (column 0 has no predecessor and is never gathered; see
:func:`sequence_log_probs`). A trainer whose log-probs are shifted by one (verl's column s holds
token s + 1) pads one column on the left first. The reference code gathered the span without
the padding offset, so its prefix loss read padding and neighbouring tokens; with the policy
equal to the SFT model our prefix ratio is 1 and the prefix KL 0 (tested).

Objectives (g(r, A; lo, hi): the dual-clipped surrogate of :mod:`agentenvs.train.losses`)
-----------------------------------------------------------------------------------------
- split (main): L = L_cont + weight * L_pre, L_cont = agg(g(r_cont, A_cont; policy clip)),
  L_pre = agg(g(r_pre, A_pre; prefix clip)) over the prefix mask, r_pre = exp(log pi - l_old);
  each branch aggregated on its own (``policy.agg_mode``).
- joint (ablation): one ``agg_loss`` over each row's concatenated [prefix | continuation] tokens,
  the policy's clip range for both and no prefix weight (as the reference code's joint mode).

Prefix advantage A_pre per row (detached; a = the row's mean continuation advantage)
-----------------------------------------------------------------------------------
- ``cont_abs`` (default): |a|, the continuation-magnitude anchor (eq. 5)
- ``constant``: ``constant`` (1) on every prefix token
- ``cont_pos``: max(a, 0), the positive continuation signal
- ``success``: ``constant`` when the continuation succeeded, else 0
- ``family_lift``: cont_weight * |a| + lift_weight * max(clamp(lift, -lift_clip, lift_clip), 0),
  lift = mean reward of this row's query - mean reward of the raw (no-prefix) query cut from
  the same teacher trajectory (:func:`family_lift`); the reference code's
  ``cont_abs_plus_family_lift_pos``
- ``full_demo``: rows that are full-demo queries (the whole teacher trajectory as the prefix,
  no continuation) get clamp(R_demo - mean R_raw, 0, 1) (:func:`demo_advantage`); other rows |a|

Diagnostics: ``prefix/kl`` = mean(old - new) over prefix tokens, ``prefix/clipfrac``,
``prefix/loss_share`` = |weight * L_pre| / (|weight * L_pre| + |L_cont|) (joint: the prefix
tokens' part of the one loss), ``prefix/token_frac`` = prefix / (prefix + continuation) tokens.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F

from agentenvs.suggestions import did_you_mean
from agentenvs.train._groups import as_numpy, check_length, factorize
from agentenvs.train.losses import (
    PolicyLossConfig,
    RolloutCorrection,
    agg_loss,
    masked_mean,
    policy_loss,
    surrogate_metrics,
    surrogate_terms,
)

__all__ = [
    "PREFIX_ADVANTAGE_MODES",
    "PrefixBatch",
    "PrefixConfig",
    "PrefixSignals",
    "demo_advantage",
    "family_lift",
    "first_token_offsets",
    "gather_prefix_log_probs",
    "prefix_advantages",
    "prefix_grpo_loss",
    "raw_query_mean_reward",
    "sequence_log_probs",
]

PREFIX_ADVANTAGE_MODES = ("cont_abs", "constant", "cont_pos", "success", "family_lift", "full_demo")
# PrefixConfig settings read by only some advantage modes (set elsewhere: an error).
_MODE_SETTINGS = {
    "constant": ("constant", "success"),
    "cont_weight": ("family_lift",),
    "lift_weight": ("family_lift",),
    "lift_clip": ("family_lift",),
}
# PrefixSignals fields each advantage mode needs.
_MODE_SIGNALS = {
    "success": ("success",),
    "family_lift": ("lift",),
    "full_demo": ("demo", "demo_advantage"),
}


@dataclass(frozen=True)
class PrefixConfig:
    """Prefix-GRPO settings (defaults: the paper's main TextCraft run)."""

    objective: Literal["split", "joint"] = "split"
    """``split``: L_cont + weight * L_pre (main); ``joint``: one loss over both token groups."""
    weight: float = 1.0
    """lambda_pre, the prefix-loss weight (split only)."""
    advantage_mode: str = "cont_abs"
    """How A_pre is set; one of PREFIX_ADVANTAGE_MODES (module docstring)."""
    clip_low: float | None = None
    """Prefix clip epsilon_low (split only; None: the policy's)."""
    clip_high: float | None = None
    """Prefix clip epsilon_high (split only; None: the policy's)."""
    constant: float = 1.0
    """The prefix advantage of ``constant`` and of successful rows under ``success``."""
    cont_weight: float = 1.0
    """``family_lift``: weight of |mean continuation advantage|."""
    lift_weight: float = 1.0
    """``family_lift``: weight of the clipped non-negative lift."""
    lift_clip: float = 1.0
    """``family_lift``: the lift is clamped to [-lift_clip, lift_clip] before max(., 0)."""

    def __post_init__(self) -> None:
        if self.objective not in ("split", "joint"):
            raise ValueError(f"objective must be 'split' or 'joint', got {self.objective!r}")
        if self.advantage_mode not in PREFIX_ADVANTAGE_MODES:
            hint = did_you_mean(self.advantage_mode, PREFIX_ADVANTAGE_MODES)
            raise ValueError(
                f"unknown prefix advantage mode {self.advantage_mode!r}; choose from "
                f"{list(PREFIX_ADVANTAGE_MODES)}." + hint
            )
        if self.objective == "joint" and (
            self.weight != 1.0 or self.clip_low is not None or self.clip_high is not None
        ):
            raise ValueError(
                "the joint objective uses the policy's clip range for every token and has no "
                "prefix weight; use objective='split' to set weight, clip_low or clip_high"
            )
        if self.weight < 0:
            raise ValueError(f"weight must be >= 0, got {self.weight}")
        defaults = {f.name: f.default for f in fields(self)}
        for name, modes in _MODE_SETTINGS.items():
            if getattr(self, name) != defaults[name] and self.advantage_mode not in modes:
                raise ValueError(
                    f"{name} is only read by advantage mode(s) {list(modes)}, "
                    f"not by {self.advantage_mode!r}; leave it at its default"
                )

    def prefix_policy(self, policy: PolicyLossConfig) -> PolicyLossConfig:
        """The surrogate settings of the prefix branch: the policy's, with the prefix clip."""
        return replace(
            policy,
            clip_low=policy.clip_low if self.clip_low is None else self.clip_low,
            clip_high=policy.clip_high if self.clip_high is None else self.clip_high,
        )


@dataclass(frozen=True)
class PrefixSignals:
    """Per-row inputs some prefix-advantage modes need (all (B,))."""

    success: torch.Tensor | None = None
    """bool: the continuation rollout succeeded (``success``)."""
    lift: torch.Tensor | None = None
    """The row's family lift (``family_lift``), from :func:`family_lift`."""
    demo: torch.Tensor | None = None
    """bool: the row is a full-demo query (``full_demo``)."""
    demo_advantage: torch.Tensor | None = None
    """clamp(R_demo - mean R_raw, 0, 1) for demo rows (``full_demo``), :func:`demo_advantage`."""


@dataclass(frozen=True)
class PrefixBatch:
    """The sidecars of B rows, padded to width W; a row without a prefix has start == end.

    ``span_start`` / ``span_end`` (B,) long, canonical-prompt coordinates; ``mask`` (B, W), 1 on
    prefix tokens to train, 0 past each row's span; ``old_log_probs`` (B, W), element j the SFT
    log-prob of canonical token span_start + j.
    """

    span_start: torch.Tensor
    span_end: torch.Tensor
    mask: torch.Tensor
    old_log_probs: torch.Tensor

    def __post_init__(self) -> None:
        rows = self.span_start.shape[0]
        if self.span_end.shape != (rows,) or self.span_start.dim() != 1:
            raise ValueError("span_start and span_end must both have shape (B,)")
        if self.mask.dim() != 2 or self.mask.shape[0] != rows:
            raise ValueError(f"mask must have shape (B={rows}, W), got {tuple(self.mask.shape)}")
        if self.old_log_probs.shape != self.mask.shape:
            raise ValueError("old_log_probs must have the same (B, W) shape as mask")
        lengths = self.span_end - self.span_start
        if (self.span_start < 0).any() or (lengths < 0).any():
            raise ValueError("every prefix span needs 0 <= start <= end")
        if rows and int(lengths.max()) > self.mask.shape[1]:
            raise ValueError(f"width W={self.mask.shape[1]} is below the longest span")
        past_span = torch.arange(self.mask.shape[1])[None, :] >= lengths[:, None].cpu()
        if bool((self.mask.cpu().bool() & past_span).any()):
            raise ValueError("prefix mask is set past the end of its span; it must be 0 there")

    def to(self, device: torch.device | str) -> PrefixBatch:
        """The same batch on ``device``."""
        return PrefixBatch(
            self.span_start.to(device),
            self.span_end.to(device),
            self.mask.to(device),
            self.old_log_probs.to(device),
        )

    @classmethod
    def from_sidecars(cls, sidecars: Sequence[Mapping | None]) -> PrefixBatch:
        """Pad sidecar dicts (keys ``assistant_prefix_span`` {start, end}, ``prefix_mask``,
        ``assistant_prefix_old_log_probs``, optional ``prefix_token_count``); None: no prefix."""
        spans, masks, olds = [], [], []
        for row, sidecar in enumerate(sidecars):
            span = None if sidecar is None else sidecar.get("assistant_prefix_span")
            if span is None:
                spans.append((0, 0))
                masks.append([])
                olds.append([])
                continue
            start, end = int(span["start"]), int(span["end"])
            mask = [float(m) for m in sidecar["prefix_mask"]]
            old = [float(v) for v in sidecar["assistant_prefix_old_log_probs"]]
            if len(mask) != end - start or len(old) != end - start:
                raise ValueError(
                    f"row {row}: prefix_mask ({len(mask)}) and assistant_prefix_old_log_probs "
                    f"({len(old)}) must both have end - start = {end - start} entries"
                )
            count = sidecar.get("prefix_token_count")
            if count is not None and int(count) != int(sum(mask)):
                raise ValueError(f"row {row}: prefix_token_count {count} != sum(prefix_mask)")
            spans.append((start, end))
            masks.append(mask)
            olds.append(old)
        width = max((len(m) for m in masks), default=0)
        return cls(
            span_start=torch.tensor([s for s, _ in spans], dtype=torch.long),
            span_end=torch.tensor([e for _, e in spans], dtype=torch.long),
            mask=_pad_rows(masks, width),
            old_log_probs=_pad_rows(olds, width),
        )


def first_token_offsets(attention_mask: torch.Tensor) -> torch.Tensor:
    """(B,) the position of each row's first real token (the left-padding width).

    Assumes each row's real prompt tokens are contiguous (left- or right-padded prompts).
    """
    real = attention_mask > 0
    if not bool(real.any(dim=-1).all()):
        raise ValueError("a row of attention_mask has no real token; drop empty rows first")
    return real.to(torch.int64).argmax(dim=-1)


def sequence_log_probs(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """(B, S) log pi(input_ids[:, s] | input_ids[:, :s]) from (B, S, V) logits; column 0 is 0."""
    log_probs = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    picked = log_probs.gather(-1, input_ids[:, 1:, None]).squeeze(-1)
    return F.pad(picked, (1, 0))


def gather_prefix_log_probs(
    token_log_probs: torch.Tensor, prefix: PrefixBatch, offsets: torch.Tensor
) -> torch.Tensor:
    """(B, W) current log-probs of the prefix tokens, 0 past each span (keeps the gradient).

    ``token_log_probs`` (B, S) is aligned with the tokens (module docstring); canonical token
    span_start + j of row i is read at ``offsets[i] + span_start[i] + j``.
    """
    rows, seq_len = token_log_probs.shape
    device = token_log_probs.device
    width = prefix.mask.shape[1]
    step = torch.arange(width, device=device)[None, :]
    start = (offsets.to(device) + prefix.span_start.to(device))[:, None]
    positions = start + step
    in_span = step < (prefix.span_end - prefix.span_start).to(device)[:, None]
    outside = in_span & ((positions < 1) | (positions >= seq_len))
    if bool(outside.any()):
        bad = sorted(set(torch.nonzero(outside)[:, 0].tolist()))
        raise ValueError(
            f"rows {bad}: prefix span plus padding offset falls outside positions 1..{seq_len - 1}"
            " of the sequence; check the sidecar span and the attention mask"
        )
    gathered = token_log_probs.gather(1, positions.clamp(0, seq_len - 1))
    return torch.where(in_span, gathered, torch.zeros_like(gathered))


def prefix_advantages(
    cont_advantages: torch.Tensor,
    cont_mask: torch.Tensor,
    config: PrefixConfig,
    signals: PrefixSignals | None = None,
) -> torch.Tensor:
    """(B,) A_pre per row (module docstring) from (B, L) continuation advantages and mask."""
    signals = PrefixSignals() if signals is None else signals
    needed = _MODE_SIGNALS.get(config.advantage_mode, ())
    missing = [name for name in needed if getattr(signals, name) is None]
    if missing:
        raise ValueError(
            f"prefix advantage mode {config.advantage_mode!r} needs PrefixSignals field(s) "
            f"{missing} (one value per row)"
        )
    with torch.no_grad():
        mean_adv = masked_row_mean(cont_advantages, cont_mask)
        mode = config.advantage_mode
        if mode == "cont_abs":
            return mean_adv.abs()
        if mode == "constant":
            return torch.full_like(mean_adv, config.constant)
        if mode == "cont_pos":
            return mean_adv.clamp(min=0.0)
        if mode == "success":
            won = _row_signal(signals.success, mean_adv).bool()
            return torch.where(won, torch.full_like(mean_adv, config.constant), 0.0 * mean_adv)
        if mode == "family_lift":
            lift = _row_signal(signals.lift, mean_adv)
            lift = lift.clamp(-config.lift_clip, config.lift_clip).clamp(min=0.0)
            return config.cont_weight * mean_adv.abs() + config.lift_weight * lift
        demo = _row_signal(signals.demo, mean_adv).bool()
        return torch.where(demo, _row_signal(signals.demo_advantage, mean_adv), mean_adv.abs())


def masked_row_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B,) each row's mean of ``values`` over ``mask`` (0 for a row with no valid token)."""
    mask = mask.to(values.dtype)
    return (values * mask).sum(dim=-1) / mask.sum(dim=-1).clamp(min=1.0)


def raw_query_mean_reward(
    rewards: torch.Tensor | Sequence[float],
    family_index: Sequence[Hashable],
    is_raw: torch.Tensor | Sequence[bool],
) -> torch.Tensor:
    """(B,) mean R_raw: the mean reward of the raw (no-prefix) query rows of each row's family
    (a family = the queries cut from one teacher trajectory)."""
    values = as_numpy(rewards).reshape(-1)
    raw = as_numpy(is_raw, dtype=bool).reshape(-1)
    check_length("family_index", family_index, len(values))
    check_length("is_raw", raw, len(values))
    families, n_families = factorize(family_index)
    raw_count = np.bincount(families[raw], minlength=n_families)
    if (raw_count[families] == 0).any():
        lacking = sorted({str(family_index[i]) for i in np.flatnonzero(raw_count[families] == 0)})
        raise ValueError(f"families {lacking} have no raw (no-prefix) query rows in the batch")
    raw_sum = np.bincount(families[raw], weights=values[raw], minlength=n_families)
    return torch.as_tensor((raw_sum / np.maximum(raw_count, 1))[families], dtype=torch.float32)


def family_lift(
    rewards: torch.Tensor | Sequence[float],
    query_index: Sequence[Hashable],
    family_index: Sequence[Hashable],
    is_raw: torch.Tensor | Sequence[bool],
) -> torch.Tensor:
    """(B,) lift = mean reward of the row's query - mean reward of its family's raw query
    (0 on raw rows). ``query_index`` names the query (prompt) each row was sampled from."""
    values = as_numpy(rewards).reshape(-1)
    raw = as_numpy(is_raw, dtype=bool).reshape(-1)
    check_length("query_index", query_index, len(values))
    queries, n_queries = factorize(zip(family_index, query_index, strict=True))
    query_mean = np.bincount(queries, weights=values, minlength=n_queries) / np.bincount(queries)
    raw_mean = raw_query_mean_reward(values, family_index, raw).numpy().astype(np.float64)
    lift = np.where(raw, 0.0, query_mean[queries] - raw_mean)
    return torch.as_tensor(lift, dtype=torch.float32)


def demo_advantage(
    demo_reward: torch.Tensor | Sequence[float], raw_mean_reward: torch.Tensor | Sequence[float]
) -> torch.Tensor:
    """(B,) the full-demo query's advantage clamp(R_demo - mean R_raw, 0, 1)."""
    demo = torch.as_tensor(demo_reward, dtype=torch.float32)
    raw = torch.as_tensor(raw_mean_reward, dtype=torch.float32)
    return torch.clamp(demo - raw, 0.0, 1.0)


def prefix_grpo_loss(
    *,
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    prefix_log_prob: torch.Tensor,
    prefix: PrefixBatch,
    prefix_advantage: torch.Tensor,
    policy: PolicyLossConfig,
    config: PrefixConfig,
    correction: RolloutCorrection | None = None,
    denominator: float | None = None,
    prefix_denominator: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Prefix-GRPO's split or joint objective and its diagnostics.

    Continuation: ``log_prob`` / ``old_log_prob`` / ``advantages`` / ``response_mask`` (B, L)
    (``correction`` applies to these tokens only). Prefix: ``prefix_log_prob`` (B, W) from
    :func:`gather_prefix_log_probs`, old log-probs and mask from ``prefix``, and
    ``prefix_advantage`` (B,) from :func:`prefix_advantages`.

    ``denominator`` / ``prefix_denominator`` (see :func:`agentenvs.train.losses.agg_loss`): the
    whole mini-batch's count for the continuation and prefix branches when this call sees one
    micro-batch of it (split); the joint objective divides by ``denominator``, which then counts
    both token groups (prefix and continuation) and ``prefix_denominator`` must be None.
    """
    _check_prefix_inputs(prefix_log_prob, prefix, prefix_advantage, config, prefix_denominator)
    dtype = prefix_log_prob.dtype
    pre_mask = prefix.mask.to(device=prefix_log_prob.device, dtype=dtype)
    pre_old = prefix.old_log_probs.to(device=prefix_log_prob.device, dtype=dtype)
    pre_adv = prefix_advantage.detach().to(dtype)[:, None].expand_as(prefix_log_prob)
    cont_mask = response_mask if correction is None else response_mask * correction.mask
    terms = dict(
        log_prob=log_prob,
        old_log_prob=old_log_prob,
        advantages=advantages,
        response_mask=response_mask,
        prefix_log_prob=prefix_log_prob,
        pre_old=pre_old,
        pre_adv=pre_adv,
        pre_mask=pre_mask,
        policy=policy,
        correction=correction,
        denominator=denominator,
    )
    if config.objective == "split":
        loss, metrics, pre_part, cont_part = _split_loss(
            **terms, config=config, prefix_denominator=prefix_denominator
        )
    else:
        loss, metrics, pre_part = _joint_loss(**terms)
        cont_part = float(loss.detach()) - pre_part
    n_pre, n_cont = float(pre_mask.sum()), float((cont_mask > 0).sum())
    metrics.update(
        {
            "prefix/loss_share": abs(pre_part) / max(abs(pre_part) + abs(cont_part), 1e-12),
            "prefix/token_frac": n_pre / max(n_pre + n_cont, 1.0),
            "prefix/token_count": n_pre,
            "prefix/advantage_mean": float(masked_mean(pre_adv, pre_mask)),
            "actor/total_loss": float(loss.detach()),
        }
    )
    return loss, metrics


def _check_prefix_inputs(
    prefix_log_prob: torch.Tensor,
    prefix: PrefixBatch,
    prefix_advantage: torch.Tensor,
    config: PrefixConfig,
    prefix_denominator: float | None,
) -> None:
    """The prefix tensors' shapes agree, and the joint objective has one denominator."""
    if config.objective == "joint" and prefix_denominator is not None:
        raise ValueError(
            "the joint objective has one denominator (prefix + continuation tokens); "
            "pass it as denominator= and leave prefix_denominator=None"
        )
    if prefix_log_prob.shape != prefix.mask.shape or prefix_advantage.shape != (
        prefix.mask.shape[0],
    ):
        raise ValueError(
            f"prefix_log_prob must be (B, W) = {tuple(prefix.mask.shape)} and prefix_advantage "
            f"(B,); got {tuple(prefix_log_prob.shape)} and {tuple(prefix_advantage.shape)}"
        )


def _split_loss(
    *,
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    prefix_log_prob: torch.Tensor,
    pre_old: torch.Tensor,
    pre_adv: torch.Tensor,
    pre_mask: torch.Tensor,
    policy: PolicyLossConfig,
    correction: RolloutCorrection | None,
    denominator: float | None,
    config: PrefixConfig,
    prefix_denominator: float | None,
) -> tuple[torch.Tensor, dict[str, float], float, float]:
    """L_cont + weight * L_pre, each aggregated on its own; also the two branches' parts
    (weight * L_pre, L_cont)."""
    cont_loss, metrics = policy_loss(
        log_prob,
        old_log_prob,
        advantages,
        response_mask,
        policy,
        correction=correction,
        denominator=denominator,
    )
    pre_loss, pre_metrics = policy_loss(
        prefix_log_prob,
        pre_old,
        pre_adv,
        pre_mask,
        config.prefix_policy(policy),
        prefix="prefix",
        denominator=prefix_denominator,
    )
    metrics.update(pre_metrics)
    loss = cont_loss + config.weight * pre_loss
    return loss, metrics, config.weight * float(pre_loss.detach()), float(cont_loss.detach())


def _joint_loss(
    *,
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    prefix_log_prob: torch.Tensor,
    pre_old: torch.Tensor,
    pre_adv: torch.Tensor,
    pre_mask: torch.Tensor,
    policy: PolicyLossConfig,
    correction: RolloutCorrection | None,
    denominator: float | None = None,
) -> tuple[torch.Tensor, dict[str, float], float]:
    """One agg_loss over [prefix | continuation] tokens; also the prefix tokens' part of it."""
    pre_terms = surrogate_terms(prefix_log_prob, pre_old, pre_adv, policy)
    cont_terms = surrogate_terms(log_prob, old_log_prob, advantages, policy)
    cont_mat, cont_mask = cont_terms.loss_mat, response_mask.to(pre_mask.dtype)
    if correction is not None:
        cont_mat, cont_mask = cont_mat * correction.weights, cont_mask * correction.mask
    joint_mask = torch.cat([pre_mask, cont_mask], dim=1)
    loss = agg_loss(
        torch.cat([pre_terms.loss_mat, cont_mat], dim=1),
        joint_mask,
        policy.agg_mode,
        denominator=denominator,
    )
    with torch.no_grad():  # agg_loss is linear in the loss matrix for a fixed mask
        pre_only = torch.cat([pre_terms.loss_mat, torch.zeros_like(cont_mat)], dim=1)
        pre_part = float(agg_loss(pre_only, joint_mask, policy.agg_mode, denominator=denominator))
    metrics = surrogate_metrics(cont_terms, cont_mask, "actor")
    metrics.update(surrogate_metrics(pre_terms, pre_mask, "prefix"))
    metrics["actor/pg_loss"] = float(loss.detach()) - pre_part
    metrics["prefix/pg_loss"] = pre_part
    return loss, metrics, pre_part


def _row_signal(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    values = torch.as_tensor(values, device=like.device)
    if values.shape != like.shape:
        raise ValueError(f"a PrefixSignals field must have shape {tuple(like.shape)} (B,)")
    return values if values.dtype == torch.bool else values.to(like.dtype)


def _pad_rows(rows: list[list[float]], width: int) -> torch.Tensor:
    """(len(rows), width) float tensor, each row right-padded with 0."""
    out = torch.zeros(len(rows), width)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row)
    return out
