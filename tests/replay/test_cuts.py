"""Cut selection on hand-made entropy sequences, and queries built from expert trajectories."""

from __future__ import annotations

import numpy as np
import pytest

from agentenvs.replay.cuts import (
    FIXED_RATIO_PRESETS,
    CutConfig,
    CutStrategy,
    change_scores,
    fixed_ratio_turns,
    queries_for_trajectory,
    select_cuts,
    smooth_centered,
    token_scores,
    top_k_turns,
)
from agentenvs.replay.query import (
    DROP_EPISODE_OVER,
    DROP_NO_OBSERVATION,
    RAW_STRATEGY,
    TrajectoryShapeError,
    build_query,
    raw_query,
)

# --- smoothing and scores -------------------------------------------------------------------


def test_centered_average_by_hand() -> None:
    x = [0, 0, 0, 9, 0, 0, 0]
    assert smooth_centered(x, 3).tolist() == pytest.approx([0, 0, 3, 3, 3, 0, 0])
    assert smooth_centered(x, 1).tolist() == x  # window 1: no smoothing


def test_centered_average_shrinks_at_the_edges() -> None:
    # radius 2: j=0 averages x[0:3], j=1 x[0:4], j=2 x[0:4] (n=4), j=3 x[1:4]
    assert smooth_centered([1, 2, 3, 4], 5).tolist() == pytest.approx([2.0, 2.5, 2.5, 3.0])
    # a window wider than the sequence: every position averages everything in reach
    assert smooth_centered([1.0, 5.0], 11).tolist() == pytest.approx([3.0, 3.0])
    assert smooth_centered([], 11).tolist() == []


def test_even_window_uses_radius_window_over_two() -> None:
    # w = 4 -> radius 2, the same as w = 5
    x = np.arange(10.0) ** 2
    assert smooth_centered(x, 4).tolist() == smooth_centered(x, 5).tolist()


def test_change_scores_by_hand() -> None:
    assert change_scores([1.0, 3.0, 2.0, 2.0]).tolist() == [0.0, 2.0, 1.0, 0.0]
    assert change_scores([5.0]).tolist() == [0.0]
    assert change_scores([]).tolist() == []


def test_entropy_change_and_raw_entropy_scores() -> None:
    h = [1.0, 1.0, 4.0, 1.0, 1.0]
    ec = token_scores(h, CutConfig(CutStrategy.ENTROPY_CHANGE, window=3))
    assert ec.tolist() == pytest.approx([0.0, 1.0, 0.0, 0.0, 1.0])  # smoothed: 1,2,2,2,1
    assert token_scores(h, CutConfig(CutStrategy.RAW_ENTROPY)).tolist() == h
    with pytest.raises(ValueError, match="does not score"):
        token_scores(h, CutConfig(CutStrategy.FIXED_RATIO))


# --- top-k distinct turns ---------------------------------------------------------------------


def test_best_token_per_turn_and_stop_at_k() -> None:
    scores = [0.1, 0.9, 0.8, 0.7, 0.2, 0.6]
    turns = [0, 0, 0, 1, 1, 2]
    cuts = top_k_turns(scores, turns, k=2)
    assert [(c.turn, c.index) for c in cuts] == [(0, 1), (1, 3)]
    assert cuts[0].score == pytest.approx(0.9)


def test_ties_go_to_the_earlier_token() -> None:
    scores = [0.5, 0.5, 0.5, 0.5]
    turns = [0, 1, 2, 3]
    assert [c.turn for c in top_k_turns(scores, turns, k=3)] == [0, 1, 2]
    # a tie inside one turn keeps the earlier token of that turn
    assert top_k_turns([0.0, 0.7, 0.7], [0, 1, 1], k=1)[0].index == 1


def test_fewer_turns_than_k_gives_fewer_cuts() -> None:
    cuts = top_k_turns([0.3, 0.1, 0.2], [0, 0, 1], k=3)
    assert [c.turn for c in cuts] == [0, 1]
    assert top_k_turns([], [], k=3) == []


def test_edge_token_scores_zero_and_the_first_change_wins() -> None:
    # s_0 = 0 always, so a high first entropy cannot select turn 0 by itself
    h = [9.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    config = CutConfig(CutStrategy.ENTROPY_CHANGE, window=1, k=1)
    cut = select_cuts(config, 3, h, [0, 1, 1, 2, 2, 2])[0]
    assert (cut.turn, cut.index) == (1, 1)
    raw = select_cuts(CutConfig(CutStrategy.RAW_ENTROPY, k=1), 3, h, [0, 1, 1, 2, 2, 2])[0]
    assert (raw.turn, raw.index) == (0, 0)


def test_scores_and_turns_must_line_up() -> None:
    with pytest.raises(ValueError, match="turn labels"):
        top_k_turns([1.0, 2.0], [0], k=1)
    with pytest.raises(ValueError, match="needs the per-token entropy"):
        select_cuts(CutConfig(), 3)


# --- fixed ratio --------------------------------------------------------------------------------


def test_fixed_ratio_presets_by_hand() -> None:
    assert fixed_ratio_turns(11, FIXED_RATIO_PRESETS["paper-a"]) == [1, 3, 5]
    assert fixed_ratio_turns(5, FIXED_RATIO_PRESETS["paper-b"]) == [1, 2, 3]
    assert fixed_ratio_turns(4, (0.25, 0.5, 0.7)) == [1, 2, 3]  # 1/3 >= .25, 2/3 >= .5, 3/3 >= .7


def test_fixed_ratio_edges_deduplicate() -> None:
    assert fixed_ratio_turns(2, (0.1, 0.3, 0.5)) == [1]
    assert fixed_ratio_turns(1, (0.1, 0.3, 0.5)) == [0]
    assert fixed_ratio_turns(0, (0.1,)) == []
    assert fixed_ratio_turns(3, (0.0, 1.0)) == [0, 2]


def test_config_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="choose from"):
        CutConfig("entropy")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="window"):
        CutConfig(window=0)
    with pytest.raises(ValueError, match="k must"):
        CutConfig(k=0)
    with pytest.raises(ValueError, match="ratios"):
        CutConfig(CutStrategy.FIXED_RATIO, ratios=(0.5, 1.5))
    assert CutConfig("raw-entropy").name == "raw-entropy"  # type: ignore[arg-type]


# --- queries from trajectories ---------------------------------------------------------------


def test_queries_of_an_expert_trajectory(expert_trajectory) -> None:
    traj = expert_trajectory("TextCraft-v0", "agentgym/421")
    n = len(traj.steps)
    assert n >= 8
    config = CutConfig(CutStrategy.FIXED_RATIO, ratios=(0.0, 0.5, 1.0))
    queries, dropped = queries_for_trajectory(traj, 7, [config])
    raw, *cuts = queries
    assert raw.strategy == RAW_STRATEGY and raw.prefix_turns == 0 and raw.is_raw
    assert [m["role"] for m in raw.messages] == ["system", "user"]
    assert raw.cut_observation == traj.steps[0].anchor and raw.probe_action == traj.steps[0].action
    # the cut after the last turn: the episode is over there
    assert [(d.turn, d.reason) for d in dropped] == [(n - 1, DROP_EPISODE_OVER)]
    first, middle = cuts
    assert first.prefix_turns == 1
    assert middle.prefix_turns == fixed_ratio_turns(n, (0.5,))[0] + 1
    for q in cuts:
        t = q.prefix_turns - 1
        assert q.messages[-1] == {"role": "user", "content": traj.steps[t].observation}
        assert [m["role"] for m in q.messages].count("assistant") == q.prefix_turns
        assert q.prefix_actions == traj.actions[: q.prefix_turns]
        assert q.cut_observation == traj.steps[t].observation and q.cut_from_env
        assert q.probe_action == traj.steps[t + 1].action
        assert q.probe_observation == traj.steps[t + 1].observation
        assert q.trajectory_index == 7 and q.query_id.endswith(f"@{q.prefix_turns}")


def test_cut_without_a_following_observation_is_dropped(expert_trajectory) -> None:
    traj = expert_trajectory("TextCraft-v0", "agentgym/140", final_observation=False)
    dropped = build_query(traj, 0, len(traj.steps) - 1, "x")
    assert dropped.reason == DROP_NO_OBSERVATION
    with pytest.raises(ValueError, match="not an assistant turn"):
        build_query(traj, 0, len(traj.steps), "x")


def test_misaligned_trajectory_is_a_clear_error(expert_trajectory) -> None:
    traj = expert_trajectory("TextCraft-v0", "agentgym/140")
    traj.steps.pop()
    with pytest.raises(TrajectoryShapeError, match="assistant messages but"):
        raw_query(traj, 0)


def test_query_row_round_trip(expert_trajectory) -> None:
    from agentenvs.replay.query import CutQuery

    traj = expert_trajectory("TextCraft-v0", "agentgym/140")
    q = build_query(
        traj, 3, 0, "entropy-change", {"index": 4, "position": 40, "score": 0.5, "entropy": 1.0}
    )
    assert CutQuery.from_row(q.to_row()) == q
    with pytest.raises(ValueError, match="lacks"):
        CutQuery.from_row({"query_id": "x"})
