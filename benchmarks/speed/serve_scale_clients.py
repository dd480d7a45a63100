"""The client side of :mod:`agentenvs.benchmarks.speed.serve_scale`: the sessions of a level
over each transport, run in client processes that share one clock and one ramp."""

from __future__ import annotations

import asyncio
import json
import os
import resource
import time
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["CLIENT_FD_MARGIN", "client_processes", "own_cpu", "raise_fd_limit", "run_clients"]

V1 = "/agentenvs/v1"
FDS_PER_SESSION = 4
"""Open files a ``/ws`` session may need in one process tree: the client's socket, HAProxy's two
and the worker's."""
FD_MARGIN = 4096
"""Open files beside the sessions' (HTTP connections, logs, libraries)."""
CLIENT_FD_MARGIN = 2048
"""Open files a client process keeps beside its sessions' sockets."""
CLIENT_START_S = 3.0
"""The level starts this long after its client processes are asked to (their start-up)."""


@dataclass
class _Tally:
    latencies: list[float] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)
    """When each request of ``latencies`` was sent (``time.monotonic``)."""
    requests: int = 0
    failed: set[int] = field(default_factory=set)
    errors: dict[str, int] = field(default_factory=dict)

    def fail(self, why: str, *sessions: int) -> None:
        """Sessions ``sessions`` failed because of ``why``."""
        self.failed.update(sessions)
        key = why[:100]
        self.errors[key] = self.errors.get(key, 0) + 1


# ----- sessions ------------------------------------------------------------------------------


GROUP = 8
"""ALFWorld sessions per game: a GRPO group plays each game this many times at once."""


def _task(env_id: str, i: int) -> str:
    if env_id == "ALFWorld-v0":
        return f"agentgym/{2420 + (i // GROUP) % 200}"
    return f"agentgym/{i % 100}"


ACTIONS = ("inventory", "look")


async def _timed(tally: _Tally, call: Any, timeout: float) -> Any:
    sent, start = time.monotonic(), time.perf_counter()
    answer = await asyncio.wait_for(call, timeout)
    tally.latencies.append(time.perf_counter() - start)
    tally.starts.append(sent)
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

        async def ask(message: dict[str, Any]) -> bool:
            """Send ``message``; whether the episode is over."""
            await ws.send(json.dumps(message))
            answer = json.loads(await ws.recv())
            if answer.get("type") == "error":
                raise RuntimeError(answer.get("data", {}).get("message", "error"))
            return bool(answer.get("data", {}).get("done"))

        reset = {"type": "reset", "data": data}
        await _timed(tally, ask(reset), args.timeout)
        turn, over = 0, False
        while True:
            await asyncio.sleep(args.think)
            step = {"type": "step", "data": {"action": ACTIONS[turn % 2]}}
            over = await _timed(tally, ask(reset if over else step), args.timeout)
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
        turn, over = 0, False
        while True:
            await asyncio.sleep(args.think)
            if over:  # a new episode in the same session, as a rollout worker starts one
                await _timed(tally, _post(client, url + V1 + "/reset", reset), args.timeout)
                over = False
            else:
                step = {"session": sid, "action": ACTIONS[turn % 2]}
                answer = await _timed(tally, _post(client, url + V1 + "/step", step), args.timeout)
                over = answer["terminated"] or answer["truncated"]
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
        turn, over = 0, set()
        while live:
            await asyncio.sleep(args.think)
            if over:  # new episodes for the sessions whose episode ended, in one request
                ended = [s for s in live if s in over]
                body = {
                    "resets": [{"session": s, "task_id": _task(env_id, index[s])} for s in ended]
                }
                answer = await _timed(
                    tally, _post(client, url + V1 + "/reset_batch", body), args.timeout
                )
                for s, r in zip(ended, answer["results"], strict=True):
                    if r["status"] != 200:
                        tally.fail(f"reset item {r['status']} {r['error']['type']}", index[s])
                        live.remove(s)
            stepping = [s for s in live if s not in over]
            over = set()
            body = {"steps": [{"session": s, "action": ACTIONS[turn % 2]} for s in stepping]}
            answer = await _timed(
                tally, _post(client, url + V1 + "/step_batch", body), args.timeout
            )
            for s, r in zip(stepping, answer["results"], strict=True):
                if r["status"] != 200:
                    tally.fail(f"step item {r['status']} {r['error']['type']}", index[s])
                    live.remove(s)
                elif r["terminated"] or r["truncated"]:
                    over.add(s)
            turn += 1
            if hold(turn):
                break
        for s in live:
            await _timed(tally, _post(client, url + V1 + "/close", {"session": s}), args.timeout)
    except Exception as exc:  # the request failed: every session of the group with it
        tally.fail(f"{type(exc).__name__}: {exc}", *range(first, first + size))


# ----- levels --------------------------------------------------------------------------------


async def _run_sessions(
    transport: str,
    url: str,
    env_id: str | None,
    share: _Share,
    args: Any,
    tally: _Tally,
) -> None:
    """This client process's sessions of the level (every ``share.of``-th session or group),
    each opened at ``share.start + i / share.ramp_rate``."""
    n, ramp_rate = share.sessions, share.ramp_rate
    ramp_end = share.start + n / ramp_rate

    def hold(turn: int) -> bool:
        """Whether a session that has stepped ``turn`` times is done: every session of the
        level is open, and it stepped ``--steps`` times since."""
        return turn >= args.steps and time.monotonic() >= ramp_end + (args.steps - 1) * args.think

    async def at(offset: float, coro: Any) -> None:
        await asyncio.sleep(max(share.start + offset - time.monotonic(), 0.0))
        await coro

    tasks = []
    client = None
    if transport == "ws":
        for i in range(share.index, n, share.of):
            tasks.append(at(i / ramp_rate, ws_session(url, env_id, i, hold, args, tally)))
    else:
        import aiohttp

        client = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=max(args.http_connections // share.of, 1)),
            timeout=aiohttp.ClientTimeout(total=None),
        )
        if transport == "native":
            for i in range(share.index, n, share.of):
                coro = native_session(client, url, env_id, i, hold, args, tally)
                tasks.append(at(i / ramp_rate, coro))
        else:
            firsts = range(0, n, args.batch)
            for first in firsts[share.index :: share.of]:
                size = min(args.batch, n - first)
                coro = batch_group(client, url, env_id, first, size, hold, args, tally)
                tasks.append(at(first / ramp_rate, coro))
    try:
        await asyncio.gather(*tasks)
    finally:
        if client is not None:
            await client.close()


@dataclass(frozen=True)
class _Share:
    """Which sessions of a level one client process runs, and when the level starts."""

    index: int
    of: int
    sessions: int
    ramp_rate: float
    start: float
    """``time.monotonic()`` of the level's first session (one clock for every process)."""


def _client(transport: str, url: str, env_id: str | None, share: _Share, args: Any) -> dict:
    """One client process: its sessions' tally and the CPU seconds it spent on them."""
    raise_fd_limit(0)
    tally = _Tally()
    before = own_cpu()
    asyncio.run(_run_sessions(transport, url, env_id, share, args, tally))
    return {**asdict(tally), "failed": sorted(tally.failed), "cpu": own_cpu() - before}


def client_processes(sessions: int, open_files: int) -> int:
    """Client processes for ``sessions``: a ``/ws`` session holds a socket in its client, and one
    process holds at most ``open_files`` less :data:`CLIENT_FD_MARGIN`."""
    per_process = max(open_files - CLIENT_FD_MARGIN, 1)
    return max(1, -(-sessions // per_process))


def run_clients(
    transport: str, url: str, env_id: str | None, n: int, args: Any, ramp_rate: float
) -> tuple[_Tally, float, float, int]:
    """The level's sessions over :func:`client_processes` processes: (their merged tally,
    their CPU seconds, the level's start on ``time.monotonic``, the number of processes)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    processes = client_processes(n, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    start = time.monotonic() + CLIENT_START_S
    tally, cpu = _Tally(), 0.0
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(processes, mp_context=context) as pool:
        shares = [_Share(k, processes, n, ramp_rate, start) for k in range(processes)]
        futures = [pool.submit(_client, transport, url, env_id, sh, args) for sh in shares]
        for future in futures:
            part = future.result()
            tally.latencies += part["latencies"]
            tally.starts += part["starts"]
            tally.requests += part["requests"]
            tally.failed.update(part["failed"])
            for key, count in part["errors"].items():
                tally.errors[key] = tally.errors.get(key, 0) + count
            cpu += part["cpu"]
    return tally, cpu, start, processes


def own_cpu() -> float:
    times = os.times()
    return times.user + times.system


def raise_fd_limit(sessions: int) -> int:
    """Raise this process's open-file limit (its children inherit it): to
    :data:`FDS_PER_SESSION` per session where the process may raise its hard limit (root),
    else the soft limit to the hard one. Nothing system-wide changes."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = FDS_PER_SESSION * sessions + FD_MARGIN
    if hard != resource.RLIM_INFINITY and wanted > hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, wanted))
            return wanted
        except (ValueError, OSError):
            pass
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard
