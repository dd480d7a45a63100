"""The OpenAI-compatible backend against a real chat-completions server on 127.0.0.1.

The server (``http.server`` in a thread) checks the bearer token, knows one model, answers with
the last user message echoed inside an action, can fail the first requests with 503 to exercise
retries, records the largest number of requests it handled at once, and can return log-probs in
vLLM's ``token_id:<n>`` form.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agentenvs.agents.backends.openai_backend import (
    BackendAuthError,
    BackendModelError,
    OpenAIPolicy,
)
from agentenvs.agents.policy import BackendError, BackendUnavailableError, SamplingParams
from agentenvs.agents.registry import make_policy
from agentenvs.agents.rollout import RolloutConfig, plan_episodes, run_rollouts

KEY = "sk-test-123"
MODEL = "teacher-1"


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active = 0
        self.max_active = 0
        self.requests: list[dict] = []
        self.fail_next = 0
        self.truncate_next = 0  # replies cut short: the headers promise more bytes than come
        self.delay = 0.0
        self.logprobs = "return"  # or "ignore", or "refuse" (HTTP 400 naming the field)


class _Handler(BaseHTTPRequestHandler):
    state: _State

    def log_message(self, *args) -> None:  # keep test output clean
        pass

    def _send(self, status: int, body: dict, headers: dict | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        state = self.state
        with state.lock:
            state.active += 1
            state.max_active = max(state.max_active, state.active)
        try:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with state.lock:
                state.requests.append(body)
                failing = state.fail_next > 0
                state.fail_next -= int(failing)
            time.sleep(state.delay)
            if self.path != "/v1/chat/completions":
                return self._send(404, {"error": {"message": f"no route {self.path}"}})
            if self.headers.get("Authorization") != f"Bearer {KEY}":
                return self._send(
                    401,
                    {"error": {"message": "Incorrect API key provided", "code": "invalid_api_key"}},
                )
            if body["model"] != MODEL:
                return self._send(
                    404,
                    {
                        "error": {
                            "message": f"The model `{body['model']}` does not exist",
                            "code": "model_not_found",
                        }
                    },
                )
            if failing:
                return self._send(503, {"error": {"message": "overloaded"}}, {"Retry-After": "0"})
            with state.lock:
                truncating = state.truncate_next > 0
                state.truncate_next -= int(truncating)
            if truncating:  # as a server killed while writing its answer
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "312")
                self.end_headers()
                self.wfile.write(b'{"id": "c1", "choi')
                self.close_connection = True
                return None
            if body.get("logprobs") and state.logprobs == "refuse":
                return self._send(400, {"error": {"message": "unknown field: logprobs"}})
            last = body["messages"][-1]["content"]
            text = f"Think: echo.\nAction: [[ {last.splitlines()[-1][:40]} ]]"
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
            if body.get("logprobs") and state.logprobs == "return":
                ids = body.get("return_tokens_as_token_ids")
                choice["logprobs"] = {
                    "content": [
                        {"token": f"token_id:{100 + i}" if ids else "x", "logprob": -0.5 * i}
                        for i in range(3)
                    ]
                }
            self._send(
                200, {"id": "c1", "object": "chat.completion", "model": MODEL, "choices": [choice]}
            )
        finally:
            with state.lock:
                state.active -= 1


@pytest.fixture()
def server():
    state = _State()
    handler = type("Handler", (_Handler,), {"state": state})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield state, f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


def _conversations(n: int) -> list[list[dict]]:
    return [
        [{"role": "system", "content": "s"}, {"role": "user", "content": f"get {i} stick"}]
        for i in range(n)
    ]


def test_completions_in_order_with_sampling_settings(server, monkeypatch) -> None:
    state, url = server
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    policy = make_policy(f"openai:{MODEL}@{url}", concurrency=3)
    state.delay = 0.05
    outs = policy.generate(
        _conversations(9), SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=64, seed=10)
    )
    assert [o.text.splitlines()[-1] for o in outs] == [
        f"Action: [[ get {i} stick ]]" for i in range(9)
    ]
    assert all(o.finish_reason == "stop" and o.token_ids is None for o in outs)
    assert 1 < state.max_active <= 3  # concurrent, within the limit
    body = state.requests[0]
    assert (body["temperature"], body["top_p"], body["max_tokens"], body["n"]) == (0.7, 0.9, 64, 1)
    assert (
        sorted(r["seed"] for r in state.requests) == list(range(10, 19))
        and body["logprobs"] is True
    )
    policy.close()


def test_logprobs_and_token_ids(server, monkeypatch) -> None:
    state, url = server
    monkeypatch.setenv("MY_KEY", KEY)
    policy = OpenAIPolicy(MODEL, url, api_key_env="MY_KEY", logprobs="true", token_ids="1")
    out = policy.generate(_conversations(1))[0]
    assert out.token_ids == [100, 101, 102] and out.logprobs == [0.0, -0.5, -1.0]
    assert state.requests[0]["return_tokens_as_token_ids"] is True
    only_logprobs = OpenAIPolicy(MODEL, url, api_key_env="MY_KEY", logprobs=True).generate(
        _conversations(1)
    )[0]
    assert only_logprobs.token_ids is None and only_logprobs.logprobs == [0.0, -0.5, -1.0]


@pytest.mark.parametrize(
    ("failure", "last_error"),
    [
        ("fail_next", r"giving up after 3 attempts over 0 s .*; last error: HTTP 503: overloaded"),
        # the server died while sending its answer (http.client.IncompleteRead)
        ("truncate_next", r"giving up after 3 attempts over 0 s .*; last error: IncompleteRead"),
    ],
)
def test_retries_transient_errors(server, monkeypatch, failure: str, last_error: str) -> None:
    state, url = server
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    setattr(state, failure, 2)
    policy = OpenAIPolicy(MODEL, url, concurrency=1, backoff=0.01)
    assert policy.generate(_conversations(1))[0].text.endswith("[[ get 0 stick ]]")
    assert len(state.requests) == 3
    setattr(state, failure, 10)
    with pytest.raises(BackendUnavailableError, match=last_error):
        OpenAIPolicy(MODEL, url, max_retries=2, backoff=0.01).generate(_conversations(1))


def test_auth_error_is_clear_and_not_retried(server, monkeypatch) -> None:
    state, url = server
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong")
    with pytest.raises(
        BackendAuthError,
        match=r"refused the credentials \(HTTP 401: Incorrect API key provided\); "
        r"\$OPENAI_API_KEY is set",
    ):
        OpenAIPolicy(MODEL, url, backoff=0.01).generate(_conversations(1))
    assert len(state.requests) == 1
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(BackendAuthError, match="is not set"):
        OpenAIPolicy(MODEL, url).generate(_conversations(1))


def test_unknown_model_is_clear(server, monkeypatch) -> None:
    _, url = server
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with pytest.raises(BackendModelError, match="does not serve model 'nope'.*does not exist"):
        OpenAIPolicy("nope", url).generate(_conversations(1))


def test_unreachable_server() -> None:
    with pytest.raises(BackendError, match="giving up after 2 attempts"):
        OpenAIPolicy(
            MODEL, "http://127.0.0.1:9/v1", max_retries=1, backoff=0.01, timeout=2
        ).generate(_conversations(1))


def test_rollout_through_the_server(server, monkeypatch) -> None:
    """A TextCraft rollout with the echo model: its action is the observation's last line."""
    state, url = server
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    policy = make_policy(f"openai:{MODEL}@{url}")
    trajs = run_rollouts(
        policy,
        "TextCraft-v0",
        plan_episodes(["agentgym/0", "agentgym/1"], 2),
        RolloutConfig(max_turns=3),
    )
    assert len(trajs) == 4 and all(t.turns == 3 and t.error is None for t in trajs)
    assert trajs[0].steps[0].action.startswith("Goal: craft")
    assert len(state.requests) == 12
    policy.close()


@pytest.mark.parametrize("mode", ["ignore", "refuse"])
def test_a_server_without_logprobs_gets_one_warning_and_a_metadata_field(
    server, monkeypatch, mode
) -> None:
    state, url = server
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    state.logprobs = mode
    policy = OpenAIPolicy(MODEL, url, concurrency=4)
    assert policy.run_metadata()["logprobs"] == "requested"
    with pytest.warns(RuntimeWarning, match="log-probabilities were requested") as caught:
        out = policy.generate(_conversations(6)) + policy.generate(_conversations(3))
    assert len(caught) == 1 and all(c.logprobs is None and c.text for c in out)
    assert policy.run_metadata()["logprobs"] == ("missing" if mode == "ignore" else "refused")
    state.logprobs = "return"
    assert OpenAIPolicy(MODEL, url).generate(_conversations(1))[0].logprobs == [0.0, -0.5, -1.0]


def test_retries_last_as_long_as_the_window(server, monkeypatch) -> None:
    state, url = server
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    state.fail_next = 6  # 0.01 + 0.02 + ... s of backoff: inside a 5 s window
    policy = OpenAIPolicy(MODEL, url, concurrency=1, backoff=0.01, retry_window=5)
    assert policy.generate(_conversations(1))[0].text.endswith("[[ get 0 stick ]]")
    assert len(state.requests) == 7 and policy.run_metadata()["retried_seconds"] > 0
    state.fail_next = 10**6
    started = time.monotonic()
    with pytest.raises(BackendUnavailableError, match=r"retry window 0.5 s"):
        OpenAIPolicy(MODEL, url, backoff=0.05, retry_window=0.5).generate(_conversations(1))
    assert time.monotonic() - started < 3
