"""verl: Prefix-GRPO's objective in verl's policy-loss registry, with the teacher prefix as
response tokens; checked against our clipped surrogate branch by branch and through verl's own
ppo_loss (wrapped to pass the prefix tensors)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("verl")

from agentenvs.integrations.verl import install  # noqa: E402
from agentenvs.integrations.verl.prefix_loss import (  # noqa: E402
    LOSS_MODE,
    configure,
    prefix_grpo_policy_loss,
)
from agentenvs.train.losses import PolicyLossConfig, policy_loss  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))  # verl_helpers
B, L = 4, 9


def _inputs(seed=0):
    gen = torch.Generator().manual_seed(seed)
    old = -torch.rand(B, L, generator=gen) * 2
    new = (old + 0.3 * torch.randn(B, L, generator=gen)).requires_grad_(True)
    adv = torch.randn(B, 1, generator=gen).expand(B, L).clone()
    mask = torch.ones(B, L, dtype=torch.bool)
    mask[:, -2:] = False  # padding
    mask[:, 3] = False  # an observation between two replies
    prefix = torch.zeros(B, L, dtype=torch.bool)
    prefix[:2, :3] = True  # rows 0 and 1 start with a 3-token teacher reply
    sft = -torch.rand(B, L, generator=gen) * 2
    return old, new, adv, mask, prefix, sft


def _actor_config(**overrides):
    from verl.workers.config import FSDPActorConfig, PolicyLossConfig

    settings = dict(strategy="fsdp", ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=4)
    settings.update(rollout_n=1, clip_ratio_low=0.2, clip_ratio_high=0.28, **overrides)
    return FSDPActorConfig(policy_loss=PolicyLossConfig(loss_mode=LOSS_MODE), **settings)


def test_without_a_prefix_it_is_verls_vanilla_loss():
    from verl.trainer.ppo import core_algos

    install()
    old, new, adv, mask, _, _ = _inputs()
    config = _actor_config()
    ours, _ = core_algos.get_policy_loss_fn(LOSS_MODE)(
        old_log_prob=old,
        log_prob=new,
        advantages=adv,
        response_mask=mask,
        loss_agg_mode="token-mean",
        config=config,
    )
    theirs, _ = core_algos.get_policy_loss_fn("vanilla")(
        old_log_prob=old,
        log_prob=new,
        advantages=adv,
        response_mask=mask,
        loss_agg_mode="token-mean",
        config=config,
    )
    assert ours.item() == pytest.approx(theirs.item(), abs=1e-6)


@pytest.mark.parametrize("weight", [1.0, 0.5])
def test_split_objective_is_continuation_plus_weighted_prefix_branch(weight):
    from verl.trainer.ppo import core_algos

    install()
    configure(weight=weight, clip_low=0.1, clip_high=0.1)
    try:
        old, new, adv, mask, prefix, sft = _inputs(1)
        loss, metrics = core_algos.get_policy_loss_fn(LOSS_MODE)(
            old_log_prob=old,
            log_prob=new,
            advantages=adv,
            response_mask=mask,
            loss_agg_mode="token-mean",
            config=_actor_config(),
            prefix_mask=prefix,
            prefix_old_log_probs=sft,
        )
    finally:
        configure()
    cont = (mask & ~prefix).float()
    policy = PolicyLossConfig(clip_low=0.2, clip_high=0.28, dual_clip=3.0)
    l_cont, _ = policy_loss(new, old, adv, cont, policy)
    a_pre = ((adv * cont).sum(1) / cont.sum(1)).abs()[:, None].expand(B, L)
    pre_policy = PolicyLossConfig(clip_low=0.1, clip_high=0.1, dual_clip=3.0)
    l_pre, _ = policy_loss(new, sft, a_pre, prefix.float(), pre_policy)
    assert loss.item() == pytest.approx((l_cont + weight * l_pre).item(), abs=1e-6)
    assert "prefix/kl" in metrics
    loss.backward()
    assert new.grad[prefix].abs().sum() > 0  # the prefix tokens are trained


def test_verls_ppo_loss_passes_the_prefix_tensors():
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils import losses

    install()
    old, new, adv, mask, prefix, sft = _inputs(2)
    prompt = 3
    data = TensorDict(
        {
            "prompts": torch.ones(B, prompt, dtype=torch.long),
            "responses": torch.ones(B, L, dtype=torch.long),
            "attention_mask": torch.ones(B, prompt + L, dtype=torch.long),
            "response_mask": mask.long(),
            "old_log_probs": old,
            "advantages": adv,
            "agentenvs_prefix_mask": prefix.long(),
            "agentenvs_prefix_old_log_probs": sft,
        },
        batch_size=B,
    )
    tu.assign_non_tensor(data, dp_size=1, batch_num_tokens=None, global_batch_size=None)
    # verl's model output: log-probs flat over every sequence, shifted one to the left
    flat = torch.zeros(B * (prompt + L))
    for i in range(B):
        end = (i + 1) * (prompt + L)
        flat[end - L - 1 : end - 1] = new[i].detach()
    config = _actor_config()
    total, _ = losses.ppo_loss(config, {"log_probs": flat}, data)
    direct, _ = prefix_grpo_policy_loss(
        old, new.detach(), adv, mask, "token-mean", config, None, prefix, sft
    )
    assert total.item() == pytest.approx(direct.item(), abs=1e-6)
    del data["agentenvs_prefix_mask"]  # without the prefix keys: verl's loss, untouched
    plain, _ = losses.ppo_loss(config, {"log_probs": flat}, data)
    vanilla, _ = losses.ppo_loss.__wrapped__(config, {"log_probs": flat}, data)
    assert plain.item() == pytest.approx(vanilla.item(), abs=1e-7)
    assert plain.item() != pytest.approx(total.item(), abs=1e-4)


def test_cut_state_queries_flow_from_replay_to_the_prefix_loss(tmp_path, reply_model):
    """A replay query file -> the dataset command -> the agent loop's cut-state start (the
    teacher's replies as prefix tokens, the environment at the cut state) -> verl's
    compute_advantage puts the prefix mask in the batch -> the prefix_grpo loss trains it."""
    import numpy as np
    import pandas as pd
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from verl import DataProto
    from verl.trainer.ppo import ray_trainer
    from verl_helpers import TransformersServer, make_agent_loop

    from agentenvs.agents.registry import make_policy
    from agentenvs.agents.rollout import plan_episodes, run_rollouts
    from agentenvs.agents.trajectory import write_trajectories
    from agentenvs.integrations.verl.dataset import main
    from agentenvs.replay import CutConfig, run_cuts
    from agentenvs.replay.io import QUERY_SCHEMA, read_rows

    # agentgym/6: the expert takes three steps, so a cut at half leaves the episode open
    trajs = run_rollouts(make_policy("expert"), "TextCraft-v0", plan_episodes(["agentgym/6"], 1))
    write_trajectories(tmp_path / "expert.jsonl", trajs)
    run_cuts(
        [tmp_path / "expert.jsonl"],
        tmp_path / "queries.jsonl",
        [CutConfig("fixed-ratio", ratios=(0.5,))],
        progress=False,
    )
    (query,) = [q for q in read_rows(tmp_path / "queries.jsonl", QUERY_SCHEMA) if q["prefix_turns"]]
    argv = ["TextCraft-v0", "--queries", str(tmp_path / "queries.jsonl"), "-o", str(tmp_path)]
    assert main(argv) == 0
    rows = pd.read_parquet(tmp_path / "queries.parquet").to_dict("records")
    row = next(r for r in rows if r["extra_info"]["query_id"] == query["query_id"])
    teacher = [m["content"] for m in query["messages"] if m["role"] == "assistant"]
    assert list(row["extra_info"]["prefix_replies"]) == teacher

    tokenizer = AutoTokenizer.from_pretrained(reply_model)
    model = AutoModelForCausalLM.from_pretrained(reply_model).eval()
    outs = []
    for seed in range(2):
        loop = make_agent_loop(tokenizer, TransformersServer(model, tokenizer, seed), 2048, 6)
        outs.append(loop.loop.run_until_complete(loop.run({"temperature": 1.0}, **row)))
    out = outs[0]
    spans = out.extra_fields["agentenvs_prefix_spans"]
    assert len(spans) == len(teacher)
    for (start, end), reply in zip(spans, teacher, strict=True):
        assert all(out.response_mask[start:end])
        assert tokenizer.decode(out.response_ids[start:end], skip_special_tokens=True) == reply
    # the student's first turn starts at the cut state the query recorded
    first_student = out.extra_fields["agentenvs_anchors"][0]
    assert first_student == query["cut_observation"]

    width = 2048
    mask = torch.zeros(2, width, dtype=torch.int64)
    scores = torch.zeros(2, width)
    for i, o in enumerate(outs):
        mask[i, : len(o.response_mask)] = torch.tensor(o.response_mask)
        scores[i, len(o.response_mask) - 1] = o.reward_score + i  # the group's rewards differ
    spans_col = np.empty(2, dtype=object)
    spans_col[:] = [o.extra_fields["agentenvs_prefix_spans"] for o in outs]
    data = DataProto.from_dict(
        tensors={"response_mask": mask, "token_level_rewards": scores},
        non_tensors={
            "uid": np.array(["q", "q"], dtype=object),
            "agentenvs_prefix_spans": spans_col,
        },
    )
    install()
    data = ray_trainer.compute_advantage(data, adv_estimator="grpo", gamma=1.0)
    prefix = data.batch["agentenvs_prefix_mask"]
    for i, o in enumerate(outs):
        expected = torch.zeros(width, dtype=torch.long)
        for start, end in o.extra_fields["agentenvs_prefix_spans"]:
            expected[start:end] = 1
        assert torch.equal(prefix[i], expected)
    log_prob = torch.zeros(2, width, requires_grad=True)
    loss, _ = prefix_grpo_policy_loss(
        torch.zeros(2, width),
        log_prob,
        data.batch["advantages"],
        mask.bool(),
        "token-mean",
        _actor_config(),
        None,
        prefix,
        torch.zeros(2, width),  # ratio 1 on the prefix: unclipped
    )
    loss.backward()
    assert log_prob.grad[prefix.bool()].abs().sum() > 0  # the teacher's tokens are trained
