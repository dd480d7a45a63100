"""Grouping helpers shared by the advantage estimators and the batch-level loss helpers.

Groups are found by hashing (a dict from key to code, in order of first appearance), never by
comparing every pair, and never through Python's ``hash()`` of strings leaking into an order: the
codes depend only on the order of the input, so they are the same under any ``PYTHONHASHSEED``.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

__all__ = [
    "BatchRows",
    "EpisodeLayout",
    "as_numpy",
    "check_length",
    "factorize",
    "factorize_ints",
    "group_standardize",
    "group_std",
]


class BatchRows(Protocol):
    """The rows an episode layout reads (:class:`agentenvs.train.advantages.AdvantageBatch`)."""

    @property
    def rewards(self) -> torch.Tensor: ...
    @property
    def group_index(self) -> Sequence[Hashable]: ...
    @property
    def episode_index(self) -> Sequence[Hashable] | None: ...
    @property
    def step_index(self) -> Sequence[int] | None: ...
    @property
    def anchors(self) -> Sequence[str] | None: ...


def factorize(keys: Iterable[Hashable]) -> tuple[np.ndarray, int]:
    """Codes 0..n-1 for ``keys`` in order of first appearance, and n (distinct keys)."""
    table: dict[Hashable, int] = {}
    codes = [table.setdefault(key, len(table)) for key in keys]
    return np.asarray(codes, dtype=np.int64), len(table)


def factorize_ints(keys: np.ndarray, key_range: int) -> tuple[np.ndarray, int]:
    """Codes 0..n-1 for non-negative integer ``keys`` < ``key_range``, and n, in O(len(keys)).

    When the key range is small (at most 4 x the number of keys + 1024) the key itself is the
    hash (direct addressing: a presence table and a running count); otherwise a dict.
    """
    if key_range <= 4 * len(keys) + 1024:
        present = np.zeros(key_range, dtype=bool)
        present[keys] = True
        code_of_key = np.cumsum(present) - 1
        return code_of_key[keys], int(code_of_key[-1] + 1) if key_range else 0
    return factorize(keys.tolist())


def as_numpy(values: object, *, dtype: type = np.float64) -> np.ndarray:
    """``values`` (a tensor, array or sequence) as a 1-D or 2-D numpy array of ``dtype``."""
    detach = getattr(values, "detach", None)
    if detach is not None:  # a torch tensor
        return detach().cpu().numpy().astype(dtype)
    return np.asarray(values, dtype=dtype)


def group_standardize(
    values: np.ndarray, groups: np.ndarray, n_groups: int, *, eps: float, use_std: bool
) -> np.ndarray:
    """Per-group ``values - mean`` (``use_std``: divided by ``std + eps``, Bessel's correction).

    A group of one member gets 0 (its value minus itself); a group whose values are all equal
    gets 0 as well. Shapes: ``values`` (n,), ``groups`` (n,) codes in ``[0, n_groups)``.
    """
    count = np.bincount(groups, minlength=n_groups).astype(np.float64)
    mean = np.bincount(groups, weights=values, minlength=n_groups) / np.maximum(count, 1.0)
    centered = values - mean[groups]
    singleton = count[groups] <= 1
    centered[singleton] = 0.0
    if not use_std:
        return centered
    scale = group_std(centered, groups, count)[groups] + eps
    return np.divide(centered, scale, out=np.zeros_like(centered), where=scale > 0)


def group_std(centered: np.ndarray, groups: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Per-group sample std (Bessel) from already centred values; 0 for singletons."""
    squares = np.bincount(groups, weights=centered * centered, minlength=len(count))
    dof = np.maximum(count - 1.0, 1.0)
    return np.where(count > 1, np.sqrt(squares / dof), 0.0)


def check_length(name: str, values: Sequence[object] | np.ndarray, expected: int) -> None:
    """Raise a ValueError when ``values`` does not have one entry per batch row."""
    if len(values) != expected:
        raise ValueError(
            f"{name} has {len(values)} entries but the batch has {expected} rows; "
            "give exactly one entry per row (one row = one generated completion)."
        )


@dataclass(frozen=True)
class EpisodeLayout:
    """Rows arranged as E episodes: ``rows[e, t]`` is the batch row of step t (-1 past the end)."""

    row_episode: np.ndarray  # (B,) episode code of each row
    row_step: np.ndarray  # (B,) t of each row
    row_group: np.ndarray  # (B,) task-group code of each row
    episode_group: np.ndarray  # (E,) task-group code of each episode
    lengths: np.ndarray  # (E,) T_i
    rows: np.ndarray  # (E, T_max)
    n_groups: int

    @classmethod
    def build(cls, batch: BatchRows) -> EpisodeLayout:
        n_rows = batch.rewards.shape[0]
        row_group, n_groups = factorize(batch.group_index)
        if batch.episode_index is None:
            row_episode, n_episodes = np.arange(n_rows, dtype=np.int64), n_rows
        else:
            keys = zip(row_group.tolist(), batch.episode_index, strict=True)
            row_episode, n_episodes = factorize(keys)
        if batch.step_index is None:
            row_step = np.zeros(n_rows, dtype=np.int64)
        else:
            row_step = np.asarray(batch.step_index, dtype=np.int64).reshape(n_rows)
        lengths = np.bincount(row_episode, minlength=n_episodes)
        if n_rows and ((row_step < 0).any() or (row_step >= lengths[row_episode]).any()):
            raise ValueError(
                "step_index must number each episode's rows 0 .. T-1 (T = its number of rows); "
                "check episode_index/step_index (or pass step_index=None for one row per episode)"
            )
        rows = np.full((n_episodes, int(lengths.max(initial=0))), -1, dtype=np.int64)
        rows[row_episode, row_step] = np.arange(n_rows)
        if int((rows >= 0).sum()) != n_rows:
            raise ValueError("two rows of one episode have the same step_index; each t once")
        episode_group = row_group[rows[:, 0]] if n_episodes else row_group[:0]
        return cls(row_episode, row_step, row_group, episode_group, lengths, rows, n_groups)

    def reward_matrix(self, batch: BatchRows) -> np.ndarray:
        rewards = as_numpy(batch.rewards)
        return np.where(self.rows >= 0, rewards[np.maximum(self.rows, 0)], 0.0)

    def episode_rewards(self, batch: BatchRows) -> np.ndarray:
        """(E,) R^(i) = sum of the episode's rewards."""
        return self.reward_matrix(batch).sum(axis=1)

    def episode_advantages(self, batch: BatchRows, *, eps: float, use_std: bool) -> np.ndarray:
        """(E,) A_episode = (R - mean_R) / (std_R + eps) within each task group (without the
        std: R - mean_R)."""
        return group_standardize(
            self.episode_rewards(batch), self.episode_group, self.n_groups, eps=eps, use_std=use_std
        )

    def row_returns(self, batch: BatchRows, gamma: float) -> np.ndarray:
        """(B,) discounted return G_t of each row."""
        rewards = self.reward_matrix(batch)
        returns = np.zeros_like(rewards)
        running = np.zeros(rewards.shape[0])
        for t in range(rewards.shape[1] - 1, -1, -1):
            running = rewards[:, t] + gamma * running
            returns[:, t] = running
        return returns[self.row_episode, self.row_step]

    def anchor_groups(self, batch: BatchRows) -> tuple[np.ndarray, int]:
        """(B,) codes of the step groups: same task group and identical anchor string."""
        return factorize(zip(self.row_group.tolist(), batch.anchors, strict=True))
