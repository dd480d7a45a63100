"""Entropy and log-probs: hand-made logits, and batched teacher forcing against a plain forward."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from agentenvs.replay.scoring import TokenScorer, entropy_from_logits, logprobs_from_logits


def _entropy_by_definition(logits: list[float]) -> float:
    z = np.asarray(logits, dtype=np.float64)
    p = np.exp(z - z.max())
    p /= p.sum()
    return float(-(p[p > 0] * np.log(p[p > 0])).sum())


def test_entropy_of_uniform_logits_is_log_vocab() -> None:
    for vocab in (2, 5, 1000):
        h = entropy_from_logits(torch.zeros(vocab))
        assert h.item() == pytest.approx(math.log(vocab), rel=1e-6)


@pytest.mark.parametrize(
    "logits",
    [[1.0, 2.0, 3.0], [0.5, -1.0, 4.0, 0.0], [10.0, 10.0, -10.0], [3.0, 3.0, 3.0, 3.0, 9.0]],
)
def test_entropy_matches_the_definition(logits: list[float]) -> None:
    h = entropy_from_logits(torch.tensor(logits)).item()
    assert h == pytest.approx(_entropy_by_definition(logits), abs=1e-6)
    # shift invariance: the formula works on unnormalised logits
    assert entropy_from_logits(torch.tensor(logits) + 123.0).item() == pytest.approx(h, abs=1e-4)


def test_entropy_of_a_peaked_distribution_is_near_zero_and_finite() -> None:
    h = entropy_from_logits(torch.tensor([[1000.0, 0.0, 0.0], [0.0, -1e4, 50.0]]))
    assert torch.isfinite(h).all()
    assert h.max().item() < 1e-6


def test_entropy_keeps_leading_axes_and_uses_float32() -> None:
    logits = torch.randn(2, 3, 7, dtype=torch.float64)
    h = entropy_from_logits(logits.to(torch.bfloat16))
    assert h.shape == (2, 3) and h.dtype == torch.float32


def test_logprobs_match_log_softmax() -> None:
    logits = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]])
    got = logprobs_from_logits(logits, torch.tensor([2, 1]))
    expected = [3.0 - math.log(math.exp(1) + math.exp(2) + math.exp(3)), -math.log(3)]
    assert got.tolist() == pytest.approx(expected, abs=1e-6)


def _reference(model, ids: list[int], positions: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Entropy and log-prob from one unpadded full forward pass (no scorer code involved)."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0].double()
    logp = torch.log_softmax(logits, dim=-1)
    ent = -(logp.exp() * logp).sum(-1)
    pos = torch.tensor(positions)
    return ent[pos - 1].numpy(), logp[pos - 1, torch.tensor(ids)[pos]].numpy()


def test_batched_scoring_equals_a_plain_forward_pass(tiny_lm) -> None:
    model, tokenizer = tiny_lm
    texts = [
        "Got 1 oak logs",
        "Think: craft it.\nAction: [[ get 2 stick ]] and more words here",
        "x",
    ]
    seqs = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    seqs[2] = seqs[2] + [5, 6]
    positions = [list(range(1, len(s))) for s in seqs]
    # a batch budget that splits the three rows into two forward passes, right-padded
    scorer = TokenScorer(
        model, pad_token_id=tokenizer.pad_token_id, batch_tokens=2 * len(seqs[1]), head_chunk=3
    )
    stats = scorer.score(seqs, positions)
    for seq, pos, stat in zip(seqs, positions, stats, strict=True):
        ent, logp = _reference(model, seq, pos)
        assert stat.positions.tolist() == pos
        np.testing.assert_allclose(stat.entropy, ent, atol=1e-4)
        np.testing.assert_allclose(stat.logprob, logp, atol=1e-4)


def test_scoring_rejects_position_zero_and_out_of_range(scorer) -> None:
    with pytest.raises(ValueError, match="position 0"):
        scorer.score([[1, 2, 3]], [[0, 1]])
    with pytest.raises(ValueError, match="position 0"):
        scorer.score([[1, 2, 3]], [[3]])
    with pytest.raises(ValueError, match="one list of positions"):
        scorer.score([[1, 2, 3]], [])
    assert scorer.score([[1, 2]], [[]])[0].entropy.shape == (0,)
