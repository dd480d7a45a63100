"""No wasted passes: rows that cannot change a weight skip the old-log-prob and update passes,
an update with no such row skips its optimizer step, and nothing else changes.

The model is a tiny random Qwen3 (no tokenizer needed: rows are token ids). The loss and the
gradients of a mini-batch are compared with the skip on and off; the loss without the zero
rows at all differs exactly by the denominator ratio, which is why the skip keeps them there.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch

from agentenvs.train.distributed import DistContext
from agentenvs.train.losses import AGG_MODES, PolicyLossConfig, agg_denominator
from agentenvs.train.prefix_loss import PrefixConfig
from agentenvs.train.rl.batch import StepRow
from agentenvs.train.rl.trainer import RLTrainer
from agentenvs.train.rl.update import (
    UpdateSettings,
    _optimizer_step,
    ppo_update,
    recompute_old_log_probs,
    zero_advantage_rows,
)

transformers = pytest.importorskip("transformers")
CPU = torch.device("cpu")
VOCAB = 96


@pytest.fixture(scope="module")
def model():
    config = transformers.Qwen3Config(
        vocab_size=VOCAB,
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
    return transformers.AutoModelForCausalLM.from_config(config).float()


def make_rows(n: int, zero: set[int], *, prefix_rows: set[int] = frozenset(), seed: int = 0):
    """``n`` rows of random tokens; rows in ``zero`` get all-zero advantages, the others
    random non-zero ones; rows in ``prefix_rows`` carry a prefix sidecar over 3 prompt tokens."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(n):
        p = 4 + int(torch.randint(0, 5, (1,), generator=g))
        m = 2 + int(torch.randint(0, 5, (1,), generator=g))
        prompt = torch.randint(3, VOCAB, (p,), generator=g).tolist()
        reply = torch.randint(3, VOCAB, (m,), generator=g).tolist()
        row = StepRow(
            prompt_ids=prompt,
            response_ids=reply,
            rollout_log_probs=[-1.0] * m,
            reward=0.0,
            group_id=f"g{i % 2}",
            episode_id=f"e{i}",
            step_index=0,
            anchor="",
            action="",
            episode_won=bool(i % 3 == 0),
            episode_reward=0.0,
        )
        if i in prefix_rows:
            row.prefix = {
                "assistant_prefix_span": {"start": 1, "end": 4},
                "prefix_mask": [1, 1, 1],
                "assistant_prefix_old_log_probs": [-2.0, -3.0, -1.5],
            }
        row.advantages = (
            torch.zeros(m) if i in zero else torch.randn(m, generator=g).sign() * (0.5 + i / n)
        )
        rows.append(row)
    return rows


def settings(agg: str = "token-mean", prefix: PrefixConfig | None = None, **kw) -> UpdateSettings:
    values = dict(
        policy=PolicyLossConfig(agg_mode=agg),
        prefix=prefix,
        loss="clipped" if prefix is None else "prefix_grpo",
        correction=None,
        ppo_epochs=1,
        mini_batches=1,
        micro_batch_size=3,
        max_grad_norm=1e9,
        precision="fp32",
        seed=0,
    )
    values.update(kw)
    return UpdateSettings(**values)


def with_old_log_probs(model, rows):
    recompute_old_log_probs(model, rows, micro_batch_size=4, pad_id=0, device=CPU, precision="fp32")
    # the update's own policy differs from the old one: move the old log-probs a little
    for i, r in enumerate(rows):
        r.old_log_probs = r.old_log_probs + 0.05 * ((-1) ** i)
    return rows


def gradient_of(model, rows, part, s: UpdateSettings):
    """(metrics, {name: grad}) of one mini-batch ``part`` of ``rows`` (no optimizer step)."""
    m = copy.deepcopy(model)
    opt = torch.optim.SGD(m.parameters(), lr=0.0)
    zero = zero_advantage_rows(rows, s)
    active = [i for i in part if not zero[i]]
    metrics = _optimizer_step(
        m,
        opt,
        rows,
        part=part,
        active=active,
        settings=s,
        lift=None,
        pad_id=0,
        device=CPU,
        ctx=DistContext(),
    )
    grads = {k: p.grad.clone() for k, p in m.named_parameters() if p.grad is not None}
    return metrics, grads


PREFIX_CASES = {"none": None, "split": PrefixConfig(), "joint": PrefixConfig(objective="joint")}


@pytest.mark.parametrize("agg", AGG_MODES)
@pytest.mark.parametrize("prefix", list(PREFIX_CASES))
def test_skipping_zero_rows_keeps_the_loss_and_the_gradients(model, agg, prefix):
    config = PREFIX_CASES[prefix]
    rows = with_old_log_probs(model, make_rows(8, {1, 2, 5, 6}, prefix_rows={0, 2, 3, 6}))
    on, off = settings(agg, config), settings(agg, config, skip_zero_advantage=False)
    expected = [i in {1, 2, 5, 6} for i in range(8)]
    if agg == "seq-mean-token-sum-norm":  # divides by the micro-batch width: nothing skipped
        expected = [False] * 8
    assert zero_advantage_rows(rows, on) == expected
    part = list(range(8))
    skip_metrics, skip_grads = gradient_of(model, rows, part, on)
    full_metrics, full_grads = gradient_of(model, rows, part, off)
    for key in ("actor/total_loss", "actor/pg_loss", "actor/grad_norm"):
        assert skip_metrics[key] == pytest.approx(full_metrics[key], rel=1e-6, abs=1e-9), key
    assert skip_metrics["actor/total_loss"] != 0.0
    assert skip_grads.keys() == full_grads.keys()
    for name, grad in full_grads.items():
        torch.testing.assert_close(skip_grads[name], grad, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("agg", [m for m in AGG_MODES if m != "seq-mean-token-sum-norm"])
def test_dropping_zero_rows_instead_would_change_the_loss_by_the_denominator(model, agg):
    """Why the skip keeps the zero rows in the denominators: leaving them out of the batch
    scales the loss (and the step) by count(all) / count(kept)."""
    rows = with_old_log_probs(model, make_rows(8, {1, 4, 5}))
    kept = [i for i in range(8) if i not in {1, 4, 5}]
    full, _ = gradient_of(model, rows, list(range(8)), settings(agg))
    only, _ = gradient_of(model, rows, kept, settings(agg))

    def count(indices):
        width = max(len(rows[i].response_ids) for i in indices)
        mask = torch.zeros(len(indices), width)
        for j, i in enumerate(indices):
            mask[j, : len(rows[i].response_ids)] = 1.0
        return agg_denominator(mask, agg)

    ratio = count(kept) / count(list(range(8)))
    assert ratio < 1.0
    assert full["actor/total_loss"] == pytest.approx(only["actor/total_loss"] * ratio, rel=1e-5)


def test_a_batch_of_zero_rows_runs_no_pass_and_no_optimizer_step(model):
    m = copy.deepcopy(model)
    rows = make_rows(6, set(range(6)))
    calls = []
    hook = m.register_forward_hook(lambda *_: calls.append(1))
    opt = torch.optim.SGD(m.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0 / (1 + step))
    before = {k: v.clone() for k, v in m.state_dict().items()}
    s = settings(ppo_epochs=2, mini_batches=2)
    metrics = ppo_update(
        m, opt, sched, rows, s, iteration=0, pad_id=0, device=CPU, last_checkpoint=None
    )
    hook.remove()
    assert calls == []
    assert metrics["actor/optimizer_steps"] == 0.0 and metrics["actor/skipped_steps"] == 4.0
    assert sched.last_epoch == 4, "the lr schedule still advances once per (skipped) step"
    assert all(torch.equal(before[k], v) for k, v in m.state_dict().items())


def test_a_mixed_batch_runs_only_the_rows_with_signal(model):
    m = copy.deepcopy(model)
    rows = with_old_log_probs(model, make_rows(6, {0, 1, 2, 3}))
    seen = []
    hook = m.register_forward_hook(
        lambda mod, args, kw, out: seen.append(kw["input_ids"].shape[0]), with_kwargs=True
    )
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
    metrics = ppo_update(
        m,
        opt,
        sched,
        rows,
        settings(micro_batch_size=8),
        iteration=0,
        pad_id=0,
        device=CPU,
        last_checkpoint=None,
    )
    hook.remove()
    assert seen == [2], "one micro-batch of the two rows that carry a signal"
    assert metrics["actor/optimizer_steps"] == 1.0 and metrics["actor/skipped_steps"] == 0.0


def test_a_prefix_advantage_keeps_a_row_with_zero_continuation_advantage():
    rows = make_rows(6, set(range(6)), prefix_rows={0, 1})
    # cont_abs: |mean continuation advantage| = 0 -> nothing to train
    assert all(zero_advantage_rows(rows, settings(prefix=PrefixConfig())))
    # success: the won row with a prefix (row 0) gets prefix advantage 1; row 1 lost
    flags = zero_advantage_rows(rows, settings(prefix=PrefixConfig(advantage_mode="success")))
    assert flags == [False, True, True, True, True, True]
    constant = zero_advantage_rows(rows, settings(prefix=PrefixConfig(advantage_mode="constant")))
    assert constant == [False, False, True, True, True, True]
    assert not any(zero_advantage_rows(rows, settings(skip_zero_advantage=False)))


def test_the_old_log_prob_step_leaves_zero_rows_out(model):
    trainer = RLTrainer.__new__(RLTrainer)
    trainer.config = SimpleNamespace(micro_batch_size=4, precision="fp32")
    trainer.update_settings = settings()
    trainer.model, trainer.pad_id, trainer.device, trainer.dist = model, 0, CPU, DistContext()
    rows = make_rows(5, {0, 3})
    metrics = trainer.old_log_prob_step(rows)
    assert metrics["batch/zero_advantage_rows"] == 2.0
    assert [r.old_log_probs is None for r in rows] == [True, False, False, True, False]
    everything_zero = make_rows(3, {0, 1, 2})
    assert trainer.old_log_prob_step(everything_zero) == {"batch/zero_advantage_rows": 3.0}
