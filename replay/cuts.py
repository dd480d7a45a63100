"""Cut selection: which assistant turns of a teacher trajectory become cut-state queries.

Prefix-GRPO §3.1 and appendix 6.2.0.1, with the exact rules of its public code:

* the SFT model's teacher-forced next-token entropy ``H`` at every assistant token (content
  through ``<|im_end|>``), all assistant turns concatenated in order;
* ``entropy-change`` (the default): a centred moving average ``Ĥ`` of radius ``window // 2``
  that shrinks at the edges, then ``s_0 = 0``, ``s_j = |Ĥ_j - Ĥ_{j-1}|``;
  ``raw-entropy``: ``s_j = H_j`` (no smoothing);
* tokens ranked by ``(-s_j, j)``; the best token of each assistant turn is kept, and ranking
  stops at ``k`` distinct turns (fewer turns than ``k``: fewer cuts);
* ``fixed-ratio``: for each ratio, the smallest turn ``idx`` with ``idx / (N - 1) >= ratio``
  (``N`` assistant turns; distinct turns only), the paper's two sets as presets;
* a cut after turn ``t`` makes a query whose prompt ends at the observation that followed ``t``;
  a cut whose continuation does not start with an observation is dropped (and counted), and
  every trajectory also gives one raw no-prefix query (:func:`agentenvs.replay.query.raw_query`).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentenvs.agents.trajectory import Trajectory
from agentenvs.replay.query import CutQuery, DroppedCut, build_query, raw_query
from agentenvs.replay.tokens import RenderedChat, render_chat

__all__ = [
    "FIXED_RATIO_PRESETS",
    "CutConfig",
    "CutStrategy",
    "SelectedCut",
    "assistant_entropies",
    "change_scores",
    "fixed_ratio_turns",
    "queries_for_trajectory",
    "select_cuts",
    "smooth_centered",
    "token_scores",
    "top_k_turns",
    "trajectory_entropies",
]

FIXED_RATIO_PRESETS: dict[str, tuple[float, ...]] = {
    "paper-a": (0.1, 0.3, 0.5),
    "paper-b": (0.25, 0.5, 0.7),
}


class CutStrategy(str, enum.Enum):
    """How cut turns are chosen."""

    ENTROPY_CHANGE = "entropy-change"
    RAW_ENTROPY = "raw-entropy"
    FIXED_RATIO = "fixed-ratio"


@dataclass(frozen=True)
class CutConfig:
    """One cut-selection strategy and its settings.

    Attributes:
        strategy: ``entropy-change`` (default), ``raw-entropy`` or ``fixed-ratio``.
        window: moving-average window of ``entropy-change`` (radius ``window // 2``); 11.
        k: most cuts (distinct assistant turns) per trajectory for the entropy strategies; 3.
        ratios: relative depths of ``fixed-ratio``, each in [0, 1]; ``paper-a`` by default.
        name: the label of its queries in files and summaries; the strategy's value if empty.
    """

    strategy: CutStrategy = CutStrategy.ENTROPY_CHANGE
    window: int = 11
    k: int = 3
    ratios: tuple[float, ...] = FIXED_RATIO_PRESETS["paper-a"]
    name: str = ""

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "strategy", CutStrategy(self.strategy))
        except ValueError:
            valid = [s.value for s in CutStrategy]
            raise ValueError(
                f"unknown cut strategy {self.strategy!r}; choose from {valid}"
            ) from None
        if self.window < 1:
            raise ValueError(f"window must be at least 1, got {self.window}")
        if self.k < 1:
            raise ValueError(f"k must be at least 1, got {self.k}")
        if not self.ratios or any(not 0.0 <= r <= 1.0 for r in self.ratios):
            raise ValueError(
                f"ratios must be a non-empty list of values in [0, 1], got {self.ratios}"
            )
        object.__setattr__(self, "ratios", tuple(float(r) for r in self.ratios))
        if not self.name:
            object.__setattr__(self, "name", self.strategy.value)

    @property
    def needs_model(self) -> bool:
        return self.strategy is not CutStrategy.FIXED_RATIO


@dataclass(frozen=True)
class SelectedCut:
    """A chosen cut: after assistant turn ``turn``; for entropy strategies, the token that chose
    it (``index`` in the assistant-token sequence) and its score."""

    turn: int
    index: int | None = None
    score: float | None = None


# --------------------------------------------------------------------------------------------
# Pure scoring and selection


def smooth_centered(values: Sequence[float] | np.ndarray, window: int) -> np.ndarray:
    """Centred moving average of radius ``window // 2``, shrinking at the edges."""
    x = np.asarray(values, dtype=np.float64)
    n = len(x)
    if n == 0:
        return x.copy()
    radius = window // 2
    cumulative = np.concatenate([[0.0], np.cumsum(x)])
    j = np.arange(n)
    lo = np.maximum(0, j - radius)
    hi = np.minimum(n, j + radius + 1)
    return (cumulative[hi] - cumulative[lo]) / (hi - lo)


def change_scores(smoothed: Sequence[float] | np.ndarray) -> np.ndarray:
    """``s_0 = 0``, ``s_j = |Ĥ_j - Ĥ_{j-1}|``."""
    h = np.asarray(smoothed, dtype=np.float64)
    if len(h) == 0:
        return h.copy()
    return np.concatenate([[0.0], np.abs(np.diff(h))])


def token_scores(entropy: Sequence[float] | np.ndarray, config: CutConfig) -> np.ndarray:
    """The per-token score of an entropy strategy."""
    if config.strategy is CutStrategy.ENTROPY_CHANGE:
        return change_scores(smooth_centered(entropy, config.window))
    if config.strategy is CutStrategy.RAW_ENTROPY:
        return np.asarray(entropy, dtype=np.float64).copy()
    raise ValueError(f"{config.strategy.value} does not score tokens")


def top_k_turns(
    scores: Sequence[float] | np.ndarray, turns: Sequence[int] | np.ndarray, k: int
) -> list[SelectedCut]:
    """Rank tokens by ``(-score, index)``; keep each turn's best token until ``k`` turns.

    Returned in rank order. ``turns[j]`` is the assistant turn of token ``j``.
    """
    scores = np.asarray(scores, dtype=np.float64)
    if len(scores) != len(turns):
        raise ValueError(f"{len(scores)} scores but {len(turns)} turn labels")
    order = np.lexsort((np.arange(len(scores)), -scores))  # last key is the primary one
    chosen: dict[int, SelectedCut] = {}
    for j in order:
        turn = int(turns[j])
        if turn not in chosen:
            chosen[turn] = SelectedCut(turn, int(j), float(scores[j]))
            if len(chosen) == k:
                break
    return list(chosen.values())


def fixed_ratio_turns(n_turns: int, ratios: Sequence[float]) -> list[int]:
    """For each ratio the smallest ``idx`` with ``idx / (n_turns - 1) >= ratio`` (distinct)."""
    if n_turns <= 0:
        return []
    chosen: list[int] = []
    for ratio in ratios:
        if n_turns == 1:
            turn = 0
        else:
            turn = next((i for i in range(n_turns) if i / (n_turns - 1) >= ratio), n_turns - 1)
        if turn not in chosen:
            chosen.append(turn)
    return chosen


def select_cuts(
    config: CutConfig,
    n_turns: int,
    entropy: Sequence[float] | np.ndarray | None = None,
    turns: Sequence[int] | np.ndarray | None = None,
) -> list[SelectedCut]:
    """The cuts of one trajectory under ``config`` (entropy strategies need entropy and turns)."""
    if config.strategy is CutStrategy.FIXED_RATIO:
        return [SelectedCut(t) for t in fixed_ratio_turns(n_turns, config.ratios)]
    if entropy is None or turns is None:
        raise ValueError(f"{config.name} needs the per-token entropy and turn of each token")
    return top_k_turns(token_scores(entropy, config), turns, config.k)


# --------------------------------------------------------------------------------------------
# Trajectories -> queries


def trajectory_entropies(
    scorer: Any, tokenizer: Any, trajectories: Sequence[Trajectory]
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per trajectory: (entropy, assistant turn, token position) of every assistant token."""
    return assistant_entropies(scorer, [render_chat(tokenizer, t.messages) for t in trajectories])


def assistant_entropies(
    scorer: Any, rendered: Sequence[RenderedChat]
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """:func:`trajectory_entropies` for conversations already rendered."""
    stats = scorer.score(
        [r.token_ids for r in rendered], [r.assistant_positions() for r in rendered]
    )
    return [
        (s.entropy, np.asarray(r.assistant_turns(), dtype=np.int64), s.positions)
        for r, s in zip(rendered, stats, strict=True)
    ]


def queries_for_trajectory(
    traj: Trajectory,
    index: int,
    configs: Sequence[CutConfig],
    entropy: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> tuple[list[CutQuery], list[DroppedCut]]:
    """The raw query and every config's cut queries of one trajectory, plus dropped cuts.

    ``entropy`` is this trajectory's item of :func:`trajectory_entropies` (needed when a config
    is an entropy strategy).
    """
    queries = [raw_query(traj, index)]
    dropped: list[DroppedCut] = []
    for config in configs:
        values, turns, positions = entropy if entropy is not None else (None, None, None)
        for cut in select_cuts(config, len(traj.steps), values, turns):
            token = None
            if cut.index is not None:
                assert values is not None and positions is not None
                token = {
                    "index": cut.index,
                    "position": int(positions[cut.index]),
                    "score": cut.score,
                    "entropy": float(values[cut.index]),
                }
            made = build_query(traj, index, cut.turn, config.name, token)
            (dropped if isinstance(made, DroppedCut) else queries).append(made)  # type: ignore[arg-type]
    return queries, dropped
