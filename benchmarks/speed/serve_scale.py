"""Concurrent sessions at scale through one address, after OpenEnv's scaling method.

    python -m agentenvs.benchmarks.speed.serve_scale                  # the full run
    python -m agentenvs.benchmarks.speed.serve_scale --levels 64,256 --think 2 --steps 2
    python -m agentenvs.benchmarks.speed.serve_scale --write-doc docs/serving.md

OpenEnv's method: WebSocket sessions, the figure the largest number of concurrent sessions still
at >= 95% success. Here, at each level L (``--levels``, default 256, 1,024, 4,096, 16,384, 32,768) L
sessions open, spread evenly over ``L / --ramp-rate`` seconds; each resets (the task
``agentgym/<i % 100>``, ALFWorld ``agentgym/<2420 + (i // 8) % 200>``, each game 8 times
at once as a GRPO group plays it) and then steps
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
raises its own open-file limit (which its children inherit): to 4 per session of the largest
level where it may raise its hard limit, else to the hard limit; nothing system-wide changes.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentenvs.benchmarks.speed.serve_scale_clients import (
    V1,
    raise_fd_limit,
    run_clients,
)
from agentenvs.benchmarks.speed.serve_scale_limits import (
    ALFWORLD_MEMORY_BUDGET,
    ALFWORLD_SESSION_BYTES,
)

__all__ = ["LevelResult", "main", "run_level"]

DEFAULT_LEVELS = (256, 1024, 4096, 16384, 32768)
STOP_BELOW = 0.5
"""A series stops after a level below this success rate (the next levels only fail more)."""

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
    p99_after_ramp_ms: float | None = None
    """p99 of the requests sent after the last session of the level opened."""
    client_processes: int = 1


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

    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(1.0):
            peak[0] = max(peak[0], server.rss())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    cpu_before = server.cpu_seconds()
    tally, client_cpu, start, processes = run_clients(
        transport, server.url, env_id, n, args, ramp_rate
    )
    wall = time.monotonic() - start
    cpu_after = server.cpu_seconds()
    per = 1000 / max(tally.requests, 1)
    cpu = {k: round((cpu_after[k] - cpu_before[k]) * per, 3) for k in cpu_after}
    cpu["client"] = round(client_cpu * per, 3)
    done.set()
    sampler.join()
    left = None
    if transport == "ws" and series.startswith("agentenvs"):
        time.sleep(5)
        left = server.ws_sessions()
    lat = sorted(tally.latencies) or [float("nan")]
    ramp_end = start + n / ramp_rate
    after = sorted(x for x, t in zip(tally.latencies, tally.starts, strict=True) if t >= ramp_end)
    return LevelResult(
        series=series,
        sessions=n,
        success=round(1 - len(tally.failed) / n, 4),
        p50_ms=round(lat[len(lat) // 2] * 1000, 1),
        p99_ms=_p99_ms(lat) or float("nan"),
        requests_per_s=round(tally.requests / wall, 1),
        rss_per_session_kib=round(max(peak[0] - base_rss, 0) / n / 1024, 1) if peak[0] else None,
        wall_s=round(wall, 1),
        cpu_ms_per_request=cpu,
        errors=dict(sorted(tally.errors.items(), key=lambda kv: -kv[1])[:3]),
        ws_left_open=left,
        p99_after_ramp_ms=_p99_ms(after),
        client_processes=processes,
    )


def _p99_ms(latencies: list[float]) -> float | None:
    """The 99th percentile of sorted ``latencies`` (seconds) in ms; None when there are none."""
    if not latencies:
        return None
    return round(latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000, 1)


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


def _levels_for(env_id: str, levels: list[int]) -> list[int]:
    if env_id != "ALFWorld-v0":
        return levels
    return [n for n in levels if n * ALFWORLD_SESSION_BYTES <= ALFWORLD_MEMORY_BUDGET]


def run(args: Any) -> dict[str, Any]:
    from agentenvs.benchmarks.machine import cpu_model

    hard = raise_fd_limit(max(args.levels + (args.openenv_levels or [])))
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
            levels = args.openenv_levels or args.levels
            server = openenv_server(args.openenv_python, max(levels) + 64, Path(tmp))
            try:
                results += _series(
                    "openenv echo ws", "ws", server, None, levels, args, args.ramp_rate
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
            for k in (
                "levels",
                "openenv_levels",
                "think",
                "steps",
                "workers",
                "ramp_rate",
                "alfworld_ramp_rate",
            )
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
    p.add_argument(
        "--openenv-levels", type=ints, default=None, help="OpenEnv's server's (default --levels)"
    )
    p.add_argument("--think", type=float, default=10.0, help="seconds between a session's steps")
    p.add_argument("--steps", type=int, default=3, help="steps after every session is open")
    p.add_argument("--ramp-rate", type=float, default=200.0, help="sessions opened per second")
    p.add_argument("--alfworld-ramp-rate", type=float, default=10.0)
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
    p.add_argument(
        "--doc-section",
        default=None,
        help="write into the doc's serve-scale-NAME section instead of the main one",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    from agentenvs.benchmarks.speed.serve_scale_report import format_doc, write_doc

    args = _parser().parse_args(argv)
    if args.from_json:
        text = format_doc(json.loads(args.from_json.read_text()))
        print(text)
        if args.write_doc:
            write_doc(args.write_doc, text, args.doc_section)
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
        write_doc(args.write_doc, text, args.doc_section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
