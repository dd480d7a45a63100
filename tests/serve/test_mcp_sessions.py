"""MCP sessions of ``--api mcp`` through the official client over streamable HTTP: every bad call
is a tool error and the session plays on; snapshot tokens restore in another MCP session;
``max_sessions`` and ``idle_timeout`` hold as in the other APIs; the bearer token is required
when set; a web page's Origin is refused."""

from __future__ import annotations

import anyio
import httpx
import pytest

from agentenvs import env_class
from agentenvs.serve.mcp_http import build_mcp_app, service_of

from .conftest import live_server, serve_process
from .test_mcp import call, error, http_session, played_in_process


def test_bad_calls_are_tool_errors_and_the_session_plays_on() -> None:
    app = build_mcp_app("TextCraft-v0")
    with live_server(app) as url:

        async def run() -> None:
            async with http_session(url) as s:
                assert (await error(s, "step", action="inventory")).startswith("reset_needed:")
                assert (await error(s, "snapshot")).startswith("reset_needed:")
                message = await error(s, "reset", task_id="agentgym/nope")
                assert message.startswith("unknown_task:") and "agentgym/" in message
                message = await error(s, "reset", split="valid")
                assert message.startswith("bad_arguments: split:")
                assert "index must be below" in await error(s, "reset", split="test", index=100)
                assert "task_id alone" in await error(s, "reset", task_id="agentgym/0", seed=1)
                first = await call(s, "reset", task_id="agentgym/0")
                message = await error(s, "step", action="x" * 10_001)
                assert message == "bad_arguments: action: 10001 characters; at most 10000"
                assert "'action' is a required property" in await error(s, "step", act="x")
                assert "bad_arguments: action:" in await error(s, "step", action=3)
                assert "takes ['action']" in await error(s, "step", action="x", extra=1)
                assert "unknown tool" in await error(s, "jump")
                assert (await error(s, "restore", snapshot="not-a-token")).startswith(
                    "bad_snapshot:"
                )
                # nothing above used a turn: the expert wins from the first observation
                _, steps = played_in_process("TextCraft-v0", "agentgym/0")
                assert first["turn"] == 0
                for action, _ in steps:
                    last = await s.call_tool("step", {"action": action})
                assert not last.isError and last.structuredContent["won"]
                assert "[episode over: won, reward 1" in last.content[0].text
                assert (await error(s, "step", action="inventory")).startswith("episode_over:")
                again = await call(s, "reset", split="test", index=1)
                assert again["task_id"] == env_class("TextCraft-v0")().task_ids("test")[1]
                assert again["turn"] == 0
                assert (await call(s, "admissible_actions"))["admissible_actions"] is None
                # a seed draws the same task every time, alone (training) or in a split
                drawn = [(await call(s, "reset", seed=7))["task_id"] for _ in range(2)]
                assert drawn[0] == drawn[1] and drawn[0] in env_class("TextCraft-v0")().task_ids(
                    "train"
                )
                in_split = [
                    (await call(s, "reset", split="adapt", seed=7))["task_id"] for _ in "ab"
                ]
                assert in_split[0] == in_split[1] and in_split[0].startswith("adapt/")
                page = await call(s, "list_tasks", split="test", offset=98, limit=5)
                test_ids = env_class("TextCraft-v0")().task_ids("test")
                assert page["total"] == 100
                assert [t["task_id"] for t in page["tasks"]] == test_ids[98:]
                family = page["tasks"][0]["family"]
                same = await call(s, "list_tasks", split="test", family=family, limit=1000)
                assert same["tasks"] and all(t["family"] == family for t in same["tasks"])

        anyio.run(run)


def test_snapshot_restores_in_another_session() -> None:
    _, steps = played_in_process("Sokoban-v0", "seed/0")
    app = build_mcp_app("Sokoban-v0")
    with live_server(app) as url:

        async def run() -> None:
            async with http_session(url) as first:
                await call(first, "reset", task_id="seed/0")
                for action, _ in steps[:2]:
                    await call(first, "step", action=action)
                saved = await call(first, "snapshot")
                assert saved["turn"] == 2
                async with http_session(url) as second:
                    back = await call(second, "restore", snapshot=saved["snapshot"])
                    assert back["turn"] == 2 and back["observation"] == steps[1][1][0]
                    for action, result in steps[2:]:
                        got = await call(second, "step", action=action)
                        assert got["observation"] == result[0]
                    assert got["won"] and got["terminated"]
                    listed = await call(second, "admissible_actions")
                    assert listed["admissible_actions"] == ["up", "down", "left", "right"]
                    assert len(service_of(app).store) == 2
                # the first session's episode is its own
                got = await call(first, "step", action=steps[2][0])
                assert got["observation"] == steps[2][1][0]

        anyio.run(run)


def test_max_sessions_and_idle_timeout() -> None:
    app = build_mcp_app("TextCraft-v0", max_sessions=1, idle_timeout=0.6)
    with live_server(app) as url:

        async def run() -> None:
            async with http_session(url) as s:
                await call(s, "reset", task_id="agentgym/1")
                with pytest.raises(Exception):  # noqa: B017 (the SDK's 503 surfaces as it may)
                    with anyio.fail_after(20):
                        async with http_session(url) as other:
                            await call(other, "reset", task_id="agentgym/1")
                assert len(service_of(app).store) == 1
            await anyio.sleep(0.3)
            assert len(service_of(app).store) == 0  # the MCP session's end closed it
            async with http_session(url) as s:
                await call(s, "reset", task_id="agentgym/1")
                await anyio.sleep(1.5)  # past the idle timeout: the MCP session ends
            # a new MCP session gets a fresh environment session
            async with http_session(url) as s:
                got = await call(s, "reset", task_id="agentgym/2")
                assert got["turn"] == 0

        anyio.run(run)


def test_environment_session_expiry_is_a_tool_error_and_reset_recovers() -> None:
    app = build_mcp_app("TextCraft-v0", idle_timeout=0.6)
    store = service_of(app).store
    with live_server(app) as url:

        async def run() -> None:
            async with http_session(url) as s:
                await call(s, "reset", task_id="agentgym/1")
                for session in store:  # the environment session idles; the MCP one does not
                    session.last_used -= 10
                message = await error(s, "step", action="inventory")
                assert message.startswith("session_expired:") and "call reset" in message
                got = await call(s, "reset", task_id="agentgym/1")
                assert got["turn"] == 0 and len(store) == 1

        anyio.run(run)


def test_auth_token_and_origin() -> None:
    app = build_mcp_app("TextCraft-v0", auth_token="s3cret")
    with live_server(app) as url:
        r = httpx.post(url + "/mcp", json={}, headers={"Accept": "application/json"})
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        r = httpx.get(url + "/agentenvs/v1/health", headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 401
        good = {"Authorization": "Bearer s3cret"}
        assert httpx.get(url + "/agentenvs/v1/health", headers=good).json()["status"] == "ok"
        r = httpx.get(
            url + "/agentenvs/v1/health", headers={**good, "Origin": "http://evil.example"}
        )
        assert r.status_code == 403

        async def run() -> None:
            with pytest.raises(Exception):  # noqa: B017 (the SDK raises its own on 401)
                with anyio.fail_after(20):
                    async with http_session(url) as s:
                        await call(s, "list_tasks")
            async with http_session(url, Authorization="Bearer s3cret") as s:
                got = await call(s, "reset", task_id="agentgym/0")
                assert got["task_id"] == "agentgym/0"

        anyio.run(run)


def test_agentenvs_serve_api_mcp_command() -> None:
    """The command itself: ``agentenvs serve ENV --api mcp`` with a token from the environment."""
    import os

    os.environ["AGENTENVS_AUTH_TOKEN"] = "from-env"
    try:
        with serve_process("Sokoban-v0", "--api", "mcp", "--max-sessions", "2") as urls:
            assert httpx.get(urls[0] + "/agentenvs/v1/health").status_code == 401

            async def run() -> None:
                async with http_session(urls[0], Authorization="Bearer from-env") as s:
                    got = await call(s, "reset", task_id="seed/3")
                    assert got["task_id"] == "seed/3" and got["max_turns"] == 15

            anyio.run(run)
    finally:
        del os.environ["AGENTENVS_AUTH_TOKEN"]
