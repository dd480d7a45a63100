"""Our step-level advantage estimators in verl's own registry (verl 0.9.1).

:func:`install` registers ``gigpo`` and ``ptgpo`` with
``verl.trainer.ppo.core_algos.register_adv_est``, so ``algorithm.adv_estimator=ptgpo`` names them
in a verl config. The numbers are :mod:`agentenvs.train.advantages`' (the same functions our trainer
runs).

Batch layout: one row per episode (what :mod:`agentenvs.integrations.verl.agent_loop` returns: the
whole multi-turn conversation is the row's response). Step-level inputs travel in the ``DataProto``
non-tensor batch, one object (a list, one entry per assistant turn) per row:

=============================  ======================================================
key                            per row
=============================  ======================================================
``uid``                        verl's group id (the prompt's; set by verl's trainer)
``agentenvs_turn_spans``       ``[[start, end), ...]`` response-token span of each turn
``agentenvs_anchors``          the observation each turn's action was chosen from
``agentenvs_actions``          the parsed action of each turn (``"<invalid format>"``)
``agentenvs_step_rewards``     the environment's reward for each turn's action
=============================  ======================================================

Two optional keys carry a protocol's invalid-action penalty (the agent loop writes both):
``agentenvs_format_valid`` (per turn: False where the reply broke the protocol's format,
unparseable or projected) and ``agentenvs_invalid_penalty`` (per row: the penalty). The penalty
is subtracted from the reward of each turn whose reply broke the format before the advantages
are computed, as our trainer does (:mod:`agentenvs.train.rl.batch`); without the keys no penalty
applies.

(:data:`STEP_KEYS` lists the four required ``agentenvs_`` keys, :data:`PENALTY_KEYS` the two
optional ones.) Each turn becomes one step row of an
:class:`agentenvs.train.advantages.AdvantageBatch` (group ``uid``, episode = the verl row, step t);
the step advantage is written on that turn's response tokens (times ``response_mask``: observation
tokens stay 0). ``returns`` holds G_t on the same tokens.

verl's ``compute_advantage`` hands the non-tensor batch only to its ``gdpo`` estimator, so
:func:`install` also wraps ``verl.trainer.ppo.ray_trainer.compute_advantage`` (the function
``RayPPOTrainer.fit`` calls) to hand it to ours as well; every other estimator goes to verl's
own code unchanged. verl's v1 trainer (``trainer.use_v1=True``) reads only a fixed list of
fields from its transfer queue before computing advantages, so these estimators need the
legacy trainer (``trainer.use_v1=False``). The wrapper also turns the agent loop's
``agentenvs_prefix_spans`` into the tensor ``agentenvs_prefix_mask`` that the ``prefix_grpo``
policy loss reads (:mod:`agentenvs.integrations.verl.prefix_loss`), whatever the estimator. Settings
other than verl's ``algorithm.gamma`` come from :func:`configure` (default: our estimators'
defaults).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from agentenvs.train.advantages import AdvantageBatch, get_advantage_estimator

__all__ = ["ESTIMATORS", "PENALTY_KEYS", "STEP_KEYS", "configure", "install", "step_advantages"]

ESTIMATORS = ("gigpo", "ptgpo")
STEP_KEYS = (
    "agentenvs_turn_spans",
    "agentenvs_anchors",
    "agentenvs_actions",
    "agentenvs_step_rewards",
)
PENALTY_KEYS = ("agentenvs_format_valid", "agentenvs_invalid_penalty")
_SETTINGS: dict[str, dict[str, Any]] = {name: {} for name in ESTIMATORS}


def configure(name: str, **settings: Any) -> None:
    """Set ``name``'s settings (e.g. ``configure("ptgpo", tau_expand=2, step_weight=0.5)``);
    an unknown setting is an error listing the valid ones."""
    get_advantage_estimator(name).make_config(**settings)  # validate now
    _SETTINGS[name] = dict(settings)


def step_advantages(
    name: str,
    response_mask: torch.Tensor,
    non_tensor_batch: Mapping[str, Any],
    *,
    gamma: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``name``'s (advantages, returns), each (B, L), for a batch in the layout above."""
    missing = [k for k in ("uid", *STEP_KEYS) if k not in non_tensor_batch]
    if missing:
        raise ValueError(
            f"advantage estimator {name!r} needs the DataProto non-tensor keys {missing} "
            "(agentenvs.integrations.verl.agent_loop writes them; with verl's trainer run "
            "trainer.use_v1=False after agentenvs.integrations.verl.install())"
        )
    spans = non_tensor_batch["agentenvs_turn_spans"]
    rows, steps = _step_rows(non_tensor_batch)
    if not rows:
        zeros = torch.zeros_like(response_mask, dtype=torch.float32)
        return zeros, zeros.clone()
    estimator = get_advantage_estimator(name)
    settings = dict(_SETTINGS.get(name, {}))
    if gamma is not None:
        settings.setdefault("gamma", float(gamma))
    batch = AdvantageBatch(
        rewards=torch.tensor([s[3] for s in steps], dtype=torch.float32),
        response_mask=torch.ones(len(steps), 1),
        group_index=[s[0] for s in steps],
        episode_index=[r for r, _ in rows],
        step_index=[t for _, t in rows],
        anchors=[s[1] for s in steps],
        actions=[s[2] for s in steps],
    )
    result = estimator(batch, estimator.make_config(**settings))
    advantages = torch.zeros_like(response_mask, dtype=torch.float32)
    returns = torch.zeros_like(advantages)
    for k, (row, t) in enumerate(rows):
        start, end = (int(x) for x in spans[row][t])
        advantages[row, start:end] = result.step_advantages[k]
        returns[row, start:end] = result.returns[k]
    mask = response_mask.to(advantages.dtype)
    return advantages * mask, returns * mask


def _step_rows(batch: Mapping[str, Any]) -> tuple[list[tuple[int, int]], list[tuple]]:
    """(row, t) of every turn and its (uid, anchor, action, reward)."""
    rows, steps = [], []
    uids = batch["uid"]
    for row in range(len(uids)):
        spans = list(batch["agentenvs_turn_spans"][row])
        per_turn = [list(batch[k][row]) for k in STEP_KEYS[1:]]
        if any(len(v) != len(spans) for v in per_turn):
            raise ValueError(
                f"row {row}: {STEP_KEYS} must have one entry per turn; got lengths "
                f"{[len(spans), *(len(v) for v in per_turn)]}"
            )
        rewards = _penalized(batch, row, [float(r) for r in per_turn[2]])
        for t, (anchor, action) in enumerate(zip(per_turn[0], per_turn[1], strict=True)):
            rows.append((row, t))
            steps.append((str(uids[row]), str(anchor), str(action), rewards[t]))
    return rows, steps


def _penalized(batch: Mapping[str, Any], row: int, rewards: list[float]) -> list[float]:
    """Row ``row``'s step rewards less the invalid-action penalty where the reply broke the
    format (see the module docstring)."""
    if not all(k in batch for k in PENALTY_KEYS):
        return rewards
    valid = [bool(v) for v in batch["agentenvs_format_valid"][row]]
    if len(valid) != len(rewards):
        raise ValueError(
            f"row {row}: agentenvs_format_valid must have one entry per turn; got {len(valid)} "
            f"for {len(rewards)} turns"
        )
    penalty = float(batch["agentenvs_invalid_penalty"][row])
    return [r if ok else r - penalty for r, ok in zip(rewards, valid, strict=True)]


def _make_verl_estimator(name: str):
    def estimator(
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: np.ndarray | None = None,
        config: Any = None,
        non_tensor_batch: Mapping[str, Any] | None = None,
        **_: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if non_tensor_batch is None:
            raise ValueError(
                f"adv_estimator={name} needs the DataProto's non-tensor batch "
                f"({', '.join(STEP_KEYS)}): call agentenvs.integrations.verl.install() in the "
                "process that computes advantages (verl's driver / TaskRunner)"
            )
        batch = dict(non_tensor_batch)
        if index is not None:
            batch.setdefault("uid", index)
        gamma = config.get("gamma", None) if hasattr(config, "get") else None
        return step_advantages(name, response_mask, batch, gamma=gamma)

    estimator.__name__ = f"compute_{name}_advantage"
    estimator.__qualname__ = estimator.__name__
    return estimator


_VERL_FNS = {name: _make_verl_estimator(name) for name in ESTIMATORS}


def install() -> None:
    """Register ``gigpo`` and ``ptgpo`` in verl's registry and let verl's ``compute_advantage``
    hand them the non-tensor batch (idempotent)."""
    from verl.trainer.ppo import core_algos, ray_trainer

    for name, fn in _VERL_FNS.items():
        if core_algos.ADV_ESTIMATOR_REGISTRY.get(name) is not fn:
            core_algos.register_adv_est(name)(fn)
    original = ray_trainer.compute_advantage
    if getattr(original, "_agentenvs_wrapped", False):
        return

    def compute_advantage(data, adv_estimator, *args: Any, **kwargs: Any):
        from agentenvs.integrations.verl.prefix_loss import add_prefix_mask

        add_prefix_mask(data)  # cut-state (Prefix-GRPO) rows: the prefix mask joins the batch
        name = getattr(adv_estimator, "value", adv_estimator)
        if name not in _VERL_FNS:
            return original(data, adv_estimator, *args, **kwargs)
        config = kwargs.get("config", args[4] if len(args) > 4 else None)
        gamma = kwargs.get("gamma", args[0] if args else None)
        if "response_mask" not in data.batch.keys():
            data.batch["response_mask"] = ray_trainer.compute_response_mask(data)
        if config is None:
            config = {"gamma": gamma}
        advantages, returns = _VERL_FNS[name](
            token_level_rewards=data.batch["token_level_rewards"],
            response_mask=data.batch["response_mask"],
            index=data.non_tensor_batch.get("uid"),
            config=config,
            non_tensor_batch=data.non_tensor_batch,
        )
        data.batch["advantages"] = advantages
        data.batch["returns"] = returns
        return data

    compute_advantage._agentenvs_wrapped = True  # type: ignore[attr-defined]
    compute_advantage.__wrapped__ = original  # type: ignore[attr-defined]
    ray_trainer.compute_advantage = compute_advantage
