"""Per-episode sampling seeds (``RolloutConfig(episode_seeds=True)``, ``generate(seeds=...)``): an
episode's sampled replies do not depend on the batch it shares or on ``max_active``."""

from __future__ import annotations

import hashlib

import pytest

from agentenvs.agents.backends.kv_cache import writes_in_place
from agentenvs.agents.backends.transformers_backend import TransformersPolicy
from agentenvs.agents.policy import SamplingParams, row_seed
from agentenvs.agents.rollout import RolloutConfig, episode_seed, plan_episodes, run_rollouts

from .conftest import CONVERSATIONS

ENGINE = {"device": "cpu", "dtype": "bfloat16", "cpu_engine": "auto"}


def test_episode_seed_is_fixed_per_seed_key_and_turn() -> None:
    # the documented digest (not Python's salted hash): the same in every process and version
    digest = hashlib.blake2b(b"0|agentgym/0/0|0", digest_size=8).digest()
    assert episode_seed(0, "agentgym/0/0", 0) == int.from_bytes(digest, "big") >> 1
    seeds = {episode_seed(s, k, t) for s in (0, 1) for k in ("a/0", "a/1") for t in (0, 1)}
    assert len(seeds) == 8 and all(0 <= s < 2**63 for s in seeds)


def test_row_seed() -> None:
    sampling = SamplingParams(seed=10)
    assert [row_seed(sampling, r, None) for r in range(3)] == [10, 11, 12]
    assert row_seed(sampling, 1, [5, 6]) == 6
    assert row_seed(SamplingParams(), 0, None) is None


@pytest.mark.skipif(not writes_in_place(), reason="needs transformers 5 buffer caches")
def test_seeded_rows_sample_alone_what_they_sample_batched(tiny_model_dir) -> None:
    policy = TransformersPolicy(str(tiny_model_dir), **ENGINE)
    sampling = SamplingParams(max_new_tokens=12)
    seeds = [101, 202, 303]
    batched = policy.generate(CONVERSATIONS, sampling, seeds=seeds)
    for i, conversation in enumerate(CONVERSATIONS):
        alone = policy.generate([conversation], sampling, seeds=[seeds[i]])[0]
        assert (alone.token_ids, alone.logprobs) == (batched[i].token_ids, batched[i].logprobs)
    reordered = policy.generate(CONVERSATIONS[::-1], sampling, seeds=seeds[::-1])
    assert [o.token_ids for o in reordered[::-1]] == [o.token_ids for o in batched]
    with pytest.raises(ValueError, match="seeds"):
        policy.generate(CONVERSATIONS, sampling, seeds=[1])


@pytest.mark.skipif(not writes_in_place(), reason="needs transformers 5 buffer caches")
def test_episode_seeds_make_max_active_irrelevant(tiny_model_dir) -> None:
    """TextCraft, 4 episodes x 3 turns sampled: batched and one at a time sample the same
    tokens with episode seeds (log-probs equal up to float summation order where a row's left
    padding differs); with one seed per call they do not."""
    policy = TransformersPolicy(str(tiny_model_dir), **ENGINE)
    plan = plan_episodes(["agentgym/0", "agentgym/1"], 2)
    sampling = SamplingParams(max_new_tokens=16, seed=5)

    def play(max_active: int, episode_seeds: bool) -> list:
        config = RolloutConfig(
            max_turns=3, sampling=sampling, max_active=max_active, episode_seeds=episode_seeds
        )
        trajectories = run_rollouts(policy, "TextCraft-v0", plan, config)
        assert all(t.metadata["episode_seeds"] is episode_seeds for t in trajectories)
        return sorted((t.group_id, t.sample_index, t.steps) for t in trajectories)

    def tokens(played: list) -> list:
        return [(g, i, [s.token_ids for s in steps]) for g, i, steps in played]

    batched, alone = play(4, True), play(1, True)
    assert tokens(batched) == tokens(alone)
    assert sum(len(steps) for _, _, steps in batched) > 4  # several turns were played
    worst = max(
        abs(x - y)
        for (_, _, a), (_, _, b) in zip(batched, alone, strict=True)
        for sa, sb in zip(a, b, strict=True)
        for x, y in zip(sa.logprobs, sb.logprobs, strict=True)
    )
    assert worst < 1e-3
    assert tokens(play(4, False)) != tokens(play(1, False))
