"""The PTGPO speed benchmark's importable pieces (the timings themselves are not asserted)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from agentenvs.benchmarks.speed.ptgpo import (  # noqa: E402
    corridor_groups,
    format_growth,
    growth_rows,
)


def test_corridor_groups_shape_and_sparse_rewards():
    groups = corridor_groups(3, 4, 12, seed=1)
    assert [len(episodes) for episodes in groups] == [4, 4, 4]
    assert all(len(episode) == 12 for episodes in groups for episode in episodes)
    for episodes in groups:
        for episode in episodes:
            assert all(reward == 0.0 for _, _, reward in episode[:-1])
    assert corridor_groups(3, 4, 12, seed=1) == groups  # seeded


def test_growth_rows_and_table():
    rows = growth_rows(quick=True, lengths=(4,))
    assert rows[0]["rows"] == 16 * 8 * 4 and rows[0]["ptgpo_s"] > 0
    table = format_growth(rows)
    assert table.splitlines()[0].startswith("| steps/episode |") and "| 4 | 512 |" in table
