"""verl: our estimators in verl's registry, run through verl's own compute_advantage on a real
DataProto, give exactly our numbers; seq-mean-token-sum-norm agrees with verl's agg_loss."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("verl")

from agentenvs.integrations.verl import install  # noqa: E402
from agentenvs.integrations.verl.estimators import STEP_KEYS, configure  # noqa: E402
from agentenvs.train.advantages import AdvantageBatch, get_advantage_estimator  # noqa: E402
from agentenvs.train.losses import agg_loss  # noqa: E402

# two groups of episodes: (anchor, action, reward) per turn; shared anchors make step groups
GROUPS = [
    [
        [("s0", "a", 0.0), ("s1", "b", 1.0)],
        [("s0", "a", 0.0), ("s1", "c", 0.0), ("s2", "d", 0.0)],
        [("s0", "x", 0.0)],
    ],
    [
        [("t0", "a", 1.0)],
        [("t0", "b", 0.0), ("t1", "a", 0.5)],
    ],
]
TURN_TOKENS = 3  # each turn: 3 reply tokens, then 2 observation tokens (mask 0)


def _data_proto():
    from verl import DataProto

    rows = [(g, ep) for g, episodes in enumerate(GROUPS) for ep in episodes]
    width = max(len(ep) for _, ep in rows) * (TURN_TOKENS + 2)
    mask = torch.zeros(len(rows), width, dtype=torch.int64)
    spans, anchors, actions, rewards = [], [], [], []
    scores = torch.zeros(len(rows), width)
    for i, (_, ep) in enumerate(rows):
        row_spans = []
        for t in range(len(ep)):
            start = t * (TURN_TOKENS + 2)
            mask[i, start : start + TURN_TOKENS] = 1
            row_spans.append([start, start + TURN_TOKENS])
        spans.append(row_spans)
        anchors.append([s[0] for s in ep])
        actions.append([s[1] for s in ep])
        rewards.append([s[2] for s in ep])
        scores[i, row_spans[-1][1] - 1] = sum(s[2] for s in ep)

    def objects(values):
        out = np.empty(len(values), dtype=object)
        out[:] = values
        return out

    non_tensor = {"uid": np.array([f"g{g}" for g, _ in rows], dtype=object)}
    for key, values in zip(STEP_KEYS, (spans, anchors, actions, rewards), strict=True):
        non_tensor[key] = objects(values)
    batch = {"response_mask": mask, "token_level_rewards": scores, "responses": mask.clone()}
    return DataProto.from_dict(tensors=batch, non_tensors=non_tensor), rows


@pytest.mark.parametrize(
    ("name", "settings"),
    [("ptgpo", {}), ("ptgpo", {"tau_expand": 1, "max_depth": 2}), ("gigpo", {})],
)
def test_verl_compute_advantage_gives_our_numbers(name, settings):
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo import core_algos, ray_trainer

    install()
    assert core_algos.get_adv_estimator_fn(name) is not None
    configure(name, **settings)
    try:
        data, rows = _data_proto()
        gamma = 0.9
        config = AlgoConfig(adv_estimator=name, gamma=gamma)
        out = ray_trainer.compute_advantage(data, adv_estimator=name, gamma=gamma, config=config)
    finally:
        configure(name)
    est = get_advantage_estimator(name)
    ours = est(AdvantageBatch.from_groups(GROUPS), est.make_config(gamma=gamma, **settings))
    assert ours.step_advantages.abs().sum() > 0
    k = 0
    for i, (_, ep) in enumerate(rows):
        for t in range(len(ep)):
            start = t * (TURN_TOKENS + 2)
            span = out.batch["advantages"][i, start : start + TURN_TOKENS]
            assert torch.equal(span, ours.step_advantages[k].expand(TURN_TOKENS))
            assert torch.equal(out.batch["returns"][i, start], ours.returns[k])
            k += 1
    assert k == len(ours.step_advantages)
    # observation tokens (mask 0) carry no advantage
    assert torch.all(out.batch["advantages"][out.batch["response_mask"] == 0] == 0)


def test_missing_step_keys_are_a_clear_error():
    from verl.trainer.ppo import ray_trainer

    install()
    data, _ = _data_proto()
    del data.non_tensor_batch["agentenvs_anchors"]
    with pytest.raises(ValueError, match="agentenvs_anchors"):
        ray_trainer.compute_advantage(data, adv_estimator="ptgpo", gamma=1.0)


def test_other_estimators_still_run_verls_code():
    from verl.trainer.ppo import core_algos, ray_trainer

    install()
    data, _ = _data_proto()
    out = ray_trainer.compute_advantage(data, adv_estimator="grpo", gamma=1.0)
    expected, _ = core_algos.compute_grpo_outcome_advantage(
        data.batch["token_level_rewards"], data.batch["response_mask"], data.non_tensor_batch["uid"]
    )
    assert torch.equal(out.batch["advantages"], expected)


def test_seq_mean_token_sum_norm_matches_verl():
    from verl.trainer.ppo.core_algos import agg_loss as verl_agg_loss

    gen = torch.Generator().manual_seed(0)
    loss = torch.randn(5, 7, generator=gen)
    mask = (torch.rand(5, 7, generator=gen) > 0.4).long()
    mask[2] = 0  # a row without a valid token
    mode = "seq-mean-token-sum-norm"
    theirs = verl_agg_loss(loss, mask, mode)
    assert agg_loss(loss, mask, mode).item() == pytest.approx(theirs.item(), abs=1e-6)
    theirs = verl_agg_loss(loss, mask, mode, loss_scale_factor=32)
    ours = agg_loss(loss, mask, mode, scale_factor=32)
    assert ours.item() == pytest.approx(theirs.item(), abs=1e-6)
