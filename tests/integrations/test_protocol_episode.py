"""The integrations play our benchmark protocols: an episode played through
:class:`agentenvs.agents.episode.TextEpisode` (what the TRL adapter and the verl agent loop drive)
under a protocol gives the same prompts, actions, rewards and validity as
:func:`agentenvs.agents.rollout.run_rollouts` with the same protocol and the same replies.

The replies are the expert's (played by ``run_rollouts``, written in the protocol's reply
format), replayed through both drivers by a fixed-reply policy that keeps every prompt it is
given; and malformed ones: projected to Sokoban's ``still`` under ``ptgpo``, answered with the
feedback (not stepped) under ``prefix-grpo``.
"""

from __future__ import annotations

import pytest

from agentenvs.agents.episode import INVALID_ACTION, TextEpisode
from agentenvs.agents.policy import Completion, Policy
from agentenvs.agents.protocol_rules import ProtocolRules
from agentenvs.agents.protocols import PROTOCOLS, env_protocol
from agentenvs.agents.registry import make_policy
from agentenvs.agents.rollout import RolloutConfig, plan_episodes, run_rollouts

SETUPS = [(p, env) for p, protocol in PROTOCOLS.items() for env in protocol.envs]
TASKS = {"ALFWorld-v0": "agentgym/2424", "TextCraft-v0": "agentgym/0"}


class _FixedReplies(Policy):
    """A language-model stand-in that answers the n-th prompt of the episode with the n-th
    fixed text and keeps the prompts (a test policy for the reply path, not a model)."""

    def __init__(self, replies: list[str]) -> None:
        super().__init__("fixed-replies")
        self.replies = replies
        self.prompts: list[list[dict[str, str]]] = []

    def generate(self, prompts, sampling, keys=None):
        (prompt,) = prompts  # one episode at a time
        self.prompts.append([dict(m) for m in prompt])
        return [Completion(text=self.replies[len(self.prompts) - 1])]


def _task(env_id: str) -> str:
    from agentenvs.registration import make

    if env_id in TASKS:
        return TASKS[env_id]
    env = make(env_id)
    try:
        return env.task_ids("test")[0]
    finally:
        env.close()


def _both(env_id: str, protocol: str, task: str, replies: list[str], max_turns=None):
    """The replies played by run_rollouts (their prompts kept) and by TextEpisode, with the
    protocol's training turn limit (or ``max_turns``)."""
    policy = _FixedReplies(replies)
    budget = max_turns or env_protocol(protocol, env_id).turns("train")
    config = RolloutConfig(protocol=protocol, max_turns=budget)
    (traj,) = run_rollouts(policy, env_id, plan_episodes([task], 1), config)
    episode = TextEpisode(env_id, protocol=protocol, max_turns=max_turns)
    prompts = [episode.start(task)]
    for reply in replies[: traj.turns]:
        if episode.reply(reply) is not None:
            prompts.append(episode.prompt())
    return traj, policy.prompts, episode, prompts


def _check_same(traj, rollout_prompts, episode, prompts) -> None:
    assert traj.error is None, traj.error
    assert prompts == rollout_prompts
    assert episode.conversation.messages == traj.messages
    assert episode.conversation.history == traj.metadata["history"]
    assert (episode.protocol, episode.variant) == (traj.protocol, traj.variant)
    assert episode.max_turns == traj.metadata["max_turns"] and episode.done
    assert len(episode.steps) == traj.turns
    for ours, step in zip(episode.steps, traj.steps, strict=True):
        assert ours.action == (step.action if step.action is not None else INVALID_ACTION)
        assert (ours.anchor, ours.observation) == (step.anchor, step.observation)
        assert ours.reward == pytest.approx(step.reward)
        assert ours.valid == step.valid
        assert ours.format_error == step.info.get("format_error")
    assert episode.reward == pytest.approx(traj.total_reward) and episode.won == traj.won


@pytest.mark.parametrize(("protocol", "env_id"), SETUPS, ids=[f"{p}:{e}" for p, e in SETUPS])
def test_expert_replies_play_the_same_under_each_protocol(protocol: str, env_id: str) -> None:
    task = _task(env_id)
    config = RolloutConfig(
        protocol=protocol, max_turns=env_protocol(protocol, env_id).turns("train")
    )
    (expert,) = run_rollouts(make_policy("expert"), env_id, plan_episodes([task], 1), config)
    replies = [s.completion for s in expert.steps]
    assert replies and expert.error is None
    traj, rollout_prompts, episode, prompts = _both(env_id, protocol, task, replies)
    _check_same(traj, rollout_prompts, episode, prompts)
    assert [s.action for s in traj.steps] == [s.action for s in expert.steps]
    assert all(s.format_valid for s in episode.steps)


def test_malformed_reply_under_ptgpo_projects_to_still() -> None:
    """verl-agent's handling, through both drivers: a reply without tags is stepped as Sokoban's
    ``still`` (reward -0.1), recorded invalid and projected; the penalty applies to it."""
    from agentenvs.train.rl.batch import _format_invalid

    replies = ["I would like to go up", "<think>x</think><action>up</action>"]
    traj, rollout_prompts, episode, prompts = _both("Sokoban-v0", "ptgpo", "seed/0", replies, 2)
    _check_same(traj, rollout_prompts, episode, prompts)
    first, second = episode.steps[:2]
    assert (first.action, first.valid, first.projected, first.stepped) == (
        "still",
        False,
        True,
        True,
    )
    assert first.reward == pytest.approx(-0.1) and not first.format_valid
    assert second.action == "up" and second.format_valid and not second.projected
    # the steps the trainer penalises are the ones the verl estimators penalise
    assert [not s.format_valid for s in episode.steps] == [_format_invalid(s) for s in traj.steps]
    assert episode.invalid_penalty == pytest.approx(0.1)


def test_malformed_reply_under_prefix_grpo_gets_the_feedback() -> None:
    from agentenvs.agents.prompts import textcraft as T

    replies = ["I am not sure what to do.\nMaybe look around?"] * 2 + [
        "Think: x\nAction: [[ inventory ]]"
    ]
    traj, rollout_prompts, episode, prompts = _both(
        "TextCraft-v0", "prefix-grpo", "agentgym/0", replies, 3
    )
    _check_same(traj, rollout_prompts, episode, prompts)
    first = episode.steps[0]
    assert (first.action, first.stepped, first.format_valid) == (INVALID_ACTION, False, False)
    assert first.observation == T.TEXTCRAFT_INVALID_ACTION and episode.invalid_penalty == 0.0
    assert episode.steps[2].action == "inventory" and episode.steps[2].format_valid


def test_default_protocol_and_act_take_a_bare_action() -> None:
    """TextEpisode's default is the environment's default protocol; :meth:`act` (TRL's tool
    argument) takes a bare action as the reply format would carry it."""
    episode = TextEpisode("Sokoban-v0")
    rules = ProtocolRules.of("Sokoban-v0")
    assert episode.protocol == rules.name == "ptgpo"
    assert episode.max_turns == rules.max_turns("train") == 15
    assert episode.variant["grid_style"] == "verl-agent"
    episode.start("seed/0")
    episode.act("up")
    step = episode.steps[-1]
    assert (step.action, step.projected, step.format_valid) == ("up", False, True)
    episode.act("fly away")  # not an action even when wrapped: projected, as a reply would be
    assert (episode.steps[-1].action, episode.steps[-1].projected) == ("still", True)
    none = TextEpisode("Sokoban-v0", protocol=None)
    assert none.protocol is None and none.invalid_penalty == 0.0
    with pytest.raises(ValueError, match="unknown protocol"):
        TextEpisode("Sokoban-v0", protocol="nosuch")


def test_verl_estimators_apply_the_invalid_penalty_as_our_trainer_does() -> None:
    """With ``agentenvs_format_valid`` and ``agentenvs_invalid_penalty`` (the agent loop's keys)
    the step rewards lose the penalty where the reply broke the format: the same advantages as
    rewards reduced by hand (agentenvs.train.rl.batch's rule) without the keys."""
    import numpy as np
    import torch

    from agentenvs.integrations.verl.estimators import step_advantages

    def column(values):
        out = np.empty(len(values), dtype=object)
        out[:] = values
        return out

    spans = [[[0, 2], [2, 4]], [[0, 3]]]
    rewards = [[0.0, 1.0], [-0.1]]
    valid = [[False, True], [False]]
    base = {
        "uid": column(["g", "g"]),
        "agentenvs_turn_spans": column(spans),
        "agentenvs_anchors": column([["a", "b"], ["a"]]),
        "agentenvs_actions": column([["still", "up"], ["still"]]),
    }
    mask = torch.ones(2, 4)
    penalised = {
        **base,
        "agentenvs_step_rewards": column(rewards),
        "agentenvs_format_valid": column(valid),
        "agentenvs_invalid_penalty": column([0.1, 0.1]),
    }
    by_hand = [[0.0 - 0.1, 1.0], [-0.1 - 0.1]]  # rewards less the penalty where not valid
    reference = {**base, "agentenvs_step_rewards": column(by_hand)}
    unpenalised = {**base, "agentenvs_step_rewards": column(rewards)}
    for name in ("gigpo", "ptgpo"):
        ours = step_advantages(name, mask, penalised, gamma=1.0)
        expected = step_advantages(name, mask, reference, gamma=1.0)
        assert torch.equal(ours[0], expected[0]) and torch.equal(ours[1], expected[1])
        assert not torch.equal(ours[1], step_advantages(name, mask, unpenalised, gamma=1.0)[1])


def test_verl_dataset_rows_name_the_protocol(tmp_path) -> None:
    from agentenvs.agents.prompts import system_prompt
    from agentenvs.integrations.verl.dataset import dataset_rows, main

    (row,) = dataset_rows("ALFWorld-v0", "train", limit=1, protocol="prefix-grpo")
    assert row["extra_info"]["protocol"] == "prefix-grpo"
    assert row["prompt"][0]["content"] == system_prompt("ALFWorld-v0", "alfworld-agentgym")
    (row,) = dataset_rows("Sokoban-v0", "train", limit=1)
    assert row["extra_info"]["protocol"] == "ptgpo"
    (row,) = dataset_rows("Sokoban-v0", "train", limit=1, protocol=None)
    assert row["extra_info"]["protocol"] == "none"
    assert main(["Sokoban-v0", "-o", str(tmp_path), "--limit", "1", "--protocol", "nosuch"]) == 2
