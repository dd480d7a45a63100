"""The rollout-speed benchmark runs and compares like with like (timings reported, not asserted)."""

from __future__ import annotations

from agentenvs.benchmarks.speed.rollout import measure


def test_rollout_speed_quick(tmp_path) -> None:
    from agentenvs.agents.tiny_model import build_tiny_model

    speed = measure(True, episodes=4, model_dir=build_tiny_model(tmp_path / "tiny"), threads=1)
    assert (
        speed.batched_calls == 3 and speed.sequential_calls == 4 * 3
    )  # one call per turn vs per episode-turn
    assert speed.batched_tokens_per_s > 0 and speed.sequential_tokens_per_s > 0
    assert 0.0 <= speed.env_share < 1.0
    # episode seeds: both runs sample the same replies (float32 SDPA rows are batch-independent)
    assert speed.same_replies == 1.0 and speed.batched_tokens == speed.sequential_tokens
    rows = speed.rows()
    assert rows[0].baseline == "one episode at a time" and abs(rows[0].ratio - speed.ratio) < 1e-9


def test_engine_speed_runs_both_policies_on_the_same_episodes(tmp_path) -> None:
    from agentenvs.agents.tiny_model import build_tiny_model
    from agentenvs.benchmarks.speed.rollout import measure_engine

    speed = measure_engine(
        build_tiny_model(tmp_path / "tiny"),
        episodes=2,
        repeats=1,
        threads=1,
        max_turns=2,
        max_new_tokens=8,
    )
    assert speed.engine_tokens > 0 and speed.plain_tokens > 0
    assert speed.engine_line.startswith("cpu engine: ")
    row = speed.row()
    assert row.baseline.startswith("plain backend") and abs(row.ratio - speed.ratio) < 1e-9


def test_write_doc_replaces_only_the_measured_section(tmp_path) -> None:
    from agentenvs.benchmarks.speed.rollout import DOC_END, DOC_START, write_doc

    page = tmp_path / "cpu-engine.md"
    page.write_text(f"# The engine\n\nhistory\n\n{DOC_START}\nold table\n{DOC_END}\n\nmore\n")
    write_doc(page, "new table")
    text = page.read_text()
    assert "old table" not in text and "new table" in text
    assert text.startswith("# The engine\n\nhistory") and text.endswith("more\n")
    fresh = tmp_path / "new.md"
    write_doc(fresh, "first")
    assert fresh.read_text() == f"{DOC_START}\nfirst\n{DOC_END}\n"
