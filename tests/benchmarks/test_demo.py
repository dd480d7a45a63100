"""``make demo``: the expert and the random agent on the registered environments, then the
learning stage, which says what one seed can and cannot show."""

from __future__ import annotations

import json
from pathlib import Path

from agentenvs.benchmarks.demo import (
    COMMITTED_BENCHMARK,
    COMMITTED_BENCHMARKS,
    available_envs,
    committed_benchmark,
    format_summary,
    learning_verdict,
    run_demo,
)


def test_available_envs_reports_unknown_ids() -> None:
    ok, skipped = available_envs(["TextCraft-v0", "Nope-v0"])
    assert ok == ["TextCraft-v0"] and "not registered" in skipped["Nope-v0"]


def test_demo_on_textcraft(tmp_path, capsys) -> None:
    rows = run_demo(["TextCraft-v0"], k=2, out_root=tmp_path, progress=False)
    printed = capsys.readouterr().out
    assert [(r.env_id, r.agent) for r in rows] == [
        ("TextCraft-v0", "expert"),
        ("TextCraft-v0", "random"),
    ]
    expert, random = (r.overall for r in rows)
    assert expert.avg_at_k == 1.0 and expert.tasks == 100 and expert.k == 1
    assert 0.0 < random.avg_at_k < 1.0 and random.samples == 200 and random.k == 2
    assert "### Summary" in printed and "### TextCraft-v0 / random / test" in printed
    assert (tmp_path / "TextCraft-v0" / "random" / "results.png").is_file()
    assert "| TextCraft-v0 | expert | 100 | 100 | 100.00 | 100.00 | 1 | test |" in format_summary(
        rows
    )


def test_learning_demo_runs_the_pipeline_on_held_out_tasks(tmp_path, capsys) -> None:
    from agentenvs.benchmarks.demo import learning_demo
    from agentenvs.benchmarks.learning.settings import preset

    settings = preset("smoke", arms=("sft", "prefix-grpo"), seeds=(0,))
    summary = learning_demo(tmp_path, settings=settings, progress=True)
    captured = capsys.readouterr()
    printed = captured.out
    assert "teacher trajectories: 12 expert episodes" in printed
    assert "RL tasks: 12 of them, each under 2 permutations of the item names" in printed
    assert "cut-state queries (seed 0)" in printed and "validated" in printed
    assert "| prefix-grpo |" in printed and "| sft |" in printed
    assert not set(summary["train_task_ids"]) & set(summary["eval_task_ids"])
    assert (tmp_path / "curve.png").is_file()
    # one seed: its paired difference with its SE, called a smoke run, the committed run beside
    assert "prefix-grpo vs sft on 3 held-out tasks x 1 seed(s): " in printed
    assert "1 seed on 3 tasks is a smoke run" in printed
    committed = json.loads(COMMITTED_BENCHMARK.read_text())
    assert "### The committed learning benchmark: TextCraft-v0" in printed
    assert "### The committed learning benchmark: Sokoban-v0" in printed
    assert f"seeds {committed['settings']['seeds']}" in printed.split("is a smoke run")[1]
    # the bars move per SFT step, RL iteration and evaluation episode (3 tasks x 8 episodes)
    bars = captured.err
    assert "sft: 100%" in bars and "40/40" in bars
    assert "eval sft: 100%" in bars and "24/24" in bars
    assert "rl prefix-grpo" in bars and "2/2" in bars and "eval prefix-grpo @2: 100%" in bars


def test_learning_verdict_weighs_the_difference_against_its_standard_error(tmp_path) -> None:
    summary = {
        "settings": {"seeds": [0]},
        "eval_task_ids": ["a", "b", "c", "d"],
        "paired": {
            "prefix-grpo": {"mean_diff": 0.0, "se": 0.03, "pairs": 4, "better": 1, "worse": 1},
            "grpo": {"mean_diff": 0.1, "se": 0.04, "pairs": 4, "better": 3, "worse": 0},
        },
    }
    text = learning_verdict(summary)
    assert "prefix-grpo vs sft on 4 held-out tasks x 1 seed(s): +0.000 success rate" in text
    assert "the difference is not larger than its standard error" in text
    assert "grpo vs sft on 4 held-out tasks x 1 seed(s): +0.100" in text
    assert "1 seed on 4 tasks is a smoke run" in text
    summary["settings"]["seeds"] = [0, 1, 2]
    assert "smoke run" not in learning_verdict(summary)
    assert committed_benchmark(tmp_path / "absent.json") is None


def test_committed_tables_name_files_that_exist() -> None:
    for path in COMMITTED_BENCHMARKS:
        text = committed_benchmark(path)
        assert text is not None and "| ptgpo |" in text
        source, how = text.rsplit("\n", 1)[1].strip("()").split("; how it was run: ")
        assert source == f"from {path}" and Path(how).is_file()
