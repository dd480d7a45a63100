"""The KL to the initial policy (``actor/kl_to_initial``): exact per token against a full
forward pass, zero against the same weights, on a seeded sample of the iteration's rows."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch

from agentenvs.train.distributed import DistContext
from agentenvs.train.losses import PolicyLossConfig
from agentenvs.train.rl.batch import StepRow, collate
from agentenvs.train.rl.reference_kl import kl_sample, reference_kl
from agentenvs.train.rl.trainer import RLTrainer
from agentenvs.train.rl.update import UpdateSettings, reply_statistics, token_log_probs

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


def test_reference_kl_is_the_token_mean_over_the_rows(models):
    policy, initial = models
    rows = make_rows(6, set())
    metrics = reference_kl(
        policy, initial, rows, micro_batch_size=4, pad_id=0, device=CPU, precision="fp32"
    )
    batch = collate(rows, 0, CPU)
    _, ent, kl = reply_statistics(policy, batch, initial)
    mask = batch["response_mask"]
    assert metrics["actor/kl_to_initial"] == pytest.approx(float((kl * mask).sum() / mask.sum()))
    assert metrics["actor/entropy_sampled"] == pytest.approx(float((ent * mask).sum() / mask.sum()))
    assert metrics["actor/kl_to_initial"] > 0
    assert all(r.old_log_probs is None for r in rows)  # the rows are left as they were
    same = reference_kl(
        policy, policy, rows, micro_batch_size=4, pad_id=0, device=CPU, precision="fp32"
    )
    assert abs(same["actor/kl_to_initial"]) < 1e-6


def test_the_sample_is_seeded_uniform_and_bounded():
    rows = make_rows(10, set())
    picked = kl_sample(rows, 4, seed=7)
    assert len(picked) == 4 and picked == kl_sample(rows, 4, seed=7)
    assert [rows.index(r) for r in picked] == sorted(rows.index(r) for r in picked)
    assert picked != kl_sample(rows, 4, seed=8)
    assert kl_sample(rows, 64, seed=7) == rows  # no more rows than the sample: all of them
    state = torch.random.get_rng_state()
    kl_sample(rows, 4, seed=9)
    assert torch.equal(state, torch.random.get_rng_state())


def test_the_trainer_measures_every_row_kind_but_trains_only_those_with_signal(models):
    policy, initial = models
    trainer = RLTrainer.__new__(RLTrainer)
    trainer.config = SimpleNamespace(
        micro_batch_size=4, precision="fp32", seed=0, reference_kl_rows=64
    )
    trainer.update_settings = settings()
    trainer.model, trainer.pad_id, trainer.device, trainer.dist = policy, 0, CPU, DistContext()
    trainer.reference = initial
    rows = make_rows(5, {0, 1, 2, 3, 4})  # no row has a signal
    assert trainer.old_log_prob_step(rows) == {"batch/zero_advantage_rows": 5.0}
    metrics = trainer.reference_kl_step(rows, iteration=0)
    assert metrics["actor/kl_to_initial"] > 0
    trainer.reference = None
    assert trainer.reference_kl_step(rows, iteration=0) == {}
