"""The policy losses by name, one signature: an algorithm names its loss, the update calls it.

Like the advantage estimators (:mod:`agentenvs.train.advantages`), each loss is a pure function
registered under a name (duplicates rejected), and the optimizer step only calls
``get_policy_loss(name)(inputs, policy, prefix)``; the inputs a loss needs beyond the reply
tokens (Prefix-GRPO's prefix tokens and signals) are typed fields of :class:`LossInputs`, not
branches in the trainer.

=================  =============================================================================
``clipped``        the clipped surrogate (dual clip, rollout correction) over the reply tokens:
                   :func:`agentenvs.train.losses.policy_loss` (verl's ``vanilla``)
``prefix_grpo``    Prefix-GRPO's split or joint objective over the reply and the teacher's prefix
                   tokens: :func:`agentenvs.train.prefix_loss.prefix_grpo_loss`; a micro-batch with
                   no prefix row takes the clipped loss
=================  =============================================================================

Every loss returns ``(loss, metrics)`` with ``actor/total_loss`` among the metrics.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from agentenvs.suggestions import did_you_mean
from agentenvs.train.losses import PolicyLossConfig, RolloutCorrection, policy_loss
from agentenvs.train.prefix_loss import (
    PrefixBatch,
    PrefixConfig,
    PrefixSignals,
    prefix_advantages,
    prefix_grpo_loss,
)

__all__ = [
    "LossInputs",
    "PolicyLoss",
    "get_policy_loss",
    "policy_loss_names",
    "register_policy_loss",
]


@dataclass(frozen=True)
class LossInputs:
    """One micro-batch of a loss: B rows, L reply tokens, W the widest prefix span.

    ``log_prob`` (B, L) carries the gradient; ``old_log_prob``, ``advantages``,
    ``response_mask`` (B, L) are data. ``denominator`` / ``prefix_denominator``: the whole
    mini-batch's counts (:func:`agentenvs.train.losses.agg_loss`). The prefix fields are None
    when no row of the micro-batch has a prefix."""

    log_prob: torch.Tensor
    old_log_prob: torch.Tensor
    advantages: torch.Tensor
    response_mask: torch.Tensor
    correction: RolloutCorrection | None = None
    denominator: float | None = None
    prefix_log_prob: torch.Tensor | None = None
    """(B, W) the current log-probs of the prefix tokens."""
    prefix: PrefixBatch | None = None
    prefix_signals: PrefixSignals | None = None
    """Per-row inputs of the prefix advantage mode (success, lift)."""
    prefix_denominator: float | None = None


LossFn = Callable[
    [LossInputs, PolicyLossConfig, "PrefixConfig | None"], "tuple[torch.Tensor, dict[str, float]]"
]


@dataclass(frozen=True)
class PolicyLoss:
    """A registered loss: call it as ``loss(inputs, policy, prefix)``. ``takes_prefix``: it
    trains the prefix tokens and needs a :class:`~agentenvs.train.prefix_loss.PrefixConfig`
    (the others take None)."""

    name: str
    fn: LossFn
    takes_prefix: bool

    def check(self, prefix: PrefixConfig | None) -> None:
        """A prefix config exactly when the loss trains a prefix."""
        if self.takes_prefix and prefix is None:
            raise ValueError(f"policy loss {self.name!r} needs a PrefixConfig")
        if not self.takes_prefix and prefix is not None:
            raise ValueError(
                f"policy loss {self.name!r} has no prefix branch; a PrefixConfig goes with "
                f"{[n for n in policy_loss_names() if _REGISTRY[n].takes_prefix]}"
            )

    def __call__(
        self, inputs: LossInputs, policy: PolicyLossConfig, prefix: PrefixConfig | None = None
    ) -> tuple[torch.Tensor, dict[str, float]]:
        self.check(prefix)
        return self.fn(inputs, policy, prefix)


_REGISTRY: dict[str, PolicyLoss] = {}


def register_policy_loss(name: str, *, takes_prefix: bool = False) -> Callable[[LossFn], LossFn]:
    """Register ``fn(inputs, policy, prefix) -> (loss, metrics)`` under ``name`` (duplicates
    rejected)."""

    def decorator(fn: LossFn) -> LossFn:
        if name in _REGISTRY:
            raise ValueError(f"policy loss {name!r} is already registered")
        _REGISTRY[name] = PolicyLoss(name, fn, takes_prefix)
        return fn

    return decorator


def get_policy_loss(name: str) -> PolicyLoss:
    """The loss registered as ``name``; an unknown name says the valid ones."""
    try:
        return _REGISTRY[name]
    except KeyError:
        hint = did_you_mean(name, _REGISTRY)
        raise ValueError(
            f"unknown policy loss {name!r}; choose from {policy_loss_names()}." + hint
        ) from None


def policy_loss_names() -> list[str]:
    """The registered names, sorted."""
    return sorted(_REGISTRY)


# --------------------------------------------------------------------------------------------
# Losses
# --------------------------------------------------------------------------------------------


@register_policy_loss("clipped")
def clipped_loss(
    inputs: LossInputs, policy: PolicyLossConfig, prefix: PrefixConfig | None = None
) -> tuple[torch.Tensor, dict[str, float]]:
    """The clipped surrogate over the reply tokens (:func:`agentenvs.train.losses.policy_loss`)."""
    loss, metrics = policy_loss(
        inputs.log_prob,
        inputs.old_log_prob,
        inputs.advantages,
        inputs.response_mask,
        policy,
        correction=inputs.correction,
        denominator=inputs.denominator,
    )
    metrics["actor/total_loss"] = float(loss.detach())
    return loss, metrics


@register_policy_loss("prefix_grpo", takes_prefix=True)
def prefix_grpo(
    inputs: LossInputs, policy: PolicyLossConfig, prefix: PrefixConfig | None
) -> tuple[torch.Tensor, dict[str, float]]:
    """Prefix-GRPO's objective (:func:`agentenvs.train.prefix_loss.prefix_grpo_loss`) with
    A_pre from :func:`~agentenvs.train.prefix_loss.prefix_advantages`; without prefix rows in
    the micro-batch, the clipped loss with ``inputs.denominator`` (the joint count under the
    joint objective)."""
    assert prefix is not None  # PolicyLoss.check
    if inputs.prefix is None or inputs.prefix_log_prob is None:
        return clipped_loss(inputs, policy)
    pre_adv = prefix_advantages(
        inputs.advantages, inputs.response_mask, prefix, inputs.prefix_signals
    )
    return prefix_grpo_loss(
        log_prob=inputs.log_prob,
        old_log_prob=inputs.old_log_prob,
        advantages=inputs.advantages,
        response_mask=inputs.response_mask,
        prefix_log_prob=inputs.prefix_log_prob,
        prefix=inputs.prefix,
        prefix_advantage=pre_adv,
        policy=policy,
        config=prefix,
        correction=inputs.correction,
        denominator=inputs.denominator,
        prefix_denominator=inputs.prefix_denominator,
    )
