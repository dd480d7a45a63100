"""The environment speed rows (per action kind, random walks) run and compare against their
same-run baselines (no timed assertion: ``met`` is reported, not asserted)."""

from __future__ import annotations

import importlib.util

import pytest

from agentenvs.benchmarks.speed import textcraft
from agentenvs.benchmarks.speed.timing import format_table


def test_textcraft_kind_rows() -> None:
    rows = textcraft.kind_rows(quick=True)
    assert [r.operation.split(" (")[0] for r in rows] == [
        f"step: {kind}" for kind in textcraft.KIND_ACTIONS
    ]
    assert all(r.baseline_seconds and r.seconds > 0 and r.met is not None for r in rows)
    assert "the game logic alone (_apply)" in format_table(rows)


def test_babyai_walk_row() -> None:
    if importlib.util.find_spec("minigrid") is None:
        pytest.skip("needs minigrid")
    from agentenvs.benchmarks.speed import babyai

    row = babyai._walk_row(quick=True)
    assert row.baseline_seconds and row.seconds > 0 and row.met is not None
    assert row.baseline == "the same primitives on raw minigrid"


def test_alfworld_rows_against_the_original_process(monkeypatch) -> None:
    if importlib.util.find_spec("alfworld") is None:
        pytest.skip("needs the alfworld extra")
    from agentenvs.benchmarks.speed import alfworld

    comparison = alfworld.compare_with_original(rounds=1, games_per_round=1, commands=4)
    assert comparison.games == 1 and len(comparison.ours_steps) == 4
    rows = comparison.rows()
    assert [r.baseline for r in rows] == ["original engine, own process"] * 2
    assert all(r.ratio and r.met is not None for r in rows)
    assert all(s > 0 for s in comparison.steps_per_second())

    monkeypatch.setattr(alfworld, "first_observation", lambda text: text + " (changed)")
    with pytest.raises(RuntimeError, match="differs from the original engine"):
        alfworld.compare_with_original(rounds=1, games_per_round=1, commands=1)
