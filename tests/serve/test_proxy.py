"""`agentenvs serve --workers N`: N workers behind HAProxy at one address, with real clients (ours
over the native and batched routes, AgentGym's request forms, OpenEnv's client over `/ws`);
stopping the command stops every process. Skips where HAProxy is not installed."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
import requests

from agentenvs.serve.proxy import AFFINITY_HEADER, haproxy_binary

from .conftest import free_port

pytestmark = pytest.mark.skipif(haproxy_binary() is None, reason="HAProxy is not installed")

NATIVE = "/agentenvs/v1"


def _children(pid: int) -> list[int]:
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry))
        except (OSError, ValueError, IndexError):
            continue
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@contextlib.contextmanager
def proxied(env_id: str, *args: str, workers: int = 2) -> Iterator[tuple[str, list[int]]]:
    """``agentenvs serve env_id --workers workers`` on one free port; yields (url, the pids of
    its workers and HAProxy) once a request through the address is answered; afterwards checks
    that SIGTERM stopped every one of them."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentenvs.cli", "serve", env_id, "--port", str(port)]
        + ["--workers", str(workers), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    children: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.stderr.read()[-2000:]
            try:
                if requests.get(url + NATIVE + "/health", timeout=2).status_code in (200, 401):
                    break
            except requests.ConnectionError:
                pass
            assert time.monotonic() < deadline, "the proxied server did not start"
            time.sleep(0.1)
        children = [c for c in _children(proc.pid) if _alive(c)]
        yield url, children
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    time.sleep(0.5)
    assert not [c for c in children if _alive(c)], "a worker or HAProxy outlived the command"


def test_one_address_reaches_every_worker_with_sticky_sessions() -> None:
    with proxied("TextCraft-v0", "--max-sessions", "16") as (url, children):
        assert len(children) >= 3  # two workers and HAProxy (plus spawn's resource tracker)
        # native routes: sessions spread over both workers, every request lands on its own
        sessions = [
            requests.post(url + NATIVE + "/sessions", json={}).json()["session"] for _ in range(6)
        ]
        assert {s.split("-", 1)[0] for s in sessions} == {"w0", "w1"}
        with requests.Session() as client:  # one keep-alive connection for every session
            for sid in sessions:
                r = client.post(
                    url + NATIVE + "/reset", json={"session": sid, "task_id": "agentgym/3"}
                )
                assert r.status_code == 200, r.text
                r = client.post(
                    url + NATIVE + "/step", json={"action": "inventory", "session": sid}
                )
                assert r.status_code == 200 and r.json()["info"]["turn"] == 1, r.text
                token = client.post(url + NATIVE + "/snapshot", json={"session": sid}).json()
                body = {"snapshot": token["snapshot"], "session": sid}  # session after the token
                r = client.post(url + NATIVE + "/restore", json=body)
                assert r.status_code == 200 and r.json()["session"] == sid
        # batches: sessions created under one affinity key share a worker, so one batch holds them
        for key in ("group-a", "group-b"):
            group = [
                requests.post(
                    url + NATIVE + "/sessions", json={}, headers={AFFINITY_HEADER: key}
                ).json()["session"]
                for _ in range(4)
            ]
            assert len({s.split("-", 1)[0] for s in group}) == 1
            resets = [{"session": s, "task_id": f"agentgym/{i}"} for i, s in enumerate(group)]
            r = requests.post(url + NATIVE + "/reset_batch", json={"resets": resets})
            assert [x["status"] for x in r.json()["results"]] == [200] * 4
            steps = [{"session": s, "action": "inventory"} for s in group]
            r = requests.post(url + NATIVE + "/step_batch", json={"steps": steps})
            assert [x["status"] for x in r.json()["results"]] == [200] * 4
        # AgentGym's routes: integer ids, body and query forms
        ids = [requests.post(url + "/create", json={}).json()["id"] for _ in range(4)]
        assert {i % 2 for i in ids} == {0, 1}
        for idx in ids:
            assert requests.post(url + "/reset", json={"id": idx, "data_idx": 2}).status_code == 200
            r = requests.post(url + "/step", json={"id": idx, "action": "inventory"})
            assert r.status_code == 200 and "error" not in r.json(), r.text
            assert requests.get(url + "/observation", params={"id": idx}).status_code == 200
            assert requests.post(url + "/close", json={"id": idx}).json() is True


def test_openenv_clients_and_the_token_through_one_address() -> None:
    from openenv import GenericEnvClient

    from agentenvs.serve.openenv import AgentenvsAction, AgentenvsEnvClient

    token = {"Authorization": "Bearer proxied-token"}
    with proxied("TextCraft-v0", "--api", "openenv", "--auth-token", "proxied-token") as (url, _):
        assert requests.get(url + "/health").status_code == 401
        assert requests.get(url + "/health", headers=token).status_code == 200
        clients = [AgentenvsEnvClient(base_url=url, headers=token).sync() for _ in range(4)]
        try:
            for i, env in enumerate(clients):
                env.connect()
                assert env.reset(task_id=f"agentgym/{i}").observation.info["turn"] == 0
            for env in clients:  # each WebSocket stays on the worker it opened on
                result = env.step(AgentenvsAction(action="inventory"))
                assert result.observation.info["turn"] == 1
        finally:
            for env in clients:
                env.close()
        # openenv's generic client too
        with GenericEnvClient(base_url=url, headers=token).sync() as env:
            assert env.reset(task_id="agentgym/5").observation["info"]["task_id"] == "agentgym/5"
        sid = requests.post(url + NATIVE + "/sessions", json={}, headers=token).json()["session"]
        r = requests.post(url + NATIVE + "/reset", json={"session": sid}, headers=token)
        assert r.status_code == 200


def _worker_sockets(children: list[int]) -> list[str]:
    """The workers' Unix sockets, beside the configuration HAProxy was started with."""
    for pid in children:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().decode().split("\0")
        if os.path.basename(argv[0]) == "haproxy":
            directory = os.path.dirname(argv[argv.index("-f") + 1])
            return sorted(os.path.join(directory, n) for n in os.listdir(directory) if ".sock" in n)
    raise AssertionError("no HAProxy among the command's children")


def test_mcp_sessions_stick_to_their_workers_through_one_address() -> None:
    """Two MCP sessions of the official client at once through one address: each lives on its
    own worker (HAProxy's stick table on ``Mcp-Session-Id``) and plays the expert's episodes with
    the in-process observations, their requests interleaved."""
    import anyio
    import httpx

    from .test_mcp import call, http_session, play_expert_tasks

    env_id = "TextCraft-v0"
    with proxied(env_id, "--api", "mcp", "--max-sessions", "4") as (url, children):
        sockets = _worker_sockets(children)
        assert len(sockets) == 2

        def held(sock: str) -> int:
            transport = httpx.HTTPTransport(uds=sock)
            with httpx.Client(transport=transport, base_url="http://worker") as worker:
                return worker.get(NATIVE + "/health").json()["sessions"]

        async def play(ready: anyio.Event, both: anyio.Event, counts: list[list[int]]) -> None:
            async with http_session(url) as session:
                await call(session, "reset", task_id="agentgym/0")
                ready.set()
                await both.wait()
                if not counts:
                    counts.append([held(s) for s in sockets])
                await play_expert_tasks(session, env_id, tasks=2)

        async def run() -> list[list[int]]:
            counts: list[list[int]] = []
            first, second, both = anyio.Event(), anyio.Event(), anyio.Event()
            async with anyio.create_task_group() as group:
                group.start_soon(play, first, both, counts)
                await first.wait()  # the second session opens while the first holds a worker
                group.start_soon(play, second, both, counts)
                await second.wait()
                both.set()
            return counts

        counts = anyio.run(run)
        assert counts == [[1, 1]], counts  # one environment session on each worker
        deadline = time.monotonic() + 5  # the client's DELETE ends each MCP session
        while [held(s) for s in sockets] != [0, 0] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [held(s) for s in sockets] == [0, 0]  # each closed on its own worker
