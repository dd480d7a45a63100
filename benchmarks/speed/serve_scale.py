"""Concurrent sessions at scale through one address, after OpenEnv's scaling method.

    python -m agentenvs.benchmarks.speed.serve_scale                  # the full run
    python -m agentenvs.benchmarks.speed.serve_scale --levels 64,256 --think 2 --steps 2
    python -m agentenvs.benchmarks.speed.serve_scale --write-doc docs/serving.md

OpenEnv's method: WebSocket sessions, the figure the largest number of concurrent sessions still
at >= 95% success. Here, at each level L (``--levels``, default 256, 1,024, 4,096, 16,384) L
sessions open, spread evenly over ``L / --ramp-rate`` seconds; each resets (the task
``agentgym/<i % 100>``, ALFWorld ``agentgym/<2420 + i % 200>``) and then steps
(``inventory``, ``look``) every ``--think`` seconds (10 s by default, an LLM's turn) until every
session of the level is open and has stepped ``--steps`` more times, so all L are live at once;
then each closes. A session succeeds when every one of its requests was answered without error
within ``--timeout`` seconds. Per level: the success rate, p50/p99 latency of the reset and step
requests, requests/s over the whole level, and the server's RSS growth over its idle start
(all its processes: workers and HAProxy) per session at the level's peak.

Transports, each through one address (``agentenvs serve ENV --api openenv --workers W``:
HAProxy in front of W workers):

* ``native``: ``POST /agentenvs/v1/sessions``, ``/reset``, ``/step``, ``/close`` through an
  aiohttp client holding ``--http-connections`` keep-alive connections for all sessions;
* ``batch``: sessions in groups of ``--batch`` (one affinity key each, so a group lives on one
  worker): one ``reset_batch`` and then one ``step_batch`` per turn per group;
* ``ws``: OpenEnv's ``/ws``, one WebSocket per session (the ``websockets`` client OpenEnv's
  ``EnvClient`` uses, its messages); 1 in ``--drop-every`` (100) sessions drops its connection
  without a close frame at the end, and the server's open WebSocket sessions 5 s after the
  level are recorded.

In the same run, ``openenv`` (OpenEnv's own server, installed in a scratch venv outside the
repository, ``--openenv-python``) serves a trivial environment of its own (one instance per
session, each step answers at once) through ``/ws`` to the same client, as one uvicorn process
with OpenEnv's defaults. A level below 50% success ends that series. The benchmark process
raises its own open-file limit to its hard limit; nothing system-wide changes.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentenvs.benchmarks.speed.serve_scale_limits import (
    ALFWORLD_MEMORY_BUDGET,
    ALFWORLD_SESSION_BYTES,
)

__all__ = ["LevelResult", "main", "run_level"]

DEFAULT_LEVELS = (256, 1024, 4096, 16384)
STOP_BELOW = 0.5
"""A series stops after a level below this success rate (the next levels only fail more)."""
V1 = "/agentenvs/v1"

OPENENV_SERVER = """
import sys, uvicorn
from openenv.core.env_server import Action, Observation, State, Environment, create_app

class EchoAction(Action):
    action: str = ""

class EchoObservation(Observation):
    text: str = ""

class EchoEnv(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True
    def __init__(self):
        super().__init__()
        self._state = State(step_count=0)
    def reset(self, seed=None, episode_id=None, **kw):
        self._state = State(step_count=0)
        return EchoObservation(text="ready", reward=0.0, done=False)
    def step(self, action, timeout_s=None, **kw):
        self._state.step_count += 1
        return EchoObservation(text=action.action, reward=0.0, done=False)
    @property
    def state(self):
        return self._state

app = create_app(EchoEnv, EchoAction, EchoObservation, env_name="echo",
                 max_concurrent_envs=int(sys.argv[2]))
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="error", backlog=4096)
"""


@dataclass
class LevelResult:
    """One level of one series."""

    series: str
    sessions: int
    success: float
    p50_ms: float
    p99_ms: float
    requests_per_s: float
    rss_per_session_kib: float | None
    wall_s: float
    cpu_ms_per_request: dict[str, float] = field(default_factory=dict)
    """CPU of the server's workers, its proxy and the client, per request of the level."""
    errors: dict[str, int] = field(default_factory=dict)
    ws_left_open: int | None = None


@dataclass
class _Tally:
    latencies: list[float] = field(default_factory=list)
    requests: int = 0
    failed: set[int] = field(default_factory=set)
    errors: dict[str, int] = field(default_factory=dict)

    def fail(self, why: str, *sessions: int) -> None:
        """Sessions ``sessions`` failed because of ``why``."""
        self.failed.update(sessions)
        key = why[:100]
        self.errors[key] = self.errors.get(key, 0) + 1


# ----- servers -------------------------------------------------------------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A server process tree on 127.0.0.1 and its RSS (every process of the tree)."""

    def __init__(self, argv: list[str], port: int, health: str) -> None:
        import urllib.request

        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 300
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.proc.stderr.read()[-2000:]!r}")
            try:
                urllib.request.urlopen(self.url + health, timeout=5).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{argv} did not start") from None
                time.sleep(0.2)
        self.health = health

    def rss(self) -> int:
        import psutil

        root = psutil.Process(self.proc.pid)
        total = 0
        for p in [root, *root.children(recursive=True)]:
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
        return total

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds (user + system) so far: ``workers`` (Python processes) and ``proxy``."""
        import psutil

        root = psutil.Process(self.proc.pid)
        totals = {"workers": 0.0, "proxy": 0.0}
        for p in [root, *root.children(recursive=True)]:
            try:
                times = p.cpu_times()
                kind = "workers" if "python" in p.name() else "proxy"
                totals[kind] += times.user + times.system
            except psutil.Error:
                pass
        return totals

    def ws_sessions(self) -> int | None:
        import urllib.request

        try:
            answer = json.loads(urllib.request.urlopen(self.url + V1 + "/health").read())
        except OSError:
            return None
        return answer.get("ws_sessions")

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def ours(env_id: str, workers: int, max_sessions: int) -> Server:
    port = _free_port()
    argv = [sys.executable, "-m", "agentenvs.cli", "serve", env_id, "--api", "openenv"]
    argv += ["--port", str(port), "--workers", str(workers), "--idle-timeout", "0"]
    argv += ["--max-sessions", str(max_sessions)]
    return Server(argv, port, V1 + "/health")


def openenv_server(python: str, max_sessions: int, directory: Path) -> Server:
    script = directory / "openenv_echo_server.py"
    script.write_text(OPENENV_SERVER)
    port = _free_port()
    return Server([python, str(script), str(port), str(max_sessions)], port, "/health")


# ----- sessions ------------------------------------------------------------------------------


def _task(env_id: str, i: int) -> str:
    return f"agentgym/{2420 + i % 200}" if env_id == "ALFWorld-v0" else f"agentgym/{i % 100}"


ACTIONS = ("inventory", "look")


async def _timed(tally: _Tally, call: Any, timeout: float) -> Any:
    start = time.perf_counter()
    answer = await asyncio.wait_for(call, timeout)
    tally.latencies.append(time.perf_counter() - start)
    tally.requests += 1
    return answer


async def ws_session(
    url: str, env_id: str | None, i: int, hold: Any, args: Any, tally: _Tally
) -> None:
    from websockets.asyncio.client import connect

    ws_url = url.replace("http://", "ws://") + "/ws"
    try:
        ws = await asyncio.wait_for(
            connect(ws_url, ping_interval=None, max_size=None, open_timeout=args.timeout),
            args.timeout,
        )
    except Exception as exc:
        tally.fail(f"connect: {type(exc).__name__}: {exc}", i)
        return
    try:
        data = {"task_id": _task(env_id, i)} if env_id else {}

        async def ask(message: dict[str, Any]) -> None:
            await ws.send(json.dumps(message))
            answer = json.loads(await ws.recv())
            if answer.get("type") == "error":
                raise RuntimeError(answer.get("data", {}).get("message", "error"))

        await _timed(tally, ask({"type": "reset", "data": data}), args.timeout)
        turn = 0
        while True:
            await asyncio.sleep(args.think)
            await _timed(
                tally, ask({"type": "step", "data": {"action": ACTIONS[turn % 2]}}), args.timeout
            )
            turn += 1
            if hold(turn):
                break
        if i % args.drop_every == args.drop_every - 1:
            ws.transport.abort()  # a client that vanishes mid-episode
        else:
            await ws.close()
    except Exception as exc:
        tally.fail(f"{type(exc).__name__}: {exc}", i)
        ws.transport.abort()


async def _post(client: Any, url: str, body: dict[str, Any], headers: Any = None) -> Any:
    async with client.post(url, json=body, headers=headers) as r:
        payload = await r.json(content_type=None)
        if r.status != 200:
            raise RuntimeError(f"{r.status} {payload.get('error', payload)}")
        return payload


async def native_session(
    client: Any, url: str, env_id: str, i: int, hold: Any, args: Any, tally: _Tally
) -> None:
    try:
        sid = (await _timed(tally, _post(client, url + V1 + "/sessions", {}), args.timeout))[
            "session"
        ]
        reset = {"session": sid, "task_id": _task(env_id, i)}
        await _timed(tally, _post(client, url + V1 + "/reset", reset), args.timeout)
        turn = 0
        while True:
            await asyncio.sleep(args.think)
            step = {"session": sid, "action": ACTIONS[turn % 2]}
            await _timed(tally, _post(client, url + V1 + "/step", step), args.timeout)
            turn += 1
            if hold(turn):
                break
        await _timed(tally, _post(client, url + V1 + "/close", {"session": sid}), args.timeout)
    except Exception as exc:
        tally.fail(f"{type(exc).__name__}: {exc}", i)


async def batch_group(
    client: Any, url: str, env_id: str, first: int, size: int, hold: Any, args: Any, tally: _Tally
) -> None:
    """``size`` sessions stepped together; each failed item fails its session."""
    from agentenvs.serve.proxy import AFFINITY_HEADER

    headers = {AFFINITY_HEADER: f"group-{first}"}
    try:
        sids = []
        for _ in range(size):
            answer = await _timed(
                tally, _post(client, url + V1 + "/sessions", {}, headers), args.timeout
            )
            sids.append(answer["session"])
        body = {
            "resets": [
                {"session": s, "task_id": _task(env_id, first + k)} for k, s in enumerate(sids)
            ]
        }
        answer = await _timed(tally, _post(client, url + V1 + "/reset_batch", body), args.timeout)
        index = {s: first + k for k, s in enumerate(sids)}
        live = [s for s, r in zip(sids, answer["results"], strict=True) if r["status"] == 200]
        for s, r in zip(sids, answer["results"], strict=True):
            if r["status"] != 200:
                tally.fail(f"reset item {r['status']} {r['error']['type']}", index[s])
        turn = 0
        while live:
            await asyncio.sleep(args.think)
            body = {"steps": [{"session": s, "action": ACTIONS[turn % 2]} for s in live]}
            answer = await _timed(
                tally, _post(client, url + V1 + "/step_batch", body), args.timeout
            )
            ok = []
            for s, r in zip(live, answer["results"], strict=True):
                if r["status"] == 200:
                    ok.append(s)
                else:
                    tally.fail(f"step item {r['status']} {r['error']['type']}", index[s])
            live = ok
            turn += 1
            if hold(turn):
                break
        for s in live:
            await _timed(tally, _post(client, url + V1 + "/close", {"session": s}), args.timeout)
    except Exception as exc:  # the request failed: every session of the group with it
        tally.fail(f"{type(exc).__name__}: {exc}", *range(first, first + size))


# ----- levels --------------------------------------------------------------------------------


async def _run_sessions(
    transport: str, url: str, env_id: str | None, n: int, args: Any, tally: _Tally, ramp_rate: float
) -> None:
    ramp = n / ramp_rate
    start = time.monotonic()
    ramp_end = start + ramp

    def hold(turn: int) -> bool:
        """Whether a session that has stepped ``turn`` times is done: every session of the
        level is open, and it stepped ``--steps`` times since."""
        return turn >= args.steps and time.monotonic() >= ramp_end + (args.steps - 1) * args.think

    async def later(delay: float, coro: Any) -> None:
        await asyncio.sleep(delay)
        await coro

    tasks = []
    client = None
    if transport == "ws":
        for i in range(n):
            tasks.append(later(i / ramp_rate, ws_session(url, env_id, i, hold, args, tally)))
    else:
        import aiohttp

        client = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=args.http_connections),
            timeout=aiohttp.ClientTimeout(total=None),
        )
        if transport == "native":
            for i in range(n):
                coro = native_session(client, url, env_id, i, hold, args, tally)
                tasks.append(later(i / ramp_rate, coro))
        else:
            for first in range(0, n, args.batch):
                size = min(args.batch, n - first)
                coro = batch_group(client, url, env_id, first, size, hold, args, tally)
                tasks.append(later(first / ramp_rate, coro))
    try:
        await asyncio.gather(*tasks)
    finally:
        if client is not None:
            await client.close()


def run_level(
    series: str,
    transport: str,
    server: Server,
    env_id: str | None,
    n: int,
    args: Any,
    base_rss: int,
    ramp_rate: float,
) -> LevelResult:
    """One level: ``n`` sessions over ``transport``; the server's RSS sampled every second."""
    import threading

    tally = _Tally()
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(1.0):
            peak[0] = max(peak[0], server.rss())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.monotonic()
    cpu_before, client_before = server.cpu_seconds(), _own_cpu()
    asyncio.run(_run_sessions(transport, server.url, env_id, n, args, tally, ramp_rate))
    wall = time.monotonic() - start
    cpu_after, client_after = server.cpu_seconds(), _own_cpu()
    per = 1000 / max(tally.requests, 1)
    cpu = {k: round((cpu_after[k] - cpu_before[k]) * per, 3) for k in cpu_after}
    cpu["client"] = round((client_after - client_before) * per, 3)
    done.set()
    sampler.join()
    left = None
    if transport == "ws" and series.startswith("agentenvs"):
        time.sleep(5)
        left = server.ws_sessions()
    lat = sorted(tally.latencies) or [float("nan")]
    return LevelResult(
        series=series,
        sessions=n,
        success=round(1 - len(tally.failed) / n, 4),
        p50_ms=round(lat[len(lat) // 2] * 1000, 1),
        p99_ms=round(lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000, 1),
        requests_per_s=round(tally.requests / wall, 1),
        rss_per_session_kib=round(max(peak[0] - base_rss, 0) / n / 1024, 1) if peak[0] else None,
        wall_s=round(wall, 1),
        cpu_ms_per_request=cpu,
        errors=dict(sorted(tally.errors.items(), key=lambda kv: -kv[1])[:3]),
        ws_left_open=left,
    )


def _own_cpu() -> float:
    times = os.times()
    return times.user + times.system


def _series(
    name: str,
    transport: str,
    server: Server,
    env_id: str | None,
    levels: list[int],
    args: Any,
    ramp_rate: float,
) -> list[LevelResult]:
    results = []
    base = server.rss()
    for n in levels:
        result = run_level(name, transport, server, env_id, n, args, base, ramp_rate)
        print(json.dumps(asdict(result)), flush=True)
        results.append(result)
        if result.success < STOP_BELOW:
            break
    return results


def _raise_fd_limit() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def _levels_for(env_id: str, levels: list[int]) -> list[int]:
    if env_id != "ALFWorld-v0":
        return levels
    return [n for n in levels if n * ALFWORLD_SESSION_BYTES <= ALFWORLD_MEMORY_BUDGET]


def run(args: Any) -> dict[str, Any]:
    from agentenvs.benchmarks.machine import cpu_model

    hard = _raise_fd_limit()
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    load_start = os.getloadavg()
    results: list[LevelResult] = []
    skipped: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for env_id in args.envs:
            levels = _levels_for(env_id, args.levels)
            skipped += [f"{env_id} {n}" for n in args.levels if n not in levels]
            if not levels:
                continue
            per_worker = max(levels) + 64  # affinity keys hash unevenly: any worker may hold all
            ramp = args.alfworld_ramp_rate if env_id == "ALFWorld-v0" else args.ramp_rate
            for transport in args.transports:  # a fresh server each: RSS from its idle start
                server = ours(env_id, args.workers, per_worker)
                try:
                    name = f"agentenvs {env_id} {transport}"
                    results += _series(name, transport, server, env_id, levels, args, ramp)
                finally:
                    server.close()
        if args.openenv_python:
            server = openenv_server(args.openenv_python, max(args.levels) + 64, Path(tmp))
            try:
                results += _series(
                    "openenv echo ws", "ws", server, None, args.levels, args, args.ramp_rate
                )
            finally:
                server.close()
    memory = [] if args.no_session_memory else _session_memory()
    return {
        "session_memory": memory,
        "started": started,
        "finished": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": {
            "cpu": cpu_model(),
            "cpus": os.cpu_count(),
            "load_average_start": [round(x, 2) for x in load_start],
            "load_average_end": [round(x, 2) for x in os.getloadavg()],
            "open_file_limit": hard,
        },
        "settings": {
            k: getattr(args, k)
            for k in ("levels", "think", "steps", "workers", "ramp_rate", "alfworld_ramp_rate")
            + ("batch", "http_connections", "timeout")
        },
        "skipped": skipped,
        "results": [asdict(r) for r in results],
    }


def _session_memory() -> list[dict[str, Any]]:
    """Every environment's memory per live session (``session_memory``: 8 tasks x 8 sessions)."""
    from agentenvs.benchmarks.speed import session_memory

    return [asdict(row) for row in session_memory.run(list(session_memory.ENV_IDS))]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="serve_scale",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ints = lambda text: [int(x) for x in text.split(",")]  # noqa: E731
    p.add_argument("--envs", type=lambda t: t.split(","), default=["TextCraft-v0", "ALFWorld-v0"])
    p.add_argument("--transports", type=lambda t: t.split(","), default=["native", "batch", "ws"])
    p.add_argument("--levels", type=ints, default=list(DEFAULT_LEVELS))
    p.add_argument("--think", type=float, default=10.0, help="seconds between a session's steps")
    p.add_argument("--steps", type=int, default=3, help="steps after every session is open")
    p.add_argument("--ramp-rate", type=float, default=500.0, help="sessions opened per second")
    p.add_argument("--alfworld-ramp-rate", type=float, default=20.0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch", type=int, default=64, help="sessions per batch group")
    p.add_argument(
        "--drop-every",
        type=int,
        default=100,
        help="1 in this many /ws sessions drops its connection",
    )
    p.add_argument("--http-connections", type=int, default=256)
    p.add_argument("--timeout", type=float, default=30.0, help="seconds a request may take")
    p.add_argument(
        "--openenv-python",
        default=os.environ.get("OPENENV_PYTHON", "/tmp/openenv-scratch/bin/python"),
        help="a Python with the openenv package (a scratch venv outside the repository); "
        "empty: skip OpenEnv's server",
    )
    p.add_argument("--no-session-memory", action="store_true", help="skip session_memory")
    p.add_argument("--json", type=Path, default=None, help="write the report here")
    p.add_argument(
        "--from-json", type=Path, default=None, help="no run: format a report written by --json"
    )
    p.add_argument("--write-doc", type=Path, default=None)
    return p


def main(argv: list[str] | None = None) -> int:
    from agentenvs.benchmarks.speed.serve_scale_report import format_doc, write_doc

    args = _parser().parse_args(argv)
    if args.from_json:
        text = format_doc(json.loads(args.from_json.read_text()))
        print(text)
        if args.write_doc:
            write_doc(args.write_doc, text)
        return 0
    if args.openenv_python and not Path(args.openenv_python).exists():
        print(
            f"serve_scale: no {args.openenv_python}; OpenEnv's server is skipped", file=sys.stderr
        )
        args.openenv_python = ""
    report = run(args)
    text = format_doc(report)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    if args.write_doc:
        write_doc(args.write_doc, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
