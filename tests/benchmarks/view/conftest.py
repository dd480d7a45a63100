"""Runs for the viewer's tests, made by the real commands: an expert and a random agent's
``agentenvs eval`` of the same TextCraft tasks, the learning benchmark's SFT and PTGPO units of
one seed (its smoke preset: a tiny model, a short SFT, two RL iterations that save their sampled
episodes), and replay queries cut from the expert's episodes and replay-validated."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

EVAL_ARGS = ["TextCraft-v0", "-k", "2", "--limit", "6", "--no-progress"]


@dataclass(frozen=True)
class ViewRuns:
    expert: Path
    random: Path
    sft: Path  # the learning benchmark's SFT unit of seed 0 (its evaluation is in eval/)
    ptgpo: Path  # the PTGPO unit of seed 0: a train rl run with its evaluation points
    replay: Path  # a replay.validated file


@pytest.fixture(scope="session")
def view_runs(tmp_path_factory) -> ViewRuns:
    import torch

    from agentenvs.benchmarks.learning.check import preset, run_benchmark
    from agentenvs.cli import main
    from agentenvs.replay import CutConfig, run_cuts, run_validate

    root = tmp_path_factory.mktemp("view-runs")
    for agent, name in (("expert", "expert"), ("random:1", "random")):
        assert main(["eval", *EVAL_ARGS, "--agent", agent, "--out", str(root / name)]) == 0
    threads = torch.get_num_threads()
    try:
        run_benchmark(
            preset("smoke", seeds=(0,)), root / "learn", only=("sft", "ptgpo"), progress=False
        )
    finally:
        torch.set_num_threads(threads)
    run_cuts(
        [root / "expert" / "trajectories.jsonl"],
        root / "replay" / "queries.jsonl",
        [CutConfig(strategy="fixed-ratio")],
        progress=False,
    )
    run_validate(
        root / "replay" / "queries.jsonl", root / "replay" / "validated.jsonl", progress=False
    )
    return ViewRuns(
        root / "expert",
        root / "random",
        root / "learn" / "sft" / "seed-0",
        root / "learn" / "ptgpo" / "seed-0",
        root / "replay" / "validated.jsonl",
    )


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory) -> Path:
    """Where screenshots go: ``$AGENTENVS_TEST_ARTIFACTS/view`` (CI keeps them), else a
    temporary folder; printed either way."""
    given = os.environ.get("AGENTENVS_TEST_ARTIFACTS")
    folder = Path(given) / "view" if given else tmp_path_factory.mktemp("view-screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    print(f"\nagentenvs view screenshots: {folder.resolve()}")
    return folder


@contextlib.contextmanager
def _serving(*runs: Path) -> Iterator[str]:
    """``agentenvs view RUN ... --port 0`` in its own process; yields its address."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentenvs.cli", "view", *map(str, runs), "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        while line and not line.startswith("serving"):
            line = proc.stdout.readline()
        assert line.startswith(f"serving {len(runs)} run(s) at http://127.0.0.1:"), line
        yield line.split(" at ")[1].strip()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(scope="session")
def serve_view() -> Callable[..., contextlib.AbstractContextManager[str]]:
    """``with serve_view(run, ...) as url``: a real server of those runs on 127.0.0.1."""
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    return _serving
