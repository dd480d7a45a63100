"""Malformed requests on every route never get a 5xx, and the server keeps serving."""

from __future__ import annotations

import itertools

import requests

from agentenvs.serve import build_app

from .conftest import live_server

BODIES = [
    None,
    b"",
    b"{",
    b"[]",
    b"null",
    b'"x"',
    b"1e999",
    b'{"session": null}',
    b'{"id": "1", "action": ["a"]}',
    b'{"id": 1e30, "action": "\\u0000"}',
    b'{"env_idx": -1, "session_id": "x"}',
    b'{"data_idx": 99999999999999999999999}',
    b'{"snapshot": 5}',
    b'{"task_id": {}, "actions": "abc"}',
    b'{"session": "a", "action": "\\ud800"}',
    b'{"env_kwargs": {"max_turns": "x"}}',
    b'{"env_kwargs": {"max_turns": -3}}',
    b'{"goal": 1, "commands": [1]}',
    b'{"id": 0, "game": -5, "world_type": "Text"}',
]
PATHS = [
    "/create",
    "/reset",
    "/step",
    "/close",
    "/observe?id=x",
    "/observation?id=-1",
    "/detail?id=1",
    "/commands?id=999",
    "/agentenvs/v1/sessions",
    "/agentenvs/v1/reset",
    "/agentenvs/v1/step",
    "/agentenvs/v1/snapshot",
    "/agentenvs/v1/restore",
    "/agentenvs/v1/replay",
    "/agentenvs/v1/close",
    "/agentenvs/v1/tasks?split=",
    "/agentenvs/v1/tasks",
]


def test_no_5xx_on_malformed_requests() -> None:
    with live_server(build_app("TextCraft-v0", "agentgym")) as url:
        http = requests.Session()
        http.post(url + "/create", json={"data_idx": 1})  # ids 0 and 1 exist, so the fuzz
        http.post(url + "/create", json={})  # bodies naming 0 and 1 reach real sessions
        keep = http.post(url + "/agentenvs/v1/sessions", json={}).json()["session"]
        http.post(url + "/agentenvs/v1/reset", json={"session": keep, "task_id": "agentgym/1"})
        statuses = set()
        for path, body in itertools.product(PATHS, BODIES):
            for method in ("POST", "GET"):
                r = http.request(
                    method,
                    url + path,
                    data=body,
                    headers={"content-type": "application/json"},
                    timeout=30,
                )
                assert r.status_code < 500, (method, path, body, r.status_code, r.text)
                assert r.headers["content-type"].startswith("application/json"), (path, body)
                statuses.add(r.status_code)
        assert statuses >= {200, 400, 404, 405, 422}
        r = http.post(url + "/agentenvs/v1/step", json={"session": keep, "action": "inventory"})
        assert r.status_code == 200 and "Inventory" in r.json()["observation"]
