"""`agentenvs serve` as a process: --workers N --proxy none serves N ports, sessions stay on
their worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import requests

from agentenvs.cli import COMMANDS

from .conftest import free_port


def wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else proc.returncode
        try:
            return requests.get(url + "/agentenvs/v1/health", timeout=2).json()
        except requests.ConnectionError:
            time.sleep(0.1)
    raise AssertionError(f"{url} did not become healthy")


def test_serve_is_registered() -> None:
    assert COMMANDS["serve"][0] == "agentenvs.serve.cli:serve_main"


def test_two_workers_on_consecutive_ports_with_sticky_sessions() -> None:
    port = free_port()
    while True:  # port+1 must be free as well
        try:
            import socket

            with socket.socket() as s:
                s.bind(("127.0.0.1", port + 1))
            break
        except OSError:
            port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentenvs.cli",
            "serve",
            "TextCraft-v0",
            "--port",
            str(port),
            "--workers",
            "2",
            "--proxy",
            "none",
            "--max-sessions",
            "8",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "AGENTENVS_SERVE_KEY": ""},
    )
    try:
        urls = [f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port + 1}"]
        for url in urls:
            health = wait_healthy(url, proc)
            assert health["status"] == "ok" and health["max_sessions"] == 8
        sessions = []
        for i, url in enumerate(urls):
            sid = requests.post(url + "/agentenvs/v1/sessions", json={}).json()["session"]
            assert sid.startswith(f"w{i}-")
            sessions.append(sid)
            r = requests.post(
                url + "/agentenvs/v1/reset", json={"session": sid, "task_id": "agentgym/3"}
            )
            assert r.status_code == 200
        # AgentGym's integer ids carry the worker too (n * workers + i)
        ids = [requests.post(url + "/create", json={}).json()["id"] for url in urls]
        assert [i % 2 for i in ids] == [0, 1]
        r = requests.post(urls[0] + "/step", json={"id": ids[1], "action": "inventory"})
        assert r.status_code == 404 and r.json()["error_type"] == "unknown_session"
        # a session asked of the other worker: a clear 404, the session itself unharmed
        r = requests.post(
            urls[1] + "/agentenvs/v1/step", json={"session": sessions[0], "action": "inventory"}
        )
        assert r.status_code == 404 and "another server or worker" in r.json()["error"]["message"]
        # the workers share one snapshot key: a token of worker 0 restores on worker 1 directly
        token = requests.post(
            urls[0] + "/agentenvs/v1/snapshot", json={"session": sessions[0]}
        ).json()["snapshot"]
        r = requests.post(urls[1] + "/agentenvs/v1/restore", json={"snapshot": token})
        assert r.status_code == 200 and r.json()["session"].startswith("w1-")
        r = requests.post(
            urls[0] + "/agentenvs/v1/step", json={"session": sessions[0], "action": "inventory"}
        )
        assert r.status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, proc.stderr.read()


def test_openenv_server_process_with_openenvs_client() -> None:
    from openenv import GenericEnvClient

    from .conftest import serve_process

    with serve_process("Sokoban-v0", "--api", "openenv") as (url,):
        with GenericEnvClient(base_url=url).sync() as env:
            result = env.reset(task_id="seed/65536")
            assert result.observation["info"]["task_id"] == "seed/65536" and not result.done


def test_missing_serving_dependency_names_the_extra(monkeypatch, capsys) -> None:
    import importlib.util

    import pytest

    from agentenvs.cli import main
    from agentenvs.serve import build_app

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "openenv" else real(name, *a)
    )
    with pytest.raises(ImportError, match=r"pip install 'agentenvs\[serve\]'"):
        build_app("TextCraft-v0", "openenv")
    assert main(["serve", "TextCraft-v0", "--api", "openenv"]) == 1
    err = capsys.readouterr().err
    assert err == "agentenvs serve: needs openenv: pip install 'agentenvs[serve]'\n"
