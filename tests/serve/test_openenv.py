"""`--api openenv`: every environment through openenv-core's server, played with openenv-core's
own clients (the typed EnvClient subclass, GenericEnvClient, their .sync() form)."""

from __future__ import annotations

import pytest
import requests
from openenv import GenericEnvClient

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
