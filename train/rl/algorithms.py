"""The RL algorithms as data: presets over one loop (:mod:`agentenvs.train.rl.config`).

Every algorithm is the same loop (rollout -> rewards/advantages -> old log-probs -> clipped updates
-> weight sync) with a different :class:`AlgoSpec`: the advantage estimator, the policy loss
(:mod:`agentenvs.train.loss_registry`), where the episodes start (task resets or Prefix-GRPO's
replayed cut-state queries), and the settings it changes. Settings left at ``None`` take the
algorithm's preset; a value given explicitly wins.

=============  ============================================================================
``grpo``       GRPO outcome advantage, clip 0.2/0.2, dual clip 3, token-mean
``dapo``       GRPO advantage, clip-higher 0.2/0.28, dynamic sampling (groups whose rewards are
               all equal are dropped and more prompts are drawn)
``grpo-mis``   GRPO with sequence-level masked importance sampling from the rollout engine's
               log-probs to the trainer's old log-probs (threshold 2)
``gigpo``      GiGPO (gamma 0.95, omega 1, mean-normalised step groups)
``ptgpo``      PTGPO (gamma 0.95 as GiGPO's code it builds on, tau_expand 2, unbounded depth,
               omega 1)
``oracle``     a control for the learning benchmark, not an algorithm to pick: GRPO (same
               episode advantage, loss and starts) plus omega x the expert's true step credit
               ``info["step_credit"]`` (omega 1, the credit as given); an environment whose
               steps carry no credit is an error
``prefix-grpo``  rollouts from replay-validated cut-state queries (``data.queries``: a
               ``replay.sample`` file), GRPO over each query's n continuations, plus the
               prefix branch (split objective, lambda_pre 1, ``cont_abs`` = |mean continuation
               advantage|, prefix clip 0.2/0.2)
=============  ============================================================================

This module imports nothing heavy, so ``agentenvs train rl --help`` lists the algorithms on an
install without torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["ALGORITHMS", "AlgoSpec"]


@dataclass(frozen=True)
class AlgoSpec:
    """What an algorithm name means: estimator, episode starts and preset settings."""

    estimator: str
    """Registered advantage estimator
    (:func:`agentenvs.train.advantages.get_advantage_estimator`)."""
    starts: Literal["tasks", "queries"] = "tasks"
    """``tasks``: episodes start at a task's reset; ``queries``: at a replayed cut state."""
    loss: str = "clipped"
    """Registered policy loss (:func:`agentenvs.train.loss_registry.get_policy_loss`)."""
    clip_high: float = 0.2
    dynamic_sampling: bool = False
    correction: dict[str, Any] | None = None
    """Rollout-correction preset (fields of :class:`agentenvs.train.losses.RolloutCorrectionConfig`;
    None: off)."""
    advantage: dict[str, Any] = field(default_factory=dict)
    """Estimator settings preset (fields of the estimator's config)."""

    @property
    def prefix(self) -> bool:
        """The loss has Prefix-GRPO's prefix branch (it takes the ``prefix`` settings)."""
        from agentenvs.train.loss_registry import get_policy_loss  # torch: only when asked

        return get_policy_loss(self.loss).takes_prefix


ALGORITHMS: dict[str, AlgoSpec] = {
    "grpo": AlgoSpec("grpo"),
    "dapo": AlgoSpec("grpo", clip_high=0.28, dynamic_sampling=True),
    "grpo-mis": AlgoSpec("grpo", correction={"mode": "mis", "level": "sequence", "threshold": 2.0}),
    "gigpo": AlgoSpec("gigpo", advantage={"gamma": 0.95, "step_weight": 1.0, "normalize": "mean"}),
    "ptgpo": AlgoSpec(
        "ptgpo", advantage={"gamma": 0.95, "tau_expand": 2, "max_depth": None, "step_weight": 1.0}
    ),
    "oracle": AlgoSpec("oracle", advantage={"step_weight": 1.0, "credit_scale": "given"}),
    "prefix-grpo": AlgoSpec("grpo", starts="queries", loss="prefix_grpo"),
}
