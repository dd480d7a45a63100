"""Short prefills on CPU in bfloat16 (``prefill_attention="bmm"``): each row's attention over its
own positions with two bmm products (cpu_attention.prefill_rows), rows of similar lengths packed
into one forward pass (prefill.packing_groups, kv_cache.packed_cache): log-probs close to a
teacher-forced pass, a row's result the same bit for bit alone or packed, cached turns as fresh
ones."""

from __future__ import annotations

import pytest
import torch

from agents.backends import cpu_attention, prefill
from agents.backends.cpu_attention import _rows_attention
from agents.backends.kv_cache import writes_in_place
from agents.backends.prefill import aligned_width, packing_groups
from agents.backends.transformers_backend import TransformersPolicy
from agents.policy import SamplingParams

from .conftest import CONVERSATIONS, SYSTEM, logprob_gap, teacher_forced_diff

GREEDY = SamplingParams(temperature=0, max_new_tokens=12)
BMM = {"device": "cpu", "dtype": "bfloat16", "decode_attention": "bmm", "prefill_attention": "bmm"}
needs_buffers = pytest.mark.skipif(not writes_in_place(), reason="needs transformers 5 caches")


def test_packing_groups_bound_the_padding() -> None:
    # in order of length: 22, 25, 29, 32 (4 x 32 = 128 <= 1.25 x 108), then 56 alone
    # (5 x 56 > 1.25 x 164), then 114, 187, 199 (3 x 199 = 597 <= 1.25 x 500)
    assert packing_groups([32, 114, 56, 25, 29, 22, 187, 199]) == [[5, 3, 4, 0], [2], [1, 6, 7]]
    assert packing_groups([45, 45, 45]) == [[0, 1, 2]]
    assert packing_groups([10, 100]) == [[0], [1]]
    assert packing_groups([3, 3, 4], max_padding=0.0) == [[0, 1], [2]]
    assert packing_groups([]) == []


def test_rows_end_at_a_multiple_of_64_positions() -> None:
    assert [aligned_width(n) for n in (1, 63, 64, 65, 1191)] == [64, 64, 64, 128, 1216]


def test_rows_attention_reads_each_rows_own_positions() -> None:
    """Against float32 SDPA over each row's block alone (causal among its new tokens): equal
    within bfloat16 rounding; the padding queries' outputs are zero."""
    torch.manual_seed(0)
    kv_heads, groups, dim, length = 2, 3, 16, 20
    keys = torch.randn(3, kv_heads, length, dim).bfloat16()
    values = torch.randn(3, kv_heads, length, dim).bfloat16()
    query = torch.randn(2, kv_heads * groups, 5, dim).bfloat16()
    rows = [(2, 8, 20, 5), (0, 3, 15, 2)]  # query row 0: key row 2, [8, 20); row 1: row 0, [3, 15)
    out = _rows_attention(query, keys, values, rows, dim**-0.5)
    assert out.shape == (2, 5, kv_heads * groups, dim)
    assert out[1, :3].abs().max() == 0  # row 1's first 3 queries are padding
    for row, (key_row, start, stop, new) in enumerate(rows):
        k = keys[key_row, :, start:stop].float().repeat_interleave(groups, dim=0)
        v = values[key_row, :, start:stop].float().repeat_interleave(groups, dim=0)
        q = query[row, :, 5 - new :].float()
        span = stop - start
        visible = torch.ones(new, span, dtype=torch.bool).tril_(span - new)
        want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=visible)
        got = out[row, 5 - new :].transpose(0, 1).float()
        assert (got - want).abs().max() < 0.05


@needs_buffers
def test_packed_prefill_keeps_rows_log_probs_and_turns(tiny_model_dir) -> None:
    policy = TransformersPolicy(str(tiny_model_dir), **BMM)
    meta = policy.run_metadata()
    assert (meta["prefill_attention"], meta["decode_attention"]) == ("bmm", "bmm")
    sampled = SamplingParams(max_new_tokens=12, seed=3)
    got = policy.generate(CONVERSATIONS, sampled)
    assert policy.packed_rows > 0  # the rows past the shared system prompt ran packed
    assert teacher_forced_diff(policy, CONVERSATIONS, got) < 0.05
    batched = policy.generate(CONVERSATIONS, GREEDY)
    for i, conversation in enumerate(CONVERSATIONS):
        alone = policy.generate([conversation], GREEDY)[0]
        assert (alone.token_ids, alone.logprobs) == (batched[i].token_ids, batched[i].logprobs)
    sdpa = TransformersPolicy(str(tiny_model_dir), device="cpu", dtype="bfloat16")
    reference = sdpa.generate(CONVERSATIONS, GREEDY)
    assert logprob_gap(reference, batched) < 0.05
    # later turns: every row past its cached prefix, packed; as from scratch, and each row as alone
    keys = [f"episode-{i}" for i in range(len(CONVERSATIONS))]
    first = policy.generate(CONVERSATIONS, GREEDY, keys=keys)
    turn_2 = [
        [
            *c,
            {"role": "assistant", "content": o.text},
            {"role": "user", "content": f"Got {i} stick"},
        ]
        for i, (c, o) in enumerate(zip(CONVERSATIONS, first, strict=True))
    ]
    packed_before = policy.packed_rows
    cached = policy.generate(turn_2, GREEDY, keys=keys)
    assert policy.cache_stats.reused_tokens > 0 and policy.packed_rows > packed_before
    policy.clear_cache()
    for i, conversation in enumerate(turn_2):
        alone = policy.generate([conversation], GREEDY)[0]
        assert alone.token_ids == cached[i].token_ids
        assert (
            max(abs(a - b) for a, b in zip(alone.logprobs, cached[i].logprobs, strict=True)) < 0.05
        )


@needs_buffers
def test_long_prompts_run_in_chunks_packed_with_short_ones(tiny_model_dir, monkeypatch) -> None:
    """Prompts longer than a chunk run chunk by chunk, packed with the short ones in each round;
    every row gets what it gets alone (cut into chunks differently), bit for bit."""
    monkeypatch.setattr(cpu_attention, "MAX_PREFILL_QUERIES", 12)
    monkeypatch.setattr(prefill, "MAX_PREFILL_QUERIES", 12)
    policy = TransformersPolicy(str(tiny_model_dir), **BMM)
    long_goal = "Goal: " + " ".join(["craft oak planks from oak logs"] * 4)
    conversations = [*CONVERSATIONS, [SYSTEM, {"role": "user", "content": long_goal}]]
    new = [len(policy.prompt_ids(c)) for c in conversations]
    assert max(new) > 12  # past the shared system prompt too
    batched = policy.generate(conversations, GREEDY)
    for i, conversation in enumerate(conversations):
        alone = policy.generate([conversation], GREEDY)[0]
        assert (alone.token_ids, alone.logprobs) == (batched[i].token_ids, batched[i].logprobs)


def test_prefill_attention_option(tiny_model_dir) -> None:
    with pytest.raises(ValueError, match="prefill_attention"):
        TransformersPolicy(str(tiny_model_dir), device="cpu", prefill_attention="flash")
    bf16 = {"device": "cpu", "dtype": "bfloat16"}
    assert TransformersPolicy(str(tiny_model_dir), **bf16).run_metadata()["prefill_attention"] == (
        "sdpa"
    )  # the default
    plain = TransformersPolicy(str(tiny_model_dir), **BMM, decode="plain")
    assert plain.run_metadata()["prefill_attention"] == "sdpa"
    fp32 = TransformersPolicy(str(tiny_model_dir), **{**BMM, "dtype": "float32"})
    assert fp32.run_metadata()["prefill_attention"] == "sdpa"  # only bfloat16/float16 switch
    only_prefill = TransformersPolicy(str(tiny_model_dir), **bf16, prefill_attention="bmm")
    meta = only_prefill.run_metadata()
    assert (meta["prefill_attention"], meta["decode_attention"]) == ("bmm", "sdpa")
