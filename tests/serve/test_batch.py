"""``step_batch`` / ``reset_batch`` on a real server: results in order, each item what the single
route answers for it (body and status), an item's error in its place while the others step."""

from __future__ import annotations

import threading
import time

import pytest
import requests

from agentenvs import env_class
from agentenvs.serve import build_app
from agentenvs.serve.native import MAX_BATCH_ITEMS

from .conftest import expert_episode, live_server

V1 = "/agentenvs/v1"
TC = "TextCraft-v0"


class Client:
    def __init__(self, url: str) -> None:
        self.url = url
        self.http = requests.Session()

    def post(self, route: str, body: object) -> tuple[int, dict]:
        r = self.http.post(self.url + V1 + route, json=body, timeout=60)
        return r.status_code, r.json()

    def session(self) -> str:
        return self.post("/sessions", {})[1]["session"]

    def batch(self, route: str, key: str, items: list) -> list[tuple[int, dict]]:
        """The batch's results as (status, the rest) pairs, like single answers."""
        status, body = self.post(route, {key: items})
        assert status == 200, body
        assert len(body["results"]) == len(items)
        return [(r.pop("status"), r) for r in body["results"]]


@pytest.fixture(scope="module")
def client(textcraft_url: str) -> Client:
    return Client(textcraft_url)


def test_whole_expert_episodes_in_batches_equal_single_steps(client: Client) -> None:
    """Eight episodes of different lengths stepped together, one batch per turn, each item equal
    to the single route's answer in a session of its own playing the same actions."""
    tasks = env_class(TC)().task_ids("test")[::60][:8]
    episodes = {t: expert_episode(TC, t)[0] for t in tasks}
    assert len({len(a) for a in episodes.values()}) > 1  # some finish before others
    batched = {t: client.session() for t in tasks}
    single = {t: client.session() for t in tasks}
    resets = client.batch(
        "/reset_batch", "resets", [{"session": batched[t], "task_id": t} for t in tasks]
    )
    for t, result in zip(tasks, resets, strict=True):
        assert result == client.post("/reset", {"session": single[t], "task_id": t})
    for turn in range(max(len(a) for a in episodes.values())):
        live = [t for t in tasks if turn < len(episodes[t])]
        items = [{"session": batched[t], "action": episodes[t][turn]} for t in live]
        for t, result in zip(live, client.batch("/step_batch", "steps", items), strict=True):
            expected = client.post("/step", {"session": single[t], "action": episodes[t][turn]})
            assert result == expected
            assert result[1]["info"]["turn"] == turn + 1
    for t in tasks:  # every episode won, and stepping on is the single route's 409
        over = client.batch("/step_batch", "steps", [{"session": batched[t], "action": "x"}])
        assert over == [client.post("/step", {"session": single[t], "action": "x"})]
        assert over[0][0] == 409 and over[0][1]["error"]["type"] == "episode_over"


def test_each_items_error_stands_in_its_place(client: Client) -> None:
    a, b, fresh = client.session(), client.session(), client.session()
    client.batch(
        "/reset_batch", "resets", [{"session": s, "task_id": "agentgym/5"} for s in (a, b)]
    )
    limit = env_class(TC).max_action_length
    items = [
        {"session": a, "action": "inventory"},
        {"session": "nope", "action": "inventory"},  # unknown session
        {"session": fresh, "action": "inventory"},  # never reset
        "not an object",
        {"session": b},  # no action
        {"session": b, "action": 3},  # mistyped
        {"session": b, "action": "inventory", "x": 1},  # extra field
        {"session": b, "action": "x" * (limit + 1)},  # too long
        {"session": b, "action": "inventory"},
        {"session": a, "action": "inventory"},  # the same session again, in order
    ]
    results = client.batch("/step_batch", "steps", items)
    statuses = [status for status, _ in results]
    assert statuses == [200, 404, 409, 422, 422, 422, 422, 413, 200, 200]
    types = [body.get("error", {}).get("type") for _, body in results]
    assert types == [
        None,
        "unknown_session",
        "reset_needed",
        "bad_request",
        "bad_request",
        "bad_request",
        "bad_request",
        "action_too_long",
        None,
        None,
    ]
    assert [body["info"]["turn"] for s, body in results if s == 200] == [1, 1, 2]
    assert "steps.3" in results[3][1]["error"]["message"]
    assert "steps.4.action" in results[4][1]["error"]["message"]
    # an error item is exactly the single route's error answer (body and status)
    assert results[1] == client.post("/step", {"session": "nope", "action": "inventory"})
    assert results[2] == client.post("/step", {"session": fresh, "action": "inventory"})
    assert results[7] == client.post("/step", {"session": b, "action": "x" * (limit + 1)})


def test_reset_batch_errors_and_seeds(client: Client) -> None:
    a, b = client.session(), client.session()
    results = client.batch(
        "/reset_batch",
        "resets",
        [
            {"session": a, "task_id": "agentgym/x"},
            {"session": b, "seed": 7},
            {"session": b, "seed": -1},
            {"session": "gone"},
            {"session": a, "task_id": "agentgym/9"},
        ],
    )
    assert [s for s, _ in results] == [400, 200, 422, 404, 200]
    assert results[0][1]["error"]["type"] == "unknown_task"
    assert results[1] == client.post("/reset", {"session": b, "seed": 7})
    assert results[4][1]["info"]["task_id"] == "agentgym/9"


def test_the_request_itself_malformed_or_too_big(client: Client) -> None:
    for body in ({"steps": {}}, {"steps": [], "extra": 1}, {}, {"resets": [1]}):
        status, answer = client.post("/step_batch", body)
        assert status == 422 and answer["error"]["type"] == "bad_request", answer
    status, answer = client.post("/step_batch", {"steps": [{}] * (MAX_BATCH_ITEMS + 1)})
    assert status == 422 and "at most" in answer["error"]["message"]
    assert client.post("/step_batch", {"steps": []})[1]["results"] == []


def test_an_environment_crash_is_that_items_500() -> None:
    app = build_app(TC)
    with live_server(app) as url:
        c = Client(url)
        ok, broken = c.session(), c.session()
        c.batch(
            "/reset_batch",
            "resets",
            [{"session": s, "task_id": "agentgym/1"} for s in (ok, broken)],
        )
        env = app.state.service.store.get(broken).env

        def crash(action: str) -> None:
            raise RuntimeError("the engine fell over")

        env.step = crash
        results = c.batch(
            "/step_batch",
            "steps",
            [{"session": broken, "action": "inventory"}, {"session": ok, "action": "inventory"}],
        )
        assert results[0][0] == 500 and results[0][1]["error"] == {
            "type": "internal_error",
            "message": "RuntimeError: the engine fell over",
        }
        assert results[1][0] == 200 and results[1][1]["info"]["turn"] == 1
        assert c.post("/step", {"session": broken, "action": "inventory"}) == results[0]


def test_a_long_batch_lets_a_health_check_through() -> None:
    """A batch of slow steps yields between items: the server answers its health check while
    the batch runs (how a client tells a long batch from a hung server)."""
    app = build_app(TC)
    with live_server(app) as url:
        c = Client(url)
        sessions = [c.session() for _ in range(20)]
        c.batch(
            "/reset_batch", "resets", [{"session": s, "task_id": "agentgym/1"} for s in sessions]
        )
        for sid in sessions:
            env = app.state.service.store.get(sid).env
            slow_step = env.step

            def step(action: str, _step=slow_step) -> object:
                time.sleep(0.1)
                return _step(action)

            env.step = step
        answer: list = []
        batch = threading.Thread(
            target=lambda: answer.append(
                c.batch(
                    "/step_batch",
                    "steps",
                    [{"session": s, "action": "inventory"} for s in sessions],
                )
            )
        )
        batch.start()
        time.sleep(0.3)
        t0 = time.monotonic()
        health = requests.get(url + V1 + "/health", timeout=5)
        waited = time.monotonic() - t0
        assert batch.is_alive(), "the batch finished before the health check: not a test"
        batch.join(30)
    assert health.status_code == 200 and waited < 1.0
    assert [s for s, _ in answer[0]] == [200] * 20


@pytest.mark.slow  # openenv's import alone takes most of it
def test_the_batch_routes_are_on_the_openenv_api_too() -> None:
    pytest.importorskip("openenv")
    with live_server(build_app(TC, "openenv")) as url:
        c = Client(url)
        sid = c.session()
        resets = c.batch("/reset_batch", "resets", [{"session": sid, "task_id": "agentgym/1"}])
        steps = c.batch("/step_batch", "steps", [{"session": sid, "action": "inventory"}])
    assert resets[0][0] == steps[0][0] == 200 and steps[0][1]["info"]["turn"] == 1


def _asgi_post(app: object, path: str, body: bytes, content_type: bytes | None) -> tuple:
    """One POST through an ASGI app, no socket: (status, headers, body)."""
    import asyncio

    headers = [(b"host", b"test"), (b"content-length", str(len(body)).encode())]
    if content_type is not None:
        headers.append((b"content-type", content_type))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 2),
    }
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[dict] = []

    async def receive() -> dict:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    start = sent[0]
    return start["status"], dict(start["headers"]), b"".join(m.get("body", b"") for m in sent[1:])


def test_the_fast_path_answers_a_plain_batch_and_passes_on_the_rest() -> None:
    """BatchFastPath answers a plain batch itself; every other request (another route, another
    method, a body the route's model would judge) reaches the app behind it, body intact."""
    import orjson

    from agentenvs.serve.native import BatchFastPath

    service = build_app(TC).state.service
    passed: list[tuple[str, bytes]] = []

    async def behind(scope: dict, receive: object, send: object) -> None:
        message = await receive()  # type: ignore[operator]
        passed.append((scope["path"], message["body"]))
        await send({"type": "http.response.start", "status": 299, "headers": []})  # type: ignore[operator]
        await send({"type": "http.response.body", "body": b""})  # type: ignore[operator]

    fast = BatchFastPath(behind, service)
    sid = service.store.create().id
    service.reset(service.store.get(sid), "agentgym/1")
    plain = orjson.dumps({"steps": [{"session": sid, "action": "inventory"}]})
    status, headers, body = _asgi_post(fast, V1 + "/step_batch", plain, b"application/json")
    assert status == 200 and passed == [] and headers[b"content-type"] == b"application/json"
    assert orjson.loads(body)["results"][0]["info"]["turn"] == 1
    assert _asgi_post(fast, V1 + "/reset_batch", b'{"resets": []}', None)[0] == 200
    others = [
        (V1 + "/step_batch", b'{"steps": [], "extra": 1}', b"application/json"),
        (V1 + "/step_batch", b'{"steps": {}}', b"application/json"),
        (V1 + "/step_batch", b"\xef\xbb\xbf" + plain, b"application/json"),  # a BOM: json's
        (V1 + "/step_batch", plain, b"text/plain"),
        (V1 + "/reset_batch", b'{"steps": []}', b"application/json"),
        (V1 + "/step", plain, b"application/json"),
        (V1 + "/step_batch", b"[" * 10, b"application/json"),
    ]
    for path, raw, content_type in others:
        assert _asgi_post(fast, path, raw, content_type)[0] == 299
    assert passed == [(path, raw) for path, raw, _ in others]
    too_many = orjson.dumps({"steps": [{}] * (MAX_BATCH_ITEMS + 1)})
    assert _asgi_post(fast, V1 + "/step_batch", too_many, b"application/json")[0] == 299


def test_the_fast_path_answers_byte_for_byte_what_the_route_answers() -> None:
    """The same steps in two sessions at the same state, one batch through the fast path and
    one through FastAPI's route (a body with a BOM, which only the route's ``json`` reads):
    the same bytes, errors included."""
    import orjson

    app = build_app(TC)
    service = app.state.service
    a, b = service.store.create().id, service.store.create().id
    for sid in (a, b):
        service.reset(service.store.get(sid), "agentgym/3")
    actions = ["inventory", "get 1 oak log", "craft 4 oak planks using 1 oak log", "jump"]
    for action in actions + ["x" * (env_class(TC).max_action_length + 1)]:
        answers = []
        for sid, prefix in ((a, b""), (b, b"\xef\xbb\xbf")):
            items = [
                {"session": sid, "action": action},
                {"session": "nope", "action": action},
                {"session": sid},
            ]
            body = prefix + orjson.dumps({"steps": items})
            answers.append(_asgi_post(app, V1 + "/step_batch", body, b"application/json"))
        assert answers[0] == answers[1]
        assert [r["status"] for r in orjson.loads(answers[0][2])["results"]] in (
            [200, 404, 422],
            [413, 404, 422],
        )
    resets = []
    for sid, prefix in ((a, b""), (b, b"\xef\xbb\xbf")):
        body = prefix + orjson.dumps(
            {"resets": [{"session": sid, "task_id": "agentgym/4"}, {"session": sid, "seed": -1}]}
        )
        resets.append(_asgi_post(app, V1 + "/reset_batch", body, b"application/json"))
    assert resets[0] == resets[1]


def test_the_fast_path_answers_single_steps_and_resets_as_the_route() -> None:
    """A plain ``/step`` or ``/reset`` through the fast path and the same through FastAPI's
    route (a body with a BOM): the same status, headers and bytes, errors included."""
    import orjson

    app = build_app(TC)
    service = app.state.service
    a, b = service.store.create().id, service.store.create().id
    too_long = "x" * (env_class(TC).max_action_length + 1)
    for fast, routed in (
        ({"session": a, "task_id": "agentgym/3"}, {"session": b, "task_id": "agentgym/3"}),
        ({"session": a, "task_id": "agentgym/3", "seed": 7}, None),
        ({"session": "nope", "task_id": "agentgym/3"}, None),
        ({"session": a, "task_id": "no/such"}, None),
    ):
        answers = [_asgi_post(app, V1 + "/reset", orjson.dumps(fast), b"application/json")]
        if routed is not None:
            body = b"\xef\xbb\xbf" + orjson.dumps(routed)
            answers.append(_asgi_post(app, V1 + "/reset", body, b"application/json"))
            assert answers[0] == answers[1]
        else:
            body = b"\xef\xbb\xbf" + orjson.dumps(fast)
            assert answers[0] == _asgi_post(app, V1 + "/reset", body, b"application/json")
    service.reset(service.store.get(b), "agentgym/3")
    service.reset(service.store.get(a), "agentgym/3")
    actions = ["inventory", "get 1 oak log", too_long, "craft 4 oak planks using 1 oak log"]
    for action in actions:
        answers = []
        for sid, prefix in ((a, b""), (b, b"\xef\xbb\xbf")):
            body = prefix + orjson.dumps({"session": sid, "action": action})
            answers.append(_asgi_post(app, V1 + "/step", body, b"application/json"))
        assert answers[0] == answers[1]
        assert answers[0][0] == (413 if action == too_long else 200)
    for body in ({"session": "nope", "action": "x"}, {"session": a}, {"session": a, "action": 1}):
        raw = orjson.dumps(body)
        answer = _asgi_post(app, V1 + "/step", raw, b"application/json")
        assert answer == _asgi_post(app, V1 + "/step", b"\xef\xbb\xbf" + raw, b"application/json")
        assert answer[0] in (404, 422)
