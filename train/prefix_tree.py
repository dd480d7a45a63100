"""PTGPO's prefix trees over a batch: the root spreads and the edge credits, level by level.

The estimator (:func:`agentenvs.train.advantages.ptgpo_advantage`) calls :func:`root_scales` and
then :func:`prefix_tree_credits`; the equations are in
:mod:`agentenvs.train.reference_advantages`, whose plain per-group functions the tests compare
against.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import torch

from agentenvs.train._groups import EpisodeLayout, as_numpy, factorize_ints, group_std
from agentenvs.train.advantage_metrics import TreeCounts, flat_groups

__all__ = ["TreeSettings", "prefix_tree_credits", "root_scales"]


class TreeSettings(Protocol):
    """The settings the trees read (:class:`agentenvs.train.advantages.PTGPOConfig` has them)."""

    @property
    def eps(self) -> float: ...
    @property
    def tau_expand(self) -> int: ...
    @property
    def max_depth(self) -> int | None: ...
    @property
    def root_spread(self) -> str: ...
    @property
    def spread_floor(self) -> float: ...


def root_scales(
    outcomes: Sequence[float] | torch.Tensor | None,
    returns: np.ndarray,
    roots: np.ndarray,
    n_roots: int,
    config: TreeSettings,
) -> tuple[np.ndarray, float | None]:
    """(n_roots,) 1 / root spread per anchor-state group (0: no tree credit there), and under
    ``outcome_gated`` the share of roots of >= 2 members whose episode outcomes are all equal."""
    count = np.bincount(roots, minlength=n_roots).astype(np.float64)
    mean = np.bincount(roots, weights=returns, minlength=n_roots) / count
    spread = group_std(returns - mean[roots], roots, count)
    if config.root_spread == "floored":
        spread = np.maximum(spread, config.spread_floor)
    spread = spread + config.eps  # 0 only when eps = 0 and the returns are equal
    scale = np.divide(1.0, spread, out=np.zeros_like(spread), where=spread > 0)
    if config.root_spread != "outcome_gated":
        return scale, None
    if outcomes is None:
        raise ValueError(
            "ptgpo with root_spread='outcome_gated' needs AdvantageBatch.outcomes (each row's "
            "episode outcome, 1.0 won / 0.0 not)"
        )
    flat = flat_groups(as_numpy(outcomes), roots, n_roots)
    shared = count >= 2
    scale[flat] = 0.0
    return scale, float((flat & shared).sum() / shared.sum()) if shared.any() else 0.0


def prefix_tree_credits(
    lay: EpisodeLayout,
    returns: np.ndarray,
    roots: np.ndarray,
    n_roots: int,
    root_scale: np.ndarray,
    action_codes: np.ndarray,
    n_actions: int,
    config: TreeSettings,
) -> tuple[np.ndarray, TreeCounts]:
    """A^PT per row (B,) and the trees' counts (depth reached, nodes, branching, credits).

    Level d holds the members (i, t) still on an expanded path, each with its node at depth d.
    A node expands when it has >= tau_expand members and d < max_depth; its members with a next
    action a_{t+d} move to the child keyed (node, a_{t+d}) and credit that action with
    (mean(child) - mean(node)) * ``root_scale`` of its root (1 / its spread). Each level is
    one vectorised grouping of the surviving members, so the total cost is
    O(rows x depth reached).
    """
    member_episode, member_start = lay.row_episode, lay.row_step
    node = roots
    count = np.bincount(node, minlength=n_roots).astype(np.float64)
    mean = np.bincount(node, weights=returns, minlength=n_roots) / count
    member_scale = root_scale[node]
    member_return = returns
    action_at = np.full(lay.rows.shape, -1, dtype=np.int64)
    action_at[lay.row_episode, lay.row_step] = action_codes
    credit = np.zeros(lay.rows.shape)
    tree = TreeCounts(trees=int((count >= config.tau_expand).sum()))
    while config.max_depth is None or tree.depth < config.max_depth:
        position = member_start + tree.depth
        keep = (count[node] >= config.tau_expand) & (position < lay.lengths[member_episode])
        if not keep.any():
            break
        member_episode, member_start = member_episode[keep], member_start[keep]
        node, position = node[keep], position[keep]
        member_return, member_scale = member_return[keep], member_scale[keep]
        key = node * n_actions + action_at[member_episode, position]
        child, n_children = factorize_ints(key, len(count) * n_actions)
        child_count = np.bincount(child).astype(np.float64)
        child_mean = np.bincount(child, weights=member_return) / child_count
        credit[member_episode, position] += (child_mean[child] - mean[node]) * member_scale
        parent_of_child = np.zeros(n_children, dtype=np.int64)
        parent_of_child[child] = node
        children_per_parent = np.bincount(parent_of_child)
        tree.expanded += int((children_per_parent > 0).sum())
        tree.split += int((children_per_parent >= 2).sum())
        node, count, mean = child, child_count, child_mean
        tree.depth += 1
        tree.nodes += n_children
        tree.credits += len(child)
    return credit[lay.row_episode, lay.row_step], tree
