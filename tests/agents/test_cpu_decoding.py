"""The CPU engine's decoding in bfloat16: 4-bit decoder weights for one-token steps
(agents/backends/cpu/int4.py) and cascade attention over the batch's shared system prompt
(kv_cache.split_shared_prefix): log-probs close to a teacher-forced pass, a row's result
independent of the batch bit for bit, the prefix cache across turns unchanged."""

from __future__ import annotations

import pytest
import torch

from agentenvs.agents.backends.cpu import int4 as cpu_int4
from agentenvs.agents.backends.cpu.engine import EngineSettings
from agentenvs.agents.backends.cpu.kernels import int_dot_path
from agentenvs.agents.backends.kv_cache import buffer_cache, split_shared_prefix, writes_in_place
from agentenvs.agents.backends.transformers_backend import TransformersPolicy
from agentenvs.agents.policy import SamplingParams

from .conftest import CONVERSATIONS, logprob_gap, teacher_forced_diff

pytestmark = pytest.mark.skipif(not cpu_int4.available(), reason="no CPU int4 kernel in torch")

GREEDY = SamplingParams(temperature=0, max_new_tokens=16)
BF16 = {"device": "cpu", "dtype": "bfloat16"}
BMM = EngineSettings(
    decode_attention="bmm", prefill_attention="bmm", decode_weights="model", sampler="torch"
)
INT4 = EngineSettings(
    decode_attention="bmm", prefill_attention="bmm", decode_weights="int4", sampler="torch"
)


@pytest.fixture(scope="module")
def q4_model_dir(tmp_path_factory):
    """The tiny model with every decoder linear weight on a Q4_1 grid (as the embedded model's
    are), saved in float32."""
    return _q4_model(tmp_path_factory)


@pytest.fixture(scope="module")
def q4_wide_model_dir(tmp_path_factory):
    """:func:`q4_model_dir` with heads of 64, so every decoder layer's output count is a
    multiple of 64 (as the embedded model's are)."""
    from agentenvs.agents.tiny_model import TinyModelSpec

    return _q4_model(tmp_path_factory, TinyModelSpec(head_dim=64))


def _q4_model(tmp_path_factory, spec=None):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentenvs.agents.tiny_model import build_tiny_model

    source = build_tiny_model(tmp_path_factory.mktemp("tiny"), spec)
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    with torch.no_grad():
        for name, module in model.named_modules():
            if isinstance(module, torch.nn.Linear) and ".layers." in f".{name}.":
                q, scales_zeros, _ = cpu_int4.quantize_groups(module.weight)
                scale = scales_zeros[..., 0].T.repeat_interleave(32, dim=1)
                zero = scales_zeros[..., 1].T.repeat_interleave(32, dim=1)
                module.weight.copy_((q.float() - 8) * scale + zero)
    out = tmp_path_factory.mktemp("tiny-q4")
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(source).save_pretrained(out)
    return out


def test_quantize_groups_recovers_a_q4_1_grid_exactly() -> None:
    d, m = 0.25, -1.5
    q = torch.tensor([list(range(16)) * 2, [15 - i for i in range(16)] * 2], dtype=torch.int32)
    weight = q.float() * d + m  # both rows hold q = 0 and q = 15: Q4_1's min/max rule
    got, scales_zeros, error = cpu_int4.quantize_groups(weight)
    assert torch.equal(got, q) and error == 0.0
    assert scales_zeros.shape == (1, 2, 2)
    assert scales_zeros[0, 0].tolist() == [d, m + 8 * d]  # (q - 8) * scale + zero
    lossy = cpu_int4.quantize_groups(torch.randn(4, 64))[2]
    assert 0.0 < lossy < 0.1  # any other weight: a lossy 4-bit copy, reported


def test_int4_kernel_multiplies_by_the_dequantized_weight() -> None:
    weight = torch.randn(48, 64)
    q, scales_zeros, _ = cpu_int4.quantize_groups(weight)
    dequantized = (q.float() - 8) * scales_zeros[..., 0].T.repeat_interleave(32, 1)
    dequantized += scales_zeros[..., 1].T.repeat_interleave(32, 1)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
    x = torch.randn(5, 64).bfloat16()
    got = torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, 32, scales_zeros.bfloat16())
    want = x.float() @ dequantized.T
    assert (got.float() - want).abs().max() < 0.05 * want.abs().max()


@pytest.mark.parametrize("shape", [(1536, 576), (576, 1536), (576, 576), (192, 576)])
def test_prefill_products_give_a_row_the_same_bits_at_any_row_count(shape) -> None:
    """The embedded model's layer shapes: a switched layer outside decoding (a prefill) gives
    each row what the row alone gets, at any row count and offset (oneDNN's GEMM on an AMX CPU
    does not for 43-575 rows: cpu_int4's module docstring)."""

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = torch.nn.ModuleList([torch.nn.Linear(shape[1], shape[0], bias=False)])

    torch.manual_seed(0)
    model = Model().to(torch.bfloat16)
    weights = cpu_int4.install(model)
    assert weights.report.layers == 1
    module = model.layers[0]

    def layer(x):
        return weights.linear(module, x, decoding=False)

    x = torch.randn(700, shape[1], dtype=torch.bfloat16)
    with torch.no_grad():
        alone = torch.cat([layer(x[i : i + 1]) for i in range(len(x))])
        for start, stop in [(0, 700), (3, 50), (17, 333), (100, 132), (5, 7), (0, 129)]:
            assert torch.equal(layer(x[start:stop]), alone[start:stop]), (start, stop)
        assert torch.equal(layer(x[None, 10:400]), alone[None, 10:400])  # [batch, tokens, dim]


def test_int4_decoding_is_exact_on_a_q4_grid_and_leaves_prefill_alone(q4_model_dir) -> None:
    plain = TransformersPolicy(str(q4_model_dir), **BF16, cpu_engine="auto", engine=BMM)
    int4 = TransformersPolicy(str(q4_model_dir), **BF16, cpu_engine="auto", engine=INT4)
    assert int4.engine.weights.report.max_relative_error < 1e-6
    assert "4-bit weights" in int4.run_metadata()["engine"]
    assert plain.engine.weights is None
    state = plain.model.state_dict()
    assert set(int4.model.state_dict()) == set(state)  # the 4-bit copies are not saved
    a = plain.generate(CONVERSATIONS, GREEDY)
    b = int4.generate(CONVERSATIONS, GREEDY)
    # the first token comes from prefill, which keeps the bfloat16 weights: bit for bit
    assert [o.logprobs[0] for o in a] == [o.logprobs[0] for o in b]
    assert teacher_forced_diff(int4, CONVERSATIONS, b) < 0.05
    for i, conversation in enumerate(CONVERSATIONS):
        alone = int4.generate([conversation], GREEDY)[0]
        assert (alone.token_ids, alone.logprobs) == (b[i].token_ids, b[i].logprobs)


def test_int4_copies_follow_changed_weights(q4_model_dir) -> None:
    policy = TransformersPolicy(str(q4_model_dir), **BF16, cpu_engine="auto", engine=INT4)
    before = policy.generate(CONVERSATIONS, GREEDY)
    with torch.no_grad():  # as an optimizer step would: in place, the version counters move
        for module in policy.engine.weights.layers:
            module.weight.mul_(-1.0)
    after = policy.generate(CONVERSATIONS, GREEDY)
    fresh = TransformersPolicy.from_model(
        policy.model, policy.tokenizer, cpu_engine="auto", engine=INT4
    )
    assert [o.logprobs for o in after] == [
        o.logprobs for o in fresh.generate(CONVERSATIONS, GREEDY)
    ]
    assert [o.logprobs for o in after] != [o.logprobs for o in before]
    # a plain policy on the same model uses neither the 4-bit copies nor bmm: it generates
    # what a plain policy on an untouched copy of the weights does, bit for bit
    plain = TransformersPolicy.from_model(policy.model, policy.tokenizer)
    assert plain.engine is None
    untouched = TransformersPolicy(str(q4_model_dir), **BF16)
    with torch.no_grad():
        for mine, theirs in zip(
            untouched.model.parameters(), policy.model.parameters(), strict=True
        ):
            mine.copy_(theirs)
    want = untouched.generate(CONVERSATIONS, GREEDY)
    got = plain.generate(CONVERSATIONS, GREEDY)
    assert [o.logprobs for o in got] == [o.logprobs for o in want]


def test_policies_sharing_a_model_keep_their_own_decoding(q4_model_dir) -> None:
    """The 4-bit copies live in the policy's engine, not on the model: a plain policy on the
    same model in between does not change the engine's results."""
    fast = TransformersPolicy(str(q4_model_dir), **BF16, cpu_engine="auto", engine=INT4)
    before = fast.generate(CONVERSATIONS, GREEDY)
    plain = TransformersPolicy.from_model(fast.model, fast.tokenizer)
    plain.generate(CONVERSATIONS, GREEDY)
    after = fast.generate(CONVERSATIONS, GREEDY)
    assert [(o.token_ids, o.logprobs) for o in after] == [(o.token_ids, o.logprobs) for o in before]
    assert fast.engine.cascade_rows == 2 * len(CONVERSATIONS)


def test_int4_applies_to_float32_models_only_with_integer_dot_products(tiny_model_dir) -> None:
    fp32 = TransformersPolicy(
        str(tiny_model_dir), device="cpu", dtype="float32", cpu_engine="auto", engine=INT4
    )
    line = fp32.run_metadata()["engine"]
    if int_dot_path() == "none":  # the kernel's plain float32 sums: slower than linear
        assert fp32.engine.weights is None and "model weights" in line
    else:
        assert fp32.engine.weights.report.compiled and "4-bit weights (compiled" in line
        assert f"{int_dot_path()} dot products" in line
    torch_kernel = TransformersPolicy(
        str(tiny_model_dir),
        device="cpu",
        dtype="float32",
        cpu_engine="auto",
        engine=EngineSettings(decode_weights="int4_torch"),
    )
    assert torch_kernel.engine.weights is None


@pytest.mark.skipif(int_dot_path() == "none", reason="no AVX2 or AVX-512 VNNI here")
@pytest.mark.skipif(not writes_in_place(), reason="needs transformers 5 buffer caches")
def test_a_float32_model_with_the_embedded_options_is_close_and_row_independent(
    q4_wide_model_dir,
) -> None:
    """On a CPU without native bfloat16 the embedded options give a float32 model: its decoding
    steps take the 4-bit copies too (float32 rows in and out), in the engine's steps with the
    compiled float32 attention and the cascade (prefill: the two-bmm attention; the prefill kernel
    is bfloat16's), close to the float32 pass, and a row's reply is the same bits alone or
    batched."""
    from agentenvs.agents.models import EMBEDDED_OPTIONS

    fp32 = {"device": "cpu", "dtype": "float32"}
    plain = TransformersPolicy(str(q4_wide_model_dir), **fp32)
    int4 = TransformersPolicy(str(q4_wide_model_dir), **{**EMBEDDED_OPTIONS, **fp32})
    line = int4.run_metadata()["engine"]
    assert int4.engine.weights.report.max_relative_error < 1e-6
    assert "4-bit weights (compiled + 8-bit head" in line
    assert int4.engine.kernel_attention and not int4.engine.kernel_prefill
    assert int4.engine.cascade and "prefill kernel is for bfloat16" in line
    batched = int4.generate(CONVERSATIONS, GREEDY)
    assert teacher_forced_diff(plain, CONVERSATIONS, batched) < 0.05
    for i, conversation in enumerate(CONVERSATIONS):
        alone = int4.generate([conversation], GREEDY)[0]
        assert (alone.token_ids, alone.logprobs) == (batched[i].token_ids, batched[i].logprobs)


@pytest.mark.skipif(not writes_in_place(), reason="needs transformers 5 buffer caches")
def test_cascade_keeps_log_probs_rows_and_turns(tiny_model_dir) -> None:
    cascade = TransformersPolicy(str(tiny_model_dir), **BF16, cpu_engine="auto", engine=BMM)
    separate = TransformersPolicy(
        str(tiny_model_dir),
        **BF16,
        cpu_engine="auto",
        engine=EngineSettings(**{**BMM.__dict__, "cascade": False}),
    )
    sampled = SamplingParams(max_new_tokens=16, seed=7)
    got = cascade.generate(CONVERSATIONS, sampled)
    assert cascade.engine.cascade_rows == len(CONVERSATIONS)
    assert teacher_forced_diff(cascade, CONVERSATIONS, got) < 0.05
    want = separate.generate(CONVERSATIONS, GREEDY)
    batched = cascade.generate(CONVERSATIONS, GREEDY)
    assert logprob_gap(want, batched) < 0.05
    for i, conversation in enumerate(CONVERSATIONS):  # the split is the system message's end
        alone = cascade.generate([conversation], GREEDY)[0]
        assert (alone.token_ids, alone.logprobs) == (batched[i].token_ids, batched[i].logprobs)
    # a second turn from the prefix cache (stored as prefix + rest) matches one from scratch
    # (same tokens; log-probs within the bmm path's bfloat16 noise, 0.008 here with or without)
    keys = [f"episode-{i}" for i in range(len(CONVERSATIONS))]
    first = cascade.generate(CONVERSATIONS, GREEDY, keys=keys)
    turn_2 = [
        [*c, {"role": "assistant", "content": o.text}, {"role": "user", "content": "Got 1 stick"}]
        for c, o in zip(CONVERSATIONS, first, strict=True)
    ]
    cached = cascade.generate(turn_2, GREEDY, keys=keys)
    assert cascade.cache_stats.reused_tokens > 0
    cascade.clear_cache()
    fresh = cascade.generate(turn_2, GREEDY)
    assert [o.token_ids for o in cached] == [o.token_ids for o in fresh]
    assert (
        max(
            abs(x - y)
            for c, f in zip(cached, fresh, strict=True)
            for x, y in zip(c.logprobs, f.logprobs, strict=True)
        )
        < 0.05
    )  # as without the cascade: bmm rounds scores to bfloat16


@pytest.mark.skipif(not writes_in_place(), reason="needs transformers 5 buffer caches")
def test_split_shared_prefix_layout() -> None:
    width, capacity, shared = 6, 9, 3
    lengths = [6, 4]  # rows right-aligned: row 1 starts at position 2
    keys = torch.zeros(2, 1, capacity, 1)
    prefix = torch.tensor([1.0, 2.0, 3.0])
    keys[0, 0, :3, 0], keys[0, 0, 3:6, 0] = prefix, torch.tensor([10.0, 11.0, 12.0])
    keys[1, 0, 2:5, 0], keys[1, 0, 5, 0] = prefix, 20.0
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1]])
    cache = buffer_cache([(keys, keys.clone())], width)
    rest, new_mask, layers = split_shared_prefix(cache, mask, shared, min_shared=1)
    assert layers[0][0][0, :, 0].tolist() == prefix.tolist()
    k = rest.layers[0]._k
    assert k.shape == (2, 1, capacity - shared, 1) and rest.layers[0]._n == width - shared
    assert k[0, 0, :, 0].tolist() == [10.0, 11.0, 12.0, 0, 0, 0]
    assert k[1, 0, :, 0].tolist() == [0, 0, 20.0, 0, 0, 0]  # row 1 keeps its start
    assert new_mask.tolist() == [[1, 1, 1], [0, 0, 1]] and sum(lengths) - 2 * shared == 4
    # a padded batch's layout (gaps inside a row): refused, although its keys would match
    gap = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 1, 1]])
    assert split_shared_prefix(buffer_cache([(keys, keys)], width), gap, shared, 1) is None
    keys[1, 0, 3, 0] = 2.5  # the rows' prefixes differ: nothing is shared
    assert split_shared_prefix(buffer_cache([(keys, keys)], width), mask, shared, 1) is None
    assert split_shared_prefix(cache, mask, shared) is None  # shorter than min_shared
