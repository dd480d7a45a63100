"""Hardening of `agentenvs serve`: the body cap on chunked bodies, WebSockets that drop, the
refusals at capacity and the access token, on real servers on 127.0.0.1 with real clients."""

from __future__ import annotations

import json
import select
import socket
import time

import pytest
import requests

from agentenvs.serve.cli import bind_warning

from .conftest import live_server, serve_process

pytest.importorskip("openenv")

CAP = 1024 * 1024


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _server_pid(port: int) -> int:
    """The pid of the process listening on 127.0.0.1:``port`` (from /proc/net/tcp)."""
    import os

    inode = None
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            parts = line.split()
            if parts[1].endswith(f":{port:04X}") and parts[3] == "0A":
                inode = parts[9]
    assert inode is not None
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}") == f"socket:[{inode}]":
                    return int(pid)
        except OSError:
            continue
    raise AssertionError(f"no process listens on {port}")


def _send_chunked(port: int, path: bytes, total: int) -> tuple[int, bytes]:
    """POST ``total`` bytes as chunked; returns (bytes sent, the server's answer) as soon as
    the server answers (it may do so before the body ends)."""
    chunk = b"x" * 65536
    sent, answer = 0, b""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(
            b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        try:
            while sent < total:
                if select.select([sock], [], [], 0)[0]:
                    break
                sock.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
        sock.settimeout(10)
        try:
            while True:
                data = sock.recv(65536)
                if not data:
                    break
                answer += data
        except (ConnectionResetError, TimeoutError):
            pass
    return sent, answer


def test_a_chunked_body_over_the_cap_gets_413_and_is_not_read() -> None:
    with serve_process("TextCraft-v0", "--max-body-bytes", str(CAP)) as (url,):
        port = int(url.rsplit(":", 1)[1])
        pid = _server_pid(port)
        before = _rss_kib(pid)
        total = 200 * 1024 * 1024
        sent, answer = _send_chunked(port, b"/agentenvs/v1/step_batch", total)
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
        body = json.loads(answer.split(b"\r\n\r\n", 1)[1])
        assert body["error"]["type"] == "body_too_large" and str(CAP) in body["error"]["message"]
        assert b"connection: close" in answer.lower()
        assert sent < total // 4  # it stopped reading long before the end
        assert _rss_kib(pid) - before < 48 * 1024  # no body kept in memory
        # AgentGym's routes answer in AgentGym's form; the server still serves
        sent, answer = _send_chunked(port, b"/step", 8 * CAP)
        assert answer.startswith(b"HTTP/1.1 413")
        assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error_type"] == "body_too_large"
        assert requests.get(url + "/agentenvs/v1/health").status_code == 200
        # a chunked body under the cap is read and served as usual
        chunks = iter([b'{"env_kwargs":', b" null}"])
        r = requests.post(
            url + "/agentenvs/v1/sessions",
            data=chunks,
            headers={"Content-Type": "application/json"},
        )
        assert r.status_code == 200 and r.json()["session"], r.text


def test_a_dropped_websocket_frees_its_session_at_once() -> None:
    from websockets.sync.client import connect

    from agentenvs.serve import build_app

    with live_server(build_app("TextCraft-v0", "openenv", max_sessions=2)) as url:
        ws_url = url.replace("http://", "ws://") + "/ws"
        health = url + "/agentenvs/v1/health"
        for _ in range(3):  # more drops than the server holds sessions
            with connect(ws_url) as ws:
                ws.send(json.dumps({"type": "reset", "data": {"task_id": "agentgym/1"}}))
                assert json.loads(ws.recv())["type"] == "observation"
                assert requests.get(health).json()["ws_sessions"] == 1
                ws.socket.shutdown(socket.SHUT_RDWR)  # gone mid-episode, no close frame
                ws.socket.close()
            deadline = time.monotonic() + 5
            while requests.get(health).json()["ws_sessions"] and time.monotonic() < deadline:
                time.sleep(0.02)
            assert requests.get(health).json()["ws_sessions"] == 0


def test_refusals_at_capacity_name_the_limit_and_what_to_do() -> None:
    from openenv import GenericEnvClient

    from agentenvs.serve import build_app

    with live_server(build_app("TextCraft-v0", "agentgym", max_sessions=1)) as url:
        assert requests.post(url + "/agentenvs/v1/sessions", json={}).status_code == 200
        r = requests.post(url + "/agentenvs/v1/sessions", json={})
        assert r.status_code == 429 and r.json()["error"]["type"] == "session_limit"
        message = r.json()["error"]["message"]
        assert "--max-sessions 1" in message and "--workers" in message
        r = requests.post(url + "/create", json={})
        assert r.status_code == 429 and "--max-sessions 1" in r.json()["error"]
        assert r.json()["error_type"] == "session_limit"
    with live_server(build_app("TextCraft-v0", "openenv", max_sessions=1)) as url:
        with GenericEnvClient(base_url=url).sync() as first:
            first.reset(task_id="agentgym/1")
            with pytest.raises(Exception) as refused:
                with GenericEnvClient(base_url=url).sync() as second:
                    second.reset(task_id="agentgym/1")
            text = str(refused.value)
            assert "CAPACITY_REACHED" in text or "maximum of 1 sessions" in text
            assert "--max-sessions 1" in text and "--workers" in text


def test_the_access_token_guards_every_api() -> None:
    from openenv import GenericEnvClient

    from agentenvs.serve import build_app

    token = "s3cret-token"
    good = {"Authorization": f"Bearer {token}"}
    bad = {"Authorization": "Bearer wrong"}
    with live_server(build_app("TextCraft-v0", "agentgym", auth_token=token)) as url:
        for headers in ({}, bad):
            r = requests.get(url + "/agentenvs/v1/health", headers=headers)
            assert r.status_code == 401 and r.json()["error"]["type"] == "unauthorized"
            assert r.json()["env_id"] == "TextCraft-v0"
            assert r.headers["www-authenticate"] == "Bearer"
            r = requests.post(url + "/create", json={}, headers=headers)
            assert r.status_code == 401 and r.json()["error_type"] == "unauthorized"
        assert requests.get(url + "/agentenvs/v1/health", headers=good).status_code == 200
        created = requests.post(url + "/create", json={}, headers=good)
        assert created.status_code == 200
    with live_server(build_app("TextCraft-v0", "openenv", auth_token=token)) as url:
        r = requests.get(url + "/health")
        assert r.status_code == 401 and r.json()["error_type"] == "unauthorized"
        assert requests.get(url + "/health", headers=good).status_code == 200
        with pytest.raises(Exception) as refused:
            with GenericEnvClient(base_url=url).sync() as env:
                env.reset(task_id="agentgym/1")
        assert "401" in str(refused.value) or "nauthorized" in str(refused.value)
        with GenericEnvClient(base_url=url, headers=good).sync() as env:
            result = env.reset(task_id="agentgym/1")
            assert result.observation["info"]["task_id"] == "agentgym/1"


def test_a_token_comes_from_the_environment_and_a_public_bind_without_one_warns(
    monkeypatch,
) -> None:
    assert bind_warning("127.0.0.1", None) is None
    assert bind_warning("::1", None) is None
    assert bind_warning("localhost", None) is None
    assert bind_warning("0.0.0.0", "t") is None
    for host in ("0.0.0.0", "10.1.2.3", "example.org"):
        warning = bind_warning(host, None)
        assert warning and "--auth-token" in warning and host in warning
    with serve_process("TextCraft-v0", env={"AGENTENVS_AUTH_TOKEN": "from-env"}) as (url,):
        assert requests.get(url + "/agentenvs/v1/health").status_code == 401
        headers = {"Authorization": "Bearer from-env"}
        assert requests.get(url + "/agentenvs/v1/health", headers=headers).status_code == 200
