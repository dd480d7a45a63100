"""The learning benchmark: its statistics, and the smoke preset end to end (about a minute),
resumed without redoing a finished unit."""

from __future__ import annotations

import json
import math

import pytest

from agentenvs.benchmarks.learning.check import main, preset, run_benchmark
from agentenvs.benchmarks.learning.report import arm_table, contrasts, paired


def test_paired_difference_and_seed_standard_error():
    per_task = {
        "sft": {"0": {"a": [2, 4], "b": [0, 4]}, "1": {"a": [4, 4], "b": [1, 4]}},
        "ptgpo": {"0": {"a": [3, 4], "b": [2, 4]}, "1": {"a": [4, 4], "b": [1, 4]}},
    }
    diffs = [0.25, 0.5, 0.0, 0.0]
    mean = sum(diffs) / 4
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / 3)
    row = paired(per_task)["ptgpo"]
    assert row["mean_diff"] == pytest.approx(mean)
    assert row["se"] == pytest.approx(sd / 2)
    assert row["z"] == pytest.approx(mean / (sd / 2))
    assert (row["pairs"], row["better"], row["worse"]) == (4, 2, 0)
    table = arm_table(per_task, k=2)
    seeds = [0.25, 0.625]  # Avg over tasks per seed: (0.5 + 0) / 2, (1 + 0.25) / 2
    assert table["sft"]["avg_at_k"]["mean"] == pytest.approx(sum(seeds) / 2)
    assert table["sft"]["avg_at_k"]["se"] == pytest.approx(abs(seeds[0] - seeds[1]) / 2)
    # Pass@2 with n=4: task a seed 0: 1 - C(2,2)/C(4,2) = 5/6; task b: 0
    assert table["sft"]["per_seed"]["0"][1] == pytest.approx((5 / 6 + 0) / 2)


def test_seed_clustered_figures_and_every_contrast():
    per_task = {
        "sft": {"0": {"a": [2, 4], "b": [0, 4]}, "1": {"a": [4, 4], "b": [1, 4]}},
        "ptgpo": {"0": {"a": [3, 4], "b": [2, 4]}, "1": {"a": [4, 4], "b": [1, 4]}},
        "grpo": {"0": {"a": [2, 4], "b": [0, 4]}, "1": {"a": [3, 4], "b": [1, 4]}},
        "oracle": {"0": {"a": [4, 4], "b": [1, 4]}, "1": {"a": [4, 4], "b": [3, 4]}},
        "random": {"0": {"a": [0, 4], "b": [0, 4]}, "1": {"a": [1, 4], "b": [0, 4]}},
    }
    row = paired(per_task)["ptgpo"]["clustered"]
    per_seed = [(0.25 + 0.5) / 2, 0.0]  # seed 0: tasks a, b; seed 1: no change
    mean = sum(per_seed) / 2
    se = abs(per_seed[0] - per_seed[1]) / 2  # sd (ddof 1) of two values / sqrt(2)
    assert row["per_seed"] == pytest.approx({"0": per_seed[0], "1": per_seed[1]})
    assert (row["mean"], row["se"], row["t"], row["df"]) == pytest.approx((mean, se, mean / se, 1))
    between = contrasts(per_task)
    assert list(between) == ["sft - random", "oracle - grpo", "ptgpo - grpo", "ptgpo - oracle"]
    # oracle - grpo over (seed, task): (4-2)/4, (1-0)/4, (4-3)/4, (3-1)/4
    assert between["oracle - grpo"]["mean_diff"] == pytest.approx((0.5 + 0.25 + 0.25 + 0.5) / 4)
    assert between["sft - random"]["clustered"]["per_seed"]["1"] == pytest.approx(
        ((4 - 1) / 4 + 1 / 4) / 2
    )
    one_seed = paired({a: {"0": v["0"]} for a, v in per_task.items()})["grpo"]["clustered"]
    assert one_seed["se"] is None and one_seed["t"] is None and one_seed["df"] is None


def test_smoke_benchmark_end_to_end_and_resume(tmp_path, capsys):
    settings = preset("smoke")
    summary = run_benchmark(settings, tmp_path, progress=False)
    assert summary["schema_version"] == 1 and summary["env_id"] == "TextCraft-v0"
    train, evals = summary["train_task_ids"], summary["eval_task_ids"]
    assert train and evals and not set(train) & set(evals)
    from agentenvs.registration import env_class

    env = env_class("TextCraft-v0")()
    assert set(train) <= set(env.task_ids("train")) and set(evals) <= set(env.task_ids("test"))
    assert {env.family(t) for t in evals} == {"depth-1", "depth-2"}
    # RL (and Prefix-GRPO's teacher) played the training tasks under permuted item names
    assert summary["rl_task_ids"] == train and summary["rl_name_permutations"] == 2
    from agentenvs.agents.trajectory import read_trajectories

    teacher = list(read_trajectories(tmp_path / "rl-expert.jsonl"))
    assert [t.task_id for t in teacher] == [f"{t}/names-{k}" for t in train for k in (1, 2)]
    assert all(t.won for t in teacher)
    samples = (tmp_path / "replay/seed-0/samples.jsonl").read_text().splitlines()
    assert {json.loads(x)["task_id"] for x in samples} <= {t.task_id for t in teacher}
    assert set(summary["per_task"]) == {"sft", "ptgpo", "prefix-grpo"}
    for seeds in summary["per_task"].values():
        assert set(seeds) == {"0", "1"}
        for tasks in seeds.values():
            assert set(tasks) == set(evals)
            assert all(0 <= c <= n == settings.eval_n for c, n in tasks.values())
    assert set(summary["paired"]) == {"ptgpo", "prefix-grpo"}
    assert summary["paired"]["ptgpo"]["pairs"] == 2 * len(evals)
    machine = summary["machine"]
    assert machine["torch_version"] and machine["torch_threads"] == 1 and machine["cpu_model"]
    assert summary["missing"] == []
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk["per_task"] == summary["per_task"]
    assert "| ptgpo |" in (tmp_path / "summary.md").read_text()
    assert (tmp_path / "curve.png").stat().st_size > 0
    # resume: every (arm, seed) is finished, so nothing runs again and nothing changes
    finished = sorted(tmp_path.glob("*/seed-*/result.json"))
    stamps = [p.stat().st_mtime_ns for p in finished]
    assert main(["--preset", "smoke", "--out", str(tmp_path), "--no-progress"]) == 0
    assert [p.stat().st_mtime_ns for p in finished] == stamps
    assert json.loads((tmp_path / "summary.json").read_text())["per_task"] == summary["per_task"]
    assert "| prefix-grpo |" in capsys.readouterr().out
    (tmp_path / "summary.json").unlink()
    assert main(["--preset", "smoke", "--out", str(tmp_path), "--report", "--no-progress"]) == 0
    assert json.loads((tmp_path / "summary.json").read_text())["per_task"] == summary["per_task"]
    assert [p.stat().st_mtime_ns for p in finished] == stamps


def test_renamed_copies_keep_the_episode_consistent():
    """The copies rename every item consistently: each action still names items of the
    observation's recipes, and the goal's recipe still leads to the goal."""
    from agentenvs.benchmarks.learning.model import _item_names, expert_trajectories, renamed_copies

    trajs = expert_trajectories("TextCraft-v0", ["agentgym/31", "agentgym/200", "agentgym/230"])
    copies = renamed_copies(trajs, 3, seed=1)
    assert len(copies) == 9
    for original, twin in zip([t for t in trajs for _ in range(3)], copies, strict=True):
        first = twin.messages[1]["content"]
        names = _item_names(first)
        assert names and names != _item_names(original.messages[1]["content"])
        goal = first.rsplit("Goal: craft ", 1)[1].rstrip(".")
        assert goal in names
        assert twin.messages[0] == original.messages[0]  # the system prompt is left alone
        actions = [m["content"] for m in twin.messages if m["role"] == "assistant"]
        assert "craft " in actions[-1] and goal in actions[-1]
        for step, reply in zip(twin.steps, actions, strict=False):
            assert step.action in reply
            item = step.action.split(" using ")[0].split(" ", 2)[2]
            assert item in names, (item, names)


def test_item_names_are_one_token_each_and_the_rename_pool(tmp_path):
    """With ``item_names="recipe-database"`` every item is one token where it stands as a word
    (not inside another word), text decodes unchanged, and renamed copies draw from the pool."""
    from dataclasses import replace

    from transformers import AutoTokenizer

    from agentenvs.benchmarks.learning.model import (
        CHECK_MODEL,
        _item_names,
        build_env_model,
        expert_trajectories,
        renamed_copies,
        textcraft_item_names,
    )

    items = textcraft_item_names()
    assert {"stone", "cobblestone", "smooth quartz stairs", "redstone torch"} <= set(items)
    trajs = expert_trajectories("TextCraft-v0", ["agentgym/31", "agentgym/200"])
    spec = replace(CHECK_MODEL, vocab_size=400)
    tok = AutoTokenizer.from_pretrained(
        build_env_model(tmp_path / "m", spec, "TextCraft-v0", trajs, words=items)
    )
    for name in ("stone", "cobblestone", "smooth quartz stairs", "redstone torch"):
        text = f"craft 1 {name} using 2 {name}, 1 stick"
        pieces = tok.convert_ids_to_tokens(tok(text, add_special_tokens=False)["input_ids"])
        assert pieces.count(name) == 2 and tok.decode(tok(text)["input_ids"]) == text
    pool = items[::3]
    for twin in renamed_copies(trajs, 2, seed=3, pool=pool):
        names = _item_names("\n".join(m["content"] for m in twin.messages if m["role"] == "user"))
        assert names and names <= set(pool)


def test_a_directory_of_other_settings_is_refused(tmp_path):
    (tmp_path / "settings.json").write_text(json.dumps({"env_id": "Sokoban-v0"}))
    with pytest.raises(SystemExit, match="other settings"):
        run_benchmark(preset("smoke"), tmp_path, progress=False)


def test_an_older_run_without_a_later_field_is_its_default(tmp_path):
    from agentenvs.benchmarks.learning.run import _check_settings

    settings = preset("sokoban")
    older = {k: v for k, v in settings.to_json().items() if k not in ("arms", "seeds", "threads")}
    del older["rl_name_permutations"], older["rl_max_commands"]  # fields added later
    (tmp_path / "settings.json").write_text(json.dumps(older))
    _check_settings(settings, tmp_path)  # the defaults: the same run
    with pytest.raises(SystemExit, match="rl_name_permutations"):
        _check_settings(preset("sokoban", rl_name_permutations=2), tmp_path)


def test_undefined_statistics_are_null_not_nan():
    # one seed: no standard error; identical scores: a zero SE gives no z score
    per_task = {"sft": {"0": {"a": [1, 4]}}, "ptgpo": {"0": {"a": [1, 4]}}}
    row = arm_table(per_task, k=2)["sft"]["avg_at_k"]
    assert row["mean"] == pytest.approx(0.25) and row["se"] is None and row["n"] == 1
    diff = paired(per_task)["ptgpo"]
    assert diff["mean_diff"] == 0.0 and diff["se"] is None and diff["z"] is None


def test_rl_tasks_filtered_by_commands_and_played_under_permuted_names():
    from agentenvs.benchmarks.learning.settings import rl_task_ids
    from agentenvs.textcraft import TextCraftEnv

    train = [f"agentgym/{i}" for i in range(31, 61)]
    assert rl_task_ids(preset("smoke", rl_name_permutations=0), train) == train
    settings = preset("smoke", rl_max_commands=3, rl_name_permutations=2)
    ids = rl_task_ids(settings, train)
    env = TextCraftEnv()
    short = [t for t in train if len(env.reset(options={"task_id": t})[0].splitlines()) <= 6]
    assert 0 < len(short) < len(train)  # (3 commands + header, blank line, goal)
    assert ids == [f"{t}/names-{k}" for t in short for k in (1, 2)]
    for task_id in ids[:4]:  # real tasks: the same commands' count, other names
        base = task_id.partition("/names-")[0]
        assert len(env.task(task_id).commands) == len(env.task(base).commands)
        assert env.task(task_id).goal != env.task(base).goal
    with pytest.raises(ValueError, match="TextCraft settings"):
        rl_task_ids(preset("sokoban", rl_name_permutations=2), ["seed/1"])


def test_renamed_copies_do_not_depend_on_the_hash_seed():
    import os
    import subprocess
    import sys

    code = (
        "import json\n"
        "from agentenvs.benchmarks.learning.model import expert_trajectories, renamed_copies, "
        "textcraft_item_names\n"
        "trajs = expert_trajectories('TextCraft-v0', [f'agentgym/{i}' for i in range(31, 37)])\n"
        "copies = renamed_copies(trajs, 3, seed=5, pool=textcraft_item_names())\n"
        "print(json.dumps([[m['content'] for m in t.messages] for t in copies]))\n"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env=dict(os.environ, PYTHONHASHSEED=str(h)),
        ).stdout
        for h in (1, 2, 3)
    }
    assert len(outputs) == 1  # (it was not: names of equal length kept set order)
