"""Resume never loses a record; Ctrl-C says what is on disk and how to resume."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentenvs.agents.trajectory import (
    TrajectoryFormatError,
    drop_truncated_tail,
    read_trajectories,
)
from agentenvs.benchmarks.eval.evaluate import evaluate
from agentenvs.benchmarks.eval.resume import resume_command
from agentenvs.benchmarks.eval.settings import EvalSettings
from agentenvs.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = {"env_id": "TextCraft-v0", "agent": "random:1", "k": 2, "limit": 3, "max_turns": 3}


def _run(out: Path, **kwargs):
    return evaluate(EvalSettings(**SETTINGS), out, progress=False, **kwargs)


def _newer_line(path: Path) -> bytes:
    record = json.loads(path.read_text().splitlines()[0])
    record["schema_version"] = 99
    return (json.dumps(record) + "\n").encode()


def test_an_invalid_complete_line_stops_with_file_and_line_and_leaves_the_file(tmp_path) -> None:
    out = tmp_path / "run"
    _run(out)
    path = out / "trajectories.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines[2] = _newer_line(path)  # line 3 becomes a newer-schema record
    before = b"".join(lines)
    path.write_bytes(before)
    with pytest.raises(TrajectoryFormatError, match=rf"{path}:3: schema_version 99") as info:
        _run(out)
    assert "--skip-invalid" in str(info.value)
    assert path.read_bytes() == before  # nothing dropped, nothing rewritten
    result = _run(out, skip_invalid=True)  # the flag resumes; the line stays where it was
    assert path.read_bytes().startswith(before) and result.new_episodes == 1
    assert len(result.dropped_lines) == 1 and ":3:" in result.dropped_lines[0]


def test_only_a_truncated_final_line_is_dropped_and_reported(tmp_path, capsys) -> None:
    out = tmp_path / "run"
    _run(out)
    path = out / "trajectories.jsonl"
    complete = path.read_bytes()
    lines = complete.splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-1]) + lines[-1][:57])  # the last write cut by a kill
    result = _run(out)
    assert len(result.dropped_lines) == 1 and result.new_episodes == 1
    assert f"{path}:{len(lines)}: dropped a truncated final line" in capsys.readouterr().err
    assert path.read_bytes().startswith(b"".join(lines[:-1]))
    assert sorted(t.episode_key for t in read_trajectories(path)) == sorted(
        t.episode_key for t in read_trajectories(tmp_path / "run" / "trajectories.jsonl")
    )
    assert len(list(read_trajectories(path))) == len(lines)


def test_a_complete_last_line_missing_its_newline_is_kept(tmp_path) -> None:
    out = tmp_path / "run"
    _run(out)
    path = out / "trajectories.jsonl"
    complete = path.read_bytes()
    path.write_bytes(complete[:-1])
    assert drop_truncated_tail(path) is None and path.read_bytes() == complete


def test_cli_error_is_one_line_and_skip_invalid_flag_exists(tmp_path, capsys) -> None:
    out = tmp_path / "run"
    _run(out)
    path = out / "trajectories.jsonl"
    path.write_bytes(_newer_line(path) + path.read_bytes())
    argv = ["eval", "TextCraft-v0", "--agent", "random:1", "-k", "2", "--limit", "3"]
    argv += ["--max-turns", "3", "--no-progress", "--out", str(out)]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{path}:1:" in err
    assert cli_main([*argv, "--skip-invalid"]) == 0


def test_resume_command_drops_fresh_and_names_the_output() -> None:
    command = resume_command(["TextCraft-v0", "--agent", "random:1", "--fresh"], Path("o d"))
    assert command == "agentenvs eval TextCraft-v0 --agent random:1 --out 'o d'"


def test_ctrl_c_saves_finished_episodes_and_prints_the_resume_command(tmp_path) -> None:
    out = tmp_path / "interrupted"
    path = out / "trajectories.jsonl"
    args = ["TextCraft-v0", "--agent", "random:3", "-k", "4", "--no-progress"]
    args += ["--max-active", "4", "--out", str(out)]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from agentenvs.cli import main; sys.exit(main(sys.argv[1:]))",
            "eval",
            *args,
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        # a shell's background job starts with SIGINT ignored, and Python then installs no
        # KeyboardInterrupt handler: give the child the default, as a terminal would
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if path.exists() and path.read_text().count("\n") >= 8:
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    on_disk = len(list(read_trajectories(path)))
    assert 8 <= on_disk < 400
    assert f"{on_disk} finished episodes are on disk in {path}" in err
    command = err.strip().splitlines()[-1].strip()
    assert command == shlex.join(["agentenvs", "eval", *args])
    assert cli_main(shlex.split(command)[1:]) == 0
    keys = [t.episode_key for t in read_trajectories(path)]
    assert len(keys) == len(set(keys)) == 400


ENGINE = {"device": "cpu", "dtype": "bfloat16", "cpu_engine": "auto"}


def _replies(path: Path) -> dict:
    return {
        t.episode_key: [tuple(step.token_ids or ()) for step in t.steps]
        for t in read_trajectories(path)
    }


def test_a_resumed_llm_eval_samples_what_an_unbroken_one_does(tmp_path) -> None:
    """Sampled replies (tiny model, temperature 1): with per-episode seeds (the default) an eval
    interrupted after 2 of 4 episodes and resumed one episode at a time writes the unbroken
    run's replies."""
    from agentenvs.agents.backends.kv_cache import writes_in_place
    from agentenvs.agents.tiny_model import build_tiny_model

    if not writes_in_place():
        pytest.skip("needs transformers 5 buffer caches")
    model = build_tiny_model(tmp_path / "tiny")

    def settings(max_active: int = 8) -> EvalSettings:
        return EvalSettings(
            "TextCraft-v0",
            f"hf:{model}",
            k=2,
            limit=2,
            max_turns=2,
            max_new_tokens=12,
            temperature=1.0,
            top_p=1.0,
            max_active=max_active,
            agent_options=ENGINE,
        )

    whole = tmp_path / "whole"
    evaluate(settings(), whole, progress=False)
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / "run.json").write_bytes((whole / "run.json").read_bytes())
    lines = (whole / "trajectories.jsonl").read_bytes().splitlines(keepends=True)
    assert len(lines) == 4
    (cut / "trajectories.jsonl").write_bytes(b"".join(lines[:2]))
    resumed = evaluate(settings(max_active=1), cut, progress=False)
    assert resumed.new_episodes == 2
    unbroken = _replies(whole / "trajectories.jsonl")
    assert all(any(turns) for turns in unbroken.values())
    assert _replies(cut / "trajectories.jsonl") == unbroken
    recorded = json.loads((whole / "results.json").read_text())
    assert recorded["seeding"] == "episode" and recorded["seed"] == 0


def test_a_run_recorded_before_seeding_existed_is_refused(tmp_path) -> None:
    """Such a run drew one seed per generation call, which a resumed run cannot repeat."""
    out = tmp_path / "old"
    _run(out)
    run_file = out / "run.json"
    record = json.loads(run_file.read_text())
    assert record.pop("seeding") == "episode"
    record["seed"] = 0
    run_file.write_text(json.dumps(record))
    with pytest.raises(ValueError, match=r"'seeding': \('call', 'episode'\)"):
        _run(out)
