"""Fixtures of the serving tests: a real uvicorn server on 127.0.0.1 (a free port) in a thread of
the test process, and the expert's actions of a task played in process."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
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
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", access_log=False, lifespan="on"
    )
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
    from agentenvs import env_class
    from agentenvs.expert import make_expert

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
def serve_process(
    env_id: str, *args: str, workers: int = 1, env: dict[str, str] | None = None
) -> Iterator[list[str]]:
    """``agentenvs serve`` in its own process (its own interpreter: no GIL shared with the
    test's client), on free ports; yields the workers' URLs once all answer /health."""
    import os

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
        [
            sys.executable,
            "-m",
            "agentenvs.cli",
            "serve",
            env_id,
            "--port",
            str(port),
            "--workers",
            str(workers),
            *(("--proxy", "none") if workers > 1 else ()),  # one URL per worker
            *args,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
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


class HangingProxy:
    """A TCP proxy on 127.0.0.1 to the server at ``upstream`` (a base URL) that forwards every
    byte both ways until :meth:`hang`; from then on it accepts connections and reads requests
    but never answers, and forwards nothing (a server whose process and socket live on, stuck).
    Without ``upstream`` it hangs from the start. ``hang_at=(marker, n)``: it hangs by itself
    at the ``n``-th request whose bytes hold ``marker`` (that request is never answered).
    :meth:`close` ends it."""

    def __init__(
        self, upstream: str | None = None, hang_at: tuple[bytes, int] | None = None
    ) -> None:
        from urllib.parse import urlsplit

        self.hang_at = hang_at
        self.seen = 0

        self.upstream = None
        if upstream is not None:
            parts = urlsplit(upstream)
            self.upstream = (parts.hostname, parts.port)
        self.hung = threading.Event()
        if upstream is None:
            self.hung.set()
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(256)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._sockets: list[socket.socket] = []
        self._clients: set[socket.socket] = set()
        threading.Thread(target=self._accept, daemon=True).start()

    def hang(self) -> None:
        self.hung.set()

    def close(self) -> None:
        self._listener.close()
        for sock in list(self._sockets):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:  # closed
                return
            self._sockets.append(client)
            self._clients.add(client)
            if self.hung.is_set():
                threading.Thread(target=self._pipe, args=(client, None), daemon=True).start()
                continue
            upstream = socket.create_connection(self.upstream)
            self._sockets.append(upstream)
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(src, dst), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket | None) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                return
            if not data:
                return
            if self.hang_at is not None and src in self._clients and self.hang_at[0] in data:
                self.seen += 1
                if self.seen >= self.hang_at[1]:
                    self.hang()
            if dst is not None and not self.hung.is_set():
                try:
                    dst.sendall(data)
                except OSError:
                    return


class Server:
    """``agentenvs serve ENV_ID`` in a child process on a free 127.0.0.1 port (``proc``; stop it
    with :meth:`stop`, or kill it to fake a crash). ``version`` (tests only) makes the server
    report another agentenvs version; ``options`` go to ``agentenvs serve``."""

    def __init__(
        self, env_id: str = "TextCraft-v0", version: str | None = None, *options: str
    ) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        code = (
            "import sys, agentenvs\n"
            "if sys.argv[3]: agentenvs.__version__ = sys.argv[3]\n"
            "from agentenvs.serve.cli import serve_main\n"
            "sys.exit(serve_main([sys.argv[1], '--port', sys.argv[2], *sys.argv[4:]]))\n"
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, env_id, str(self.port), version or "", *options],
            stdout=subprocess.DEVNULL,
        )
        import requests

        deadline = time.monotonic() + 120
        while True:
            try:
                if requests.get(self.url + "/agentenvs/v1/health", timeout=5).status_code == 200:
                    return
            except requests.RequestException:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the test server on {self.url} did not start")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # in case a test stopped it
            self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
