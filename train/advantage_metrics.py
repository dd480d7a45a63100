"""What the advantage estimators saw: the ``adv/*`` diagnostics of one batch.

Pure functions over the batch's arrays (rows, episodes, task groups and anchor-state groups given
as integer codes), shared by the estimators of :mod:`agentenvs.train.advantages`. A group is
*flat* when its values are all equal: a flat task group gives GRPO no signal, a flat anchor-state
group gives GiGPO and PTGPO no step-level signal there.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "TreeCounts",
    "anchor_metrics",
    "flat_groups",
    "group_metrics",
    "step_credit_metrics",
]


def flat_groups(values: np.ndarray, groups: np.ndarray, n_groups: int) -> np.ndarray:
    """(n_groups,) bool: max == min of ``values`` over each group's members (``groups`` codes
    0 .. n_groups - 1; a group without members is not flat)."""
    high = np.full(n_groups, -np.inf)
    low = np.full(n_groups, np.inf)
    np.maximum.at(high, groups, values)
    np.minimum.at(low, groups, values)
    return high == low


def group_metrics(
    episode_rewards: np.ndarray, episode_group: np.ndarray, n_groups: int
) -> dict[str, float]:
    """Task groups: the share whose episodes' rewards are all equal (no episode-level signal)
    and the mean number of episodes a group."""
    if not n_groups:
        return {"adv/zero_std_group_frac": 0.0, "adv/group_size_mean": 0.0}
    return {
        "adv/zero_std_group_frac": float(
            flat_groups(episode_rewards, episode_group, n_groups).mean()
        ),
        "adv/group_size_mean": float(len(episode_group) / n_groups),
    }


def step_credit_metrics(
    credit: np.ndarray, *, flat_group: np.ndarray, row_group: np.ndarray
) -> dict[str, float]:
    """Mean |step credit| (the part of a row's advantage beyond its episode's outcome advantage)
    and the share of it on rows of flat task groups (``flat_group`` per task group, ``row_group``
    per row), where no outcome differs and what credit there is comes from step rewards and
    timing alone."""
    magnitude = np.abs(credit)
    total = float(magnitude.sum())
    return {
        "adv/step_credit_abs_mean": float(magnitude.mean()) if len(magnitude) else 0.0,
        "adv/step_credit_flat_group_share": float(magnitude[flat_group[row_group]].sum()) / total
        if total
        else 0.0,
    }


def anchor_metrics(
    roots: np.ndarray, n_roots: int, returns: np.ndarray | None = None
) -> dict[str, float]:
    """Anchor-state groups: mean size, the share of steps alone in theirs (singleton) or in one
    of >= 2 (grouped); with ``returns``, the share of groups of >= 2 whose returns G are all
    equal (no step-level signal there)."""
    if not len(roots):
        return {}
    sizes = np.bincount(roots, minlength=n_roots)
    metrics = {
        "adv/step_group_size_mean": float(sizes.mean()),
        "adv/singleton_step_frac": float((sizes[roots] == 1).mean()),
        "adv/grouped_step_frac": float((sizes[roots] >= 2).mean()),
    }
    if returns is not None:
        shared = sizes >= 2
        flat = shared & flat_groups(returns, roots, n_roots)
        metrics["adv/step_group_zero_spread_frac"] = (
            float(flat.sum() / shared.sum()) if shared.any() else 0.0
        )
    return metrics


@dataclass
class TreeCounts:
    """What PTGPO's prefix trees of one batch looked like (the ``adv/tree_*`` metrics)."""

    trees: int = 0  # roots with at least tau_expand members (the trees that expand)
    depth: int = 0  # deepest level reached
    expanded: int = 0  # nodes that were split by their members' next action
    split: int = 0  # expanded nodes with at least two children (where a credit can be non-0)
    nodes: int = 0  # child nodes made
    credits: int = 0  # (start, depth) edges credited

    def metrics(self) -> dict[str, float]:
        """``adv/tree_*``: counts per batch, branching = children per expanded node."""
        return {
            "adv/trees": float(self.trees),
            "adv/tree_depth_max": float(self.depth),
            "adv/tree_nodes": float(self.nodes),
            "adv/tree_credits": float(self.credits),
            "adv/tree_nodes_per_tree": self.nodes / self.trees if self.trees else 0.0,
            "adv/tree_branching": self.nodes / self.expanded if self.expanded else 0.0,
            "adv/tree_split_frac": self.split / self.expanded if self.expanded else 0.0,
        }
