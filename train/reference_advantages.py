"""Plain reference implementations of GiGPO and PTGPO over one group of episodes.

These follow the PTGPO paper's equations (written out below) line by line with Python lists and
dicts, so that a reader can check them against the equations; the registered estimators in
:mod:`agentenvs.train.advantages` (vectorised over whole batches) are tested against them. They are
re-exported by :mod:`agentenvs.train.advantages`.

A group is ``episodes``: a list of N episodes, each a list of ``(anchor, action, reward)``
steps (anchor observation string, parsed action string, reward r_t). Every function returns one
list per episode with one value per step.

Equations (the PTGPO paper's, numbered here):
  (1) G_t = sum_{k=t}^{T-1} gamma^(k-t) r_k
  (2) root group G(s) = every step (i, t) of the group whose anchor is s
  (3) node p(s, a_1..a_d) = the members of G(s) whose next d actions are a_1..a_d; the children
      of a node split its members by their next action; a member whose episode ends at depth d
      belongs to no child
  (4) mu(p) = mean of G over p
  (5) delta_d^(i,t) = mu(child) - mu(parent), credited to action a_{t+d}; only nodes with
      |p| >= tau_expand and d < D are expanded
  (6) normalised by the root's return std (Bessel): delta / (sigma(G(s)) + eps)
  (7) A_k^PT = sum_{t<=k} normalised delta_{k-t}^(i,t)  (a missing edge gives 0)
  (8) A^ep = (R - mu_R) / (sigma_R + eps), R the episode's total reward
  (9) A_k = A^ep + omega * A_k^PT
A standard deviation of a single value is taken as 0, and a group of one episode gets A^ep = 0.
``eps = 0`` is allowed (the worked example's eps -> 0): a zero spread then gives 0, not 0 / 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["Step", "gigpo_advantages", "ptgpo_advantages", "ptgpo_path_credits"]

Step = tuple[str, str, float]
"""One step of an episode: (anchor observation, parsed action, reward)."""


def gigpo_advantages(
    episodes: Sequence[Sequence[Step]],
    *,
    gamma: float = 0.95,
    step_weight: float = 1.0,
    normalize: str = "mean",
    eps: float = 1e-6,
) -> list[list[float]]:
    """GiGPO advantages of one group: A = A_episode + step_weight * A_step.

    ``normalize="mean"`` subtracts group means (verl-agent's ``mean_norm``); ``"std"`` also
    divides by the group std + eps; it applies to the episode and to the step level alike.
    The step group of (i, t) is every step of the group with the same anchor string.
    """
    if normalize not in ("mean", "std"):
        raise ValueError(f"normalize must be 'mean' or 'std', got {normalize!r}")
    use_std = normalize == "std"
    returns = [_discounted_returns(ep, gamma) for ep in episodes]
    episode_adv = _normalise([_total_reward(ep) for ep in episodes], eps, use_std)
    roots = _root_groups(episodes)
    step_adv = [[0.0] * len(ep) for ep in episodes]
    for members in roots.values():
        values = [returns[i][t] for i, t in members]
        for (i, t), value in zip(members, _normalise(values, eps, use_std), strict=True):
            step_adv[i][t] = value
    return [
        [episode_adv[i] + step_weight * step_adv[i][t] for t in range(len(ep))]
        for i, ep in enumerate(episodes)
    ]


def ptgpo_advantages(
    episodes: Sequence[Sequence[Step]],
    *,
    gamma: float = 1.0,
    tau_expand: int = 2,
    max_depth: int | None = None,
    step_weight: float = 1.0,
    eps: float = 1e-6,
) -> list[list[float]]:
    """PTGPO advantages of one group (equations 1-9 above); ``max_depth=None`` is unbounded."""
    _check_tree_settings(tau_expand, max_depth)
    returns = [_discounted_returns(ep, gamma) for ep in episodes]
    episode_adv = _normalise([_total_reward(ep) for ep in episodes], eps, True)
    tree_adv = [[0.0] * len(ep) for ep in episodes]
    for members in _root_groups(episodes).values():
        scale = _std([returns[i][t] for i, t in members]) + eps
        if scale == 0.0:  # eps = 0 and equal returns: every credit is 0
            continue
        for i, t, depth, delta in _tree_edges(episodes, returns, members, tau_expand, max_depth):
            tree_adv[i][t + depth] += delta / scale
    return [
        [episode_adv[i] + step_weight * tree_adv[i][k] for k in range(len(ep))]
        for i, ep in enumerate(episodes)
    ]


def ptgpo_path_credits(
    episodes: Sequence[Sequence[Step]],
    *,
    gamma: float = 1.0,
    tau_expand: int = 2,
    max_depth: int | None = None,
) -> list[list[list[float]]]:
    """The unnormalised credits along each start's path: ``out[i][t] = [delta_0, delta_1, ...]``.

    ``delta_d`` is credited to action a_{t+d} of episode i by the tree rooted at (i, t)'s anchor;
    the list stops where expansion stopped, so ``sum(out[i][t])`` is ``mu(last node) - mu(root)``
    (the telescoping identity).
    """
    _check_tree_settings(tau_expand, max_depth)
    returns = [_discounted_returns(ep, gamma) for ep in episodes]
    credits: list[list[list[float]]] = [[[] for _ in ep] for ep in episodes]
    for members in _root_groups(episodes).values():
        for i, t, depth, delta in _tree_edges(episodes, returns, members, tau_expand, max_depth):
            assert len(credits[i][t]) == depth  # edges come out depth by depth
            credits[i][t].append(delta)
    return credits


def _tree_edges(
    episodes: Sequence[Sequence[Step]],
    returns: list[list[float]],
    root: list[tuple[int, int]],
    tau_expand: int,
    max_depth: int | None,
):
    """Yield ``(i, t, d, delta)`` for every credited edge of the tree over ``root``, by depth.

    Breadth-first: each node's members are split by their next action with a dict, so one tree
    costs O(|root| x depth).
    """
    level = [root]
    depth = 0
    while level and (max_depth is None or depth < max_depth):
        next_level = []
        for node in level:
            if len(node) < tau_expand:
                continue
            node_mean = _mean([returns[i][t] for i, t in node])
            children: dict[str, list[tuple[int, int]]] = {}
            for i, t in node:
                if t + depth < len(episodes[i]):
                    children.setdefault(episodes[i][t + depth][1], []).append((i, t))
            for child in children.values():
                delta = _mean([returns[i][t] for i, t in child]) - node_mean
                for i, t in child:
                    yield i, t, depth, delta
                next_level.append(child)
        level = next_level
        depth += 1


def _check_tree_settings(tau_expand: int, max_depth: int | None) -> None:
    if tau_expand < 1:
        raise ValueError(f"tau_expand must be >= 1, got {tau_expand}")
    if max_depth is not None and max_depth < 0:
        raise ValueError(f"max_depth must be None (unbounded) or >= 0, got {max_depth}")


def _root_groups(episodes: Sequence[Sequence[Step]]) -> dict[str, list[tuple[int, int]]]:
    """Anchor string -> the steps (i, t) whose anchor it is, in episode order."""
    roots: dict[str, list[tuple[int, int]]] = {}
    for i, episode in enumerate(episodes):
        for t, (anchor, _action, _reward) in enumerate(episode):
            roots.setdefault(anchor, []).append((i, t))
    return roots


def _discounted_returns(episode: Sequence[Step], gamma: float) -> list[float]:
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must lie in [0, 1], got {gamma}")
    returns = [0.0] * len(episode)
    running = 0.0
    for t in range(len(episode) - 1, -1, -1):
        running = float(episode[t][2]) + gamma * running
        returns[t] = running
    return returns


def _total_reward(episode: Sequence[Step]) -> float:
    return sum(float(reward) for _anchor, _action, reward in episode)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _std(values: list[float]) -> float:
    """Sample standard deviation (Bessel's correction); 0 for a single value."""
    if len(values) < 2:
        return 0.0
    mean = _mean(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def _normalise(values: list[float], eps: float, use_std: bool) -> list[float]:
    """values - mean (use_std: / (std + eps)); a single value gives 0."""
    if len(values) < 2:
        return [0.0] * len(values)
    mean = _mean(values)
    scale = _std(values) + eps if use_std else 1.0
    if scale == 0.0:  # eps = 0 and equal values
        return [0.0] * len(values)
    return [(v - mean) / scale for v in values]
