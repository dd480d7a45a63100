"""The session-memory benchmark runs end to end in fresh processes and writes its table and JSON."""

from __future__ import annotations

import json

from agentenvs.benchmarks.speed import session_memory


def test_session_memory_writes_a_row_per_environment(tmp_path):
    out = tmp_path / "memory"
    code = session_memory.main(
        ["TextCraft-v0", "Sokoban-v0", "--games", "2", "--per-game", "2", "--out", str(out)]
    )
    assert code == 0
    table = out.with_suffix(".md").read_text(encoding="utf-8")
    assert "| TextCraft-v0 | 2 x 2 |" in table and "| Sokoban-v0 | 2 x 2 |" in table
    assert "cores" in table  # the machine is named
    rows = json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))["rows"]
    assert [r["env_id"] for r in rows] == ["TextCraft-v0", "Sokoban-v0"]
    for row in rows:
        assert row["sessions"] == 4
        assert row["baseline_rss"] > 10_000_000  # a Python process with the environment loaded
        assert row["tracemalloc_per_session"] > 0  # each live session holds some Python objects
