"""The native routes /agentenvs/v1 on a real server: episodes, snapshot/restore/replay, errors."""

from __future__ import annotations

import base64
import json

import pytest
import requests

from agentenvs import env_class
from agentenvs.serve import build_app

from .conftest import expert_episode, live_server

V1 = "/agentenvs/v1"
ENVELOPE = {"env_id", "version", "variant"}


class Client:
    """A thin requests wrapper: post/get returning (status, json)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.http = requests.Session()

    def post(self, route: str, body: object = None, **kw: object) -> tuple[int, dict]:
        r = self.http.post(self.url + V1 + route, json=body, timeout=30, **kw)
        return r.status_code, r.json()

    def get(self, route: str, **params: object) -> tuple[int, dict]:
        r = self.http.get(self.url + V1 + route, params=params, timeout=30)
        return r.status_code, r.json()

    def session(self, **env_kwargs: object) -> str:
        status, body = self.post("/sessions", {"env_kwargs": env_kwargs} if env_kwargs else {})
        assert status == 200, body
        return body["session"]


@pytest.fixture(scope="module")
def client(textcraft_url: str) -> Client:
    return Client(textcraft_url)


def play(client: Client, session: str, task_id: str, actions: list[str]) -> tuple[list, dict]:
    status, reset = client.post("/reset", {"session": session, "task_id": task_id})
    assert status == 200, reset
    rewards, last = [], reset
    for action in actions:
        status, last = client.post("/step", {"session": session, "action": action})
        assert status == 200, last
        assert ENVELOPE <= last.keys()
        rewards.append(last["reward"])
    return rewards, last


def test_health_and_tasks(client: Client) -> None:
    status, health = client.get("/health")
    assert status == 200 and health["status"] == "ok" and health["api"] == "agentgym"
    assert health["env_id"] == "TextCraft-v0" and ENVELOPE <= health.keys()
    status, tasks = client.get("/tasks", split="test")
    assert status == 200 and tasks["task_ids"] == env_class("TextCraft-v0")().task_ids("test")
    status, deep = client.get("/tasks", split="test", family="depth-4")
    assert status == 200 and deep["task_ids"] and set(deep["families"].values()) == {"depth-4"}
    assert set(deep["task_ids"]) < set(tasks["task_ids"])
    status, err = client.get("/tasks", split="tset")
    assert status == 400 and err["error"]["type"] == "unknown_split"
    assert "test" in err["error"]["message"]


def test_expert_episodes_through_http_match_in_process(client: Client) -> None:
    task_ids = env_class("TextCraft-v0")().task_ids("test")[::10]
    session = client.session()
    for task_id in task_ids:
        actions, rewards, observation = expert_episode("TextCraft-v0", task_id)
        http_rewards, last = play(client, session, task_id, actions)
        assert http_rewards == rewards and last["observation"] == observation
        assert last["terminated"] and last["info"]["won"]
    assert client.post("/close", {"session": session}) == (
        200,
        {"closed": True, "env_id": "TextCraft-v0", "version": last["version"], "variant": {}},
    )


@pytest.mark.parametrize("env_id", ["Sokoban-v0", "BabyAI-Text-v0", "WebShop-v0"])
def test_expert_episode_of_other_envs(env_id: str) -> None:
    task_id = env_class(env_id)().task_ids("test")[1]
    actions, rewards, observation = expert_episode(env_id, task_id)
    with live_server(build_app(env_id, "agentgym")) as url:
        c = Client(url)
        http_rewards, last = play(c, c.session(), task_id, actions)
    assert http_rewards == rewards and last["observation"] == observation


def test_snapshot_restore_and_replay_round_trips(client: Client) -> None:
    task_id = "agentgym/150"
    actions, rewards, final = expert_episode("TextCraft-v0", task_id)
    assert len(actions) >= 3
    cut = len(actions) // 2
    session = client.session()
    play(client, session, task_id, actions[:cut])
    status, snap = client.post("/snapshot", {"session": session})
    assert status == 200 and isinstance(snap["snapshot"], str)
    # restore into a new session, then into the old one after it moved on: both continue alike
    status, restored = client.post("/restore", {"snapshot": snap["snapshot"]})
    assert status == 200 and restored["session"] != session and restored["info"]["turn"] == cut
    client.post("/step", {"session": session, "action": actions[cut]})
    status, again = client.post("/restore", {"snapshot": snap["snapshot"], "session": session})
    assert status == 200 and again["session"] == session
    assert again["observation"] == restored["observation"]
    for sid in (session, restored["session"]):
        tail = [client.post("/step", {"session": sid, "action": a})[1] for a in actions[cut:]]
        assert [t["reward"] for t in tail] == rewards[cut:] and tail[-1]["observation"] == final
    # replay: one request, the same steps
    status, replay = client.post("/replay", {"task_id": task_id, "actions": actions})
    assert status == 200 and [s["reward"] for s in replay["steps"]] == rewards
    assert replay["reset"]["info"]["task_id"] == task_id
    assert replay["steps"][-1]["observation"] == final
    # a snapshot taken after a replay restores to the same point
    status, snap2 = client.post("/snapshot", {"session": replay["session"]})
    status, r2 = client.post("/restore", {"snapshot": snap2["snapshot"]})
    assert status == 200 and r2["observation"] == final and r2["info"]["won"]


def test_token_from_another_server_restores_by_replay(client: Client) -> None:
    """A token whose MAC does not verify here (another key) restores by replaying its actions,
    and a forged state is never unpickled."""
    task_id = "agentgym/20"
    actions, rewards, _ = expert_episode("TextCraft-v0", task_id)
    with live_server(build_app("TextCraft-v0", snapshot_key="other-server")) as other_url:
        other = Client(other_url)
        sid = other.session()
        play(other, sid, task_id, actions[:-1])
        token = other.post("/snapshot", {"session": sid})[1]["snapshot"]
    status, restored = client.post("/restore", {"snapshot": token})
    assert status == 200 and restored["info"]["turn"] == len(actions) - 1
    status, last = client.post("/step", {"session": restored["session"], "action": actions[-1]})
    assert last["reward"] == rewards[-1] and last["terminated"]
    # a tampered state with the old MAC: the MAC fails, so the state is ignored and replay wins
    body = json.loads(base64.urlsafe_b64decode(token))
    body["state"] = base64.b64encode(b"not a pickle").decode()
    forged = base64.urlsafe_b64encode(json.dumps(body).encode()).decode()
    status, restored = client.post("/restore", {"snapshot": forged})
    assert status == 200 and restored["info"]["turn"] == len(actions) - 1
    # actions that do not reach the recorded turn: 409
    body["turn"] = 99
    bad_turn = base64.urlsafe_b64encode(json.dumps(body).encode()).decode()
    status, err = client.post("/restore", {"snapshot": bad_turn})
    assert status == 409 and err["error"]["type"] == "snapshot_mismatch"


def _err(result: tuple[int, dict], status: int, type_: str) -> None:
    code, body = result
    assert code == status, body
    assert body["error"]["type"] == type_ and body["error"]["message"]


def test_every_error_is_json_4xx_and_other_sessions_keep_working(client: Client) -> None:
    bystander = client.session()
    play(client, bystander, "agentgym/5", [])
    session = client.session()
    _err(client.post("/step", {"session": "nope", "action": "inventory"}), 404, "unknown_session")
    _err(client.post("/reset", {"session": session, "task_id": "agentgym/x"}), 400, "unknown_task")
    _err(client.post("/reset", {"session": session, "task_id": "nosuch/1"}), 400, "unknown_task")
    _err(client.post("/step", {"session": session, "action": "inventory"}), 409, "reset_needed")
    _err(client.post("/snapshot", {"session": session}), 409, "reset_needed")
    r = client.http.post(
        client.url + V1 + "/step", data=b"{not json", headers={"content-type": "application/json"}
    )
    assert r.status_code == 422 and r.json()["error"]["type"] == "bad_request"
    _err(client.post("/step", {"session": session}), 422, "bad_request")
    _err(client.post("/step", {"session": session, "action": 3}), 422, "bad_request")
    _err(client.post("/step", {"session": session, "action": "x", "extra": 1}), 422, "bad_request")
    _err(client.post("/reset", {"session": session, "seed": -1}), 422, "bad_request")
    _err(client.post("/sessions", {"env_kwargs": {"data_dir": "/etc"}}), 422, "bad_env_kwargs")
    _err(client.post("/sessions", {"env_kwargs": {"max_turns": 0}}), 422, "bad_env_kwargs")
    play(client, session, "agentgym/5", [])
    limit = env_class("TextCraft-v0").max_action_length
    _err(
        client.post("/step", {"session": session, "action": "x" * (limit + 1)}),
        413,
        "action_too_long",
    )
    _err(client.post("/restore", {"snapshot": "%%%"}), 422, "bad_snapshot")
    _err(
        client.post("/restore", {"snapshot": base64.urlsafe_b64encode(b"[1]").decode()}),
        422,
        "bad_snapshot",
    )
    _err(
        client.post("/replay", {"task_id": "agentgym/5", "actions": ["craft"] * 1001}),
        409,
        "episode_over",
    )
    _err(client.post("/replay", {"task_id": "bad", "actions": []}), 400, "unknown_task")
    r = client.http.get(client.url + "/no/such/route")
    assert r.status_code == 404 and r.json()["error_type"] == "http_error"  # AgentGym's form
    r = client.http.get(client.url + V1 + "/step")
    assert r.status_code == 405 and "error" in r.json()
    # the session that saw every error and the bystander still play
    for sid in (session, bystander):
        status, body = client.post("/step", {"session": sid, "action": "inventory"})
        assert status == 200 and body["info"]["turn"] >= 1
    client.post("/close", {"session": session})
    _err(client.post("/step", {"session": session, "action": "inventory"}), 404, "unknown_session")


def test_session_limit_and_idle_expiry() -> None:
    app = build_app("TextCraft-v0", max_sessions=2, idle_timeout=0.3, max_body_bytes=1000)
    with live_server(app) as url:
        c = Client(url)
        _err(c.post("/sessions", {"env_kwargs": {"x": "y" * 1000}}), 413, "body_too_large")
        a, b = c.session(), c.session()
        _err(c.post("/sessions", {}), 429, "session_limit")
        c.post("/close", {"session": a})
        fresh = c.session()  # the closed one's slot is free again
        play(c, fresh, "agentgym/1", ["inventory"])
        import time

        deadline = time.monotonic() + 5
        keep = fresh
        while time.monotonic() < deadline:  # keep `fresh` busy while `b` idles out
            assert c.post("/step", {"session": keep, "action": "inventory"})[0] == 200
            time.sleep(0.05)
            if c.get("/health")[1]["sessions"] == 1:
                break
        _err(c.post("/step", {"session": b, "action": "inventory"}), 410, "session_expired")
        assert c.post("/step", {"session": keep, "action": "inventory"})[0] == 200
        assert c.session()  # expiry freed the slot


def test_env_kwargs_and_variant_in_every_response() -> None:
    with live_server(build_app("BabyAI-Text-v0")) as url:
        c = Client(url)
        fixed = c.session(rules="fixed")
        status, reset = c.post("/reset", {"session": fixed, "task_id": "agentgym/1800"})
        assert status == 200 and reset["variant"]["rules"] == "fixed"
        default = c.session()
        status, reset = c.post("/reset", {"session": default, "seed": 3})
        assert status == 200 and reset["variant"]["rules"] == "agentgym"
        token = c.post("/snapshot", {"session": fixed})[1]["snapshot"]
        _err(c.post("/restore", {"snapshot": token, "session": default}), 409, "snapshot_mismatch")
        status, restored = c.post("/restore", {"snapshot": token})
        assert status == 200 and restored["variant"]["rules"] == "fixed"
