"""Our http pool through one ``agentenvs serve --workers 2`` address (HAProxy in front of two
worker processes): a rollout's batches reach every session they carry, with the same
trajectories as in process. Skips where HAProxy is not installed."""

from __future__ import annotations

import pytest

pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from agentenvs.agents.envworkers import HttpPool, make_env_pool  # noqa: E402
from agentenvs.agents.registry import make_policy  # noqa: E402
from agentenvs.agents.rollout import RolloutConfig, plan_episodes, run_rollouts  # noqa: E402
from agentenvs.registration import make  # noqa: E402
from agentenvs.serve.proxy import AFFINITY_HEADER, haproxy_binary  # noqa: E402

from ..serve.test_proxy import proxied  # noqa: E402

pytestmark = pytest.mark.skipif(haproxy_binary() is None, reason="HAProxy is not installed")

TC = "TextCraft-v0"
MAX_TURNS = 10
EPISODES = 16
"""Two episodes of eight test tasks, eight in flight: each turn's batch carries eight sessions,
which HAProxy's least-connections choice alone would spread over both workers."""


MAX_POOLS = 30
"""Pools made until both workers hold one: random keys all on one of two workers 30 times has
probability 2**-29."""


def _specs():
    env = make(TC)
    try:
        return plan_episodes(env.task_ids("test")[: EPISODES // 2], 2)
    finally:
        env.close()


def _by_key(trajectories) -> dict[tuple[str, int], dict]:
    return {(t.group_id, t.sample_index): t.to_dict() for t in trajectories}


def _worker(session: str) -> str:
    return session.split("-", 1)[0]


@pytest.mark.parametrize("policy_name", ["expert", "random:5"])
def test_a_pool_through_one_address_matches_in_process(policy_name) -> None:
    specs = _specs()
    config = RolloutConfig(max_turns=MAX_TURNS, max_active=8)
    here = _by_key(run_rollouts(make_policy(policy_name), TC, specs, config))
    with proxied(TC, "--max-sessions", "64") as (url, _):
        there = run_rollouts(
            make_policy(policy_name),
            TC,
            specs,
            RolloutConfig(max_turns=MAX_TURNS, max_active=8, workers=url),
        )
        assert _by_key(there) == here
        assert all(t.error is None for t in there)
        with make_env_pool(TC, url, {"max_turns": MAX_TURNS}) as pool:
            assert isinstance(pool, HttpPool)
            trajectories = run_rollouts(make_policy(policy_name), TC, specs, config, env_pool=pool)
            assert _by_key(trajectories) == here
            assert pool.restarts == 0
            held = [session for _, session in pool._sessions._held.values()]
            assert len(held) == 8 and len({_worker(s) for s in held}) == 1, held
            assert pool.requests["step_batch"] > 0 and pool.requests["reset_batch"] > 0


def test_each_pool_has_its_own_affinity_key_and_pools_spread_over_workers() -> None:
    """A pool's key is its own (random) and the same on every request to one address; a pool's
    sessions share the worker its key hashes to, and pools spread over the workers."""
    with proxied(TC, "--max-sessions", "256") as (url, _):
        keys: set[str] = set()
        workers: set[str] = set()
        made = 0
        while made < MAX_POOLS and workers != {"w0", "w1"}:
            made += 1
            with make_env_pool(TC, url, {"max_turns": MAX_TURNS}) as pool:
                key = pool._sessions.affinity(url)[AFFINITY_HEADER]
                sessions = {pool._sessions.hold(url, slot)[1] for slot in range(4)}
                assert pool._sessions.affinity(url)[AFFINITY_HEADER] == key
                assert len({_worker(s) for s in sessions}) == 1, sessions
                keys.add(key)
                workers |= {_worker(s) for s in sessions}
        assert len(keys) == made  # a key per pool
        assert workers == {"w0", "w1"}, f"{len(keys)} pools, all on {workers}"
