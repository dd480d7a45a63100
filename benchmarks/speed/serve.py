"""Serving speed: steps per second and step latency in process vs through ``agentenvs serve``.

    python -m agentenvs.benchmarks.speed.serve                      # all five environments
    python -m agentenvs.benchmarks.speed.serve TextCraft-v0 --seconds 10
    python -m agentenvs.benchmarks.speed.serve --clients 1,16,64 --workers 1,2 --json out.json
    python -m agentenvs.benchmarks.speed.serve TextCraft-v0 --batch-episodes 1,16,64

Per environment, all in the same run:

* **in process**: one environment stepping the workload in this process (the baseline), and
  the same in N processes at once (N = each ``--workers`` value; what N servers' worth of CPU
  reaches without any serving);
* **through the server**: ``agentenvs serve ENV --workers W`` in its own process(es), and C
  clients at once (threads of this process, one keep-alive ``http.client`` connection each, C in
  ``--clients``), each playing the workload through the native routes
  (``/agentenvs/v1/reset`` and ``/step``); with W workers, client i talks to worker ``i % W``;
* **batched**: E episodes (E in ``--batch-episodes``) stepped together, one ``step_batch`` (and
  one ``reset_batch``) request per turn from one client to one server (``--workers 1``), the
  results decoded; against the same E episodes stepped in process, one loop over them per turn
  (the baseline of this row); and the largest E through our environment pools, the ``http://``
  pool (what ``--env-workers http://`` rollouts use) against the in-process pool.

The workload: the scripted expert's longest episode among the first 8 test tasks of each
environment (ALFWorld: its default game version), played again and again (reset, then its
actions) for ``--seconds``. A step's latency is the time of one
``env.step`` in process, or of one ``POST /step`` (request, server, response) through the server;
steps per second count steps over the whole wall time, resets included. Ratios are against the
in-process figures of the same run: server steps/s over one in-process environment's (for
``--workers 1``) or over N in-process environments in N processes (for ``--workers N``).

Targets (:data:`TARGET_ADDED_P50_MS`, :data:`TARGET_SHARE_64_CLIENTS`, :data:`BATCH_TARGET`):
the server adds at most 1 ms to a TextCraft step's p50 at 1 client; with 64 clients and
``--workers 2`` it serves at least 70% of the steps per second that two in-process environments
in two processes reach; 64 TextCraft episodes stepped in batches through one server reach
:data:`BATCH_TARGET` of the same steps in process. The clients run on the same machine as the
servers and share its cores; the load average is recorded, and on a shared machine every figure
moves with the other work on it.
"""

from __future__ import annotations

import argparse
import datetime
import http.client
import json
import multiprocessing
import os
import platform
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "BATCH_TARGET",
    "DEFAULT_ENVS",
    "Stats",
    "Workload",
    "bench_batched",
    "bench_env",
    "main",
    "workload",
]

DEFAULT_ENVS = ("TextCraft-v0", "Sokoban-v0", "BabyAI-Text-v0", "WebShop-v0", "ALFWorld-v0")
BATCH_TARGET = 0.5
"""64 TextCraft episodes in step batches through one server: at least half the steps per second
of the same episodes in process. Stepping then costs a rollout at most twice what it costs in
process: the HTTP request is shared by the batch, and what remains per step (the server's
bookkeeping and the JSON both ways) is of the order of the step itself."""
BATCH_TARGET_EPISODES = 64
BATCH_ROUNDS = 5
"""The batched rows alternate in process and through the server this many times (each a fifth
of ``--seconds``) and keep each side's best round: the round least disturbed by other work on a
shared machine, for both sides alike."""
V1 = "/agentenvs/v1"
BIG_BUDGET = 10**6  # the workload's episodes end by themselves; no truncation in between
TARGET_ADDED_P50_MS = 1.0
"""What the server may add to a TextCraft step's median latency at one client: a policy's reply
takes tens of milliseconds at least, so 1 ms leaves serving invisible in a rollout."""
TARGET_SHARE_64_CLIENTS = 0.7
"""Steps per second of 64 clients on ``--workers 2`` over two in-process environments in two
processes: at least 70%, so serving costs at most the rest of the CPU at full load."""


@dataclass(frozen=True)
class Workload:
    """One test task and the expert's actions on it (played again and again)."""

    env_id: str
    task_id: str
    actions: tuple[str, ...]


@dataclass
class Stats:
    """Steps over wall seconds, and the step latencies (seconds) behind the percentiles."""

    steps: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list, repr=False)

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.seconds if self.seconds else 0.0

    def percentile(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def summary(self) -> dict[str, float]:
        return {
            "steps": self.steps,
            "seconds": round(self.seconds, 3),
            "steps_per_s": round(self.steps_per_s, 1),
            "p50_ms": round(self.percentile(0.50) * 1e3, 4),
            "p99_ms": round(self.percentile(0.99) * 1e3, 4),
        }


def workload(env_id: str, candidates: int = 8) -> Workload:
    """The longest of the expert's episodes on the first ``candidates`` test tasks (so resets,
    which cost about a step each, weigh little)."""
    from agentenvs import build_env
    from agentenvs.expert import make_expert

    env = build_env(env_id, max_turns=BIG_BUDGET)
    expert = make_expert(env_id)
    best = Workload(env_id, "", ())
    for task_id in env.task_ids("test")[:candidates]:
        env.reset(options={"task_id": task_id})
        expert.reset()
        actions = []
        while not env.done and len(actions) < 200:
            action = expert.act(env).action
            env.step(action)
            actions.append(action)
        if len(actions) > len(best.actions):
            best = Workload(env_id, task_id, tuple(actions))
    env.close()
    return best


# ----- in process ----------------------------------------------------------------------------


def run_in_process(work: Workload, seconds: float, start_at: float = 0.0) -> Stats:
    """Play the workload in this process for ``seconds`` (from ``start_at``, a
    ``time.time()``, when given: processes started together measure together)."""
    from agentenvs import build_env

    env = build_env(work.env_id, max_turns=BIG_BUDGET)
    env.reset(options={"task_id": work.task_id})  # (warm: the first reset loads data)
    if start_at:
        time.sleep(max(0.0, start_at - time.time()))
    stats = Stats()
    clock = time.perf_counter
    t0 = clock()
    while clock() - t0 < seconds:
        env.reset(options={"task_id": work.task_id})
        for action in work.actions:
            s = clock()
            env.step(action)
            stats.latencies.append(clock() - s)
        stats.steps += len(work.actions)
    stats.seconds = clock() - t0
    env.close()
    return stats


def _in_process_worker(args: tuple[Workload, float, float]) -> Stats:
    return run_in_process(*args)


def run_in_processes(work: Workload, seconds: float, n: int) -> Stats:
    """The workload in ``n`` processes at once: total steps over the longest wall time."""
    if n == 1:
        return run_in_process(work, seconds)
    context = multiprocessing.get_context("spawn")
    with context.Pool(n) as pool:
        start_at = time.time() + 3.0  # time for the processes to import and warm up
        parts = pool.map(_in_process_worker, [(work, seconds, start_at)] * n)
    total = Stats(steps=sum(p.steps for p in parts), seconds=max(p.seconds for p in parts))
    total.latencies = [x for p in parts for x in p.latencies]
    return total


# ----- through the server --------------------------------------------------------------------


def _free_ports(n: int) -> int:
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        try:
            for i in range(1, n):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port + i))
            return port
        except OSError:
            continue


class Server:
    """``agentenvs serve`` with ``workers`` workers, in its own process(es), until closed."""

    def __init__(self, env_id: str, workers: int) -> None:
        port = _free_ports(workers)
        self.urls = [("127.0.0.1", port + i) for i in range(workers)]
        self.proc = subprocess.Popen(
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
                "--proxy",  # one port per worker: client i talks to worker i % W
                "none",
                "--idle-timeout",
                "0",
                "--max-sessions",
                "4096",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 120
        for host, p in self.urls:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"agentenvs serve exited: {self.proc.stderr.read()}")
                try:
                    _request(http.client.HTTPConnection(host, p, timeout=5), "GET", V1 + "/health")
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise RuntimeError("agentenvs serve did not start") from None
                    time.sleep(0.1)

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _request(
    conn: http.client.HTTPConnection, method: str, path: str, body: dict[str, Any] | None = None
) -> dict[str, Any]:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"content-type": "application/json"} if data is not None else {}
    conn.request(method, path, data, headers)
    response = conn.getresponse()
    payload = json.loads(response.read())
    if response.status != 200:
        raise RuntimeError(f"{method} {path}: {response.status} {payload}")
    return payload


def run_through_server(work: Workload, server: Server, clients: int, seconds: float) -> Stats:
    """``clients`` threads at once, each a session on worker ``i % W`` playing the workload."""
    barrier = threading.Barrier(clients + 1)
    results: list[Stats] = [Stats() for _ in range(clients)]
    errors: list[BaseException] = []

    def client(i: int) -> None:
        host, port = server.urls[i % len(server.urls)]
        conn = http.client.HTTPConnection(host, port, timeout=120)
        stats = results[i]
        try:
            sid = _request(
                conn, "POST", V1 + "/sessions", {"env_kwargs": {"max_turns": BIG_BUDGET}}
            )["session"]
            reset = {"session": sid, "task_id": work.task_id}
            _request(conn, "POST", V1 + "/reset", reset)
            bodies = [json.dumps({"session": sid, "action": a}).encode() for a in work.actions]
            headers = {"content-type": "application/json"}
            barrier.wait()
            clock = time.perf_counter
            t0 = clock()
            while clock() - t0 < seconds:
                _request(conn, "POST", V1 + "/reset", reset)
                for body in bodies:
                    s = clock()
                    conn.request("POST", V1 + "/step", body, headers)
                    response = conn.getresponse()
                    response.read()
                    stats.latencies.append(clock() - s)
                    if response.status != 200:
                        raise RuntimeError(f"step answered {response.status}")
                stats.steps += len(bodies)
            stats.seconds = clock() - t0
            _request(conn, "POST", V1 + "/close", {"session": sid})
        except BaseException as exc:  # reported after the run
            errors.append(exc)
            if not barrier.broken:
                barrier.abort()
        finally:
            conn.close()

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    try:
        barrier.wait()
    except threading.BrokenBarrierError:
        pass
    for t in threads:
        t.join(timeout=seconds + 300)
    if errors:
        raise RuntimeError(f"{len(errors)} of {clients} clients failed: {errors[0]!r}")
    total = Stats(steps=sum(r.steps for r in results), seconds=max(r.seconds for r in results))
    total.latencies = [x for r in results for x in r.latencies]
    return total


# ----- batched -------------------------------------------------------------------------------


def run_batch_in_process(work: Workload, episodes: int, seconds: float) -> Stats:
    """``episodes`` environments of this process playing the workload together, one loop over
    them per turn (the batched rows' baseline); latencies are per turn."""
    from agentenvs import build_env

    envs = [build_env(work.env_id, max_turns=BIG_BUDGET) for _ in range(episodes)]
    options = {"task_id": work.task_id}
    for env in envs:  # (warm: the first reset loads data)
        env.reset(options=options)
    stats = Stats()
    clock = time.perf_counter
    t0 = clock()
    while clock() - t0 < seconds:
        for env in envs:
            env.reset(options=options)
        for action in work.actions:
            s = clock()
            for env in envs:
                env.step(action)
            stats.latencies.append(clock() - s)
        stats.steps += episodes * len(work.actions)
    stats.seconds = clock() - t0
    for env in envs:
        env.close()
    return stats


def run_batch_through_server(
    work: Workload, server: Server, episodes: int, seconds: float
) -> Stats:
    """``episodes`` sessions on the server's first worker playing the workload together: per
    turn one ``step_batch`` request (per episode start one ``reset_batch``) from one keep-alive
    connection, its results decoded and checked; latencies are per request."""
    import orjson

    host, port = server.urls[0]
    conn = http.client.HTTPConnection(host, port, timeout=120)
    headers = {"content-type": "application/json"}

    def batch(route: str, body: dict[str, Any]) -> list[dict[str, Any]]:
        conn.request("POST", V1 + route, orjson.dumps(body), headers)
        response = conn.getresponse()
        results = orjson.loads(response.read())["results"]
        if response.status != 200 or any(r["status"] != 200 for r in results):
            raise RuntimeError(f"{route} answered {response.status}: {results[:1]}")
        return results

    try:
        kwargs = {"env_kwargs": {"max_turns": BIG_BUDGET}}
        sessions = [
            _request(conn, "POST", V1 + "/sessions", kwargs)["session"] for _ in range(episodes)
        ]
        resets = {"resets": [{"session": sid, "task_id": work.task_id} for sid in sessions]}
        batch("/reset_batch", resets)  # (warm)
        stats = Stats()
        clock = time.perf_counter
        t0 = clock()
        while clock() - t0 < seconds:
            batch("/reset_batch", resets)
            for action in work.actions:
                s = clock()
                batch(
                    "/step_batch",
                    {"steps": [{"session": sid, "action": action} for sid in sessions]},
                )
                stats.latencies.append(clock() - s)
            stats.steps += episodes * len(work.actions)
        stats.seconds = clock() - t0
        for sid in sessions:
            _request(conn, "POST", V1 + "/close", {"session": sid})
    finally:
        conn.close()
    return stats


def run_pool(work: Workload, pool: Any, episodes: int, seconds: float) -> Stats:
    """``episodes`` slots of an environment pool (:mod:`agentenvs.agents.envworkers`) playing the
    workload together: one ``reset`` and one ``step`` call per turn, as a rollout makes them;
    latencies are per ``step`` call."""
    from agentenvs.agents.envworkers import EnvFailure

    resets = [(slot, work.task_id) for slot in range(episodes)]
    pool.reset(resets)  # (warm)
    stats = Stats()
    clock = time.perf_counter
    t0 = clock()
    while clock() - t0 < seconds:
        answers = pool.reset(resets)
        for action in work.actions:
            s = clock()
            answers = pool.step([(slot, action) for slot in range(episodes)])
            stats.latencies.append(clock() - s)
        failed = [a for a in answers if isinstance(a, EnvFailure)]
        if failed:
            raise RuntimeError(f"{pool!r}: {failed[0].error}")
        stats.steps += episodes * len(work.actions)
    stats.seconds = clock() - t0
    return stats


def bench_batched(work: Workload, episodes: list[int], seconds: float) -> dict[str, Any]:
    """The batched rows of one environment: per E in ``episodes``, E episodes in process and in
    step batches through one server (measured one after the other); for the largest E, the
    in-process pool and the ``http://`` pool."""
    from agentenvs.agents.envworkers import HttpPool, InProcessPool

    rows = []
    server = Server(work.env_id, 1)
    part = seconds / BATCH_ROUNDS
    try:
        run_batch_through_server(work, server, 1, min(0.5, seconds))  # warm: imports, data
        for n in episodes:
            base, stats = _best_rounds(
                lambda n=n: run_batch_in_process(work, n, part),
                lambda n=n: run_batch_through_server(work, server, n, part),
            )
            rows.append(
                {
                    "episodes": n,
                    "in_process": base.summary(),
                    "server": stats.summary(),
                    "ratio_steps_per_s": round(stats.steps_per_s / base.steps_per_s, 4),
                }
            )
        n = max(episodes)
        kwargs = {"max_turns": BIG_BUDGET}
        url = "http://{}:{}".format(*server.urls[0])
        with (
            InProcessPool(work.env_id, kwargs) as here,
            HttpPool(work.env_id, [url], kwargs) as there,
        ):
            base, stats = _best_rounds(
                lambda: run_pool(work, here, n, part), lambda: run_pool(work, there, n, part)
            )
            requests = dict(there.requests)
    finally:
        server.close()
    pools = {
        "episodes": n,
        "in_process_pool": base.summary(),
        "http_pool": stats.summary(),
        "ratio_steps_per_s": round(stats.steps_per_s / base.steps_per_s, 4),
        "requests": requests,
    }
    return {"rows": rows, "pools": pools}


def _best_rounds(baseline: Any, measured: Any) -> tuple[Stats, Stats]:
    """Each of two measurements run :data:`BATCH_ROUNDS` times, alternating; each one's best."""
    rounds = [(baseline(), measured()) for _ in range(BATCH_ROUNDS)]
    best = [max((r[i] for r in rounds), key=lambda st: st.steps_per_s) for i in (0, 1)]
    return best[0], best[1]


# ----- the benchmark -------------------------------------------------------------------------


def bench_env(
    env_id: str,
    clients: list[int],
    workers: list[int],
    seconds: float,
    batch_episodes: list[int] | None = None,
) -> dict[str, Any]:
    """Every measurement of one environment, as a JSON-ready record."""
    work = workload(env_id)
    batched = bench_batched(work, batch_episodes, seconds) if batch_episodes else None
    in_proc = {1: run_in_process(work, seconds)}
    for n in workers:
        if n not in in_proc:
            in_proc[n] = run_in_processes(work, seconds, n)
    rows: list[dict[str, Any]] = []
    for w in workers:
        server = Server(env_id, w)
        try:
            run_through_server(work, server, 1, min(0.5, seconds))  # warm: imports, first reset
            for c in clients if w == workers[0] else [max(clients)]:
                stats = run_through_server(work, server, c, seconds)
                base = in_proc[w]
                rows.append(
                    {
                        "workers": w,
                        "clients": c,
                        **stats.summary(),
                        "ratio_steps_per_s": round(stats.steps_per_s / base.steps_per_s, 4),
                        "baseline": f"{w} in-process environment(s) in {w} process(es)",
                        "added_p50_ms": round(
                            (stats.percentile(0.5) - in_proc[1].percentile(0.5)) * 1e3, 4
                        ),
                    }
                )
        finally:
            server.close()
    return {
        "env_id": env_id,
        "task_id": work.task_id,
        "episode_steps": len(work.actions),
        "in_process": {str(n): s.summary() for n, s in in_proc.items()},
        "server": rows,
        "batched": batched,
    }


def targets(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The two targets (module docstring), where this run measured them."""
    out = []
    for r in results:
        if r["env_id"] != "TextCraft-v0":
            continue
        for row in r["server"]:
            if row["workers"] == 1 and row["clients"] == 1:
                out.append(
                    {
                        "target": f"TextCraft: server adds <= {TARGET_ADDED_P50_MS:g} ms to "
                        "the p50 step at 1 client",
                        "measured_ms": row["added_p50_ms"],
                        "met": row["added_p50_ms"] <= TARGET_ADDED_P50_MS,
                    }
                )
            if row["workers"] == 2 and row["clients"] == 64:
                out.append(
                    {
                        "target": "TextCraft: 64 clients, --workers 2 >= "
                        f"{TARGET_SHARE_64_CLIENTS:.0%} of 2 in-process environments in 2 "
                        "processes",
                        "measured_ratio": row["ratio_steps_per_s"],
                        "met": row["ratio_steps_per_s"] >= TARGET_SHARE_64_CLIENTS,
                    }
                )
        for row in (r.get("batched") or {}).get("rows", []):
            if row["episodes"] == BATCH_TARGET_EPISODES:
                out.append(
                    {
                        "target": f"TextCraft: {BATCH_TARGET_EPISODES} episodes in step "
                        f"batches through one server >= {BATCH_TARGET:.0%} of the same "
                        "steps in process",
                        "measured_ratio": row["ratio_steps_per_s"],
                        "met": row["ratio_steps_per_s"] >= BATCH_TARGET,
                    }
                )
    return out


def machine() -> dict[str, Any]:
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def format_table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| env | where | workers | clients | steps/s | p50 ms | p99 ms | ratio | +p50 ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for n, s in r["in_process"].items():
            lines.append(
                f"| {r['env_id']} | in process x{n} | {n} | - | {s['steps_per_s']:.0f} "
                f"| {s['p50_ms']:.3f} | {s['p99_ms']:.3f} | 1 | - |"
            )
        for row in r["server"]:
            lines.append(
                f"| {r['env_id']} | server | {row['workers']} | {row['clients']} | "
                f"{row['steps_per_s']:.0f} | {row['p50_ms']:.3f} | {row['p99_ms']:.3f} | "
                f"{row['ratio_steps_per_s']:.3f} | {row['added_p50_ms']:.3f} |"
            )
    batched = [r for r in results if r.get("batched")]
    if batched:
        lines += [
            "",
            "| env | episodes | in process steps/s | step batches steps/s | ratio | "
            "p50 ms per turn (in process / batch request) |",
            "|---|---|---|---|---|---|",
        ]
        for r in batched:
            for row in r["batched"]["rows"]:
                here, there = row["in_process"], row["server"]
                lines.append(
                    f"| {r['env_id']} | {row['episodes']} | {here['steps_per_s']:.0f} | "
                    f"{there['steps_per_s']:.0f} | {row['ratio_steps_per_s']:.3f} | "
                    f"{here['p50_ms']:.3f} / {there['p50_ms']:.3f} |"
                )
            p = r["batched"]["pools"]
            lines.append(
                f"| {r['env_id']} | {p['episodes']}, pools | "
                f"{p['in_process_pool']['steps_per_s']:.0f} (in-process pool) | "
                f"{p['http_pool']['steps_per_s']:.0f} (http pool) | "
                f"{p['ratio_steps_per_s']:.3f} | {p['in_process_pool']['p50_ms']:.3f} / "
                f"{p['http_pool']['p50_ms']:.3f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("env_ids", nargs="*", help=f"default: {list(DEFAULT_ENVS)}")
    parser.add_argument("--seconds", type=float, default=5.0, help="per measurement (default 5)")
    parser.add_argument("--clients", default="1,16,64", help="concurrent clients (default 1,16,64)")
    parser.add_argument("--workers", default="1,2", help="server workers (default 1,2)")
    parser.add_argument(
        "--batch-episodes",
        default="1,16,64",
        help="episodes stepped together in batches through one server, and in "
        "process (default 1,16,64; '' for none)",
    )
    parser.add_argument(
        "--json",
        type=Path,
        default=Path("results/serve_speed.json"),
        help="write the results here (default results/serve_speed.json)",
    )
    args = parser.parse_args(argv)
    clients = [int(c) for c in args.clients.split(",")]
    workers = [int(w) for w in args.workers.split(",")]
    batch_episodes = [int(e) for e in args.batch_episodes.split(",") if e.strip()]
    started = datetime.datetime.now(datetime.timezone.utc)
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    results = []
    for env_id in args.env_ids or list(DEFAULT_ENVS):
        try:
            results.append(bench_env(env_id, clients, workers, args.seconds, batch_episodes))
        except ImportError as exc:  # an optional extra not installed here
            print(f"skipping {env_id}: {exc}", file=sys.stderr)
    record = {
        "benchmark": "serve_speed",
        "date": started.isoformat(timespec="seconds"),
        "machine": {**machine(), "load_average_start": load_at_start},
        "seconds": args.seconds,
        "clients": clients,
        "workers": workers,
        "batch_episodes": batch_episodes,
        "results": results,
        "targets": targets(results),
    }
    print(format_table(results))
    for t in record["targets"]:
        print(
            f"{'MET' if t['met'] else 'NOT MET'}: {t['target']}: "
            f"{t.get('measured_ms', t.get('measured_ratio'))}"
        )
    print(f"machine: {record['machine']}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
