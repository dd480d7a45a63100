"""A bad setting of ``agentenvs train sft`` / ``train rl`` is one line on stderr with its fix, no
traceback, exit code 2, run through the console script as a user runs it; and the checks behind
those lines (value ranges, files, batch sizes, starts that no episode could play)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentenvs.train.config import ConfigError, check_ranges, load_config
from agentenvs.train.rl.config import RLConfig
from agentenvs.train.rl.starts import episode_starts
from agentenvs.train.sft import SFTConfig

AGENTENVS = Path(sys.executable).with_name("agentenvs")
TASKS = ("agentgym/0", "agentgym/181", "agentgym/445")  # depths 1, 2 and 3


@dataclasses.dataclass(frozen=True)
class Files:
    model: Path
    won: Path
    lost: Path
    queries: Path
    """Cut-state queries, the no-prefix (``raw``) ones left out: every prefix >= 1 action."""


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Files:
    from agentenvs.agents.tiny_model import build_tiny_model
    from agentenvs.agents.trajectory import write_trajectories
    from agentenvs.benchmarks.learning.check import expert_trajectories
    from agentenvs.replay import CutConfig, run_cuts, run_sidecar, run_validate

    root = tmp_path_factory.mktemp("cli_errors")
    model = build_tiny_model(root / "tiny")
    won = expert_trajectories("TextCraft-v0", TASKS)
    write_trajectories(root / "won.jsonl", won)
    write_trajectories(
        root / "lost.jsonl", [dataclasses.replace(t, won=False, total_reward=0.0) for t in won]
    )
    run_cuts(
        [root / "won.jsonl"], root / "q.jsonl", [CutConfig()], model_path=str(model), progress=False
    )
    run_validate(root / "q.jsonl", root / "v.jsonl", progress=False)
    run_sidecar(root / "v.jsonl", root / "s.jsonl", model_path=str(model), progress=False)
    rows = [json.loads(line) for line in (root / "s.jsonl").open()]
    with_prefix = [r for r in rows if r["prefix_turns"] > 0]
    assert with_prefix and min(r["prefix_turns"] for r in with_prefix) >= 1
    (root / "prefixed.jsonl").write_text("".join(json.dumps(r) + "\n" for r in with_prefix))
    return Files(model, root / "won.jsonl", root / "lost.jsonl", root / "prefixed.jsonl")


# the cases run through the console script in a subprocess (the others call the same dispatcher
# in this process, which is faster: a subprocess imports torch anew)
CONSOLE = {"batch sizes", "learning rate", "a missing file", "prefixes over the turn limit"}


def run(case: str, argv: list[str], cwd: Path, capsys) -> subprocess.CompletedProcess:
    """``agentenvs *argv`` as a finished process (stderr and exit code)."""
    if case in CONSOLE:
        return subprocess.run(
            [str(AGENTENVS), *argv], capture_output=True, text=True, timeout=300, cwd=cwd
        )
    from agentenvs.cli import main

    capsys.readouterr()
    code = main(argv)
    return subprocess.CompletedProcess(argv, code, "", capsys.readouterr().err)


def assert_one_line(proc: subprocess.CompletedProcess, command: str, *says: str) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"agentenvs {command}: "), lines[0]
    for text in says:
        assert text in lines[0], lines[0]
    assert proc.returncode == 2, proc.returncode


SFT_CASES = {
    "batch sizes": (["batch_size=2"], ["multiple of micro_batch_size 8", "micro_batch_size=2"]),
    "learning rate": (["lr=-1"], ["lr must be > 0, got -1.0", "default 1e-05"]),
    "steps": (["max_steps=0"], ["max_steps must be >= 1"]),
    "epochs": (["epochs=0"], ["epochs must be >= 1"]),
    "warmup": (["warmup_ratio=1.5"], ["warmup_ratio must be in [0, 1)"]),
    "schedule": (["schedule=cosin"], ["'cosin' is not one of"]),
    "unknown key": (["lrr=1e-5"], ["Did you mean 'lr'?"]),
    "a missing file": (["--data", "nowhere.jsonl"], ["no trajectory file at nowhere.jsonl"]),
    "no won episode": (["--data", "LOST"], ["no usable trajectories", "success_only=false"]),
    "no model": (["--model", "no/such/dir"], ["--model 'no/such/dir'"]),
}


@pytest.mark.parametrize("case", sorted(SFT_CASES))
def test_a_bad_sft_setting_is_one_line_with_its_fix(case, files, tmp_path, capsys, monkeypatch):
    extra, says = SFT_CASES[case]
    extra = [str(files.lost) if a == "LOST" else a for a in extra]
    base = ["--model", str(files.model), "--data", str(files.won), "--out", str(tmp_path / "o")]
    monkeypatch.chdir(tmp_path)
    argv = ["train", "sft", *base, "device=cpu", "max_steps=4", *extra]
    proc = run(case, argv, tmp_path, capsys)
    assert_one_line(proc, "train sft", *says)
    assert not (tmp_path / "o" / "checkpoints").exists()


RL_CASES = {
    "learning rate": (["optim.lr=0"], ["optim.lr must be > 0, got 0.0"]),
    "iterations": (["iterations=0"], ["iterations must be >= 1"]),
    "one sample a group": (["samples_per_prompt=1"], ["samples_per_prompt >= 2"]),
    "mini-batches": (["mini_batches=9"], ["mini_batches 9 exceeds the 4 episodes"]),
    "checkpoints": (["save_every=0"], ["save_every must be >= 1"]),
    "a missing queries file": (
        ["--algo", "prefix-grpo", "--queries", "nowhere.jsonl"],
        ["data.queries: no file at nowhere.jsonl"],
    ),
    "unknown tasks": (
        ["data.tasks=agentgym/0x,agentgym/1x"],
        ["knows none of ['agentgym/0x', 'agentgym/1x']", "Did you mean"],
    ),
    # Prefix-GRPO queries whose prefixes take every turn: each episode is over at its cut
    "prefixes over the turn limit": (
        ["--algo", "prefix-grpo", "--queries", "QUERIES", "rollout.max_turns=1"],
        ["is unplayable", "nothing left to play", "set rollout.max_turns above 1"],
    ),
    "prompts over max_seq_len": (
        ["--algo", "prefix-grpo", "--queries", "QUERIES", "max_seq_len=64"],
        ["prompt of >= max_seq_len=64 tokens", "set max_seq_len above"],
    ),
}


@pytest.mark.parametrize("case", sorted(RL_CASES))
def test_a_bad_rl_setting_is_one_line_with_its_fix(case, files, tmp_path, capsys, monkeypatch):
    extra, says = RL_CASES[case]
    extra = [str(files.queries) if a == "QUERIES" else a for a in extra]
    algo = [] if "--algo" in extra else ["--algo", "grpo"]
    monkeypatch.chdir(tmp_path)
    argv = [
        "train",
        "rl",
        *algo,
        "--model",
        str(files.model),
        "--out",
        str(tmp_path / "o"),
        "--no-progress",
        "device=cpu",
        "iterations=1",
        "prompts_per_iteration=2",
        "samples_per_prompt=2",
        "rollout.max_new_tokens=8",
        "tensorboard=false",
        *extra,
    ]
    proc = run(case, argv, tmp_path, capsys)
    assert_one_line(proc, "train rl", *says)
    assert not (tmp_path / "o" / "checkpoints").exists()


def test_queries_some_episodes_cannot_play_are_left_out_with_a_warning(files):
    rows = [json.loads(line) for line in files.queries.open()]
    turns = sorted(max(r["prefix_turns"], len(r["prefix_actions"])) for r in rows)
    limit = turns[-1]  # the longest prefixes cannot play
    assert turns[0] < limit
    config = load_config(
        RLConfig,
        None,
        ["algo=prefix-grpo", f"data.queries={files.queries}", f"rollout.max_turns={limit}"],
    )
    warnings: list[str] = []
    starts = episode_starts(config, warnings.append)
    kept = sum(t < limit for t in turns)
    assert len(starts) == kept and all(q.turns_used < limit for q in starts)
    assert warnings == [
        f"{len(turns) - kept} of {len(turns)} queries left out: {len(turns) - kept} with "
        f"prefixes of >= rollout.max_turns={limit} turns (nothing left to play)"
    ]
    config.rollout.max_turns = 1
    with pytest.raises(ConfigError, match="set rollout.max_turns above 1"):
        episode_starts(config, warnings.append)


def test_unknown_task_ids_among_known_ones_are_named():
    config = load_config(RLConfig, None, ["data.tasks=agentgym/0,agentgym/0x"])
    warnings: list[str] = []
    starts = episode_starts(config, warnings.append)
    assert [s.task_id for s in starts] == ["agentgym/0", "agentgym/0x"]
    assert warnings == [
        "data.tasks: TextCraft-v0 does not know ['agentgym/0x']; their episodes will fail. "
        "Did you mean 'agentgym/0'?"
    ]


@dataclasses.dataclass
class _Ranged:
    rate: float = 1e-3
    count: int | None = None
    share: float = 0.5


def test_check_ranges_names_the_setting_its_rule_and_default():
    rules = {"rate": "> 0", "count": ">= 1", "share": "in [0, 1)"}
    check_ranges(_Ranged(), rules)  # None passes: an optional setting left unset
    with pytest.raises(ValueError, match=r"^x.rate must be > 0, got 0: .* \(default 0.001\)$"):
        check_ranges(_Ranged(rate=0), rules, "x.")
    with pytest.raises(ValueError, match=r"^count must be >= 1, got 0: give count a value >= 1$"):
        check_ranges(_Ranged(count=0), rules)
    with pytest.raises(ValueError, match=r"share must be in \[0, 1\), got 1"):
        check_ranges(_Ranged(share=1), rules)
    check_ranges(_Ranged(share=0), rules)


def test_configs_check_values_before_a_model_loads(tmp_path):
    with pytest.raises(ConfigError, match="no trajectory file"):
        load_config(SFTConfig, None, [f"data={tmp_path / 'none.jsonl'}"])
    with pytest.raises(ConfigError, match="device must be auto, cpu, cuda, cuda:N or mps"):
        load_config(SFTConfig, None, ["device=gpu"])
    with pytest.raises(ConfigError, match="optim.betas must be two values in"):
        load_config(RLConfig, None, ["optim.betas=0.9,1.0"])
    top_p = r"rollout.top_p must be in \(0, 1\], got 0.0: give rollout.top_p a value in \(0, 1\]$"
    with pytest.raises(ConfigError, match=top_p):
        load_config(RLConfig, None, ["rollout.top_p=0"])
    with pytest.raises(ConfigError, match="overlong_buffer 16 must be below rollout.max_new"):
        load_config(
            RLConfig, None, ["dynamic_sampling.overlong_buffer=16", "rollout.max_new_tokens=16"]
        )
    with pytest.raises(ConfigError, match="samples_per_prompt >= 2"):
        load_config(
            RLConfig, None, ["algo=prefix-grpo", f"data.queries={__file__}", "samples_per_prompt=1"]
        )
    assert load_config(RLConfig, None, ["algo=gigpo", "samples_per_prompt=1"])  # step groups
