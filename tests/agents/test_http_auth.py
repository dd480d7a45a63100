"""The bearer token of ``agentenvs serve --auth-token``, from the client side: http pools (and the
commands that build them) send ``Authorization: Bearer <token>`` on every request, from
``auth_token=`` or ``$AGENTENVS_AUTH_TOKEN``; a missing or wrong token is one clear
:class:`AuthError` saying how to pass it, never a retry. Real ``agentenvs serve`` processes on
127.0.0.1, and a tiny standard-library server that records the headers it gets."""

from __future__ import annotations

import contextlib
import http.server
import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from agentenvs.agents.envworkers import (  # noqa: E402
    AuthError,
    EnvWorkerError,
    HttpPool,
    make_env_pool,
)
from agentenvs.agents.envworkers.http_transport import (  # noqa: E402
    AUTH_TOKEN_ENV,
    resolve_auth_token,
)
from agentenvs.agents.registry import make_policy  # noqa: E402
from agentenvs.agents.rollout import (  # noqa: E402
    RolloutConfig,
    make_rollout_pool,
    plan_episodes,
    run_rollouts,
)

from ..serve.conftest import free_port, serve_process  # noqa: E402

TC = "TextCraft-v0"
TOKEN = "s3cret-token_for.tests"
CONFIG = RolloutConfig(max_turns=6, max_active=4)
ENV_KWARGS = {"max_turns": 6}
TASKS = ["agentgym/0", "agentgym/1"]


@pytest.fixture(autouse=True)
def no_token_in_the_environment(monkeypatch) -> None:
    monkeypatch.delenv(AUTH_TOKEN_ENV, raising=False)


@pytest.fixture(scope="module")
def guarded() -> Iterator[str]:
    """``agentenvs serve TextCraft-v0 --auth-token TOKEN`` in its own process."""
    with serve_process(TC, "--auth-token", TOKEN, env={AUTH_TOKEN_ENV: ""}) as urls:
        yield urls[0]


def _by_key(trajectories) -> dict:
    return {
        (t.group_id, t.sample_index): (t.actions, [s.reward for s in t.steps], t.error)
        for t in trajectories
    }


@pytest.fixture(scope="module")
def in_process() -> dict:
    return _by_key(run_rollouts(make_policy("expert"), TC, plan_episodes(TASKS, 1), CONFIG))


def test_the_client_reads_the_servers_variable() -> None:
    from agentenvs.serve.settings import AUTH_TOKEN_ENV as SERVER_ENV

    assert AUTH_TOKEN_ENV == SERVER_ENV == "AGENTENVS_AUTH_TOKEN"


def test_the_token_option_and_its_default(monkeypatch) -> None:
    assert resolve_auth_token(None) is None
    assert resolve_auth_token(" abc ") == "abc"
    monkeypatch.setenv(AUTH_TOKEN_ENV, "from-env")
    assert resolve_auth_token(None) == "from-env"
    assert resolve_auth_token("given") == "given"
    assert resolve_auth_token("") is None  # an empty token: none, whatever the environment says
    for bad in ("two words", "line\nbreak", "café"):
        with pytest.raises(ValueError, match="printable ASCII without spaces"):
            resolve_auth_token(bad)


def test_a_pool_with_the_token_plays_as_in_process(guarded, in_process) -> None:
    specs = plan_episodes(TASKS, 1)
    with make_rollout_pool(
        TC, RolloutConfig(workers=guarded, max_turns=6), auth_token=TOKEN
    ) as pool:
        assert isinstance(pool, HttpPool)
        there = run_rollouts(make_policy("expert"), TC, specs, CONFIG, env_pool=pool)
        assert pool.restarts == 0 and pool.requests["step_batch"] > 0
    assert _by_key(there) == in_process


def test_the_token_from_the_environment_reaches_the_rollouts_pool(
    guarded, in_process, monkeypatch
) -> None:
    """``run_rollouts`` with ``workers=URL`` (what ``--env-workers`` and train's
    ``rollout.env_workers`` give) and no token option: ``$AGENTENVS_AUTH_TOKEN`` is sent."""
    monkeypatch.setenv(AUTH_TOKEN_ENV, TOKEN)
    config = RolloutConfig(workers=guarded, max_turns=6, max_active=4)
    there = run_rollouts(make_policy("expert"), TC, plan_episodes(TASKS, 1), config)
    assert _by_key(there) == in_process


def test_without_the_token_one_clear_error(guarded) -> None:
    with pytest.raises(AuthError) as missing:
        make_env_pool(TC, guarded, ENV_KWARGS)
    message = str(missing.value)
    assert f"agentenvs server {guarded} refused" in message and "401" in message
    assert "sent no token" in message
    assert AUTH_TOKEN_ENV in message and "--auth-token" in message  # how to pass it
    assert isinstance(missing.value, EnvWorkerError)  # what the command lines report
    with pytest.raises(AuthError, match="the token this client sent is not the server's"):
        make_env_pool(TC, guarded, ENV_KWARGS, auth_token="wrong")


def test_eval_cli_takes_the_token_from_the_environment(guarded, tmp_path, capsys, monkeypatch):
    from agentenvs.benchmarks.eval.cli import main

    argv = [TC, "--agent", "expert", "-k", "1", "--limit", "2", "--no-progress"]
    argv += ["--env-workers", guarded]
    assert main([*argv, "--out", str(tmp_path / "refused")]) == 1
    err = capsys.readouterr().err
    assert "401" in err and "sent no token" in err and AUTH_TOKEN_ENV in err
    monkeypatch.setenv(AUTH_TOKEN_ENV, TOKEN)
    assert main([*argv, "--out", str(tmp_path / "ok")]) == 0
    lines = (tmp_path / "ok" / "trajectories.jsonl").read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(line).get("error") is None for line in lines)


@contextlib.contextmanager
def _serve_on(port: int, token: str) -> Iterator[str]:
    """``agentenvs serve`` with ``token`` on a given port (to restart a server in place)."""
    command = [sys.executable, "-m", "agentenvs.cli", "serve", TC, "--port", str(port)]
    proc = subprocess.Popen(
        [*command, "--auth-token", token], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                httpx.get(f"{url}/agentenvs/v1/health", timeout=2)
                break
            except httpx.TransportError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"agentenvs serve on {url} did not start") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_a_server_restarted_with_another_token_stops_the_run_at_once() -> None:
    """Mid-run the server comes back with a new token: the next batch is an AuthError, no
    worker is replaced and no episode retried."""
    port = free_port()
    with _serve_on(port, TOKEN) as url:
        pool = HttpPool(TC, [url], ENV_KWARGS, auth_token=TOKEN, step_timeout_s=10)
        results = pool.reset([(0, TASKS[0]), (1, TASKS[1])])
        assert all(isinstance(r, tuple) for r in results)
    try:
        with _serve_on(port, "another-token"):
            start = time.monotonic()
            with pytest.raises(AuthError, match="the token this client sent is not the server's"):
                pool.step([(0, "inventory"), (1, "inventory")])
            assert pool.restarts == 0
            assert time.monotonic() - start < 10  # one refusal, not a retry until the deadline
    finally:
        pool.close()


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Answers every request 401 in the native error form and keeps its Authorization header."""

    seen: list[tuple[str, str | None]] = []

    def _refuse(self) -> None:
        type(self).seen.append((self.path, self.headers.get("Authorization")))
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        body = json.dumps({"error": {"type": "unauthorized", "message": "token please"}}).encode()
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _refuse

    def log_message(self, *args) -> None:
        pass


def test_every_request_carries_the_header_and_a_401_is_asked_once(monkeypatch) -> None:
    """A standard-library server on 127.0.0.1: the health check carries ``Authorization: Bearer
    <token>``, the pool asks once and reports the server's own message."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    _Recorder.seen = []
    try:
        monkeypatch.setenv(AUTH_TOKEN_ENV, TOKEN)
        with pytest.raises(AuthError, match=r"401 Unauthorized \(token please\)"):
            HttpPool(TC, [url], ENV_KWARGS)
        assert _Recorder.seen == [("/agentenvs/v1/health", f"Bearer {TOKEN}")]
    finally:
        server.shutdown()
        server.server_close()


def test_replay_validation_sends_the_token(guarded) -> None:
    """``replay validate --env-workers`` (ServerEnvs, HttpEnv): the rows of the in-process run
    with the token, one AuthError without it."""
    from agentenvs.replay.validate import validate_queries

    from ..replay.conftest import play
    from ..replay.test_validate import every_cut

    queries = every_cut(play(TC, "agentgym/421"))
    here = [r.to_row() for _, r in validate_queries(queries)]
    pairs = validate_queries(queries, env_workers=[guarded], auth_token=TOKEN)
    assert [r.to_row() for _, r in pairs] == here
    assert {row["status"] for row in here} == {"validated"}
    with pytest.raises(AuthError, match="sent no token"):
        list(validate_queries(queries, env_workers=[guarded]))
