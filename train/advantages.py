"""Advantage estimators: GRPO, Dr.GRPO, GiGPO, PTGPO and the oracle control, registered by name
with one signature.

Every estimator is ``estimator(batch: AdvantageBatch, config) -> AdvantageResult``; the trainer
only does ``est = get_advantage_estimator(name)`` and ``est(batch, est.make_config(**kwargs))``.
The inputs an estimator needs beyond rewards (anchor observations, parsed actions) are typed
fields of :class:`AdvantageBatch`, and each registration says which it requires
(``est.requires``), so a missing input is a clear error instead of a branch in the trainer.

Batch layout (B rows, L response tokens)
----------------------------------------
One row is one generated completion: one turn of one episode (a single-turn task has one row
per episode). ``rewards`` (B,) is the reward r_t the environment gave for that row's action;
``response_mask`` (B, L) marks the row's completion tokens; ``group_index`` (B,) says which
task group (N episodes of one task from one start) the row belongs to; ``episode_index`` (B,)
names the episode inside its group; ``step_index`` (B,) is t, and the rows of an episode must
have t = 0 .. T_i - 1 exactly once each (rows may come in any order). ``anchors`` (B,) are the
anchor observations s_t (two steps share an anchor state when the strings are identical) and
``actions`` (B,) the parsed action strings a_t; ``step_credits`` (B,) the expert's credit c_t of
the row's action (the environment's ``info["step_credit"]``) and ``outcomes`` (B,) the outcome
of the row's episode (1.0 won, 0.0 not). Results are (B,) per row and (B, L) per token:
``token_advantages = step_advantages[:, None] * response_mask``.

Formulas (i an episode of a group of N, t a step, R^(i) = sum_t r_t^(i), eps in the config)
------------------------------------------------------------------------------------------
- GRPO (Shao et al. 2024): A^(i) = (R^(i) - mean_R) / (std_R + eps), std with Bessel's
  correction over the N episodes of the group; every row of episode i gets A^(i).
- Dr.GRPO (Liu et al. 2025): A^(i) = R^(i) - mean_R (no division by the std).
- GiGPO (Feng et al. 2025, verl-agent): G_t = sum_{k>=t} gamma^(k-t) r_k; the step group of
  (i, t) is every step of the same task group with the same anchor string;
  A_step = G_t - mean_G (``normalize="mean"``, the default) or (G_t - mean_G) / (std_G + eps)
  (``"std"``); A = A_episode + step_weight * A_step, with A_episode normalised the same way.
- PTGPO (the equations: :mod:`agentenvs.train.reference_advantages`): per anchor-state group a
  prefix tree over the actions that follow; edge credit delta = mean(child) - mean(parent) for
  nodes with at least ``tau_expand`` members and depth below ``max_depth``; normalised by the
  root group's spread (``root_spread``: ``"paper"`` std(G) + eps, the equations;
  ``"outcome_gated"`` the same, but 0 credit in a root whose members' episode outcomes are all
  equal; ``"floored"`` max(std(G), spread_floor) + eps); A_k^PT = sum over starts t <= k of the
  normalised credit at depth k - t; A = A_episode (GRPO form) + step_weight * A^PT. Built
  level by level (:mod:`agentenvs.train.prefix_tree`): each level groups the surviving members
  by (parent node, next action) in one vectorised pass, so the cost is O(total steps x depth
  reached), never a comparison of every pair of steps.
- oracle (a control for the learning benchmark, not an algorithm to pick): GRPO's episode
  advantage plus the expert's true step credit,
  A_t = (R - mean_R) / (std_R + eps) + step_weight * c_t (``credit_scale="given"``, the default)
  or + step_weight * c_t / (rms of c over the task group's rows + eps) (``"group_rms"``).

Deliberate differences from verl / verl-agent (said plainly)
------------------------------------------------------------
- A group of one episode gets advantage 0 (its reward minus its own mean). verl's GRPO and
  verl-agent's episode advantage use mean 0 / std 1 there, which hands the raw reward through.
- GiGPO's episode advantage counts each episode once. verl-agent's default
  (``compute_mean_std_cross_all_data=True``) counts an episode once per step row, which weights
  long episodes more in the group mean.
- R^(i) is the undiscounted sum of the episode's rewards (the terminal reward in sparse tasks).

The plain reference functions :func:`gigpo_advantages`, :func:`ptgpo_advantages` and
:func:`ptgpo_path_credits` work on one group given as lists of ``(anchor, action, reward)`` steps;
the tests check the registered estimators against them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Any, Literal

import numpy as np
import torch

from agentenvs.suggestions import did_you_mean
from agentenvs.train._groups import (
    EpisodeLayout,
    as_numpy,
    check_length,
    factorize,
    group_standardize,
)
from agentenvs.train.advantage_metrics import (
    anchor_metrics,
    flat_groups,
    group_metrics,
    step_credit_metrics,
)
from agentenvs.train.prefix_tree import prefix_tree_credits, root_scales
from agentenvs.train.reference_advantages import (
    Step,
    gigpo_advantages,
    ptgpo_advantages,
    ptgpo_path_credits,
)

__all__ = [
    "AdvantageBatch",
    "AdvantageEstimator",
    "AdvantageResult",
    "GRPOConfig",
    "GiGPOConfig",
    "OracleConfig",
    "PTGPOConfig",
    "Step",
    "advantage_estimator_names",
    "get_advantage_estimator",
    "gigpo_advantages",
    "ptgpo_advantages",
    "ptgpo_path_credits",
    "register_advantage_estimator",
]

BATCH_INPUTS = ("anchors", "actions", "step_credits", "outcomes")
"""Optional :class:`AdvantageBatch` fields an estimator may require (``requires``)."""


# --------------------------------------------------------------------------------------------
# Inputs, outputs, configurations
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AdvantageBatch:
    """The rows of one training batch, as every estimator reads them (see the module docstring).

    Shapes: ``rewards`` (B,), ``response_mask`` (B, L), every index/string field (B,).
    ``episode_index=None`` makes every row its own episode (single-turn); ``step_index=None``
    makes every row step 0, so it needs one row per episode.
    """

    rewards: torch.Tensor
    """(B,) reward r_t for this row's action (single-turn: the outcome reward)."""
    response_mask: torch.Tensor
    """(B, L) 1 on this row's completion tokens, 0 on padding."""
    group_index: Sequence[Hashable]
    """(B,) task-group id (str or int): the N episodes sampled for one task share it."""
    episode_index: Sequence[Hashable] | None = None
    """(B,) episode id, unique within its group; None: each row is its own episode."""
    step_index: Sequence[int] | None = None
    """(B,) step t of the row in its episode (0 .. T_i - 1, each once); None: all 0."""
    anchors: Sequence[str] | None = None
    """(B,) anchor observation s_t (exact-match grouping); required by GiGPO and PTGPO."""
    actions: Sequence[str] | None = None
    """(B,) parsed action string a_t (not the raw completion); required by PTGPO."""
    step_credits: Sequence[float] | torch.Tensor | None = None
    """(B,) the expert's credit c_t of the row's action (``info["step_credit"]``); required by
    the oracle."""
    outcomes: Sequence[float] | torch.Tensor | None = None
    """(B,) the outcome of the row's episode (1.0 won, 0.0 not); required by PTGPO's
    ``root_spread="outcome_gated"``."""

    def __post_init__(self) -> None:
        if self.rewards.dim() != 1:
            raise ValueError(f"rewards must have shape (B,), got {tuple(self.rewards.shape)}")
        rows = self.rewards.shape[0]
        if rows == 0:
            raise ValueError("the batch has no rows; skip the advantage step for an empty batch")
        if self.response_mask.dim() != 2 or self.response_mask.shape[0] != rows:
            raise ValueError(
                f"response_mask must have shape (B={rows}, L), "
                f"got {tuple(self.response_mask.shape)}"
            )
        check_length("group_index", self.group_index, rows)
        for name in ("episode_index", "step_index", *BATCH_INPUTS):
            value = getattr(self, name)
            if value is not None:
                check_length(name, value, rows)

    @classmethod
    def from_groups(
        cls,
        groups: Sequence[Sequence[Sequence[Step]]],
        *,
        response_length: int = 1,
    ) -> AdvantageBatch:
        """A batch from ``groups[g][i] = [(anchor, action, reward), ...]`` (episode i of group g).

        Rows come in order group, episode, step; every row gets ``response_length`` valid tokens.
        """
        group_index, episode_index, step_index = [], [], []
        anchors, actions, rewards = [], [], []
        for g, episodes in enumerate(groups):
            for i, episode in enumerate(episodes):
                for t, (anchor, action, reward) in enumerate(episode):
                    group_index.append(g)
                    episode_index.append(i)
                    step_index.append(t)
                    anchors.append(anchor)
                    actions.append(action)
                    rewards.append(float(reward))
        return cls(
            rewards=torch.tensor(rewards, dtype=torch.float32),
            response_mask=torch.ones(len(rewards), response_length),
            group_index=group_index,
            episode_index=episode_index,
            step_index=step_index,
            anchors=anchors,
            actions=actions,
        )

    @cached_property
    def _layout(self) -> EpisodeLayout:
        """Rows arranged as episodes (computed once per batch)."""
        return EpisodeLayout.build(self)


@dataclass(frozen=True)
class AdvantageResult:
    """What an estimator returns (B rows, L tokens)."""

    token_advantages: torch.Tensor
    """(B, L) the row's advantage on each completion token, 0 on padding."""
    step_advantages: torch.Tensor
    """(B,) the advantage of the row's action."""
    returns: torch.Tensor
    """(B,) what the advantage is built from: R^(i) for GRPO, the discounted G_t otherwise."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Diagnostics with ``adv/`` keys (group sizes, tree depth, ...)."""


@dataclass(frozen=True)
class GRPOConfig:
    """Settings of ``grpo`` and ``dr_grpo``."""

    eps: float = 1e-6
    """Added to the group std before dividing (``grpo`` only divides); >= 0."""

    def __post_init__(self) -> None:
        _check_eps(self.eps)


@dataclass(frozen=True)
class GiGPOConfig:
    """Settings of ``gigpo`` (defaults: verl-agent's)."""

    gamma: float = 0.95
    """Discount of the step returns G_t."""
    step_weight: float = 1.0
    """omega in A = A_episode + omega * A_step (verl-agent's ``step_advantage_w``)."""
    normalize: Literal["mean", "std"] = "mean"
    """``mean``: subtract the group mean (``mean_norm``); ``std``: also divide by std + eps."""
    eps: float = 1e-6
    """Added to every std before dividing."""

    def __post_init__(self) -> None:
        _check_gamma(self.gamma)
        _check_eps(self.eps)
        if self.normalize not in ("mean", "std"):
            raise ValueError(f"normalize must be 'mean' or 'std', got {self.normalize!r}")


@dataclass(frozen=True)
class PTGPOConfig:
    """Settings of ``ptgpo`` (equations: :mod:`agentenvs.train.reference_advantages`)."""

    gamma: float = 1.0
    """Discount of the step returns G_t."""
    tau_expand: int = 2
    """A tree node is expanded only when it has at least this many members."""
    max_depth: int | None = None
    """Maximum depth D of every tree (None: unbounded; 1 gives GiGPO's first edge)."""
    step_weight: float = 1.0
    """omega in A = A_episode + omega * A^PT."""
    eps: float = 1e-6
    """Added to every std before dividing."""
    root_spread: Literal["paper", "outcome_gated", "floored"] = "paper"
    """What the edge credits are divided by, for shaped rewards (the equations assume sparse
    terminal ones): ``paper`` std(G) of the root group + eps (the equations); ``outcome_gated``
    the same, but a root whose members' episodes all have one outcome (``outcomes``: all won or
    all lost) gives no tree credit, since its returns differ only by step rewards and timing;
    ``floored`` max(std(G), ``spread_floor``) + eps."""
    spread_floor: float = 1.0
    """The floor of the root spread under ``root_spread="floored"``, in reward units: the
    reward's scale (the outcome reward's size)."""

    def __post_init__(self) -> None:
        _check_gamma(self.gamma)
        _check_eps(self.eps)
        if self.root_spread not in ("paper", "outcome_gated", "floored"):
            raise ValueError(
                "root_spread must be 'paper', 'outcome_gated' or 'floored', "
                f"got {self.root_spread!r}"
            )
        if not self.spread_floor > 0:
            raise ValueError(f"spread_floor must be > 0 (reward units), got {self.spread_floor}")
        if self.tau_expand < 1:
            raise ValueError(f"tau_expand must be >= 1, got {self.tau_expand}")
        if self.max_depth is not None and self.max_depth < 0:
            raise ValueError(f"max_depth must be None (unbounded) or >= 0, got {self.max_depth}")


@dataclass(frozen=True)
class OracleConfig:
    """Settings of ``oracle``: GRPO's episode advantage plus the expert's step credit c_t."""

    step_weight: float = 1.0
    """omega in A_t = A_episode + omega * c_t."""
    credit_scale: Literal["given", "group_rms", "anchor_centered"] = "given"
    """``given``: c_t as the environment gives it; ``group_rms``: c_t divided by the root mean
    square of c over the rows of its task group (+ eps; a group whose credits are all 0 gets
    0), so every group's step credit has scale omega like its episode advantage;
    ``anchor_centered``: c_t minus the mean credit of the steps taken from the same anchor
    state in the same task group (GiGPO's step groups; a state visited once gets 0), so the
    credit ranks the actions sampled in one state instead of lowering them all."""
    eps: float = 1e-6
    """Added to the group std (and rms) before dividing."""

    def __post_init__(self) -> None:
        _check_eps(self.eps)
        if self.credit_scale not in ("given", "group_rms", "anchor_centered"):
            raise ValueError(
                "credit_scale must be 'given', 'group_rms' or 'anchor_centered', "
                f"got {self.credit_scale!r}"
            )


def _check_gamma(gamma: float) -> None:
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must lie in [0, 1], got {gamma}")


def _check_eps(eps: float) -> None:
    if eps < 0:
        raise ValueError(f"eps must be >= 0 (0 allowed: a zero spread then gives 0), got {eps}")


# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------
EstimatorFn = Callable[[AdvantageBatch, Any], AdvantageResult]


@dataclass(frozen=True)
class AdvantageEstimator:
    """A registered estimator: call it as ``est(batch, config)`` (config None: the defaults)."""

    name: str
    fn: EstimatorFn
    config_type: type
    requires: tuple[str, ...]
    """Optional :class:`AdvantageBatch` fields this estimator needs (:data:`BATCH_INPUTS`)."""

    def make_config(self, **settings: Any) -> Any:
        """The config from keyword settings; an unknown setting is an error listing valid ones."""
        valid = [f.name for f in fields(self.config_type)]
        unknown = sorted(set(settings) - set(valid))
        if unknown:
            raise TypeError(
                f"advantage estimator {self.name!r} has no setting(s) {unknown}; "
                f"valid settings: {valid}"
            )
        return self.config_type(**settings)

    def __call__(self, batch: AdvantageBatch, config: Any = None) -> AdvantageResult:
        config = self.config_type() if config is None else config
        if not isinstance(config, self.config_type):
            raise TypeError(
                f"advantage estimator {self.name!r} takes a {self.config_type.__name__}, "
                f"got {type(config).__name__}; build it with make_config(**settings)"
            )
        missing = [name for name in self.requires if getattr(batch, name) is None]
        if missing:
            raise ValueError(
                f"advantage estimator {self.name!r} needs AdvantageBatch field(s) {missing} "
                "(one value per row); collect them during rollouts"
            )
        return self.fn(batch, config)


_REGISTRY: dict[str, AdvantageEstimator] = {}


def register_advantage_estimator(
    name: str, *, config_type: type, requires: Sequence[str] = ()
) -> Callable[[EstimatorFn], EstimatorFn]:
    """Register ``fn(batch, config) -> AdvantageResult`` under ``name`` (duplicates rejected)."""
    bad = [r for r in requires if r not in BATCH_INPUTS]
    if bad:
        raise ValueError(f"unknown batch input(s) {bad}; choose from {list(BATCH_INPUTS)}")

    def decorator(fn: EstimatorFn) -> EstimatorFn:
        if name in _REGISTRY:
            raise ValueError(f"advantage estimator {name!r} is already registered")
        _REGISTRY[name] = AdvantageEstimator(name, fn, config_type, tuple(requires))
        return fn

    return decorator


def get_advantage_estimator(name: str) -> AdvantageEstimator:
    """The estimator registered as ``name``; an unknown name says the valid ones."""
    try:
        return _REGISTRY[name]
    except KeyError:
        hint = did_you_mean(name, _REGISTRY)
        raise ValueError(
            f"unknown advantage estimator {name!r}; choose from {advantage_estimator_names()}."
            + hint
        ) from None


def advantage_estimator_names() -> list[str]:
    """The registered names, sorted."""
    return sorted(_REGISTRY)


# --------------------------------------------------------------------------------------------
# Estimators
# --------------------------------------------------------------------------------------------
@register_advantage_estimator("grpo", config_type=GRPOConfig)
def grpo_advantage(batch: AdvantageBatch, config: GRPOConfig) -> AdvantageResult:
    """GRPO outcome advantage (R - mean_R) / (std_R + eps) per task group, on every row."""
    return _outcome_advantage(batch, config, use_std=True)


@register_advantage_estimator("dr_grpo", config_type=GRPOConfig)
def dr_grpo_advantage(batch: AdvantageBatch, config: GRPOConfig) -> AdvantageResult:
    """Dr.GRPO outcome advantage R - mean_R per task group (no std), on every row."""
    return _outcome_advantage(batch, config, use_std=False)


def _outcome_advantage(
    batch: AdvantageBatch, config: GRPOConfig, *, use_std: bool
) -> AdvantageResult:
    lay = batch._layout
    episode_reward = lay.episode_rewards(batch)
    episode_adv = group_standardize(
        episode_reward, lay.episode_group, lay.n_groups, eps=config.eps, use_std=use_std
    )
    metrics = group_metrics(episode_reward, lay.episode_group, lay.n_groups)
    if batch.anchors is not None:  # how often states coincide, though GRPO does not use it
        metrics.update(anchor_metrics(*lay.anchor_groups(batch)))
    advantages = episode_adv[lay.row_episode]
    return _result(batch, advantages, episode_reward[lay.row_episode], metrics)


@register_advantage_estimator("gigpo", config_type=GiGPOConfig, requires=("anchors",))
def gigpo_advantage(batch: AdvantageBatch, config: GiGPOConfig) -> AdvantageResult:
    """GiGPO: A = A_episode + omega * A_step over exact-anchor step groups within task groups."""
    lay = batch._layout
    use_std = config.normalize == "std"
    episode_adv = lay.episode_advantages(batch, eps=config.eps, use_std=use_std)
    returns = lay.row_returns(batch, config.gamma)
    roots, n_roots = lay.anchor_groups(batch)
    step_adv = group_standardize(returns, roots, n_roots, eps=config.eps, use_std=use_std)
    advantages = episode_adv[lay.row_episode] + config.step_weight * step_adv
    metrics = group_metrics(lay.episode_rewards(batch), lay.episode_group, lay.n_groups)
    metrics.update(anchor_metrics(roots, n_roots, returns))
    metrics.update(
        step_credit_metrics(
            config.step_weight * step_adv,
            flat_group=flat_groups(lay.episode_rewards(batch), lay.episode_group, lay.n_groups),
            row_group=lay.row_group,
        )
    )
    return _result(batch, advantages, returns, metrics)


@register_advantage_estimator("ptgpo", config_type=PTGPOConfig, requires=("anchors", "actions"))
def ptgpo_advantage(batch: AdvantageBatch, config: PTGPOConfig) -> AdvantageResult:
    """PTGPO: A = A_episode + omega * A^PT, prefix-tree credits per anchor-state group."""
    lay = batch._layout
    episode_adv = lay.episode_advantages(batch, eps=config.eps, use_std=True)
    returns = lay.row_returns(batch, config.gamma)
    roots, n_roots = lay.anchor_groups(batch)
    action_codes, n_actions = factorize(batch.actions)
    scale, gated = root_scales(batch.outcomes, returns, roots, n_roots, config)
    tree_credit, tree = prefix_tree_credits(
        lay, returns, roots, n_roots, scale, action_codes, n_actions, config
    )
    advantages = episode_adv[lay.row_episode] + config.step_weight * tree_credit
    metrics = group_metrics(lay.episode_rewards(batch), lay.episode_group, lay.n_groups)
    metrics.update(anchor_metrics(roots, n_roots, returns))
    metrics.update(tree.metrics())
    metrics.update(
        step_credit_metrics(
            config.step_weight * tree_credit,
            flat_group=flat_groups(lay.episode_rewards(batch), lay.episode_group, lay.n_groups),
            row_group=lay.row_group,
        )
    )
    metrics["adv/step_credit_nonzero_frac"] = float((tree_credit != 0).mean())
    if gated is not None:
        metrics["adv/root_outcome_flat_frac"] = gated
    return _result(batch, advantages, returns, metrics)


@register_advantage_estimator("oracle", config_type=OracleConfig, requires=("step_credits",))
def oracle_advantage(batch: AdvantageBatch, config: OracleConfig) -> AdvantageResult:
    """The oracle control: GRPO's episode advantage + omega * the expert's step credit c_t."""
    lay = batch._layout
    episode_adv = lay.episode_advantages(batch, eps=config.eps, use_std=True)
    try:
        credit = as_numpy(batch.step_credits)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"step_credits must be one number per row: {exc}") from None
    bad = np.flatnonzero(~np.isfinite(credit))
    if len(bad):
        raise ValueError(
            f"step_credits must be a finite number on every row; rows {bad[:5].tolist()} have a "
            "missing (None), NaN or infinite credit"
        )
    if config.credit_scale == "group_rms":
        count = np.bincount(lay.row_group, minlength=lay.n_groups).astype(np.float64)
        squares = np.bincount(lay.row_group, weights=credit * credit, minlength=lay.n_groups)
        rms = np.sqrt(squares / np.maximum(count, 1.0))[lay.row_group] + config.eps
        credit = np.divide(credit, rms, out=np.zeros_like(credit), where=rms > 0)
    elif config.credit_scale == "anchor_centered":
        if batch.anchors is None:
            raise ValueError(
                "oracle with credit_scale='anchor_centered' needs AdvantageBatch.anchors (each "
                "row's anchor observation s_t)"
            )
        states, n_states = lay.anchor_groups(batch)
        credit = group_standardize(credit, states, n_states, eps=config.eps, use_std=False)
    step_credit = config.step_weight * credit
    advantages = episode_adv[lay.row_episode] + step_credit
    episode_reward = lay.episode_rewards(batch)
    metrics = group_metrics(episode_reward, lay.episode_group, lay.n_groups)
    if batch.anchors is not None:
        metrics.update(anchor_metrics(*lay.anchor_groups(batch)))
    metrics.update(
        step_credit_metrics(
            step_credit,
            flat_group=flat_groups(episode_reward, lay.episode_group, lay.n_groups),
            row_group=lay.row_group,
        )
    )
    return _result(batch, advantages, episode_reward[lay.row_episode], metrics)


# --------------------------------------------------------------------------------------------
# Private helpers
# --------------------------------------------------------------------------------------------
def _result(
    batch: AdvantageBatch, advantages: np.ndarray, returns: np.ndarray, metrics: dict
) -> AdvantageResult:
    dtype = batch.rewards.dtype if batch.rewards.is_floating_point() else torch.float32
    device = batch.response_mask.device
    step = torch.as_tensor(advantages, dtype=dtype, device=device)
    mask = batch.response_mask.to(dtype)
    metrics = dict(metrics)
    if len(advantages):
        metrics["adv/abs_mean"] = float(np.abs(advantages).mean())
    return AdvantageResult(
        token_advantages=step[:, None] * mask,
        step_advantages=step,
        returns=torch.as_tensor(returns, dtype=dtype, device=device),
        metrics=metrics,
    )
