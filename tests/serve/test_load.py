"""Load and robustness: hundreds of concurrent sessions on a real server, bad input mixed in,
and memory that stays flat over thousands of create/close cycles. Bounded: every request has a
timeout and each test stops by itself."""

from __future__ import annotations

import asyncio
import gc
import random
import resource
import time

import httpx
import pytest

from agentenvs.serve import build_app

from .conftest import live_server, serve_process

V1 = "/agentenvs/v1"


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * resource.getpagesize() / 2**20


async def _episode(client: httpx.AsyncClient, i: int, errors: list[str], steps: int) -> None:
    """One client: a session, a reset, steps with bad requests in between, a snapshot, close."""
    r = await client.post(f"{V1}/sessions", json={})
    if r.status_code != 200:
        errors.append(f"create {r.status_code} {r.text[:100]}")
        return
    sid = r.json()["session"]
    r = await client.post(f"{V1}/reset", json={"session": sid, "task_id": f"agentgym/{i % 544}"})
    assert r.status_code == 200, r.text
    for step in range(steps):
        if step == 1:  # bad input from this client: each a 4xx, the session unharmed
            bad = [
                await client.post(
                    f"{V1}/step", content=b"{oops", headers={"content-type": "application/json"}
                ),
                await client.post(f"{V1}/step", json={"session": sid, "action": "x" * 20_000}),
                await client.post(f"{V1}/step", json={"session": "nope", "action": "inventory"}),
            ]
            assert [b.status_code for b in bad] == [422, 413, 404]
        r = await client.post(f"{V1}/step", json={"session": sid, "action": "inventory"})
        assert r.status_code == 200 and r.json()["info"]["turn"] == step + 1, r.text
        await asyncio.sleep(random.random() * 0.01)
    r = await client.post(f"{V1}/snapshot", json={"session": sid})
    assert r.status_code == 200
    r = await client.post(f"{V1}/close", json={"session": sid})
    assert r.status_code == 200


async def _load(url: str, sessions: int, steps: int = 6) -> tuple[list[str], int]:
    limits = httpx.Limits(max_connections=sessions, max_keepalive_connections=sessions)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:
        errors: list[str] = []
        await asyncio.wait_for(
            asyncio.gather(*(_episode(client, i, errors, steps) for i in range(sessions))),
            timeout=240,
        )
        health = (await client.get(f"{V1}/health")).json()
    return errors, health["sessions"]


def _concurrent(sessions: int, steps: int) -> None:
    with serve_process("TextCraft-v0", "--max-sessions", str(sessions)) as (url,):
        t0 = time.perf_counter()
        errors, left = asyncio.run(_load(url, sessions, steps=steps))
        elapsed = time.perf_counter() - t0
    assert errors == [] and left == 0, (errors[:5], left)
    print(f"{sessions} concurrent sessions, {sessions * (steps + 6)} requests in {elapsed:.1f} s")


def test_concurrent_sessions_with_bad_input() -> None:
    """64 clients at once (a server process of its own), each with bad requests mixed in; the
    slow tests below run 300 and 500."""
    _concurrent(64, steps=1)


@pytest.mark.slow
def test_hundreds_of_concurrent_sessions_with_bad_input() -> None:
    """300 clients at once, 12 requests each, bad ones mixed in."""
    _concurrent(300, steps=6)


@pytest.mark.slow
def test_five_hundred_sessions_past_the_session_limit() -> None:
    """500 clients against a limit of 300: the rest get 429 and everyone else finishes."""
    with serve_process("TextCraft-v0", "--max-sessions", "300") as (url,):
        errors, left = asyncio.run(_load(url, 500))
    assert left == 0
    assert all(e.startswith("create 429") for e in errors), errors[:3]


async def _cycles(app: object, n: int) -> None:
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://serve") as client:
        for i in range(n):
            sid = (await client.post(f"{V1}/sessions", json={})).json()["session"]
            if i % 10 == 0:
                await client.post(f"{V1}/reset", json={"session": sid, "task_id": "agentgym/3"})
                await client.post(f"{V1}/step", json={"session": sid, "action": "inventory"})
            r = await client.post(f"{V1}/close", json={"session": sid})
            assert r.status_code == 200


def _flat_memory(cycles: int, warmup: int) -> tuple[float, float]:
    app = build_app("TextCraft-v0", "agentgym")
    asyncio.run(_cycles(app, warmup))
    gc.collect()
    before = _rss_mb()
    asyncio.run(_cycles(app, cycles))
    gc.collect()
    after = _rss_mb()
    assert len(app.state.service.store) == 0
    return before, after


def test_memory_flat_over_create_close_cycles() -> None:
    before, after = _flat_memory(1_000, warmup=300)
    assert after - before < 8, (before, after)


@pytest.mark.slow
def test_memory_flat_over_ten_thousand_cycles() -> None:
    before, after = _flat_memory(10_000, warmup=1_000)
    print(f"RSS {before:.1f} MB -> {after:.1f} MB over 10,000 create/close cycles")
    assert after - before < 8, (before, after)


@pytest.mark.slow
def test_memory_flat_on_a_real_server() -> None:
    """1,000 create/reset/close cycles over HTTP: the server process's sessions all go away and
    its memory (this process: the server runs in a thread) stays flat."""
    import requests

    with live_server(build_app("TextCraft-v0", "agentgym")) as url:
        http = requests.Session()

        def cycle(n: int) -> None:
            for _ in range(n):
                sid = http.post(url + V1 + "/sessions", json={}).json()["session"]
                http.post(url + V1 + "/reset", json={"session": sid, "task_id": "agentgym/9"})
                assert http.post(url + V1 + "/close", json={"session": sid}).status_code == 200

        cycle(200)
        gc.collect()
        before = _rss_mb()
        cycle(1_000)
        gc.collect()
        after = _rss_mb()
        assert http.get(url + V1 + "/health").json()["sessions"] == 0
    assert after - before < 8, (before, after)
