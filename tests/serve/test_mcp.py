"""``--api mcp`` and ``agentenvs mcp``: every environment played through the official MCP client
(the ``mcp`` package's ``ClientSession``) over streamable HTTP to a real server on 127.0.0.1 and
over stdio to a real ``agentenvs mcp`` subprocess: the expert's actions on three test tasks of
each environment give the observations, rewards and ends of the same episodes in process."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from agentenvs import env_class
from agentenvs.expert import make_expert
from agentenvs.serve.mcp_http import build_mcp_app, service_of

from .conftest import live_server

ENVS = ["TextCraft-v0", "BabyAI-Text-v0", "ALFWorld-v0", "WebShop-v0", "Sokoban-v0"]
TASKS_PER_ENV = 3


def played_in_process(env_id: str, task_id: str) -> tuple[str, list[tuple[str, Any]]]:
    """The expert's episode: the first observation and, per action, (action, step result)."""
    env = env_class(env_id)()
    expert = make_expert(env_id)
    first, _ = env.reset(options={"task_id": task_id})
    steps = []
    while not env.done:
        action = expert.act(env).action
        steps.append((action, env.step(action)))
    env.close()
    return first, steps


@asynccontextmanager
async def http_session(url: str, **headers: str) -> AsyncIterator[ClientSession]:
    async with create_mcp_http_client(headers=headers or None) as client:
        async with streamable_http_client(url + "/mcp", http_client=client) as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


@asynccontextmanager
async def stdio_session(env_id: str) -> AsyncIterator[ClientSession]:
    # the whole environment (the SDK passes only a few variables by default): data paths etc.
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "agentenvs.cli", "mcp", env_id], env=dict(os.environ)
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            yield session


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await session.call_tool(tool, arguments)
    assert not result.isError, result.content[0].text
    return result.structuredContent


async def error(session: ClientSession, tool: str, **arguments: Any) -> str:
    result = await session.call_tool(tool, arguments)
    assert result.isError, result
    return result.content[0].text


async def play_expert_tasks(
    session: ClientSession, env_id: str, tasks: int = TASKS_PER_ENV
) -> None:
    """The first ``tasks`` test tasks, one after another in one MCP session, against the
    in-process play."""
    task_ids = env_class(env_id)().task_ids("test")[:tasks]
    listed = await call(session, "list_tasks", split="test", limit=min(tasks, 1000))
    assert [t["task_id"] for t in listed["tasks"]] == task_ids[:1000]
    for task_id in task_ids:
        first, steps = played_in_process(env_id, task_id)
        start = await call(session, "reset", task_id=task_id)
        assert start["observation"] == first and start["task_id"] == task_id
        assert start["turn"] == 0 and not start["done"]
        for action, (observation, reward, terminated, truncated, info) in steps:
            got = await call(session, "step", action=action)
            assert got["observation"] == observation, (task_id, action)
            assert (got["reward"], got["terminated"], got["truncated"]) == (
                reward,
                terminated,
                truncated,
            )
            assert got["won"] == info["won"] and got["turn"] == info["turn"]
            assert got["admissible_actions"] == info["admissible_actions"]
        assert got["done"] and got["won"] == steps[-1][1][4]["won"], task_id
        if tasks == TASKS_PER_ENV:  # the expert wins the first tasks of every environment
            assert got["won"], (task_id, got["observation"][-300:])
        message = await error(session, "step", action=steps[0][0])
        assert message.startswith("episode_over:")


@pytest.mark.parametrize("env_id", ENVS)
def test_expert_plays_through_streamable_http(env_id: str) -> None:
    app = build_mcp_app(env_id, max_sessions=4)
    with live_server(app) as url:

        async def run() -> None:
            async with http_session(url) as session:
                tools = {t.name: t for t in (await session.list_tools()).tools}
                assert set(tools) == {
                    "reset",
                    "step",
                    "admissible_actions",
                    "list_tasks",
                    "snapshot",
                    "restore",
                }
                await play_expert_tasks(session, env_id)
                assert len(service_of(app).store) == 1  # one environment session
            await anyio.sleep(0.2)  # the client's DELETE ends the MCP session
            assert len(service_of(app).store) == 0

        anyio.run(run)


@pytest.mark.parametrize("env_id", ENVS)
def test_expert_plays_through_stdio(env_id: str) -> None:
    async def run() -> None:
        async with stdio_session(env_id) as session:
            await play_expert_tasks(session, env_id)

    anyio.run(run)


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("env_id", ENVS)
def test_expert_plays_every_test_task_through_streamable_http(env_id: str) -> None:
    """Every test task; the expert's episode in process and through MCP: same observations
    (not every one won: WebShop's expert scores below 1 on some)."""
    with live_server(build_mcp_app(env_id)) as url:

        async def run() -> None:
            async with http_session(url) as session:
                await play_expert_tasks(
                    session, env_id, tasks=len(env_class(env_id)().task_ids("test"))
                )

        anyio.run(run)
