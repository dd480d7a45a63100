"""The rollout-speed benchmark runs and compares like with like (timings reported, not asserted)."""

from __future__ import annotations

from agentenvs.benchmarks.rollout_speed import measure


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


def test_eval_speedup_runs_both_settings_on_the_same_episodes(tmp_path) -> None:
    from agentenvs.agents.tiny_model import build_tiny_model
    from agentenvs.benchmarks.rollout_speed import measure_eval_speedup

    speedup = measure_eval_speedup(
        build_tiny_model(tmp_path / "tiny"),
        {"dtype": "fast"},
        episodes=2,
        repeats=1,
        threads=1,
        max_turns=2,
        max_new_tokens=8,
    )
    assert speedup.before_tokens > 0 and speedup.after_tokens > 0
    row = speedup.row()
    assert (
        row.baseline.startswith("float32, plain decode") and abs(row.ratio - speedup.ratio) < 1e-9
    )
