"""Prefix-GRPO's objective as a verl policy loss (``actor.policy_loss.loss_mode=prefix_grpo``).

verl computes log-probs over a sample's *response* tokens only, so here the teacher's prefix
(the assistant turns replayed before the cut state) is part of the response: a cut-state sample's
response is [teacher reply, observation, ..., teacher reply, observation, student
continuation...], with ``response_mask`` 1 on every reply token, teacher's and student's. Two
extra (B, L) tensors in the batch, aligned with ``responses``, say which tokens are the prefix:

* ``agentenvs_prefix_mask``: 1 on the teacher's reply tokens (the prefix to train);
* ``agentenvs_prefix_old_log_probs``: their log-probs under the SFT model, l_old of the prefix
  ratio (when absent, verl's ``ref_log_prob`` is used: verl's reference policy is the initial
  model, which in Prefix-GRPO is the SFT model).

The loss is :func:`agentenvs.train.prefix_loss.prefix_grpo_loss` (split objective by default:
clipped continuation loss + weight * clipped prefix loss with A_pre from the row's continuation
advantages, ``cont_abs``), on continuation tokens = ``response_mask`` and not prefix, with verl's
``clip_ratio_low`` / ``clip_ratio_high`` / ``clip_ratio_c`` and ``loss_agg_mode``; prefix settings
(:class:`agentenvs.train.prefix_loss.PrefixConfig`) from :func:`configure`. Rows without a prefix
get the plain clipped loss (our ``policy_loss``, which agrees with verl's ``vanilla``).

verl's ``ppo_loss`` hands a policy loss only (old_log_prob, log_prob, advantages,
response_mask, loss_agg_mode, config, rollout_is_weights), so :func:`install` wraps it (in
``verl.workers.utils.losses`` and ``verl.workers.engine_workers``, which imported it by name) to
pass the two prefix tensors along. Normalisation: each branch is aggregated over the micro-batch
it sees; under verl's global-batch normalisation (``dp_size > 1`` or global token counts given)
the result is scaled by the micro-batch's share of the global count, which is exact when the
prefix and continuation token shares are the same in every micro-batch (an approximation
otherwise, said plainly).
"""

from __future__ import annotations

import contextvars
from typing import Any

import torch

from agentenvs.train.losses import PolicyLossConfig, RolloutCorrection
from agentenvs.train.prefix_loss import (
    PrefixBatch,
    PrefixConfig,
    prefix_advantages,
    prefix_grpo_loss,
)

__all__ = [
    "LOSS_MODE",
    "PREFIX_KEYS",
    "add_prefix_mask",
    "configure",
    "install",
    "prefix_grpo_policy_loss",
]

LOSS_MODE = "prefix_grpo"
PREFIX_KEYS = ("agentenvs_prefix_mask", "agentenvs_prefix_old_log_probs")
_CONFIG = {"prefix": PrefixConfig()}
_PREFIX: contextvars.ContextVar[dict[str, torch.Tensor] | None] = contextvars.ContextVar(
    "agentenvs_prefix", default=None
)


def configure(**settings: Any) -> None:
    """Prefix-GRPO's settings (``PrefixConfig`` fields: objective, weight, advantage_mode,
    clip_low, clip_high, ...); no argument restores the paper's defaults."""
    _CONFIG["prefix"] = PrefixConfig(**settings)


def _policy_config(config: Any, loss_agg_mode: str) -> PolicyLossConfig:
    def get(name: str, default: float) -> float:
        value = config.get(name, None) if hasattr(config, "get") else getattr(config, name, None)
        return default if value is None else float(value)

    clip = get("clip_ratio", 0.2)
    return PolicyLossConfig(
        clip_low=get("clip_ratio_low", clip),
        clip_high=get("clip_ratio_high", clip),
        dual_clip=get("clip_ratio_c", 3.0),
        agg_mode=loss_agg_mode,
    )


def _global_scale(config: Any, mask: torch.Tensor, mode: str) -> float:
    """The micro-batch's share of verl's global count (1 when verl gives none)."""
    info = getattr(config, "global_batch_info", None) or {}
    dp = int(info.get("dp_size") or 1)
    if mode == "token-mean" and info.get("batch_num_tokens") is not None:
        return float(mask.sum()) / float(info["batch_num_tokens"]) * dp
    if mode != "token-mean" and info.get("global_batch_size") is not None:
        return float((mask.sum(-1) > 0).sum()) / float(info["global_batch_size"]) * dp
    return float(dp) if dp > 1 else 1.0


def prefix_grpo_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
    prefix_mask: torch.Tensor | None = None,
    prefix_old_log_probs: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """verl's policy-loss signature; the prefix tensors come as arguments or from the
    :func:`install` wrapper of verl's ``ppo_loss``."""
    if prefix_mask is None:
        passed = _PREFIX.get() or {}
        prefix_mask = passed.get("mask")
        prefix_old_log_probs = passed.get("old_log_probs")
    valid = response_mask.bool()
    if prefix_mask is None:
        prefix_mask = torch.zeros_like(valid)
    prefix_mask = prefix_mask.bool() & valid
    if prefix_old_log_probs is None:
        if bool(prefix_mask.any()):
            raise ValueError(
                "prefix_grpo: the batch has agentenvs_prefix_mask but neither "
                "agentenvs_prefix_old_log_probs nor ref_log_prob (the SFT model's log-probs)"
            )
        prefix_old_log_probs = torch.zeros_like(log_prob)
    cont_mask = valid & ~prefix_mask
    prefix_config = _CONFIG["prefix"]
    policy = _policy_config(config, loss_agg_mode)
    rows, width = prefix_mask.shape
    positions = torch.arange(width, device=prefix_mask.device).expand(rows, width)
    span_end = torch.where(prefix_mask, positions + 1, 0).amax(dim=1)
    prefix = PrefixBatch(
        span_start=torch.zeros(rows, dtype=torch.long, device=prefix_mask.device),
        span_end=span_end.long(),
        mask=prefix_mask.float(),
        old_log_probs=prefix_old_log_probs.detach(),
    )
    correction = None
    if rollout_is_weights is not None:
        correction = RolloutCorrection(rollout_is_weights.detach(), cont_mask.float())
    loss, metrics = prefix_grpo_loss(
        log_prob=log_prob,
        old_log_prob=old_log_prob,
        advantages=advantages,
        response_mask=cont_mask.float(),
        prefix_log_prob=log_prob,
        prefix=prefix,
        prefix_advantage=prefix_advantages(advantages, cont_mask.float(), prefix_config),
        policy=policy,
        config=prefix_config,
        correction=correction,
    )
    return loss * _global_scale(config, valid, loss_agg_mode), metrics


def add_prefix_mask(data: Any) -> None:
    """Put ``agentenvs_prefix_mask`` (B, L) in a ``DataProto``'s tensor batch from the agent
    loop's ``agentenvs_prefix_spans`` (non-tensor, one list of spans per row); nothing when the
    batch has no spans. The :mod:`agentenvs.integrations.verl.estimators` wrapper of verl's
    ``compute_advantage`` calls it, so the mask travels with the batch to the actor."""
    spans = data.non_tensor_batch.get("agentenvs_prefix_spans")
    if spans is None:
        return
    response_mask = data.batch["response_mask"]
    mask = torch.zeros_like(response_mask, dtype=torch.long)
    for row, row_spans in enumerate(spans):
        for start, end in row_spans or []:
            mask[row, int(start) : int(end)] = 1
    data.batch[PREFIX_KEYS[0]] = mask * (response_mask > 0).long()


def install() -> None:
    """Register ``prefix_grpo`` in verl's policy-loss registry and pass the prefix tensors to
    it through verl's ``ppo_loss`` (idempotent)."""
    import importlib

    from verl.trainer.ppo import core_algos

    if core_algos.POLICY_LOSS_REGISTRY.get(LOSS_MODE) is not prefix_grpo_policy_loss:
        core_algos.register_policy_loss(LOSS_MODE)(prefix_grpo_policy_loss)
    for module_name in ("verl.workers.utils.losses", "verl.workers.engine_workers"):
        try:
            module = importlib.import_module(module_name)
        except ImportError:  # engine_workers needs a full (GPU) install of verl's engines
            continue
        original = getattr(module, "ppo_loss", None)
        if original is None or getattr(original, "_agentenvs_wrapped", False):
            continue
        module.ppo_loss = _wrap_ppo_loss(original)


def _wrap_ppo_loss(original):
    def ppo_loss(config, model_output, data, dp_group=None):
        if PREFIX_KEYS[0] not in data.keys():
            return original(config, model_output, data, dp_group)
        old_key = PREFIX_KEYS[1] if PREFIX_KEYS[1] in data.keys() else "ref_log_prob"
        keys = [PREFIX_KEYS[0]] + ([old_key] if old_key in data.keys() else [])
        padded = data.select(*keys).to_padded_tensor()
        token = _PREFIX.set({"mask": padded[keys[0]], "old_log_probs": padded.get(old_key, None)})
        try:
            return original(config, model_output, data, dp_group)
        finally:
            _PREFIX.reset(token)

    ppo_loss._agentenvs_wrapped = True  # type: ignore[attr-defined]
    ppo_loss.__wrapped__ = original  # type: ignore[attr-defined]
    return ppo_loss
