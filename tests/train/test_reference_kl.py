"""The KL to the initial policy (``actor/kl_to_initial``): exact per token against a full
forward pass, zero against the same weights, over every row of the iteration."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch

from agentenvs.train.distributed import DistContext
from agentenvs.train.losses import PolicyLossConfig
from agentenvs.train.rl.batch import StepRow, collate
from agentenvs.train.rl.trainer import RLTrainer
from agentenvs.train.rl.update import (
    UpdateSettings,
    recompute_old_log_probs,
    reply_statistics,
    token_log_probs,
)

transformers = pytest.importorskip("transformers")
CPU = torch.device("cpu")


def make_rows(n: int, zero: set[int]) -> list[StepRow]:
    """``n`` rows of random token ids; rows in ``zero`` have all-zero advantages."""
    g = torch.Generator().manual_seed(0)
    rows = []
    for i in range(n):
        p, m = 4 + i % 3, 2 + i % 4
        row = StepRow(
            prompt_ids=torch.randint(3, 96, (p,), generator=g).tolist(),
            response_ids=torch.randint(3, 96, (m,), generator=g).tolist(),
            rollout_log_probs=[-1.0] * m,
            reward=0.0,
            group_id=f"g{i % 2}",
            episode_id=f"e{i}",
            step_index=0,
            anchor="",
            action="",
            episode_won=False,
            episode_reward=0.0,
        )
        row.advantages = torch.zeros(m) if i in zero else torch.ones(m)
        rows.append(row)
    return rows


def settings() -> UpdateSettings:
    return UpdateSettings(
        policy=PolicyLossConfig(),
        prefix=None,
        correction=None,
        ppo_epochs=1,
        mini_batches=1,
        micro_batch_size=3,
        max_grad_norm=1.0,
        precision="fp32",
        seed=0,
    )


@pytest.fixture(scope="module")
def models():
    config = transformers.Qwen3Config(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=256,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    policy = transformers.AutoModelForCausalLM.from_config(config).float().eval()
    moved = copy.deepcopy(policy)
    with torch.no_grad():
        for p in moved.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return policy, moved


def test_reply_statistics_are_token_log_probs_and_the_exact_kl(models):
    policy, initial = models
    rows = make_rows(5, set())
    batch = collate(rows, 0, CPU)
    reply, ent, kl = reply_statistics(policy, batch, initial)
    want_reply, _, want_ent = token_log_probs(policy, batch, entropy=True)
    assert torch.equal(reply, want_reply) and torch.allclose(ent, want_ent)
    # by hand, from full forward passes: sum_v p (log p - log q) at each reply position
    forward = {
        "input_ids": batch["input_ids"],
        "attention_mask": batch["attention_mask"],
        "position_ids": batch["position_ids"],
    }
    with torch.no_grad():
        log_p = torch.log_softmax(policy(**forward).logits.float(), -1)
        log_q = torch.log_softmax(initial(**forward).logits.float(), -1)
    width_p = batch["prompt_width"]
    for i, row in enumerate(rows):
        for j in range(len(row.response_ids)):
            c = width_p + j - 1  # the column that predicts reply token j
            want = float((log_p[i, c].exp() * (log_p[i, c] - log_q[i, c])).sum())
            assert float(kl[i, j]) == pytest.approx(want, rel=1e-4, abs=1e-7)
    assert float((kl * batch["response_mask"]).min()) >= -1e-7
    _, _, same = reply_statistics(policy, batch, policy)
    assert float(same.abs().max()) < 1e-5


def test_recompute_old_log_probs_reports_the_token_mean_kl(models):
    policy, initial = models
    rows = make_rows(6, set())
    metrics = recompute_old_log_probs(
        policy, rows, micro_batch_size=4, pad_id=0, device=CPU, precision="fp32", reference=initial
    )
    batch = collate(rows, 0, CPU)
    _, _, kl = reply_statistics(policy, batch, initial)
    mask = batch["response_mask"]
    assert metrics["actor/kl_to_initial"] == pytest.approx(float((kl * mask).sum() / mask.sum()))
    assert metrics["actor/kl_to_initial"] > 0
    without = recompute_old_log_probs(
        policy, rows, micro_batch_size=4, pad_id=0, device=CPU, precision="fp32"
    )
    assert "actor/kl_to_initial" not in without
    assert without["actor/entropy"] == pytest.approx(metrics["actor/entropy"])


def test_the_kl_covers_every_row_of_the_iteration(models):
    policy, initial = models
    trainer = RLTrainer.__new__(RLTrainer)
    trainer.config = SimpleNamespace(micro_batch_size=4, precision="fp32")
    trainer.update_settings = settings()
    trainer.model, trainer.pad_id, trainer.device, trainer.dist = policy, 0, CPU, DistContext()
    trainer.reference = initial
    rows = make_rows(5, {0, 3})
    metrics = trainer.old_log_prob_step(rows)
    assert metrics["batch/zero_advantage_rows"] == 2.0
    assert all(r.old_log_probs is not None for r in rows)  # the zero rows ran too
    assert metrics["actor/kl_to_initial"] > 0
