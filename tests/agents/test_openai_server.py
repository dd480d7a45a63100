"""The OpenAI backend against a real OpenAI-compatible server: ``transformers serve`` on the tiny
local model, started on 127.0.0.1 by the test (offline, CPU; about 10 s to start here).

It checks that requests flow through a rollout, that a server which ignores ``logprobs`` (this
one does) gets a single warning and is recorded in the run's metadata, that an outage shorter
than the retry window (the server stopped and started again) loses no episode in flight, and that
a longer one ends ``agentenvs eval`` with the finished episodes on disk and the command that
resumes it, which then completes the run.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.request
import warnings
from pathlib import Path

import pytest

NEEDS = "the openai extra: pip install -e '.[openai]'"
pytest.importorskip("fastapi", reason=NEEDS)
pytest.importorskip("uvicorn", reason=NEEDS)
pytest.importorskip("openai", reason=NEEDS)  # transformers serve's request types

from agentenvs.agents.registry import make_policy  # noqa: E402
from agentenvs.agents.rollout import RolloutConfig, plan_episodes, run_rollouts  # noqa: E402
from agentenvs.agents.trajectory import read_trajectories  # noqa: E402
from agentenvs.cli import main as cli_main  # noqa: E402

TRANSFORMERS_CLI = shutil.which("transformers") or str(
    Path(os.sys.executable).with_name("transformers")
)


class Server:
    """``transformers serve MODEL`` on a fixed local port, stopped and started at will."""

    def __init__(self, model_dir: Path, log: Path) -> None:
        self.model = str(model_dir)
        self.log = log
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 90.0) -> float:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        command = [TRANSFORMERS_CLI, "serve", self.model, "--host", "127.0.0.1"]
        command += ["--port", str(self.port), "--device", "cpu", "--dtype", "float32"]
        with self.log.open("a") as log:
            self.proc = subprocess.Popen(
                command, env=env, stdout=log, stderr=log, start_new_session=True
            )
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"transformers serve exited: {self.log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=1):
                    return time.monotonic() - started
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"transformers serve did not start in {timeout} s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)  # an outage: no graceful shutdown
            self.proc.wait()
        self.proc = None


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from agentenvs.agents.tiny_model import build_tiny_model

    root = tmp_path_factory.mktemp("serve")
    srv = Server(build_tiny_model(root / "tiny"), root / "serve.log")
    srv.start()
    yield srv
    srv.stop()


def _spec(server: Server) -> str:
    return f"openai:{server.model}@{server.url}"


def test_a_rollout_through_transformers_serve_warns_once_about_missing_logprobs(server) -> None:
    policy = make_policy(_spec(server), concurrency=4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trajs = run_rollouts(
            policy,
            "TextCraft-v0",
            plan_episodes(["agentgym/0", "agentgym/1"], 2),
            RolloutConfig(max_turns=2, max_active=4, sampling=_sampling()),
        )
    assert len(trajs) == 4 and all(t.error is None and t.turns == 2 for t in trajs)
    assert all(s.completion is not None for t in trajs for s in t.steps)
    missing = [w for w in caught if "log-probabilities were requested" in str(w.message)]
    assert len(missing) == 1  # one warning for the run, not one per request
    assert policy.run_metadata()["logprobs"] == "missing"
    assert all(s.logprobs is None for t in trajs for s in t.steps)
    policy.close()


def _sampling():
    from agentenvs.agents.policy import SamplingParams

    return SamplingParams(temperature=1.0, max_new_tokens=12, seed=0)


def _eval_args(server: Server, out: Path, window: float) -> list[str]:
    args = ["TextCraft-v0", "--agent", _spec(server), "-k", "1", "--limit", "2"]
    args += ["--max-turns", "2", "--max-new-tokens", "8", "--max-active", "1", "--no-progress"]
    return [*args, "--agent-opt", f"retry_window={window:g}", "--out", str(out)]


def _when_first_episode_is_on_disk(path: Path, action) -> threading.Thread:
    def watch() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if path.exists() and path.read_text().count("\n") >= 1:
                action()
                return
            time.sleep(0.02)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


@pytest.mark.filterwarnings("ignore:.*log-probabilities were requested")
def test_outages_short_ones_lose_nothing_long_ones_stop_with_a_resume_command(
    server, tmp_path, capsys
) -> None:
    # 1. the server dies after the first episode and is back within the window: nothing lost
    short = tmp_path / "short"

    def restart() -> None:
        server.stop()
        time.sleep(1.0)
        server.start()

    watcher = _when_first_episode_is_on_disk(short / "trajectories.jsonl", restart)
    assert cli_main(["eval", *_eval_args(server, short, window=120)]) == 0
    watcher.join()
    trajs = list(read_trajectories(short / "trajectories.jsonl"))
    assert len(trajs) == 2 and all(t.error is None for t in trajs)
    run = json.loads((short / "run.json").read_text())
    assert run["backend"]["logprobs"] == "missing" and run["backend"]["retried_seconds"] > 1
    capsys.readouterr()

    # 2. the server stays down past the window: the run ends, finished episodes on disk
    long = tmp_path / "long"
    watcher = _when_first_episode_is_on_disk(long / "trajectories.jsonl", server.stop)
    argv = _eval_args(server, long, window=3)
    assert cli_main(["eval", *argv]) == 1
    watcher.join()
    err = capsys.readouterr().err
    on_disk = len(list(read_trajectories(long / "trajectories.jsonl")))
    assert on_disk == 1 and "giving up after" in err
    assert f"{on_disk} finished episodes are on disk" in err
    command = err.strip().splitlines()[-1].strip()
    assert command == shlex.join(["agentenvs", "eval", *argv])

    # 3. the server is back: the printed command finishes the run, no episode twice
    server.start()
    assert cli_main(shlex.split(command)[1:]) == 0
    keys = [t.episode_key for t in read_trajectories(long / "trajectories.jsonl")]
    assert len(keys) == len(set(keys)) == 2
