"""The oracle control estimator and PTGPO's root-spread options, hand-computed."""

from __future__ import annotations

import dataclasses
import math

import pytest

torch = pytest.importorskip("torch")

from agentenvs.train.advantages import (  # noqa: E402
    AdvantageBatch,
    OracleConfig,
    PTGPOConfig,
    get_advantage_estimator,
)

R2 = math.sqrt(2.0)


def run(name, batch, **settings):
    estimator = get_advantage_estimator(name)
    return estimator(batch, estimator.make_config(**settings))


def two_episode_batch(step_credits=None) -> AdvantageBatch:
    """One group: episode 0 rewards (0, 1), R 1; episode 1 rewards (0, 0), R 0."""
    return AdvantageBatch(
        rewards=torch.tensor([0.0, 1.0, 0.0, 0.0]),
        response_mask=torch.ones(4, 2),
        group_index=[0, 0, 0, 0],
        episode_index=[0, 0, 1, 1],
        step_index=[0, 1, 0, 1],
        step_credits=step_credits,
    )


# ------------------------------------------------------------------------------ oracle


def test_oracle_is_grpo_plus_weighted_given_credit():
    # R = 1, 0: mean 1/2, std (Bessel) 1/sqrt(2), A_episode = +-1/sqrt(2)
    result = run("oracle", two_episode_batch([1.0, 2.0, 0.0, -3.0]), step_weight=0.5)
    expected = [1 / R2 + 0.5, 1 / R2 + 1.0, -1 / R2, -1 / R2 - 1.5]
    assert result.step_advantages.tolist() == pytest.approx(expected, abs=1e-5)
    assert result.token_advantages[:, 1].tolist() == pytest.approx(expected, abs=1e-5)
    assert result.metrics["adv/step_credit_abs_mean"] == pytest.approx((0.5 + 1 + 0 + 1.5) / 4)


def test_oracle_without_weight_is_exactly_grpo():
    batch = two_episode_batch([1.0, 2.0, 0.0, -3.0])
    oracle = run("oracle", batch, step_weight=0.0).step_advantages
    assert torch.equal(oracle, run("grpo", batch).step_advantages)


def test_oracle_anchor_centered_credit():
    # one group, anchors: episode 0 visits "hall" then "room"; episode 1 "hall" then "hall".
    # "hall" credits (-1, 0, -2): mean -1 -> (0, +1, -1); "room" is visited once -> 0
    batch = dataclasses.replace(
        two_episode_batch([-1.0, 5.0, 0.0, -2.0]), anchors=["hall", "room", "hall", "hall"]
    )
    result = run("oracle", batch, credit_scale="anchor_centered")
    expected = [1 / R2 + 0.0, 1 / R2 + 0.0, -1 / R2 + 1.0, -1 / R2 - 1.0]
    assert result.step_advantages.tolist() == pytest.approx(expected, abs=1e-5)
    with pytest.raises(ValueError, match="anchor_centered.*anchors"):
        run("oracle", two_episode_batch([0.0, 0.0, 0.0, 0.0]), credit_scale="anchor_centered")


def test_oracle_group_rms_scaling():
    # group 0 credits (1, 2, 0, -3): rms sqrt(14 / 4); group 1 (two one-step episodes, R 1
    # and 1): every credit 0, so its rms is 0 and its credit stays 0
    batch = AdvantageBatch(
        rewards=torch.tensor([0.0, 1.0, 0.0, 0.0, 1.0, 1.0]),
        response_mask=torch.ones(6, 1),
        group_index=[0, 0, 0, 0, 1, 1],
        episode_index=[0, 0, 1, 1, 0, 1],
        step_index=[0, 1, 0, 1, 0, 0],
        step_credits=[1.0, 2.0, 0.0, -3.0, 0.0, 0.0],
    )
    rms = math.sqrt(14 / 4)
    result = run("oracle", batch, credit_scale="group_rms")
    expected = [1 / R2 + 1 / rms, 1 / R2 + 2 / rms, -1 / R2, -1 / R2 - 3 / rms, 0.0, 0.0]
    assert result.step_advantages.tolist() == pytest.approx(expected, abs=1e-5)


def test_oracle_missing_or_bad_credit_is_a_clear_error():
    with pytest.raises(ValueError, match=r"needs AdvantageBatch field\(s\) \['step_credits'\]"):
        run("oracle", two_episode_batch())
    with pytest.raises(ValueError, match=r"finite number on every row; rows \[1\]"):
        run("oracle", two_episode_batch([1.0, None, 0.0, 0.0]))
    with pytest.raises(ValueError, match="one number per row"):
        run("oracle", two_episode_batch([1.0, "good", 0.0, 0.0]))
    with pytest.raises(ValueError, match="finite"):
        run("oracle", two_episode_batch([1.0, float("nan"), 0.0, 0.0]))
    with pytest.raises(ValueError, match="credit_scale"):
        OracleConfig(credit_scale="rank")


# ------------------------------------------------------------------------------ root spread


def all_lose_batch() -> AdvantageBatch:
    """Two lost episodes from anchor ``s`` (shaped reward -0.1 a step, gamma 1): the ``push``
    ends the episode at once (R -0.1, a fatal push that stops the step penalty), the ``walk``
    goes on one more step (R -0.2). Outcomes: both 0."""
    batch = AdvantageBatch.from_groups(
        [[[("s", "push", -0.1)], [("s", "walk", -0.1), ("t", "walk", -0.1)]]]
    )
    return dataclasses.replace(batch, outcomes=[0.0, 0.0, 0.0])


def test_paper_root_spread_credits_the_fatal_push_in_a_lost_group():
    # root s: G = -0.1 (push), -0.2 (walk); mean -0.15, std 0.05 sqrt(2); child push mean -0.1:
    # delta +0.05, / std = +1/sqrt(2); episode advantages +-1/sqrt(2)
    result = run("ptgpo", all_lose_batch(), gamma=1.0, eps=0.0)
    assert result.step_advantages.tolist() == pytest.approx(
        [1 / R2 + 1 / R2, -1 / R2 - 1 / R2, -1 / R2], abs=1e-6
    )


def test_outcome_gated_gives_no_tree_credit_without_outcome_spread():
    result = run("ptgpo", all_lose_batch(), gamma=1.0, eps=0.0, root_spread="outcome_gated")
    assert result.step_advantages.tolist() == pytest.approx([1 / R2, -1 / R2, -1 / R2], abs=1e-6)
    assert result.metrics["adv/root_outcome_flat_frac"] == 1.0  # the one root of >= 2: s
    assert result.metrics["adv/step_credit_abs_mean"] == 0.0


def test_floored_root_spread_divides_by_the_floor():
    result = run(
        "ptgpo", all_lose_batch(), gamma=1.0, eps=0.0, root_spread="floored", spread_floor=1.0
    )
    # delta +-0.05 divided by max(0.0707, 1) = 1
    assert result.step_advantages.tolist() == pytest.approx(
        [1 / R2 + 0.05, -1 / R2 - 0.05, -1 / R2], abs=1e-5
    )
    # a floor below the root's spread leaves the paper's division
    low = run(
        "ptgpo", all_lose_batch(), gamma=1.0, eps=0.0, root_spread="floored", spread_floor=0.01
    )
    paper = run("ptgpo", all_lose_batch(), gamma=1.0, eps=0.0)
    assert low.step_advantages.tolist() == pytest.approx(paper.step_advantages.tolist())


def test_outcome_gated_keeps_the_paper_where_outcomes_differ():
    # the paper's worked example: every root of >= 2 members (s0, s1, s2) mixes won and lost
    episodes = [
        [("s0", "a", 0.0), ("s1", "b", 0.0), ("s2", "c", 1.0)],
        [("s0", "a", 0.0), ("s1", "b", 0.0), ("s2", "d", 0.0)],
        [("s0", "a", 0.0), ("s1", "e", 0.0), ("s3", "f", 0.0)],
        [("s0", "g", 0.0), ("s4", "h", 1.0)],
    ]
    batch = AdvantageBatch.from_groups([episodes])
    won = [1.0, 0.0, 0.0, 1.0]
    batch = dataclasses.replace(
        batch, outcomes=[won[i] for i, ep in enumerate(episodes) for _ in ep]
    )
    gated = run("ptgpo", batch, gamma=1.0, eps=0.0, root_spread="outcome_gated")
    paper = run("ptgpo", batch, gamma=1.0, eps=0.0)
    assert torch.equal(gated.step_advantages, paper.step_advantages)
    assert gated.metrics["adv/root_outcome_flat_frac"] == 0.0


def test_root_spread_settings_are_checked():
    with pytest.raises(ValueError, match="outcomes"):
        run("ptgpo", AdvantageBatch.from_groups([[[("s", "a", 0.0)]]]), root_spread="outcome_gated")
    with pytest.raises(ValueError, match="root_spread"):
        PTGPOConfig(root_spread="tree")
    with pytest.raises(ValueError, match="spread_floor"):
        PTGPOConfig(root_spread="floored", spread_floor=0.0)


# ------------------------------------------------------------------------------ the trainer's rows


def step_rows(credits, won=(True, False)):
    """Training rows of one group: episode 0 rewards (0, 1), episode 1 rewards (0, 0)."""
    from agentenvs.train.rl.batch import StepRow

    rewards = [[0.0, 1.0], [0.0, 0.0]]
    return [
        StepRow(
            prompt_ids=[0],
            response_ids=[1, 2, 3],
            rollout_log_probs=[0.0] * 3,
            reward=rewards[e][t],
            group_id="g",
            episode_id=f"g/{e}",
            step_index=t,
            anchor=f"s{t}",
            action="a" if e == 0 else "b",
            episode_won=won[e],
            episode_reward=sum(rewards[e]),
            step_credit=credits[2 * e + t],
        )
        for e in range(2)
        for t in range(2)
    ]


def test_trainer_rows_carry_the_step_credit_into_the_oracle():
    from agentenvs.train.rl import RLConfig
    from agentenvs.train.rl.batch import compute_advantages

    config = RLConfig(algo="oracle")
    assert config.spec.estimator == "oracle"
    assert config.estimator_settings() == {"step_weight": 1.0, "credit_scale": "given"}
    rows = step_rows([1.0, 2.0, 0.0, -3.0])
    metrics = compute_advantages(rows, "oracle", config.estimator_settings())
    expected = [1 / R2 + 1.0, 1 / R2 + 2.0, -1 / R2, -1 / R2 - 3.0]
    for row, value in zip(rows, expected, strict=True):
        assert row.advantages.tolist() == pytest.approx([value] * 3, abs=1e-5)
    assert metrics["adv/step_credit_abs_mean"] == pytest.approx(6 / 4)


def test_a_step_without_credit_under_the_oracle_is_a_clear_error():
    from agentenvs.train.rl.batch import compute_advantages

    rows = step_rows([1.0, None, 0.0, -3.0])
    with pytest.raises(ValueError, match=r"episode g/0 step 1 \(action 'a'\) has no"):
        compute_advantages(rows, "oracle", {})
    # the other estimators do not read it
    compute_advantages(rows, "grpo", {})


def test_the_trainer_passes_outcomes_to_outcome_gated_ptgpo():
    from agentenvs.train.rl.batch import compute_advantages

    rows = step_rows([None] * 4, won=(False, False))  # both lost: the roots have no outcome spread
    metrics = compute_advantages(rows, "ptgpo", {"root_spread": "outcome_gated"})
    assert metrics["adv/root_outcome_flat_frac"] == 1.0
    assert metrics["adv/step_credit_abs_mean"] == 0.0


def test_step_credit_of_a_step_record():
    from agentenvs.agents.trajectory import StepRecord
    from agentenvs.train.rl.batch import _step_credit

    def record(action, info):
        return StepRecord("s", action, "o", 0.0, action is not None, info=info)

    assert _step_credit(record("up", {"step_credit": -3})) == -3.0
    assert _step_credit(record("up", {})) is None
    # not stepped: a turn spent with no progress, never cheaper than a wasted action
    assert _step_credit(record(None, {"format_error": "no action"})) == -1.0
