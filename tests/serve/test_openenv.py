"""`--api openenv`: every environment through OpenEnv's server (the ``openenv`` distribution,
0.10), played with that release's own clients: over WebSocket its typed ``EnvClient`` subclass
and ``GenericEnvClient`` (async, and their ``.sync()`` form; an ``http://`` or a ``ws://`` base
URL); over HTTP its one-shot routes, its task API and its own runtime check (``openenv validate
--url``)."""

from __future__ import annotations

import asyncio
import importlib.metadata

import pytest
import requests
from openenv import GenericEnvClient
from openenv.cli._validation import validate_running_environment

from agentenvs import env_class
from agentenvs.serve import build_app
from agentenvs.serve.openenv import AgentenvsAction, AgentenvsEnvClient, AgentenvsObservation

from .conftest import expert_episode, live_server

INFO_KEYS = {"task_id", "family", "won", "valid", "turn", "admissible_actions", "fields"}


@pytest.mark.parametrize(
    "env_id", ["TextCraft-v0", "Sokoban-v0", "BabyAI-Text-v0", "WebShop-v0", "ALFWorld-v0"]
)
def test_expert_episode_with_the_typed_client(env_id: str) -> None:
    task_id = env_class(env_id)().task_ids("test")[2]
    actions, rewards, final = expert_episode(env_id, task_id)
    with live_server(build_app(env_id, "openenv")) as url:
        with AgentenvsEnvClient(base_url=url).sync() as client:
            first = client.reset(task_id=task_id)
            assert isinstance(first.observation, AgentenvsObservation)
            assert first.observation.info["task_id"] == task_id and not first.done
            assert INFO_KEYS <= first.observation.info.keys()
            got = [client.step(AgentenvsAction(action=a)) for a in actions]
            assert [r.reward for r in got] == rewards and got[-1].observation.text == final
            assert got[-1].done and got[-1].observation.terminated
            state = client.state()
            assert state.env_id == env_id and state.task_id == task_id
            assert state.step_count == len(actions) and state.won
            assert state.variant == env_class(env_id)().variant


def test_generic_client_errors_and_capacity() -> None:
    with live_server(build_app("TextCraft-v0", "openenv", max_sessions=2)) as url:
        with GenericEnvClient(base_url=url).sync() as client:
            with pytest.raises(RuntimeError, match="reset"):
                client.step({"action": "inventory"})
            with pytest.raises(RuntimeError, match="unknown task id"):
                client.reset(task_id="agentgym/x")
            result = client.reset(task_id="agentgym/0", seed=1)
            assert result.observation["info"]["task_id"] == "agentgym/0"
            with pytest.raises(RuntimeError, match="10000"):
                client.step({"action": "x" * 10_001})
            with pytest.raises(RuntimeError):
                client.step({"act": "inventory"})  # not an AgentenvsAction
            step = client.step({"action": "get 1 sunflower"})  # the session is unharmed
            assert step.observation["text"] == "Got 1 sunflower"
            # a second session fits, a third is refused, the first keeps working
            with GenericEnvClient(base_url=url).sync() as second:
                assert second.reset(seed=3).observation["info"]["turn"] == 0
                # openenv sends CAPACITY_REACHED and closes the socket; the client raises
                with pytest.raises(Exception):  # noqa: B017 (openenv's own exception types vary)
                    with GenericEnvClient(base_url=url).sync() as third:
                        third.reset()
            assert client.step({"action": "inventory"}).observation["info"]["turn"] == 2
        # openenv's one-shot HTTP routes, its schema and our native routes on the same app
        r = requests.post(url + "/reset", json={"task_id": "agentgym/1"})
        assert r.status_code == 200 and r.json()["observation"]["info"]["task_id"] == "agentgym/1"
        r = requests.post(url + "/step", json={"action": {"action": "inventory"}})
        assert r.status_code == 409  # one-shot: a fresh environment has no task
        schema = requests.get(url + "/schema").json()
        assert "action" in schema["action"]["properties"]
        assert {"text", "info", "terminated"} <= schema["observation"]["properties"].keys()
        assert requests.get(url + "/metadata").json()["name"] == "TextCraft-v0"
        health = requests.get(url + "/agentenvs/v1/health").json()
        assert health["api"] == "openenv" and health["status"] == "ok"


def test_the_tested_openenv_release() -> None:
    assert importlib.metadata.version("openenv").startswith("0.10.")


def test_generic_async_client_over_websocket_urls() -> None:
    """``GenericEnvClient`` as openenv's docs use it (async, a ``ws://`` URL), and the task API's
    ``split`` and ``index`` in ``reset``."""

    async def play(url: str) -> tuple[dict, dict]:
        async with GenericEnvClient(base_url=url.replace("http://", "ws://")) as env:
            first = await env.reset(split="test", index=3)
            step = await env.step({"action": "inventory"})
            return first.observation, step.observation

    with live_server(build_app("TextCraft-v0", "openenv")) as url:
        first, step = asyncio.run(play(url))
        assert first["info"]["task_id"] == env_class("TextCraft-v0")().task_ids("test")[3]
        assert step["info"]["turn"] == 1 and step["text"].startswith("Inventory")
        with AgentenvsEnvClient(base_url=url).sync() as client:
            with pytest.raises(RuntimeError, match="task_id, or split and index"):
                client.reset(task_id="agentgym/0", split="test", index=0)
            assert client.reset(split="train", index=0).observation.info["turn"] == 0


def test_http_routes_pass_openenvs_own_runtime_check() -> None:
    with live_server(build_app("TextCraft-v0", "openenv")) as url:
        report = validate_running_environment(url)
        failed = [c for c in report["criteria"] if not c["passed"]]
        assert report["passed"] and not failed, failed
        assert report["mode"] == "simulation"
        state = requests.get(url + "/state").json()  # a fresh environment's, typed
        assert state["env_id"] == "TextCraft-v0" and state["task_id"] is None
        assert {"env_id", "task_id", "won"} <= requests.get(url + "/schema").json()["state"][
            "properties"
        ].keys()


def test_openenvs_task_api_lists_our_splits_and_tasks() -> None:
    env = env_class("TextCraft-v0")()
    ids = env.task_ids("test")
    with live_server(build_app("TextCraft-v0", "openenv")) as url:
        assert requests.get(url + "/list_environments").json() == ["TextCraft-v0"]
        splits = requests.get(url + "/TextCraft-v0/splits").json()
        assert [s["name"] for s in splits] == list(env.splits)
        assert {"name": "test", "type": "test"} in splits

        def post(route: str, **body) -> requests.Response:
            return requests.post(f"{url}/TextCraft-v0/{route}", json=body)

        assert post("num_tasks", split="test").json() == {"num_tasks": len(ids)}
        task = post("task", split="test", index=5).json()["task"]
        assert task == {"id": ids[5], "index": 5, "family": env.family(ids[5])}
        tasks = post("task_range", split="test", start=2, stop=4).json()["tasks"]
        assert [t["id"] for t in tasks] == ids[2:4]
        assert [t["id"] for t in post("tasks", split="test").json()["tasks"]] == ids
        assert post("task", split="test", index=len(ids)).status_code == 400
        assert "unknown split" in post("tasks", split="tset").json()["error"]
        # the one-shot HTTP reset takes the same split and index
        r = requests.post(url + "/reset", json={"split": "test", "index": 5})
        assert r.status_code == 200 and r.json()["observation"]["info"]["task_id"] == ids[5]


def test_trls_openenv_harness_imports_with_this_openenv(monkeypatch) -> None:
    """TRL 1.16's OpenEnv path (its async GRPO harness) imports from the ``openenv`` name that
    [serve] installs; no extra needs the ``openenv-core`` name."""
    pytest.importorskip("trl")
    import importlib

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")  # it warns that the API may change

    harness = importlib.import_module("trl.experimental.async_grpo.openenv_harness")
    assert harness.HarnessAdapter.__module__.startswith("openenv.core.harness")
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.version("openenv-core")
