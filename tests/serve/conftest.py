"""Fixtures of the serving tests: a real uvicorn server on 127.0.0.1 (a free port) in a thread of
the test process, and the expert's actions of a task played in process."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def live_server(app: Any) -> Iterator[str]:
    """Serve ``app`` with uvicorn on 127.0.0.1 until the block ends; yields the base URL."""
    import uvicorn

    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                            access_log=False, lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def expert_episode(
    env_id: str, task_id: str, **env_kwargs: Any
) -> tuple[list[str], list[float], str]:
    """The expert's actions on ``task_id`` played in process: (actions, rewards, last obs)."""
    from agentenvs.expert import make_expert

    from agentenvs import env_class

    env = env_class(env_id)(**env_kwargs)
    expert = make_expert(env_id)
    observation, _ = env.reset(options={"task_id": task_id})
    actions, rewards = [], []
    while not env.done:
        action = expert.act(env).action
        observation, reward, *_ = env.step(action)
        actions.append(action)
        rewards.append(reward)
    env.close()
    return actions, rewards, observation


@pytest.fixture(scope="module")
def textcraft_url() -> Iterator[str]:
    from agentenvs.serve import build_app

    with live_server(build_app("TextCraft-v0", "agentgym", max_sessions=64)) as url:
        yield url


@contextlib.contextmanager
def serve_process(env_id: str, *args: str, workers: int = 1) -> Iterator[list[str]]:
    """``agentenvs serve`` in its own process (its own interpreter: no GIL shared with the
    test's client), on free ports; yields the workers' URLs once all answer /health."""
    import os
    import signal
    import subprocess
    import sys

    import requests

    while True:  # `workers` consecutive free ports
        port = free_port()
        try:
            for i in range(1, workers):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port + i))
            break
        except OSError:
            continue
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentenvs.cli", "serve", env_id, "--port", str(port),
         "--workers", str(workers), *args],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    urls = [f"http://127.0.0.1:{port + i}" for i in range(workers)]
    try:
        deadline = time.monotonic() + 90
        for url in urls:
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"agentenvs serve exited: {proc.stderr.read()[-2000:]}")
                try:
                    requests.get(url + "/agentenvs/v1/health", timeout=2)
                    break
                except requests.ConnectionError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{url} did not start") from None
                    time.sleep(0.1)
        yield urls
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
