"""Batched rollouts: experts, the random agent (in-process and in a process pool), the tiny model
with token ids and log-probs checked against a teacher-forced forward pass, format errors, and
episodes that start at a replayed cut state."""

from __future__ import annotations

import pytest
import torch

from agentenvs.agents.parsing import get_parser
from agentenvs.agents.policy import Completion, Policy, SamplingParams
from agentenvs.agents.prompts import format_reply, parse_action, prompt_messages
from agentenvs.agents.prompts import textcraft as T
from agentenvs.agents.protocols import env_protocol
from agentenvs.agents.registry import make_policy
from agentenvs.agents.rollout import (
    EpisodeSpec,
    RolloutConfig,
    RolloutStats,
    plan_episodes,
    run_rollouts,
)
from agentenvs.agents.trajectory import Trajectory, TrajectoryFormatError
from agentenvs.registration import make

from .conftest import cut_spec, has_expert, registered_envs

TC = "TextCraft-v0"


def _tasks(env_id: str, n: int) -> list[str]:
    env = make(env_id)
    try:
        return env.task_ids("test")[:n]
    finally:
        env.close()


def test_plan_episodes_groups_and_indices() -> None:
    specs = plan_episodes(["a/1", "b/2", "a/1"], 2)
    assert [(s.task_id, s.group_id, s.sample_index) for s in specs] == [
        ("a/1", "a/1#0", 0),
        ("a/1", "a/1#0", 1),
        ("b/2", "b/2", 0),
        ("b/2", "b/2", 1),
        ("a/1", "a/1#1", 0),
        ("a/1", "a/1#1", 1),
    ]
    with pytest.raises(ValueError):
        plan_episodes(["a/1"], 0)


def test_expert_rollout_textcraft() -> None:
    tasks = _tasks(TC, 8)
    stats = RolloutStats()
    trajs = run_rollouts(make_policy("expert"), TC, plan_episodes(tasks, 2), stats=stats)
    assert len(trajs) == 16 and all(t.won and t.terminated and t.error is None for t in trajs)
    assert sorted((t.group_id, t.sample_index) for t in trajs) == sorted(
        (t, i) for t in tasks for i in range(2)
    )
    for traj in trajs:
        assert traj.family.startswith("depth-") and traj.agent == "expert"
        roles = [m["role"] for m in traj.messages]
        assert roles[0] == "system" and roles[1::2] == ["user"] * len(roles[1::2])
        assert roles[2::2] == ["assistant"] * len(roles[2::2]) and roles[-1] == "user"
        assert traj.turns == len(traj.steps) == roles.count("assistant")
        for step, reply in zip(
            traj.steps, [m for m in traj.messages if m["role"] == "assistant"], strict=True
        ):
            assert (
                step.completion == reply["content"]
                and parse_action(TC, reply["content"]).action == step.action
            )
            assert step.valid and step.token_ids is None
        assert traj.steps[-1].reward == 1.0 and traj.total_reward == 1.0
        assert Trajectory.from_json(traj.to_json()) == traj
    assert stats.episodes == 16 and stats.generate_calls == max(t.turns for t in trajs)


@pytest.mark.parametrize("env_id", [e for e in registered_envs() if e != TC])
def test_expert_rollout_other_registered_envs(env_id: str) -> None:
    if not has_expert(env_id):
        pytest.skip(f"{env_id} has no importable expert")
    trajs = run_rollouts(make_policy("expert"), env_id, plan_episodes(_tasks(env_id, 1), 1))
    assert trajs[0].error is None and trajs[0].won
    parse = get_parser(env_protocol(trajs[0].protocol, env_id).parser)  # the default protocol's
    assert all(parse(s.completion).action == s.action for s in trajs[0].steps)


def test_random_agent_is_repeatable_in_process_and_in_a_pool() -> None:
    tasks = _tasks(TC, 10)
    config = RolloutConfig(max_turns=10, max_active=7)
    here = run_rollouts(make_policy("random:5"), TC, plan_episodes(tasks, 2), config)
    pool = run_rollouts(
        make_policy("random:5"),
        TC,
        plan_episodes(tasks, 2),
        RolloutConfig(max_turns=10, max_active=7, workers=2),
    )

    def key(ts):
        return sorted((t.group_id, t.sample_index, tuple(t.actions), t.won) for t in ts)

    assert key(here) == key(pool)
    assert len(here) == 20 and all(t.error is None and 1 <= t.turns <= 10 for t in here)
    assert len({tuple(t.actions) for t in here if t.task_id == tasks[-1]}) == 2  # samples differ


def test_reset_failure_is_an_episode_error() -> None:
    trajs = run_rollouts(make_policy("expert"), TC, [EpisodeSpec("nope/1", "g", 0)])
    assert (
        len(trajs) == 1
        and trajs[0].error.startswith("reset failed")
        and "UnknownTaskError" in trajs[0].error
    )
    assert not trajs[0].won and trajs[0].steps == []


def test_tiny_model_rollout_token_ids_and_logprobs(tiny_policy) -> None:
    """Token ids and log-probs recorded by the rollout equal a teacher-forced forward pass."""
    tasks = _tasks(TC, 3)
    sampling = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=24, seed=0)
    stats = RolloutStats()
    config = RolloutConfig(max_turns=3, history=2, sampling=sampling)
    trajs = run_rollouts(tiny_policy, TC, plan_episodes(tasks, 2), config, stats=stats)
    assert len(trajs) == 6 and stats.generate_calls == 3  # one batched call per turn
    tokenizer, model = tiny_policy.tokenizer, tiny_policy.model
    max_diff = 0.0
    for traj in trajs:
        assert traj.turns == 3 and traj.truncated and not traj.won and traj.metadata["history"] == 2
        for turn, step in enumerate(traj.steps):
            assert step.token_ids and len(step.token_ids) == len(step.logprobs) <= 24
            assert all(lp <= 0 for lp in step.logprobs)
            ids = step.token_ids[:-1] if step.info["finish_reason"] == "stop" else step.token_ids
            assert tokenizer.decode(ids, skip_special_tokens=True) == step.completion
            prompt = tiny_policy.prompt_ids(prompt_messages(TC, traj.messages, turn, 2))
            with torch.no_grad():
                logits = model(torch.tensor([prompt + step.token_ids])).logits[0].float()
            start = len(prompt) - 1
            forced = torch.log_softmax(logits[start : start + len(step.token_ids)], -1)
            forced = forced.gather(1, torch.tensor(step.token_ids)[:, None])[:, 0]
            max_diff = max(max_diff, (forced - torch.tensor(step.logprobs)).abs().max().item())
            if step.action is None:  # a format error: feedback, the environment not stepped
                assert not step.valid and step.observation == T.TEXTCRAFT_INVALID_ACTION
                if turn + 1 < len(traj.steps):
                    assert traj.steps[turn + 1].anchor == step.anchor
    print(f"\nmax |rollout logprob - teacher-forced logprob| = {max_diff:.3g}")
    assert max_diff < 1e-4


def test_max_active_bounds_the_batch(tiny_policy) -> None:
    sampling = SamplingParams(max_new_tokens=8, seed=1)
    stats = RolloutStats()
    config = RolloutConfig(max_turns=2, sampling=sampling, max_active=2)
    trajs = run_rollouts(tiny_policy, TC, plan_episodes(_tasks(TC, 2), 2), config, stats=stats)
    assert len(trajs) == 4 and stats.generate_calls == 4 and stats.turns == 8


# --------------------------------------------------------------------------------------------
# Cut-state starts


class InventoryPolicy(Policy):
    """Always asks for the inventory (a valid action that never ends a TextCraft episode)."""

    def generate(self, conversations, sampling=None, *, envs=None, keys=None):
        reply = format_reply("check", "inventory", TC)
        return [Completion(reply, finish_reason="stop") for _ in conversations]


def test_a_cut_start_continues_the_conversation_and_counts_its_prefix_turns() -> None:
    prefix = ("inventory", "get 1 sunflower")
    specs = [
        cut_spec(TC, "agentgym/0", prefix, "cut", 0, max_turns=5),
        cut_spec(TC, "agentgym/0", prefix, "unparsed", 0, max_turns=5, prefix_turns=4),
        EpisodeSpec("agentgym/0", "reset", 0),
    ]
    trajs = {
        t.group_id: t
        for t in run_rollouts(InventoryPolicy("inventory"), TC, specs, RolloutConfig(max_turns=5))
    }
    cut, unparsed, reset = trajs["cut"], trajs["unparsed"], trajs["reset"]
    assert all(t.error is None and t.truncated and not t.won for t in trajs.values())
    # 5 replies in all: the prefix's 2 (or 4, when some teacher replies had no action) and the rest
    assert (cut.turns, unparsed.turns, reset.turns) == (3, 1, 5)
    assert (cut.metadata["prefix_turns"], unparsed.metadata["prefix_turns"]) == (2, 4)
    assert "prefix_turns" not in reset.metadata
    start = list(specs[0].start_messages)
    assert cut.messages[: len(start)] == start and cut.messages[len(start)]["role"] == "assistant"
    assert cut.steps[0].anchor == "Got 1 sunflower" == specs[0].cut_observation
    assert "[sunflower] (1)" in cut.steps[0].observation  # the replayed state, not a fresh reset
    assert "[sunflower]" not in reset.steps[0].observation
    assert len([m for m in cut.messages if m["role"] == "assistant"]) == 5


def test_a_cut_start_that_no_longer_reaches_its_cut_is_a_marked_episode() -> None:
    good = cut_spec(TC, "agentgym/0", ["get 1 sunflower"], "good", 0)
    moved = cut_spec(TC, "agentgym/0", ["get 1 sunflower"], "moved", 0, cut_observation="Got 9 x")
    over = cut_spec(TC, "agentgym/0", ["inventory"] * 3, "over", 0, max_turns=3)
    trajs = {
        t.group_id: t
        for t in run_rollouts(
            InventoryPolicy("inventory"), TC, [moved, good, over], RolloutConfig(max_turns=3)
        )
    }
    assert trajs["good"].error is None and trajs["good"].turns == 2
    for name in ("moved", "over"):
        error = trajs[name].error
        assert error.startswith("replay failed: ") and "CutStateError" in error
        assert trajs[name].steps == [] and not trajs[name].won
    assert "not the recorded cut observation 'Got 9 x'" in trajs["moved"].error
    assert "over at the cut" in trajs["over"].error


def test_cut_starts_need_a_chat_prompt_and_well_formed_messages() -> None:
    spec = EpisodeSpec("1", "g", 0, start_messages=[{"role": "user", "content": "room"}])
    with pytest.raises(ValueError, match="template-style prompt"):
        run_rollouts(InventoryPolicy("inventory"), "Sokoban-v0", [spec])
    with pytest.raises(ValueError, match="cut-state user turn"):
        EpisodeSpec("t", "g", 0, start_messages=[{"role": "system", "content": "s"}])
    assert not EpisodeSpec("t", "g", 0).is_cut_start and EpisodeSpec("t", "g", 0).turns_before == 0


def test_version_1_trajectories_are_refused_naming_their_writer() -> None:
    """Schema 2 added ``protocol`` and ``variant``; a version-1 line is one clear error."""
    line = (
        '{"schema_version": 1, "env_id": "TextCraft-v0", "task_id": "agentgym/0", "family": '
        '"depth-1", "group_id": "agentgym/0", "sample_index": 0, "agent": "expert", '
        '"messages": [], "steps": [{"anchor": "a", "action": "inventory", "observation": "b", '
        '"reward": 0.0, "valid": true}]}'
    )
    written_by = "schema_version 1 .written by agentenvs 0.1.0"
    with pytest.raises(TrajectoryFormatError, match=written_by) as info:
        Trajectory.from_json(line)
    assert "\n" not in str(info.value)
    new = Trajectory.from_json(Trajectory("E", "t", "f", "g", 0, "a", variant={"x": 1}).to_json())
    assert new.schema_version == 2 and new.variant == {"x": 1}


def test_a_protocol_rewrites_expert_replies_and_records_itself() -> None:
    config = RolloutConfig(protocol="prefix-grpo", max_turns=30)
    (traj,) = run_rollouts(
        make_policy("expert"), "BabyAI-Text-v0", plan_episodes(["agentgym/0"], 1), config
    )
    assert traj.won and traj.protocol == "prefix-grpo" and traj.variant == {"rules": "agentgym"}
    assert traj.metadata["prompt"] == "babyai-paper" and traj.metadata["history"] is None
    assert traj.steps[0].completion.startswith("Thought:\n")
