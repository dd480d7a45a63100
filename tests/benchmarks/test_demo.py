"""``make demo``: the expert and the random agent on the registered environments."""

from __future__ import annotations

from agentenvs.benchmarks.demo import available_envs, format_summary, run_demo


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
    summary = learning_demo(tmp_path, settings=settings, progress=False)
    printed = capsys.readouterr().out
    assert "teacher trajectories: 12 expert episodes" in printed
    assert "RL tasks: 12 of them, each under 2 permutations of the item names" in printed
    assert "cut-state queries (seed 0)" in printed and "validated" in printed
    assert "| prefix-grpo |" in printed and "| sft |" in printed
    assert not set(summary["train_task_ids"]) & set(summary["eval_task_ids"])
    assert (tmp_path / "curve.png").is_file()
