"""The environment speed rows (per action kind, random walks) run and compare against their
same-run baselines (no timed assertion: ``met`` is reported, not asserted)."""

from __future__ import annotations

import importlib.util

import pytest

from agentenvs.benchmarks.speed import textcraft
from agentenvs.benchmarks.timing import format_table


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
