"""`--api agentgym`: the request sequences of AgentGym's clients and of the Prefix-GRPO fork's
interaction classes (recorded in tests/serve/data/agentgym_*.json) against a real server, and
the expert's episodes played through AgentGym's routes to the rewards they reach in process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import requests

from agentenvs import env_class
from agentenvs.serve import build_app

from .conftest import expert_episode, live_server

DATA = Path(__file__).parent / "data"
ENVS = {
    "textcraft": "TextCraft-v0",
    "babyai": "BabyAI-Text-v0",
    "alfworld": "ALFWorld-v0",
    "webshop": "WebShop-v0",
}
TYPES: dict[str, Any] = {
    "int": int,
    "str": str,
    "bool": bool,
    "list": list,
    "number": (int, float),
    "null": type(None),
}


def _substitute(value: Any, saved: dict[str, Any]) -> Any:
    if isinstance(value, str) and value == "$id":
        return saved["id"]
    if isinstance(value, dict):
        return {k: _substitute(v, saved) for k, v in value.items()}
    return value


def run_sequence(url: str, requests_: list[dict[str, Any]]) -> None:
    """Send each recorded request and check its answer as the recording says."""
    http = requests.Session()
    saved: dict[str, Any] = {}
    for i, req in enumerate(requests_):
        kwargs: dict[str, Any] = {"timeout": 60}
        if "json" in req:
            kwargs["json"] = _substitute(req["json"], saved)
        if "params" in req:
            kwargs["params"] = _substitute(req["params"], saved)
        r = http.request(req["method"], url + req["path"], **kwargs)
        where = f"request {i} {req['method']} {req['path']}: {r.text[:300]}"
        expect = req["expect"]
        assert r.status_code == expect["status"], where
        body = r.json()
        if "type" in expect:
            assert isinstance(body, TYPES[expect["type"]]), where
        if "body" in expect:
            assert body == expect["body"], where
        for name, type_ in expect.get("fields", {}).items():
            assert name in body and isinstance(body[name], TYPES[type_]), (name, where)
            if type_ in ("int", "number"):
                assert not isinstance(body[name], bool), (name, where)
        for name, value in expect.get("values", {}).items():
            assert body[name] == value, (name, where)
        for name, prefix in expect.get("startswith", {}).items():
            assert body[name].startswith(prefix), (name, where)
        if req.get("save") == "id":
            saved["id"] = body["id"]
        elif req.get("save") == "$body":
            saved["id"] = body


def _cases() -> list[Any]:
    cases = []
    for name in ENVS:
        data = json.loads((DATA / f"agentgym_{name}.json").read_text())
        for seq in data["sequences"]:
            cases.append(pytest.param(name, seq, id=f"{name}-{seq['name']}"))
    return cases


@pytest.fixture(scope="module")
def servers() -> Any:
    """One live AgentGym server per environment, started on first use."""
    import contextlib

    with contextlib.ExitStack() as stack:
        urls: dict[str, str] = {}

        def get(name: str) -> str:
            if name not in urls:
                urls[name] = stack.enter_context(live_server(build_app(ENVS[name], "agentgym")))
            return urls[name]

        yield get


@pytest.mark.parametrize(("name", "sequence"), _cases())
def test_recorded_sequences(servers: Any, name: str, sequence: dict[str, Any]) -> None:
    assert sequence["source"]
    run_sequence(servers(name), sequence["requests"])


def _play_agentgym(url: str, env_id: str, task_index: int, actions: list[str]) -> list[float]:
    """One episode through AgentGym's routes, as that environment's clients play it."""
    http = requests.Session()
    if env_id == "TextCraft-v0":
        sid = http.post(url + "/create", json={"data_idx": task_index}).json()["id"]
        key, path_key = "id", "id"
    elif env_id == "WebShop-v0":
        sid = http.post(url + "/create").json()
        http.post(url + "/reset", json={"env_idx": sid, "session_id": task_index})
        key, path_key = "env_idx", "env_idx"
    else:
        sid = http.post(url + "/create").json()["id"]
        body = (
            {"id": sid, "game": task_index, "world_type": "Text"}
            if env_id == "ALFWorld-v0"
            else {"id": sid, "data_idx": task_index}
        )
        assert http.post(url + "/reset", json=body).status_code == 200
        key, path_key = "id", "id"
    rewards = []
    for action in actions:
        r = http.post(url + "/step", json={key: sid, "action": action})
        assert r.status_code == 200, r.text
        rewards.append(r.json()["reward"])
    assert r.json()["done"]
    assert http.post(url + "/close", json={path_key: sid}).status_code == 200
    return rewards


AGENTGYM_KWARGS = {
    "TextCraft-v0": {},
    "BabyAI-Text-v0": {"rules": "agentgym"},
    "ALFWorld-v0": {"game_version": "agentgym"},
    "WebShop-v0": {},
}


def _expert_through_http(env_id: str, task_ids: list[str]) -> None:
    with live_server(build_app(env_id, "agentgym")) as url:
        for task_id in task_ids:
            actions, rewards, _ = expert_episode(
                env_id, task_id, max_turns=1000, **AGENTGYM_KWARGS[env_id]
            )
            index = int(task_id.rsplit("/", 1)[1])
            assert _play_agentgym(url, env_id, index, actions) == rewards, task_id


@pytest.mark.parametrize("env_id", ["TextCraft-v0", "BabyAI-Text-v0", "WebShop-v0"])
def test_expert_episodes_through_agentgym_routes(env_id: str) -> None:
    tests = env_class(env_id)().task_ids("test")
    _expert_through_http(env_id, tests[:: max(1, len(tests) // 4)][:4])


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("env_id", list(AGENTGYM_KWARGS))
def test_expert_episodes_of_every_test_task(env_id: str) -> None:
    """Every test task (TextCraft, BabyAI and WebShop: 2.5 minutes together; ALFWorld's 200
    10 at load 2-5 on 2 cores)."""
    kwargs = {"game_version": "agentgym"} if env_id == "ALFWorld-v0" else {}
    _expert_through_http(env_id, env_class(env_id)(**kwargs).task_ids("test"))


def test_defaults_are_agentgym_variants() -> None:
    for env_id, variant in [
        ("BabyAI-Text-v0", {"rules": "agentgym"}),
        ("ALFWorld-v0", {"game_version": "agentgym"}),
    ]:
        app = build_app(env_id, "agentgym")
        assert variant.items() <= app.state.service.default_variant.items()
    app = build_app("ALFWorld-v0", "agentgym", env_kwargs={"game_version": "alfworld-0.4"})
    assert app.state.service.default_variant == {"game_version": "alfworld-0.4"}


def test_fork_textcraft_create_checks_goal_and_shows_given_commands() -> None:
    with live_server(build_app("TextCraft-v0", "agentgym")) as url:
        r = requests.post(url + "/create", json={"goal": "yellow dye", "commands": "a\nb"})
        body = r.json()
        assert r.status_code == 200
        assert body["observation"] == "Crafting commands:\na\nb\n\nGoal: craft yellow dye."
        r = requests.post(url + "/create", json={"goal": "stone", "commands": "a", "data_idx": 0})
        assert r.status_code == 400 and "yellow dye" in r.json()["error"]
        r = requests.post(url + "/create", json={"goal": "no such thing", "commands": "a"})
        assert r.status_code == 400 and r.json()["error_type"] == "unknown_task"
        r = requests.post(url + "/create", json={"data_idx": -1})
        assert r.status_code == 400
        # bad bodies: AgentGym's field types, JSON errors with a 4xx
        r = requests.post(url + "/step", json={"id": "x", "action": "inventory"})
        assert r.status_code == 422 and r.json()["error_type"] == "bad_request"
        r = requests.post(url + "/step", data=b"{", headers={"content-type": "application/json"})
        assert r.status_code == 422 and isinstance(r.json()["error"], str)
        assert requests.get(url + "/health").status_code == 404
        assert requests.get(url + "/agentenvs/v1/health").json()["api"] == "agentgym"
