"""``--env-workers http://HOST:PORT[,...]``: episodes in sessions on real ``agentenvs serve``
servers (uvicorn on 127.0.0.1, each in its own process), against the in-process results.

A killed server (``terminate``) costs its episodes a replay on the other server: no finished
episode is lost and every interrupted one completes with the trajectory it would have had.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from agentenvs.agents.envworkers import (  # noqa: E402
    EnvWorkerError,
    EnvWorkersSpec,
    EnvWorkersSpecError,
    HttpPool,
    make_env_pool,
    parse_env_workers,
)
from agentenvs.agents.policy import Completion, Policy  # noqa: E402
from agentenvs.agents.prompts import format_reply  # noqa: E402
from agentenvs.agents.registry import make_policy  # noqa: E402
from agentenvs.agents.rollout import (  # noqa: E402
    RolloutConfig,
    RolloutStats,
    plan_episodes,
    run_rollouts,
)
from agentenvs.registration import make  # noqa: E402

from ..serve.conftest import HangingProxy, Server, live_server  # noqa: E402
from .conftest import cut_spec, has_expert, registered_envs  # noqa: E402

TC = "TextCraft-v0"
MAX_TURNS = 10
CONFIG = RolloutConfig(max_turns=MAX_TURNS, max_active=8)
ENV_KWARGS = {"max_turns": MAX_TURNS}
NOTES = "env_worker_failures"
HEALTH = "/agentenvs/v1/health"


@pytest.fixture(scope="module")
def two_servers():
    servers = [Server(), Server()]
    yield servers
    for server in servers:
        server.stop()


@pytest.fixture
def fresh_servers():
    """Two servers for a test that kills one."""
    servers = [Server(), Server()]
    yield servers
    for server in servers:
        server.stop()


def _spec(servers) -> str:
    return ",".join(s.url for s in servers)


class ConversationPolicy(Policy):
    """Acts from the messages only, as a language model does: the servers hold all the state."""

    def generate(self, conversations, sampling=None, *, envs=None, keys=None):
        replies = []
        for messages in conversations:
            users = [m["content"] for m in messages if m["role"] == "user"]
            actions = ["inventory"]
            for line in users[0].splitlines():
                if line.startswith("craft ") and " using " in line:
                    actions.append(line.strip())
                    inputs = line.partition(" using ")[2]
                    actions += [f"get {part.strip()}" for part in inputs.split(",")]
            action = actions[len(users[-1]) % len(actions)]
            replies.append(Completion(format_reply("pick", action, TC), finish_reason="stop"))
        return replies


def _policy(name: str) -> Policy:
    return ConversationPolicy("conversation") if name == "conversation" else make_policy(name)


def _tasks(n: int) -> list[str]:
    env = make(TC)
    try:
        return env.task_ids("test")[:n]
    finally:
        env.close()


def _mixed_tasks() -> list[str]:
    """Eight test tasks, deeper ones (4-5 expert turns) between depth-1 ones (2 turns), so that
    some episodes are mid-way whenever one finishes."""
    env = make(TC)
    try:
        ids = env.task_ids("test")
        deep = [t for t in ids if env.family(t) != "depth-1"][:4]
        shallow = [t for t in ids if env.family(t) == "depth-1"][:4]
    finally:
        env.close()
    return [t for pair in zip(deep, shallow, strict=True) for t in pair]


def _by_key(trajectories, keep_notes: bool = True) -> dict[tuple[str, int], dict]:
    out = {}
    for traj in trajectories:
        record = traj.to_dict()
        if not keep_notes:
            record["metadata"] = {k: v for k, v in record["metadata"].items() if k != NOTES}
        out[(traj.group_id, traj.sample_index)] = record
    return out


def _play(policy_name: str, pool=None, on_episode=None, specs=None):
    return run_rollouts(
        _policy(policy_name),
        TC,
        specs if specs is not None else plan_episodes(_mixed_tasks(), 2),
        CONFIG,
        env_pool=pool,
        on_episode=on_episode,
    )


@pytest.fixture(scope="module")
def undisturbed() -> dict[str, dict]:
    """The in-process results the servers must reproduce, per policy."""
    return {name: _by_key(_play(name)) for name in ("expert", "random:5", "conversation")}


def _kill_first_server_at_first_finish(servers, pool):
    """An ``on_episode`` hook that terminates the server of worker 0 when the first episode
    finishes (the others are mid-episode then), and waits until it is gone."""
    finished: list[str] = []

    def on_episode(traj) -> None:
        finished.append(traj.group_id)
        if len(finished) == 1:
            victim = next(s for s in servers if s.url == pool.servers[0])
            victim.stop()

    return on_episode, finished


# --------------------------------------------------------------------------------------------
# The spec


def test_parse_http_specs() -> None:
    spec = parse_env_workers("http://127.0.0.1:8000, http://10.0.0.2:9000/")
    assert spec == EnvWorkersSpec("http", 2, urls=("http://127.0.0.1:8000", "http://10.0.0.2:9000"))
    assert parse_env_workers("https://envs.example:443").urls == ("https://envs.example:443",)
    for bad in ("http://", "http://a:1,http://a:1", "http://a:x", "http://a:1/v1", "http://a:1,"):
        with pytest.raises(EnvWorkersSpecError, match="Valid forms: .*http://HOST:PORT"):
            parse_env_workers(bad)
    with pytest.raises(TypeError, match="env_factory"):
        make_env_pool(TC, "http://127.0.0.1:1", ENV_KWARGS, env_factory="m:f")


# --------------------------------------------------------------------------------------------
# Start-up errors


def test_a_dead_server_at_start_says_which_and_how_to_start_one(two_servers) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dead = f"http://127.0.0.1:{port}"
    with pytest.raises(EnvWorkerError) as caught:
        make_env_pool(TC, f"{two_servers[0].url},{dead}", ENV_KWARGS)
    message = str(caught.value)
    assert f"no agentenvs server answers at {dead}" in message
    assert f"agentenvs serve {TC} --api agentgym --port {port}" in message


def test_a_server_of_another_environment_is_refused(two_servers) -> None:
    with pytest.raises(EnvWorkerError, match=f"serves {TC}, this run needs Sokoban-v0"):
        make_env_pool("Sokoban-v0", two_servers[0].url, {"max_turns": 5})


def test_a_server_of_another_version_is_refused() -> None:
    server = Server(version="0.0.0+other")
    try:
        with pytest.raises(EnvWorkerError, match=r"runs agentenvs 0\.0\.0\+other, this client"):
            make_env_pool(TC, server.url, ENV_KWARGS)
    finally:
        server.stop()


def test_keywords_a_server_refuses_are_an_error_at_start(two_servers) -> None:
    """A keyword a server takes from no client (a server-side setting) fails before any episode."""
    with pytest.raises(EnvWorkerError, match="cannot make TextCraft-v0 with .*render_mode"):
        HttpPool(TC, [two_servers[0].url], {"max_turns": 5, "render_mode": "ansi"})


def test_a_url_that_is_not_an_agentenvs_server() -> None:
    """Anything else answering HTTP there (here: Python's file server) is named as such."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=str(Path(__file__).parent),
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx.get(f"http://127.0.0.1:{port}/", timeout=2)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        with pytest.raises(EnvWorkerError, match="is not an agentenvs server"):
            make_env_pool(TC, f"http://127.0.0.1:{port}", ENV_KWARGS)
    finally:
        proc.terminate()
        proc.wait()


# --------------------------------------------------------------------------------------------
# Same results as in process


@pytest.mark.parametrize("policy_name", ["expert", "random:5", "conversation"])
def test_two_servers_match_in_process(policy_name, two_servers, undisturbed) -> None:
    with make_env_pool(TC, _spec(two_servers), ENV_KWARGS) as pool:
        assert isinstance(pool, HttpPool) and pool.workers == 2
        assert _by_key(_play(policy_name, pool)) == undisturbed[policy_name]
        assert pool.restarts == 0
        health = [httpx.get(s.url + HEALTH).json() for s in two_servers]
        assert all(h["sessions"] == 4 for h in health)  # 8 slots, sticky, spread evenly
    assert all(httpx.get(s.url + HEALTH).json()["sessions"] == 0 for s in two_servers)


@pytest.mark.slow
@pytest.mark.parametrize("env_id", [e for e in registered_envs() if has_expert(e)])
def test_every_environment_over_a_server_matches_in_process(env_id) -> None:
    """The expert's episodes of three test tasks through a server equal in process, with the
    rollout's variant (an AgentGym-API server's own defaults, e.g. ALFWorld's game_version, do
    not leak in: the client pins its variant keywords)."""
    env = make(env_id)
    try:
        specs = plan_episodes(env.task_ids("test")[:3], 1)
    finally:
        env.close()
    here = run_rollouts(make_policy("expert"), env_id, specs, RolloutConfig(max_active=8))
    server = Server(env_id)
    try:
        config = RolloutConfig(max_active=8, workers=server.url)
        there = run_rollouts(make_policy("expert"), env_id, specs, config)
    finally:
        server.stop()
    assert _by_key(there) == _by_key(here)
    assert all(t.error is None for t in there)


def test_unknown_task_is_that_episode_error_only(two_servers) -> None:
    specs = plan_episodes([*_tasks(2), "agentgym/no-such-task"], 1)
    with make_env_pool(TC, _spec(two_servers), ENV_KWARGS) as pool:
        trajectories = _play("expert", pool, specs=specs)
    errors = {t.task_id: t.error for t in trajectories}
    assert errors["agentgym/no-such-task"].startswith("reset failed: ")
    assert [e for t, e in errors.items() if t != "agentgym/no-such-task"] == [None, None]


def test_cut_starts_on_servers_match_in_process(fresh_servers) -> None:
    """Episodes that start at a cut state (a prefix replayed on the server in one request) play
    as in process, also when their server is killed and they move to the other."""
    experts = _play("expert", specs=plan_episodes(_tasks(8), 1))
    specs = [
        cut_spec(TC, t.task_id, t.actions[:1], f"{t.group_id}@1", j, max_turns=MAX_TURNS)
        for t in experts
        for j in range(2)
    ]
    here = _by_key(_play("conversation", specs=specs))
    assert all(t["error"] is None and t["metadata"]["prefix_turns"] == 1 for t in here.values())
    with make_env_pool(TC, _spec(fresh_servers), ENV_KWARGS) as pool:
        assert _by_key(_play("conversation", pool, specs=specs)) == here
        on_episode, _ = _kill_first_server_at_first_finish(fresh_servers, pool)
        stats = RolloutStats()
        retried = run_rollouts(
            _policy("conversation"),
            TC,
            specs,
            CONFIG,
            env_pool=pool,
            on_episode=on_episode,
            stats=stats,
        )
        assert pool.restarts == stats.env_worker_restarts == 1
    notes = [n for t in retried for n in t.metadata.get(NOTES, [])]
    assert any("restored on a new worker by replaying" in n for n in notes)
    assert _by_key(retried, keep_notes=False) == here


# --------------------------------------------------------------------------------------------
# Batches


def test_a_rollout_steps_each_turn_in_one_batch_per_server(two_servers, undisturbed) -> None:
    """Every turn's steps go in one ``step_batch`` per server and every admission's resets in one
    ``reset_batch``: no single-step requests, the same trajectories as in process."""
    with make_env_pool(TC, _spec(two_servers), ENV_KWARGS) as pool:
        stats = RolloutStats()
        trajectories = run_rollouts(
            _policy("conversation"),
            TC,
            plan_episodes(_mixed_tasks(), 2),
            CONFIG,
            env_pool=pool,
            stats=stats,
        )
        requests = dict(pool.requests)
    assert _by_key(trajectories) == undisturbed["conversation"]
    steps = sum(1 for t in trajectories for s in t.steps if s.action is not None)
    assert requests.get("step", 0) == requests.get("reset", 0) == 0, requests
    assert 0 < requests["step_batch"] <= 2 * stats.generate_calls < steps
    assert 0 < requests["reset_batch"] < len(trajectories)


def test_an_environment_crash_on_a_server_is_that_episode_error(monkeypatch, undisturbed) -> None:
    """The environment raises on the server for one task: that episode ends with the error (a
    500 item in its batch), the others play on, and its session is closed (never reused)."""
    from agentenvs.serve import build_app
    from agentenvs.textcraft import TextCraftEnv

    victim = _mixed_tasks()[0]
    real_step = TextCraftEnv.step

    def step(self, action):
        if self.task_id == victim:
            raise RuntimeError("the crafting table caught fire")
        return real_step(self, action)

    monkeypatch.setattr(TextCraftEnv, "step", step)
    app = build_app(TC, "agentgym")
    with live_server(app) as url, make_env_pool(TC, url, ENV_KWARGS) as pool:
        trajectories = _play("conversation", pool)
        store = app.state.service.store
        sessions = (store.created, store.closed)
    errors = {(t.group_id, t.sample_index): t.error for t in trajectories}
    crashed = {k: e for k, e in errors.items() if e is not None}
    assert {k[0] for k in crashed} == {victim} and len(crashed) == 2
    assert all(
        e == f"step failed: RuntimeError: the crafting table caught fire (on agentenvs server "
        f"{url})"
        for e in crashed.values()
    )
    # the start-up check's session, one per slot, and a new one after each crash (its old one
    # closed: a crashed environment is never stepped again)
    assert sessions == (1 + 8 + 2, 1 + 2)
    fine = {k: v for k, v in _by_key(trajectories).items() if k[0] != victim}
    assert fine == {k: v for k, v in undisturbed["conversation"].items() if k[0] != victim}


def test_a_long_batch_on_a_live_server_is_no_hang(monkeypatch) -> None:
    """A batch of 8 steps of 0.1 s against a timeout of 0.3 s: past the timeout the pool asks
    the server's health check, which the server answers between the batch's items, so the
    batch runs to its end and nothing is given up."""
    from agentenvs.serve import build_app
    from agentenvs.textcraft import TextCraftEnv

    config = RolloutConfig(max_turns=3, max_active=8)
    specs = plan_episodes(_mixed_tasks(), 1)
    policy = _policy("conversation")
    here = _by_key(run_rollouts(policy, TC, specs, config))
    real_step = TextCraftEnv.step

    def slow_step(self, action):
        time.sleep(0.1)
        return real_step(self, action)

    monkeypatch.setattr(TextCraftEnv, "step", slow_step)
    with live_server(build_app(TC, "agentgym")) as url:
        with HttpPool(TC, [url], {"max_turns": 3}, step_timeout_s=0.3) as pool:
            there = run_rollouts(policy, TC, specs, config, env_pool=pool)
            assert pool.restarts == 0 and pool.requests["step_batch"] == 3
    assert _by_key(there) == here


# --------------------------------------------------------------------------------------------
# A server that dies mid-run


@pytest.mark.parametrize("policy_name", ["expert", "conversation"])
def test_a_killed_server_loses_nothing(policy_name, fresh_servers, undisturbed) -> None:
    with make_env_pool(TC, _spec(fresh_servers), ENV_KWARGS) as pool:
        first = pool.servers[0]
        on_episode, finished = _kill_first_server_at_first_finish(fresh_servers, pool)
        trajectories = _play(policy_name, pool, on_episode)
        assert pool.restarts == 1 and pool.servers == [fresh_servers[1].url] * 2
    assert len(trajectories) == len(finished) == 16  # every episode, none lost or repeated
    assert all(t.error is None for t in trajectories)
    moved = [t for t in trajectories if NOTES in t.metadata]
    assert moved, "no episode was in flight on the killed server"
    notes = [note for traj in moved for note in traj.metadata[NOTES]]
    assert len(notes) == len(moved)  # one move each
    assert all(f"agentenvs server {first} is unreachable" in note for note in notes)
    assert any("restored on a new worker by replaying" in note for note in notes)  # mid-episode
    assert _by_key(trajectories, keep_notes=False) == undisturbed[policy_name]


def test_a_hung_server_is_left_after_step_timeout(fresh_servers, undisturbed) -> None:
    """A stopped (``SIGSTOP``) server misses the deadline; its episodes move to the other."""
    with HttpPool(TC, [s.url for s in fresh_servers], ENV_KWARGS, step_timeout_s=1.0) as pool:
        finished = []

        def on_episode(_traj) -> None:
            finished.append(_traj)
            if len(finished) == 1:
                victim = next(s for s in fresh_servers if s.url == pool.servers[0])
                victim.proc.send_signal(signal.SIGSTOP)

        trajectories = _play("conversation", pool, on_episode)
        assert pool.restarts == 1
    notes = [n for t in trajectories for n in t.metadata.get(NOTES, [])]
    assert notes and all("gave no answer" in n for n in notes)
    assert _by_key(trajectories, keep_notes=False) == undisturbed["conversation"]


def test_a_server_that_hangs_mid_run_is_left_after_the_timeout(fresh_servers, undisturbed):
    """A server that accepts and reads requests but never answers (a proxy gone silent in front
    of it, from its second step batch on): its batch misses the deadline and the health check,
    and its episodes move to the other server, replayed exactly."""
    proxy = HangingProxy(fresh_servers[0].url, hang_at=(b"/step_batch", 2))
    try:
        urls = [proxy.url, fresh_servers[1].url]
        with HttpPool(TC, urls, ENV_KWARGS, step_timeout_s=1.0) as pool:
            trajectories = _play("conversation", pool)
            assert pool.restarts == 1 and pool.servers == [fresh_servers[1].url] * 2
    finally:
        proxy.close()
    assert proxy.hung.is_set()
    notes = [n for t in trajectories for n in t.metadata.get(NOTES, [])]
    assert notes and all(f"agentenvs server {proxy.url}" in n for n in notes)
    assert all("gave no answer within 1 s, nor to its health check" in n for n in notes)
    assert _by_key(trajectories, keep_notes=False) == undisturbed["conversation"]


def test_a_server_that_never_answers_fails_the_start_in_time() -> None:
    proxy = HangingProxy()  # accepts, never answers
    try:
        t0 = time.monotonic()
        with pytest.raises(EnvWorkerError, match=f"no agentenvs server answers at {proxy.url}"):
            make_env_pool(TC, proxy.url, ENV_KWARGS, start_timeout_s=1.0)
        assert time.monotonic() - t0 < 30
    finally:
        proxy.close()


def test_a_replay_environment_on_a_hung_server_is_lost_in_time() -> None:
    """Replay validation's environments (one session each) have the same deadline: a step on a
    server that stopped answering ends in ServerLost, and every later call fails at once."""
    from agentenvs.agents.envworkers.http_env import HttpEnv, ServerLost

    server = Server()
    proxy = HangingProxy(server.url)
    client = httpx.Client()
    try:
        local = make(TC, **ENV_KWARGS)
        env = HttpEnv(proxy.url, TC, dict(ENV_KWARGS), local, client, httpx, timeout_s=1.0)
        env.reset(options={"task_id": "agentgym/0"})
        proxy.hang()
        t0 = time.monotonic()
        with pytest.raises(ServerLost, match="gave no answer to /step in time"):
            env.step("inventory")
        assert time.monotonic() - t0 < 10
        with pytest.raises(ServerLost):
            env.snapshot()
    finally:
        client.close()
        proxy.close()
        server.stop()


def test_env_timeout_flags() -> None:
    from agentenvs.agents.envworkers import parse_env_timeout
    from agentenvs.replay.cli import validate_main

    assert parse_env_timeout("2.5") == 2.5
    assert parse_env_timeout("0") is parse_env_timeout("none") is None
    for bad in ("-1", "x", "inf"):
        with pytest.raises(ValueError, match="--env-timeout takes seconds"):
            parse_env_timeout(bad)
    with pytest.raises(SystemExit):
        validate_main(["q.jsonl", "-o", "out.jsonl", "--env-timeout", "-1"])


def test_sessions_that_expired_between_runs_are_made_again(undisturbed) -> None:
    """A pool kept open across runs (a trainer's) outlives its idle sessions: a new episode
    makes a new session, nothing is retried."""
    servers = [Server(TC, None, "--idle-timeout", "0.5")]
    try:
        with make_env_pool(TC, servers[0].url, ENV_KWARGS) as pool:
            for _ in range(2):
                assert _by_key(_play("conversation", pool)) == undisturbed["conversation"]
                time.sleep(1.5)  # every session idles past the timeout
                assert httpx.get(servers[0].url + HEALTH).json()["sessions"] == 0
            assert pool.restarts == 0
    finally:
        servers[0].stop()


def test_a_full_server_stops_the_run_with_what_to_change() -> None:
    """More episodes in flight than the server's --max-sessions: a clear error, not episodes
    marked failed one by one."""
    server = Server(TC, None, "--max-sessions", "3")
    try:
        with make_env_pool(TC, server.url, ENV_KWARGS) as pool:
            with pytest.raises(EnvWorkerError, match="has no free session .*--max-sessions"):
                _play("conversation", pool)
    finally:
        server.stop()


def test_no_server_left_stops_the_run_and_keeps_finished_episodes(fresh_servers) -> None:
    finished = []

    with make_env_pool(TC, _spec(fresh_servers), ENV_KWARGS) as pool:

        def on_episode(traj) -> None:
            finished.append(traj)
            if len(finished) == 1:
                for server in fresh_servers:
                    server.stop()

        with pytest.raises(EnvWorkerError, match="no server is left: no agentenvs server answers"):
            _play("expert", pool, on_episode)
    assert len(finished) >= 1 and all(t.error is None for t in finished)


# --------------------------------------------------------------------------------------------
# The command lines


def _records(path: Path) -> dict[tuple[str, int], dict]:
    out = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        out[(record["group_id"], record["sample_index"])] = {
            k: record[k]
            for k in ("task_id", "actions", "observations", "rewards", "won", "error")
            if k in record
        }
    return out


def test_eval_cli_over_two_servers(two_servers, tmp_path, capsys) -> None:
    from agentenvs.benchmarks.eval.cli import main

    argv = [TC, "--agent", "expert", "-k", "2", "--limit", "4", "--no-progress"]
    assert main([*argv, "--out", str(tmp_path / "here")]) == 0
    assert main([*argv, "--out", str(tmp_path / "http"), "--env-workers", _spec(two_servers)]) == 0
    assert "8 episodes (8 new)" in capsys.readouterr().out
    here = _records(tmp_path / "here" / "trajectories.jsonl")
    there = _records(tmp_path / "http" / "trajectories.jsonl")
    assert len(here) == 8 and here == there


def test_eval_with_a_server_that_hangs_mid_run(fresh_servers, tmp_path, capsys) -> None:
    """``agentenvs eval --env-timeout 1`` over a server that stops answering mid-run: its
    episodes finish on the other server, with the same records as in process."""
    from agentenvs.benchmarks.eval.cli import main

    argv = [TC, "--agent", "expert", "-k", "2", "--limit", "4", "--no-progress"]
    assert main([*argv, "--out", str(tmp_path / "here")]) == 0
    proxy = HangingProxy(fresh_servers[0].url, hang_at=(b"/step_batch", 2))
    try:
        spec = f"{proxy.url},{fresh_servers[1].url}"
        out = tmp_path / "http"
        assert main([*argv, "--out", str(out), "--env-workers", spec, "--env-timeout", "1"]) == 0
    finally:
        proxy.close()
    assert proxy.hung.is_set() and "8 episodes (8 new)" in capsys.readouterr().out
    here = _records(tmp_path / "here" / "trajectories.jsonl")
    assert _records(out / "trajectories.jsonl") == here


def test_eval_with_its_only_server_hanging_stops_in_time(tmp_path, capsys) -> None:
    """The only server stops answering mid-run: eval stops within the timeout's bounds with the
    finished episodes on disk and the command that resumes the run."""
    from agentenvs.benchmarks.eval.cli import main

    server = Server()
    proxy = HangingProxy(server.url, hang_at=(b"/step_batch", 3))
    out = tmp_path / "hung"
    argv = [
        TC,
        "--agent",
        "expert",
        "-k",
        "2",
        "--limit",
        "4",
        "--no-progress",
        "--out",
        str(out),
        "--env-workers",
        proxy.url,
        "--env-timeout",
        "1",
    ]
    try:
        t0 = time.monotonic()
        assert main(argv) == 1
        assert time.monotonic() - t0 < 60
    finally:
        proxy.close()
        server.stop()
    err = capsys.readouterr().err
    assert f"no server is left: no agentenvs server answers at {proxy.url}" in err
    assert "--env-workers" in err and "finished" in err


def test_train_rl_cli_over_two_servers(two_servers, tiny_model_dir, tmp_path) -> None:
    pytest.importorskip("transformers")
    from agentenvs.cli import main

    out = tmp_path / "rl"
    argv = [
        "train",
        "rl",
        "--algo",
        "grpo",
        "--model",
        str(tiny_model_dir),
        "--out",
        str(out),
        "--env",
        TC,
        "--env-workers",
        _spec(two_servers),
        "--no-progress",
        "iterations=1",
        "prompts_per_iteration=2",
        "samples_per_prompt=2",
        "rollout.max_turns=2",
        "rollout.max_new_tokens=8",
        "data.tasks=agentgym/0,agentgym/1",
        "tensorboard=false",
    ]
    assert main(argv) == 0
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 1 and metrics[0]["rollout/env_worker_restarts"] == 0
    assert (out / "checkpoints" / "step-0000001" / "model" / "config.json").exists()
