"""The learning benchmark's validation split, its --set overrides, and the RL arms' training
diagnostics in the summary."""

from __future__ import annotations

import pytest

from agentenvs.benchmarks.learning.report import (
    diagnostics,
    format_diagnostics,
    format_summary,
)
from agentenvs.benchmarks.learning.run import parse_overrides
from agentenvs.benchmarks.learning.settings import (
    eval_task_ids,
    preset,
    train_task_ids,
    validation_task_ids,
)
from agentenvs.registration import build_env


def test_validation_tasks_come_from_train_after_the_training_tasks():
    settings = preset("sokoban", train_tasks=10, validation_tasks=4)
    train = train_task_ids(settings)
    validation = validation_task_ids(settings)
    test = eval_task_ids(settings)
    assert train == [f"seed/{s}" for s in range(10)]
    assert validation == [f"seed/{s}" for s in range(10, 14)]
    assert not set(validation) & set(test) and not set(train) & set(test)
    assert (
        eval_task_ids(
            preset("sokoban", train_tasks=10, validation_tasks=4, eval_split="validation")
        )
        == validation
    )
    with pytest.raises(ValueError, match="validation_tasks >= 1"):
        preset("sokoban", validation_tasks=0, eval_split="validation")
    with pytest.raises(ValueError, match="eval_split"):
        preset("sokoban", eval_split="train")


def test_the_sokoban_preset_holds_validation_rooms_apart():
    settings = preset("sokoban")
    assert settings.validation_tasks >= 24 and settings.eval_split == "test"
    assert settings.rl_samples >= 8  # the papers' group size
    assert sum(settings.eval_per_family.values()) >= 24 and len(settings.seeds) == 3


def test_the_sokoban_preset_plays_test_rooms_no_earlier_run_played():
    fresh = eval_task_ids(preset("sokoban"))
    first = eval_task_ids(preset("sokoban", eval_offset=0))
    assert len(fresh) == len(first) == 24 and len(set(fresh)) == 24
    assert not set(fresh) & set(first)
    assert set(fresh) <= set(build_env("Sokoban-v0").task_ids("test"))
    with pytest.raises(ValueError, match="eval_offset"):
        preset("sokoban", eval_offset=-1)


def test_set_overrides_parse_json_and_strings():
    got = parse_overrides(
        ["rl_lr=0.001", "eval_split=validation", "seeds=[0, 2]", "rl_iterations=4"]
    )
    assert got == {"rl_lr": 0.001, "eval_split": "validation", "seeds": (0, 2), "rl_iterations": 4}
    with pytest.raises(SystemExit, match="KEY=VALUE"):
        parse_overrides(["no_such_field=1"])
    with pytest.raises(SystemExit, match="KEY=VALUE"):
        parse_overrides(["rl_lr"])


def test_a_model_override_replaces_only_the_shape_fields_it_names():
    settings = preset("sokoban", **parse_overrides(['model={"hidden_size": 256}']))
    assert settings.model.hidden_size == 256
    assert settings.model.num_hidden_layers == preset("sokoban").model.num_hidden_layers
    with pytest.raises(ValueError, match="no_such_width"):
        preset("sokoban", model={"no_such_width": 1})


def test_diagnostics_average_seeds_per_iteration_and_skip_missing_values():
    training = {
        "ptgpo": {
            "0": {"adv/tree_branching": [2.0, 3.0, 1.0], "rollout/success_rate": [0.1, 0.2, 0.3]},
            "1": {"adv/tree_branching": [4.0, None, 3.0], "rollout/success_rate": [0.3, 0.4, 0.5]},
        },
        "grpo": {"0": {"adv/tree_branching": [None, None], "rollout/success_rate": [0.0, 1.0]}},
    }
    per_arm = diagnostics(training)
    assert per_arm["ptgpo"]["adv/tree_branching"] == [3.0, 3.0, 2.0]
    assert per_arm["ptgpo"]["rollout/success_rate"] == pytest.approx([0.2, 0.3, 0.4])
    assert per_arm["grpo"]["adv/tree_branching"] == [None, None]
    lines = format_diagnostics(per_arm, windows=2)
    text = "\n".join(lines)
    assert "| arm | diagnostic | it 1-1 | it 2-3 |" in text  # 3 iterations in 2 slices
    assert "| ptgpo | children per expanded node | 3.000 | 2.500 |" in text
    assert "| grpo | training success | 0.000 | 1.000 |" in text
    assert "| grpo | children per expanded node |" not in text  # no value: no row


def test_summary_markdown_names_the_split_and_shows_diagnostics():
    summary = {
        "env_id": "Sokoban-v0",
        "settings": {"eval_k": 8, "seeds": [0], "eval_n": 16},
        "machine": {"cpu_model": "cpu", "torch_version": "2", "torch_threads": 1},
        "train_task_ids": ["seed/0"],
        "rl_task_ids": ["seed/0"],
        "eval_task_ids": ["seed/5"],
        "eval_split": "validation",
        "results": {},
        "paired": {},
        "diagnostics": {"gigpo": {"adv/grouped_step_frac": [0.5, 0.7]}},
        "wall_seconds": 1.0,
    }
    text = format_summary(summary)
    assert "1 validation tasks (train split" in text
    assert "| gigpo | steps in anchor groups of >= 2 | " in text
    assert "Diagnostics" not in format_summary(summary, diagnostics=False)


def test_contrasts_pair_rl_arms_over_seed_and_task():
    from agentenvs.benchmarks.learning.report import contrasts

    per_task = {
        "sft": {"0": {"a": [0, 4], "b": [0, 4]}},
        "grpo": {"0": {"a": [1, 4], "b": [2, 4]}, "1": {"a": [0, 4], "b": [0, 4]}},
        "ptgpo": {"0": {"a": [3, 4], "b": [2, 4]}, "1": {"a": [1, 4], "b": [0, 4]}},
    }
    got = contrasts(per_task)
    assert set(got) == {"ptgpo - grpo"}  # gigpo has no results
    row = got["ptgpo - grpo"]
    diffs = [0.5, 0.0, 0.25, 0.0]
    assert row["mean_diff"] == pytest.approx(sum(diffs) / 4) and row["pairs"] == 4
    assert (row["better"], row["worse"]) == (2, 0)
