"""The replay speed benchmark runs, and its query sets are what its docstring says."""

from __future__ import annotations

from agentenvs.benchmarks.speed import replay as replay_speed
from agentenvs.benchmarks.speed.timing import format_table


def test_bench_quick_rows_and_notes() -> None:
    rows, notes = replay_speed.bench(quick=True)
    assert len(rows) == 3 and len(notes) == 3
    assert all(r.env_id == "TextCraft-v0" and r.seconds > 0 and r.met is not None for r in rows)
    assert rows[0].baseline_seconds and rows[1].baseline_seconds
    assert "queries/s" in format_table(rows)
    assert "env steps" in notes[0] and "x)" in notes[1]


def test_query_sets() -> None:
    trajectories = replay_speed.expert_trajectories()[:10]
    paper = replay_speed.paper_queries(trajectories)
    every = replay_speed.every_turn_queries(trajectories)
    assert {q.trajectory_index for q in paper} == set(range(10))
    per_traj = [sum(1 for q in paper if q.trajectory_index == i) for i in range(10)]
    assert all(1 <= n <= 4 for n in per_traj)  # raw + at most 3 cuts
    # every turn but the winning one, plus the raw query
    assert len(every) == sum(len(t.steps) for t in trajectories)
