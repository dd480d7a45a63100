"""The CPU engine's prefill in bfloat16: each row's attention over its own positions with two bmm
products (cpu.attention.rows_attention) or the compiled kernel, every row's next chunk end to
end in one forward pass (prefill._packed_passes, kv_cache.packed_cache): log-probs close to a
teacher-forced pass, a row's result the same bit for bit alone or packed, cached turns as fresh
ones."""

from __future__ import annotations

import pytest
import torch

from agentenvs.agents.backends import prefill
from agentenvs.agents.backends.cpu import attention as cpu_attention
from agentenvs.agents.backends.cpu.attention import rows_attention as _rows_attention
from agentenvs.agents.backends.cpu.engine import EngineSettings
from agentenvs.agents.backends.kv_cache import writes_in_place
from agentenvs.agents.backends.prefill import aligned_width
from agentenvs.agents.backends.transformers_backend import TransformersPolicy
from agentenvs.agents.policy import SamplingParams

from .conftest import CONVERSATIONS, SYSTEM, logprob_gap, teacher_forced_diff

GREEDY = SamplingParams(temperature=0, max_new_tokens=12)
BMM_ENGINE = EngineSettings(
    decode_attention="bmm", prefill_attention="bmm", decode_weights="model", sampler="torch"
)
BMM = {"device": "cpu", "dtype": "bfloat16", "cpu_engine": "auto", "engine": BMM_ENGINE}
needs_buffers = pytest.mark.skipif(not writes_in_place(), reason="needs transformers 5 caches")


def test_chunks_end_to_end_in_one_sequence_get_the_padded_rows_bits() -> None:
    """The same chunks as query rows of one sequence, end to end (``row``, ``end`` entries),
    or as left-padded rows: each chunk's output is the same bits."""
    torch.manual_seed(1)
    kv_heads, groups, dim, length = 2, 3, 16, 30
    keys = torch.randn(3, kv_heads, length, dim).bfloat16()
    values = torch.randn(3, kv_heads, length, dim).bfloat16()
    chunks = [(2, 8, 20, 5), (0, 3, 15, 2), (1, 0, 30, 7)]  # (key row, start, stop, new)
    padded_query = torch.randn(3, kv_heads * groups, 7, dim).bfloat16()
    padded = _rows_attention(padded_query, keys, values, chunks, dim**-0.5)
    pieces = [padded_query[r, :, 7 - new :] for r, (*_, new) in enumerate(chunks)]
    sequence = torch.cat(pieces, dim=1)[None]  # [1, heads, 14, dim]
    ends = [5, 7, 14]
    layout = [(*chunk, 0, end) for chunk, end in zip(chunks, ends, strict=True)]
    joined = _rows_attention(sequence, keys, values, layout, dim**-0.5)
    for r, ((*_, new), end) in enumerate(zip(chunks, ends, strict=True)):
        assert torch.equal(joined[0, end - new : end], padded[r, 7 - new :]), r


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
    assert not (policy.engine.kernel_prefill or policy.engine.kernel_attention)
    sampled = SamplingParams(max_new_tokens=12, seed=3)
    got = policy.generate(CONVERSATIONS, sampled)
    assert policy.engine.packed_rows > 0  # the rows past the shared system prompt ran packed
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
    packed_before = policy.engine.packed_rows
    cached = policy.generate(turn_2, GREEDY, keys=keys)
    assert policy.cache_stats.reused_tokens > 0 and policy.engine.packed_rows > packed_before
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


@pytest.fixture(scope="module")
def wide_head_model_dir(tmp_path_factory):
    """A tiny model with heads of 64, the compiled prefill kernel's size."""
    from agentenvs.agents.tiny_model import TinyModelSpec, build_tiny_model

    spec = TinyModelSpec(hidden_size=128, num_attention_heads=6, num_key_value_heads=2, head_dim=64)
    return build_tiny_model(tmp_path_factory.mktemp("wide-heads"), spec)


@needs_buffers
def test_kernel_prefill_keeps_rows_bits_alone_packed_and_cached(wide_head_model_dir) -> None:
    from agentenvs.agents.backends.cpu import kernels as cpu_kernels

    settings = EngineSettings(decode_weights="model", sampler="torch")  # the kernels' attention
    kernel = {**BMM, "engine": settings}
    policy = TransformersPolicy(str(wide_head_model_dir), **kernel)
    line = policy.run_metadata()["engine"]
    if not cpu_kernels.tiles_available():
        assert not policy.engine.kernel_prefill and "tiles" in line
        pytest.skip("no AMX tiles here: the engine falls back to the two-bmm prefill")
    assert policy.engine.kernel_prefill and "prefill attention" not in line
    got = policy.generate(CONVERSATIONS, SamplingParams(max_new_tokens=12, seed=3))
    assert teacher_forced_diff(policy, CONVERSATIONS, got) < 0.05
    batched = policy.generate(CONVERSATIONS, GREEDY)
    for i, conversation in enumerate(CONVERSATIONS):
        alone = policy.generate([conversation], GREEDY)[0]
        assert (alone.token_ids, alone.logprobs) == (batched[i].token_ids, batched[i].logprobs)
    keys = [f"episode-{i}" for i in range(len(CONVERSATIONS))]
    first = policy.generate(CONVERSATIONS, GREEDY, keys=keys)
    turn_2 = [
        [*c, {"role": "assistant", "content": o.text}, {"role": "user", "content": f"Got {i}"}]
        for i, (c, o) in enumerate(zip(CONVERSATIONS, first, strict=True))
    ]
    cached = policy.generate(turn_2, GREEDY, keys=keys)
    assert policy.cache_stats.reused_tokens > 0
    policy.clear_cache()
    for i, conversation in enumerate(turn_2):
        alone = policy.generate([conversation], GREEDY)[0]
        assert (alone.token_ids, alone.logprobs) == (cached[i].token_ids, cached[i].logprobs)
    bmm = TransformersPolicy(
        str(wide_head_model_dir),
        **{
            **kernel,
            "engine": EngineSettings(**{**settings.__dict__, "prefill_attention": "bmm"}),
        },
    )
    assert logprob_gap(bmm.generate(CONVERSATIONS, GREEDY), batched) < 0.05
