"""``agentenvs eval``: tables, resume after a killed run (no duplicate, no loss), settings."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentenvs.agents.trajectory import read_trajectories
from agentenvs.benchmarks.eval.evaluate import evaluate
from agentenvs.benchmarks.eval.resume import EvalSettingsError
from agentenvs.benchmarks.eval.settings import EvalSettings
from agentenvs.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[2]


def _lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.strip()]


def test_cli_expert_tables_and_plot(tmp_path, capsys) -> None:
    out = tmp_path / "expert"
    code = cli_main(
        [
            "eval",
            "TextCraft-v0",
            "--agent",
            "expert",
            "-k",
            "1",
            "--limit",
            "6",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "| **overall** | 6 | 6 | 6 | 100.00 | 100.00 | 0 |" in printed
    assert (out / "results.md").read_text().count("| depth-") >= 1
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert rows[-1]["family"] == "overall" and float(rows[-1]["pass@1"]) == 1.0
    assert (out / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((out / "run.json").read_text())["agent"] == "expert"
    assert len(_lines(out / "trajectories.jsonl")) == 6


def test_bad_arguments_are_clear(tmp_path, capsys) -> None:
    assert cli_main(["eval", "Nope-v0", "--agent", "expert", "--out", str(tmp_path)]) == 2
    assert "unknown environment 'Nope-v0'" in capsys.readouterr().err
    assert (
        cli_main(
            [
                "eval",
                "TextCraft-v0",
                "--agent",
                "expert",
                "--split",
                "tst",
                "--out",
                str(tmp_path),
                "--no-progress",
            ]
        )
        == 2
    )
    assert "unknown split 'tst'; valid splits" in capsys.readouterr().err
    assert (
        cli_main(
            [
                "eval",
                "TextCraft-v0",
                "--agent",
                "expert",
                "-k",
                "4",
                "-n",
                "2",
                "--out",
                str(tmp_path),
            ]
        )
        == 2
    )
    assert "need 1 <= k <= n" in capsys.readouterr().err


def test_resume_refuses_other_settings(tmp_path) -> None:
    evaluate(EvalSettings("TextCraft-v0", "random:1", k=2, limit=3), tmp_path, progress=False)
    with pytest.raises(EvalSettingsError, match="other settings"):
        evaluate(EvalSettings("TextCraft-v0", "random:2", k=2, limit=3), tmp_path, progress=False)
    result = evaluate(
        EvalSettings("TextCraft-v0", "random:2", k=2, limit=3), tmp_path, fresh=True, progress=False
    )
    assert result.new_episodes == 6 and result.episodes == 6
    # the same settings with a larger k of the same n only re-tabulate
    again = evaluate(
        EvalSettings("TextCraft-v0", "random:2", k=1, n=2, limit=3), tmp_path, progress=False
    )
    assert again.new_episodes == 0 and again.rows[-1].k == 1


def test_resume_after_kill_has_no_duplicate_and_no_loss(tmp_path) -> None:
    """Kill a running eval, tear its last line, resume: every episode once, as an unbroken run."""
    args = ["TextCraft-v0", "--agent", "random:3", "-k", "4", "--no-progress"]
    out = tmp_path / "killed"
    path = out / "trajectories.jsonl"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from agentenvs.cli import main; sys.exit(main(sys.argv[1:]))",
            "eval",
            *args,
            "--out",
            str(out),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if path.exists() and len(_lines(path)) >= 40:
            break
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    written = path.read_text().count("\n")  # complete lines: the kill may tear the last one
    assert 40 <= written < 400, f"the run was not interrupted mid-way ({written} episodes)"
    with path.open("a") as fh:  # an interrupted write: half a JSON line
        fh.write('{"schema_version": 1, "env_id": "TextCraft-v0", "task_id": "agentg')
    result = evaluate(EvalSettings("TextCraft-v0", "random:3", k=4), out, progress=False)
    assert len(result.dropped_lines) == 1 and result.new_episodes == 400 - written
    episodes = list(read_trajectories(path))
    keys = [t.episode_key for t in episodes]
    assert len(keys) == len(set(keys)) == 400
    reference = evaluate(
        EvalSettings("TextCraft-v0", "random:3", k=4), tmp_path / "unbroken", progress=False
    )
    unbroken = {
        t.episode_key: t.actions
        for t in read_trajectories(tmp_path / "unbroken" / "trajectories.jsonl")
    }
    assert {t.episode_key: t.actions for t in episodes} == unbroken
    assert [r.pass_at_k for r in result.rows] == [r.pass_at_k for r in reference.rows]


def test_limit_is_a_seeded_sample_across_families() -> None:
    from agentenvs.agents.task_sample import family_counts, sample_tasks
    from agentenvs.registration import make

    env = make("TextCraft-v0")
    ids = env.task_ids("test")
    first = sample_tasks(ids, env.family, 20)
    assert set(first) == set(sample_tasks(list(reversed(ids)), env.family, 20))  # order-free
    assert (
        first == sample_tasks(ids, env.family, 20, seed=0) != sample_tasks(ids, env.family, 20, 1)
    )
    counts = family_counts(first, env.family)
    assert sum(counts.values()) == 20 and set(counts) == set(family_counts(ids, env.family))
    # 38/35/24/3 of 100: one each, then 16 shared by largest remainder over 37/34/23/2
    assert counts == {"depth-1": 7, "depth-2": 7, "depth-3": 5, "depth-4": 1}
    assert first == [t for t in ids if t in set(first)]  # the split's own order
    assert sample_tasks(ids, env.family, None) == ids == sample_tasks(ids, env.family, 500)
    assert len(set(family_counts(sample_tasks(ids, env.family, 2), env.family))) == 2
    with pytest.raises(ValueError, match=">= 1"):
        sample_tasks(ids, env.family, 0)
    from agentenvs.train.rl.starts import task_starts  # training draws the same sample (data.limit)

    assert [s.task_id for s in task_starts("TextCraft-v0", [], "test", 20)] == first


def test_alfworld_train_limit_covers_every_family() -> None:
    from agentenvs.agents.task_sample import family_counts, sample_tasks
    from agentenvs.registration import make

    env = make("ALFWorld-v0")
    ids = env.task_ids("train")
    counts = family_counts(sample_tasks(ids, env.family, 20), env.family)
    assert len(counts) == 6 and sum(counts.values()) == 20, counts


def test_protocol_variant_overrides_and_tasks_are_recorded(tmp_path, capsys) -> None:
    out = tmp_path / "tc"
    argv = ["eval", "TextCraft-v0", "--agent", "expert", "-k", "1", "--limit", "4"]
    argv += ["--temperature", "0.7", "--out", str(out), "--no-progress"]
    assert cli_main(argv) == 0
    run = json.loads((out / "run.json").read_text())
    assert run["protocol"] == "prefix-grpo" and run["overrides"] == {"temperature": 0.7}
    assert run["protocol_settings"]["prompt"] == "textcraft-paper"
    assert run["protocol_settings"]["max_turns"] == run["max_turns"] == 30
    assert run["temperature"] == 0.7 and run["top_p"] == 1.0 and run["variant"] == {}
    assert len(run["task_ids"]) == 4
    results = json.loads((out / "results.json").read_text())
    assert results["task_ids"] == run["task_ids"] and results["rows"][-1]["family"] == "overall"
    assert "protocol `prefix-grpo`" in (out / "results.md").read_text()
    trajs = list(read_trajectories(out / "trajectories.jsonl"))
    assert {t.protocol for t in trajs} == {"prefix-grpo"} and trajs[0].variant == {}
    assert {t.task_id for t in trajs} == set(run["task_ids"])
    # resuming under another protocol is refused; an unknown one lists the valid ones
    with pytest.raises(ValueError, match="no setup for TextCraft-v0"):
        EvalSettings("TextCraft-v0", "expert", protocol="ptgpo")
    capsys.readouterr()
    assert cli_main(["eval", "TextCraft-v0", "--agent", "expert", "--protocol", "agentgym"]) == 2
    assert "choose from ['prefix-grpo', 'ptgpo']" in capsys.readouterr().err


def test_babyai_and_alfworld_protocols_choose_the_variant(tmp_path) -> None:
    alf = evaluate(
        EvalSettings("ALFWorld-v0", "expert", k=1, limit=2, protocol="prefix-grpo"),
        tmp_path / "alf",
        progress=False,
    )
    run = json.loads((tmp_path / "alf" / "run.json").read_text())
    assert run["variant"] == {"game_version": "agentgym"} and run["max_turns"] == 50
    assert alf.rows[-1].avg_at_k == 1.0
    ptgpo = EvalSettings("ALFWorld-v0", "expert")
    assert ptgpo.protocol == "ptgpo" and (ptgpo.temperature, ptgpo.history) == (0.4, 2)
    babyai = EvalSettings("BabyAI-Text-v0", "expert", max_turns=30)
    assert babyai.overrides == {} and babyai.max_new_tokens == 2048


def test_eval_without_matplotlib_writes_the_tables_and_says_how_to_get_the_plot(
    tmp_path, without_modules
) -> None:
    """The core install has no matplotlib: the run, its tables and results.json, then the hint."""
    out = tmp_path / "core"
    args = ["-m", "agentenvs.cli", "eval", "TextCraft-v0", "--agent", "expert", "-k", "1"]
    args += ["--limit", "3", "--no-progress", "--out", str(out)]
    proc = subprocess.run(
        [sys.executable, *args],
        env=without_modules("matplotlib"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "| **overall** | 3 | 3 | 3 | 100.00 | 100.00 | 0 |" in proc.stdout
    assert "no results.png: matplotlib is not installed; pip install 'agentenvs[train]'" in (
        proc.stdout
    )
    assert not (out / "results.png").exists()
    results = json.loads((out / "results.json").read_text())
    assert results["rows"][-1]["avg_at_k"] == 1.0 and results["protocol"] == "prefix-grpo"
    assert results["variant"] == {}  # recorded, TextCraft's default
