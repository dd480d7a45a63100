"""Policy losses: aggregation, clipped surrogate with dual clip, rollout correction, DAPO
helpers, and Prefix-GRPO's objectives, prefix advantages, gathering and padding offsets."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from agentenvs.train.losses import (  # noqa: E402
    PolicyLossConfig,
    RolloutCorrectionConfig,
    agg_denominator,
    agg_loss,
    dynamic_sampling_mask,
    overlong_penalty,
    policy_loss,
    rollout_correction,
)
from agentenvs.train.prefix_loss import (  # noqa: E402
    PrefixBatch,
    PrefixConfig,
    PrefixSignals,
    demo_advantage,
    family_lift,
    first_token_offsets,
    gather_prefix_log_probs,
    prefix_advantages,
    prefix_grpo_loss,
    raw_query_mean_reward,
    sequence_log_probs,
)

# ------------------------------------------------------------------------------ agg_loss


def test_agg_loss_modes_hand_computed():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0], [7.0, 7.0, 7.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0]])  # the last row has no token
    assert agg_loss(loss, mask, "token-mean").item() == pytest.approx(10 / 4)
    assert agg_loss(loss, mask, "seq-mean-token-mean").item() == pytest.approx((2 + 4) / 2)
    assert agg_loss(loss, mask, "seq-mean-token-sum").item() == pytest.approx((6 + 4) / 2)
    empty = torch.zeros(2, 3)
    assert agg_loss(loss[:2], empty, "token-mean").item() == 0.0
    with pytest.raises(ValueError, match="choose from"):
        agg_loss(loss, mask, "token-sum")


def test_seq_mean_token_sum_norm_divides_by_the_horizon_or_the_given_constant():
    # verl 0.9.1 core_algos.agg_loss on this matrix: seq-mean-token-sum / loss_mask.shape[-1]
    # by default, / loss_scale_factor when given (Dr.GRPO's generation budget)
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0], [7.0, 7.0, 7.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0]])
    mode = "seq-mean-token-sum-norm"
    assert agg_loss(loss, mask, mode).item() == pytest.approx((6 + 4) / 2 / 3)
    assert agg_loss(loss, mask, mode, scale_factor=8).item() == pytest.approx((6 + 4) / 2 / 8)
    assert agg_loss(loss, mask, mode, denominator=4, scale_factor=8).item() == pytest.approx(
        (6 + 4) / 4 / 8
    )
    assert agg_denominator(mask, mode) == 2.0
    # the constant only applies to this mode
    assert agg_loss(loss, mask, "seq-mean-token-sum", scale_factor=8).item() == pytest.approx(5)
    with pytest.raises(ValueError, match="scale_factor"):
        agg_loss(loss, mask, mode, scale_factor=0)
    with pytest.raises(ValueError, match="loss_scale_factor"):
        PolicyLossConfig(agg_mode=mode, loss_scale_factor=-1)


# ------------------------------------------------------------------------------ clipped surrogate


def surrogate(ratios, advantages, config=None):
    config = PolicyLossConfig() if config is None else config
    log_prob = torch.log(torch.tensor([ratios], dtype=torch.float64)).requires_grad_(True)
    adv = torch.tensor([advantages], dtype=torch.float64)
    mask = torch.ones_like(adv)
    loss, metrics = policy_loss(log_prob, torch.zeros_like(adv), adv, mask, config)
    # sum of per-token losses (token-mean times the count) and d(loss_sum)/d(log_prob)
    (loss * adv.numel()).backward()
    return loss.item() * adv.numel(), log_prob.grad[0].tolist(), metrics


def test_clipped_surrogate_hand_computed():
    total, grads, metrics = surrogate([1.0, math.exp(-0.5), math.exp(-1.0)], [1.0, -1.0, -1.0])
    assert total == pytest.approx(-1.0 + 0.8 + 0.8)  # two negative-A tokens clipped at 0.8
    assert grads == pytest.approx([-1.0, 0.0, 0.0])
    assert metrics["actor/clipfrac"] == pytest.approx(2 / 3)
    assert metrics["actor/kl"] == pytest.approx(0.5)  # mean(old - new)
    assert metrics["actor/ratio_min"] == pytest.approx(math.exp(-1.0))


@pytest.mark.parametrize(
    "ratio, adv, loss, grad, clipped, dual",
    [
        (1.2, 1.0, -1.2, -1.2, False, False),  # exactly at 1 + clip_high: still unclipped
        (1.3, 1.0, -1.2, 0.0, True, False),  # above: clipped, no gradient
        (0.5, 1.0, -0.5, -0.5, False, False),  # A > 0, ratio low: pessimistic unclipped branch
        (0.8, -1.0, 0.8, 0.8, False, False),  # exactly at 1 - clip_low
        (0.7, -1.0, 0.8, 0.0, True, False),  # below: clipped at 0.8
        (1.5, -1.0, 1.5, 1.5, False, False),  # A < 0, ratio high: unclipped, grows with ratio
        (2.99, -1.0, 2.99, 2.99, False, False),  # just below the dual clip c = 3
        (3.01, -1.0, 3.0, 0.0, False, True),  # just above: capped at -A * c
        (4.0, -2.0, 6.0, 0.0, False, True),  # beyond c: capped at -A * c, no gradient
    ],
)
def test_clip_and_dual_clip_boundaries(ratio, adv, loss, grad, clipped, dual):
    total, grads, metrics = surrogate([ratio], [adv])
    assert total == pytest.approx(loss)
    assert grads[0] == pytest.approx(grad)
    assert metrics["actor/clipfrac"] == float(clipped)
    assert metrics["actor/clipfrac_lower"] == float(dual)


def test_clip_higher_and_no_dual_clip():
    dapo = PolicyLossConfig.dapo()
    assert (dapo.clip_low, dapo.clip_high) == (0.2, 0.28)
    assert surrogate([1.25], [1.0], dapo)[0] == pytest.approx(-1.25)  # inside 1.28
    assert surrogate([1.25], [1.0])[0] == pytest.approx(-1.2)  # clipped at 1.2
    no_dual = PolicyLossConfig(dual_clip=None)
    assert surrogate([4.0], [-2.0], no_dual)[0] == pytest.approx(8.0)
    with pytest.raises(ValueError, match="dual_clip"):
        PolicyLossConfig(dual_clip=1.0)


def test_policy_equal_to_old_gives_ratio_one_and_zero_kl():
    log_prob = torch.randn(3, 5, generator=torch.Generator().manual_seed(0))
    adv = torch.randn(3, 5, generator=torch.Generator().manual_seed(1))
    _, metrics = policy_loss(log_prob, log_prob.clone(), adv, torch.ones(3, 5), PolicyLossConfig())
    assert metrics["actor/ratio_mean"] == 1.0 and metrics["actor/kl"] == 0.0
    assert metrics["actor/approx_kl"] == 0.0 and metrics["actor/clipfrac"] == 0.0


# ------------------------------------------------------------------------------ rollout correction

OLD = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, 5.0]])
ROLLOUT = torch.tensor([[-0.5, -1.0, 1.0], [-1.0, -1.0, -9.0]])  # log w: (.5, 1, -1), (1, 1, pad)
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])


def test_token_tis_truncates():
    c = rollout_correction(OLD, ROLLOUT, MASK, RolloutCorrectionConfig("tis", "token", 2.0))
    e = math.e
    assert c.weights.tolist()[0] == pytest.approx([math.exp(0.5), 2.0, 1 / e])
    assert c.weights.tolist()[1] == pytest.approx([2.0, 2.0, 0.0])  # padding gets 0
    assert torch.equal(c.mask, MASK)
    assert c.metrics["rollout/truncated_frac"] == pytest.approx(3 / 5)


def test_token_mis_masks_outside_the_thresholds():
    c = rollout_correction(OLD, ROLLOUT, MASK, RolloutCorrectionConfig("mis", "token", 2.0))
    assert c.mask.tolist() == [[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]  # e > 2 and 1/e < 1/2 rejected
    assert c.weights.tolist()[0] == pytest.approx([math.exp(0.5), 0.0, 0.0])
    assert c.metrics["rollout/rejected_frac"] == pytest.approx(4 / 5)


def test_sequence_level_weights_are_products_over_valid_tokens():
    tis = rollout_correction(OLD, ROLLOUT, MASK, RolloutCorrectionConfig("tis", "sequence", 2.0))
    assert tis.weights.tolist()[0] == pytest.approx([math.exp(0.5)] * 3)  # exp(.5 + 1 - 1)
    assert tis.weights.tolist()[1] == pytest.approx([2.0, 2.0, 0.0])  # exp(2) truncated
    mis = rollout_correction(OLD, ROLLOUT, MASK, RolloutCorrectionConfig.grpo_mis(threshold=2.0))
    assert mis.mask.tolist() == [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]  # whole second row rejected
    assert mis.metrics["rollout/rejected_seq_frac"] == 0.5
    lower = RolloutCorrectionConfig("mis", "sequence", 2.0, threshold_lower=0.0)
    assert lower.lower == 0.0 and RolloutCorrectionConfig.grpo_mis().lower == 0.5


def test_policy_loss_applies_weights_and_drops_rejected_tokens():
    correction = rollout_correction(OLD, ROLLOUT, MASK, RolloutCorrectionConfig("mis", "token"))
    adv = torch.ones(2, 3)
    loss, _ = policy_loss(OLD, OLD, adv, MASK, PolicyLossConfig(), correction=correction)
    # one kept token (weight e^0.5, loss -1): token-mean over kept tokens only
    assert loss.item() == pytest.approx(-math.exp(0.5))


def test_rollout_correction_config_validation():
    with pytest.raises(ValueError, match="MIS setting"):
        RolloutCorrectionConfig("tis", threshold_lower=0.5)
    with pytest.raises(ValueError, match="threshold must be > 1"):
        RolloutCorrectionConfig("mis", threshold=1.0)
    with pytest.raises(ValueError, match="level"):
        RolloutCorrectionConfig("mis", "turn")


# ------------------------------------------------------------------------------ DAPO helpers


def test_dynamic_sampling_drops_groups_with_equal_rewards():
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.5, 0.5])
    keep, metrics = dynamic_sampling_mask(rewards, list("aabbccdd"))
    assert keep.tolist() == [False, False, True, True, False, False, False, False]
    assert metrics == {"dapo/kept_group_frac": 0.25, "dapo/kept_row_frac": 0.25}


def test_overlong_penalty_is_linear_in_the_buffer():
    lengths = torch.tensor([10, 16, 17, 18, 20, 25])
    got = overlong_penalty(lengths, max_length=20, buffer_length=4)
    assert got.tolist() == pytest.approx([0.0, 0.0, -0.25, -0.5, -1.0, -1.0])
    half = overlong_penalty(lengths, max_length=20, buffer_length=4, penalty_factor=0.5)
    assert half.tolist() == pytest.approx([0.0, 0.0, -0.125, -0.25, -0.5, -0.5])
    with pytest.raises(ValueError, match="buffer_length"):
        overlong_penalty(lengths, max_length=20, buffer_length=0)


# ------------------------------------------------------------------------------ prefix advantages

CONT_ADV = torch.tensor([[1.0, 1.0, 9.0], [-0.5, -1.5, 0.0], [3.0, 3.0, 3.0]])
CONT_MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])  # means 1, -1, 0
SIGNALS = PrefixSignals(
    success=torch.tensor([False, True, True]),
    lift=torch.tensor([0.5, -0.2, 2.0]),
    demo=torch.tensor([False, False, True]),
    demo_advantage=torch.tensor([0.0, 0.0, 0.7]),
)


@pytest.mark.parametrize(
    "settings, expected",
    [
        ({}, [1.0, 1.0, 0.0]),  # cont_abs, the default
        ({"advantage_mode": "constant"}, [1.0, 1.0, 1.0]),
        ({"advantage_mode": "constant", "constant": 0.5}, [0.5, 0.5, 0.5]),
        ({"advantage_mode": "cont_pos"}, [1.0, 0.0, 0.0]),
        ({"advantage_mode": "success"}, [0.0, 1.0, 1.0]),
        ({"advantage_mode": "family_lift"}, [1.5, 1.0, 1.0]),  # |a| + max(clamp(lift), 0)
        ({"advantage_mode": "family_lift", "lift_weight": 2.0, "lift_clip": 0.4}, [1.8, 1.0, 0.8]),
        ({"advantage_mode": "full_demo"}, [1.0, 1.0, 0.7]),
    ],
)
def test_prefix_advantage_modes(settings, expected):
    got = prefix_advantages(CONT_ADV, CONT_MASK, PrefixConfig(**settings), SIGNALS)
    assert got.tolist() == pytest.approx(expected)


def test_prefix_config_and_signal_errors():
    with pytest.raises(ValueError, match="needs PrefixSignals"):
        prefix_advantages(CONT_ADV, CONT_MASK, PrefixConfig(advantage_mode="success"))
    with pytest.raises(ValueError, match="Did you mean 'cont_abs'"):
        PrefixConfig(advantage_mode="cont_mean_abs")
    with pytest.raises(ValueError, match="only read by"):
        PrefixConfig(constant=2.0)
    with pytest.raises(ValueError, match="joint objective"):
        PrefixConfig(objective="joint", weight=0.5)


def test_family_lift_and_demo_advantage_hand_computed():
    rewards = torch.tensor([0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0])
    family = ["f1"] * 6 + ["f2"] * 4
    query = ["raw", "raw", "q1", "q1", "q2", "q2", "raw", "raw", "q3", "q3"]
    raw = [q == "raw" for q in query]
    assert raw_query_mean_reward(rewards, family, raw).tolist() == [0.5] * 6 + [0.0] * 4
    lift = family_lift(rewards, query, family, raw)
    assert lift.tolist() == pytest.approx([0, 0, 0.5, 0.5, -0.5, -0.5, 0, 0, 0.5, 0.5])
    assert demo_advantage([1.0, 0.0, 1.0], [0.5, 0.5, -1.0]).tolist() == [0.5, 0.0, 1.0]
    with pytest.raises(ValueError, match="no raw"):
        raw_query_mean_reward(rewards[:2], ["f1", "f2"], [True, False])


# ------------------------------------------------------------------------------ prefix objectives


def small_prefix_case():
    """One row: continuation ratio 1 with A = (1, 1); prefix ratio 1.5 on token 0 (token 1
    masked out), A_pre = 0.5."""
    cont_lp = torch.zeros(1, 2, requires_grad=True)
    prefix = PrefixBatch(
        span_start=torch.tensor([3]),
        span_end=torch.tensor([5]),
        mask=torch.tensor([[1.0, 0.0]]),
        old_log_probs=torch.tensor([[-1.0, -2.0]]),
    )
    prefix_lp = torch.tensor([[-1.0 + math.log(1.5), 0.0]], requires_grad=True)
    return dict(
        log_prob=cont_lp,
        old_log_prob=torch.zeros(1, 2),
        advantages=torch.ones(1, 2),
        response_mask=torch.ones(1, 2),
        prefix_log_prob=prefix_lp,
        prefix=prefix,
        prefix_advantage=torch.tensor([0.5]),
        policy=PolicyLossConfig(),
    )


def test_split_objective_hand_computed():
    case = small_prefix_case()
    loss, metrics = prefix_grpo_loss(**case, config=PrefixConfig(weight=0.5))
    # L_cont = -1; L_pre = -0.5 * clip(1.5, 0.8, 1.2) = -0.6; L = -1 + 0.5 * -0.6
    assert loss.item() == pytest.approx(-1.3)
    assert metrics["prefix/pg_loss"] == pytest.approx(-0.6)
    assert metrics["prefix/clipfrac"] == 1.0
    assert metrics["prefix/kl"] == pytest.approx(-math.log(1.5))
    assert metrics["prefix/loss_share"] == pytest.approx(0.3 / 1.3)
    assert metrics["prefix/token_frac"] == pytest.approx(1 / 3)
    loss.backward()
    assert case["prefix_log_prob"].grad.tolist() == [[0.0, 0.0]]  # clipped, and masked
    wider = prefix_grpo_loss(**small_prefix_case(), config=PrefixConfig(clip_high=0.5))[0]
    assert wider.item() == pytest.approx(-1.0 - 0.75)  # prefix-only clip 0.5: ratio kept


def test_joint_objective_hand_computed():
    case = small_prefix_case()
    loss, metrics = prefix_grpo_loss(**case, config=PrefixConfig(objective="joint"))
    # one token-mean over 3 tokens: (-0.6 - 1 - 1) / 3
    assert loss.item() == pytest.approx(-2.6 / 3)
    assert metrics["prefix/pg_loss"] == pytest.approx(-0.2)
    assert metrics["prefix/loss_share"] == pytest.approx(0.2 / (2.6 / 3))
    seq = dict(case, policy=PolicyLossConfig(agg_mode="seq-mean-token-sum"))
    assert prefix_grpo_loss(**seq, config=PrefixConfig(objective="joint"))[0].item() == (
        pytest.approx(-2.6)
    )


def test_batch_without_prefix_tokens_adds_nothing():
    prefix = PrefixBatch.from_sidecars([None, None])
    token_lp = torch.zeros(2, 6, requires_grad=True)
    cont_lp = torch.zeros(2, 3, requires_grad=True)
    for objective in ("split", "joint"):
        loss, metrics = prefix_grpo_loss(
            log_prob=cont_lp,
            old_log_prob=torch.zeros(2, 3),
            advantages=torch.ones(2, 3),
            response_mask=torch.ones(2, 3),
            prefix_log_prob=gather_prefix_log_probs(token_lp, prefix, torch.zeros(2).long()),
            prefix=prefix,
            prefix_advantage=torch.zeros(2),
            policy=PolicyLossConfig(),
            config=PrefixConfig(objective),
        )
        loss.backward()
        assert loss.item() == -1.0
        assert metrics["prefix/token_frac"] == 0.0 and metrics["prefix/loss_share"] == 0.0


def test_prefix_batch_from_sidecars_and_validation():
    sidecars = [
        {
            "assistant_prefix_span": {"start": 2, "end": 5},
            "prefix_mask": [1, 0, 1],
            "assistant_prefix_old_log_probs": [-0.1, -0.2, -0.3],
            "prefix_token_count": 2,
        },
        None,
    ]
    batch = PrefixBatch.from_sidecars(sidecars)
    assert batch.mask.tolist() == [[1.0, 0.0, 1.0], [0.0, 0.0, 0.0]]
    assert batch.span_end.tolist() == [5, 0]
    with pytest.raises(ValueError, match="prefix_token_count"):
        PrefixBatch.from_sidecars([dict(sidecars[0], prefix_token_count=3)])
    with pytest.raises(ValueError, match="end - start"):
        PrefixBatch.from_sidecars([dict(sidecars[0], prefix_mask=[1, 1])])
    with pytest.raises(ValueError, match="past the end"):
        PrefixBatch(torch.tensor([0]), torch.tensor([1]), torch.ones(1, 2), torch.zeros(1, 2))


# ------------------------------------------------------------------------------ gathering, padding

VOCAB = 11


class Bigram:
    """A tiny causal LM: the logits of the next token depend on the current token only."""

    def __init__(self, seed: int):
        self.table = torch.randn(VOCAB, VOCAB, generator=torch.Generator().manual_seed(seed))

    def log_probs(self, input_ids: torch.Tensor) -> torch.Tensor:
        return sequence_log_probs(self.table[input_ids], input_ids)


def padded_prefix_batch(sft: Bigram):
    """Two canonical prompts of different lengths with prefix spans, left-padded to one width
    and followed by right-padded responses; sidecars computed on the unpadded prompts."""
    gen = torch.Generator().manual_seed(7)
    prompts = [
        torch.randint(1, VOCAB, (12,), generator=gen),
        torch.randint(1, VOCAB, (7,), generator=gen),
    ]
    responses = [
        torch.randint(1, VOCAB, (4,), generator=gen),
        torch.randint(1, VOCAB, (2,), generator=gen),
    ]
    spans, masks = [(3, 9), (2, 5)], [[1, 1, 0, 1, 1, 1], [1, 0, 1]]
    sidecars = []
    for prompt, (start, end), mask in zip(prompts, spans, masks, strict=True):
        old = sft.log_probs(prompt[None])[0, start:end]
        sidecars.append(
            {
                "assistant_prefix_span": {"start": start, "end": end},
                "prefix_mask": mask,
                "assistant_prefix_old_log_probs": old.tolist(),
            }
        )
    width_p, width_r = max(len(p) for p in prompts), max(len(r) for r in responses)
    input_ids = torch.zeros(2, width_p + width_r, dtype=torch.long)  # pad id 0
    attention = torch.zeros_like(input_ids)
    response_mask = torch.zeros(2, width_r)
    for row, (prompt, response) in enumerate(zip(prompts, responses, strict=True)):
        input_ids[row, width_p - len(prompt) : width_p] = prompt
        input_ids[row, width_p : width_p + len(response)] = response
        attention[row, width_p - len(prompt) : width_p + len(response)] = 1
        response_mask[row, : len(response)] = 1
    return input_ids, attention, width_p, response_mask, PrefixBatch.from_sidecars(sidecars)


def test_first_token_offsets_and_sequence_log_probs():
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1], [1, 1, 0, 0]])
    assert first_token_offsets(mask).tolist() == [2, 0, 0]
    with pytest.raises(ValueError, match="no real token"):
        first_token_offsets(torch.tensor([[0, 0]]))
    logits = torch.randn(1, 3, 4, generator=torch.Generator().manual_seed(0))
    ids = torch.tensor([[1, 3, 2]])
    expected = [0.0] + [torch.log_softmax(logits[0, s - 1], -1)[ids[0, s]].item() for s in (1, 2)]
    assert sequence_log_probs(logits, ids)[0].tolist() == pytest.approx(expected)


def test_padding_offsets_gather_the_sidecar_tokens():
    sft = Bigram(seed=1)
    input_ids, attention, width_p, _, prefix = padded_prefix_batch(sft)
    offsets = first_token_offsets(attention[:, :width_p])
    assert offsets.tolist() == [0, 5]
    gathered = gather_prefix_log_probs(sft.log_probs(input_ids), prefix, offsets)
    assert torch.allclose(gathered, prefix.old_log_probs, atol=1e-6)
    unshifted = gather_prefix_log_probs(sft.log_probs(input_ids), prefix, torch.zeros(2).long())
    assert not torch.allclose(unshifted[1], prefix.old_log_probs[1], atol=1e-3)
    with pytest.raises(ValueError, match="outside positions"):
        gather_prefix_log_probs(sft.log_probs(input_ids), prefix, torch.tensor([0, 20]))


@pytest.mark.parametrize("objective", ["split", "joint"])
def test_prefix_loss_with_policy_equal_to_sft_has_ratio_one_and_zero_kl(objective):
    sft = Bigram(seed=1)
    input_ids, attention, width_p, response_mask, prefix = padded_prefix_batch(sft)
    policy_table = sft.table.clone().requires_grad_(True)
    token_lp = sequence_log_probs(policy_table[input_ids], input_ids)
    offsets = first_token_offsets(attention[:, :width_p])
    cont_lp = token_lp[:, width_p:]
    adv = torch.tensor([[1.0] * 4, [-1.0] * 4]) * response_mask
    pre_adv = prefix_advantages(adv, response_mask, PrefixConfig())
    loss, metrics = prefix_grpo_loss(
        log_prob=cont_lp,
        old_log_prob=cont_lp.detach(),
        advantages=adv,
        response_mask=response_mask,
        prefix_log_prob=gather_prefix_log_probs(token_lp, prefix, offsets),
        prefix=prefix,
        prefix_advantage=pre_adv,
        policy=PolicyLossConfig(),
        config=PrefixConfig(objective),
    )
    assert abs(metrics["prefix/kl"]) < 1e-6
    for key in ("prefix/ratio_mean", "prefix/ratio_min", "prefix/ratio_max"):
        assert metrics[key] == pytest.approx(1.0, abs=1e-6)
    assert metrics["prefix/clipfrac"] == 0.0 and metrics["actor/kl"] == 0.0
    assert metrics["prefix/token_count"] == 7.0
    loss.backward()
    assert policy_table.grad.abs().sum() > 0
    # The reference code's bug (no padding offset) reads the wrong tokens: KL is not 0.
    wrong = gather_prefix_log_probs(token_lp, prefix, torch.zeros(2, dtype=torch.long))
    _, bad = prefix_grpo_loss(
        log_prob=cont_lp,
        old_log_prob=cont_lp.detach(),
        advantages=adv,
        response_mask=response_mask,
        prefix_log_prob=wrong,
        prefix=prefix,
        prefix_advantage=pre_adv,
        policy=PolicyLossConfig(),
        config=PrefixConfig(objective),
    )
    assert abs(bad["prefix/kl"]) > 1e-3
