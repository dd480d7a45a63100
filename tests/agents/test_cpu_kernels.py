"""The compiled decoding attention (agents/backends/cpu/kernels.py): close to a float32 pass, a
row's output the same bits alone, batched, padded, split at a shared prefix or not, at any
thread count, on AMX tiles and on the vector path; the compiled prefill attention; the
engine's kernel attention in the backend, and its fallback without a compiler."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from agentenvs.agents.backends.cpu import attention as cpu_attention
from agentenvs.agents.backends.cpu import kernels as cpu_kernels
from agentenvs.agents.backends.cpu.engine import EngineSettings
from agentenvs.agents.backends.transformers_backend import TransformersPolicy
from agentenvs.agents.policy import SamplingParams

from .conftest import CONVERSATIONS, logprob_gap, teacher_forced_diff

pytestmark = pytest.mark.skipif(
    shutil.which("gcc") is None and shutil.which("cc") is None, reason="no C compiler"
)


def _inputs(rows, kv_heads, groups, dim, capacity, prefix, seed=0):
    g = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(shape, generator=g).to(torch.bfloat16)

    query = randn(rows, kv_heads * groups, 1, dim)
    keys, values = randn(rows, kv_heads, capacity, dim), randn(rows, kv_heads, capacity, dim)
    shared = (randn(kv_heads, prefix, dim), randn(kv_heads, prefix, dim)) if prefix else None
    return query, keys, values, shared


def _reference(query, keys, values, length, mask, prefix, scale):
    rows, heads, _, dim = query.shape
    kv_heads = keys.shape[1]
    out = []
    for row in range(rows):
        visible = mask[row].bool() if mask is not None else torch.ones(length, dtype=torch.bool)
        k = keys[row, :, :length][:, visible].float()
        v = values[row, :, :length][:, visible].float()
        if prefix is not None:
            k, v = torch.cat([prefix[0].float(), k], 1), torch.cat([prefix[1].float(), v], 1)
        q = query[row, :, 0].float().view(kv_heads, heads // kv_heads, dim)
        out.append((torch.softmax(q @ k.transpose(1, 2) * scale, -1) @ v).reshape(heads, dim))
    return torch.stack(out)[:, None]


@pytest.fixture(params=["tiles", "vector"])
def kernel_path(request):
    """Each test on the AMX tile path (where this CPU has it) and on the vector path."""
    assert cpu_kernels.load() is not None, cpu_kernels.load_error()
    if request.param == "tiles" and not cpu_kernels.tiles_available():
        pytest.skip("no AMX tiles here")
    before = cpu_kernels.set_tiles(request.param == "tiles")
    yield request.param
    cpu_kernels.set_tiles(before)


@pytest.mark.parametrize("dim,groups,prefix", [(64, 3, 40), (64, 3, 0), (32, 2, 17), (48, 1, 0)])
def test_kernel_matches_a_float32_pass(dim, groups, prefix, kernel_path) -> None:
    assert cpu_kernels.load() is not None, cpu_kernels.load_error()
    query, keys, values, shared = _inputs(4, 2, groups, dim, 70, prefix)
    length = 61
    mask = torch.ones((4, length), dtype=torch.uint8)
    mask[1, :20] = 0  # left padding
    mask[2, 5:9] = 0  # a hole
    mask[3, :] = 0  # nothing of its own (only the prefix, or no position at all)
    got = cpu_kernels.decode_attention(query, keys, values, length, mask, shared, dim**-0.5)
    want = _reference(query, keys, values, length, mask, shared, dim**-0.5)
    assert got.shape == (4, 1, 2 * groups, dim) and got.dtype == torch.bfloat16
    if not prefix:
        assert torch.equal(got[3], torch.zeros_like(got[3]))
        got, want = got[:3], want[:3]
    assert (got.float() - want).abs().max() < 1e-2  # bfloat16 output rounding, no more


def test_a_row_gets_the_same_bits_alone_batched_padded_or_split(kernel_path) -> None:
    query, keys, values, shared = _inputs(6, 3, 3, 64, 300, 90, seed=1)
    lengths = [260, 200, 140, 270, 50, 270]  # each row's own tokens, right-aligned at 280
    width = 280
    mask = torch.zeros((6, width), dtype=torch.uint8)
    for row, n in enumerate(lengths):
        mask[row, width - n :] = 1
    batched = cpu_kernels.decode_attention(query, keys, values, width, mask, shared, 0.125)
    threads = torch.get_num_threads()
    for row, n in enumerate(lengths):
        for pad, count in [(0, threads), (37, 1), (5, 2)]:  # less padding, other thread counts
            k = torch.zeros((1, 3, n + pad + 11, 64), dtype=torch.bfloat16)
            v = torch.zeros_like(k)
            k[0, :, pad : pad + n] = keys[row, :, width - n : width]
            v[0, :, pad : pad + n] = values[row, :, width - n : width]
            alone_mask = torch.zeros((1, pad + n), dtype=torch.uint8)
            alone_mask[0, pad:] = 1
            torch.set_num_threads(count)
            try:
                alone = cpu_kernels.decode_attention(
                    query[row : row + 1], k, v, pad + n, alone_mask, shared, 0.125
                )
            finally:
                torch.set_num_threads(threads)
            assert torch.equal(alone[0], batched[row]), (row, pad, count)
        # the cascade's split: the prefix as the row's own first positions instead
        k = torch.cat([shared[0][None], keys[row : row + 1, :, width - n : width]], 2)
        v = torch.cat([shared[1][None], values[row : row + 1, :, width - n : width]], 2)
        whole = cpu_kernels.decode_attention(
            query[row : row + 1], k, v, k.shape[2], None, None, 0.125
        )
        assert torch.equal(whole[0], batched[row]), row


@pytest.mark.parametrize("dim,groups,prefix", [(64, 3, 40), (32, 2, 0), (48, 1, 17)])
def test_float32_kernel_matches_a_float32_pass_and_gives_a_row_the_same_bits(
    dim, groups, prefix
) -> None:
    """A float32 model's steps (a CPU without native bfloat16): float32 in and out, within
    float32 rounding of the reference, and a row's result the same alone or batched."""
    assert cpu_kernels.load() is not None, cpu_kernels.load_error()
    inputs = _inputs(4, 2, groups, dim, 70, prefix, seed=3)
    query, keys, values = (t.float() for t in inputs[:3])
    shared = tuple(t.float() for t in inputs[3]) if prefix else None
    length = 61
    mask = torch.ones((4, length), dtype=torch.uint8)
    mask[1, :20] = 0
    mask[2, 5:9] = 0
    got = cpu_kernels.decode_attention(query, keys, values, length, mask, shared, dim**-0.5)
    want = _reference(query, keys, values, length, mask, shared, dim**-0.5)
    assert got.dtype == torch.float32 and (got - want).abs().max() < 1e-5
    for row in range(4):
        visible = mask[row].bool()
        n = int(visible.sum())
        k = torch.zeros((1, 2, n + 9, dim))
        v = torch.zeros_like(k)
        k[0, :, 3 : 3 + n] = keys[row, :, :length][:, visible]
        v[0, :, 3 : 3 + n] = values[row, :, :length][:, visible]
        alone_mask = torch.zeros((1, n + 3), dtype=torch.uint8)
        alone_mask[0, 3:] = 1
        alone = cpu_kernels.decode_attention(
            query[row : row + 1], k, v, n + 3, alone_mask, shared, dim**-0.5
        )
        assert torch.equal(alone[0], got[row]), row


def test_tile_and_vector_paths_agree() -> None:
    """The two paths round differently but both to about the bfloat16 output's rounding."""
    if not cpu_kernels.tiles_available():
        pytest.skip("no AMX tiles here")
    query, keys, values, shared = _inputs(5, 3, 3, 64, 200, 77, seed=2)
    mask = torch.ones((5, 180), dtype=torch.uint8)
    mask[2, :50] = 0
    tiles = cpu_kernels.decode_attention(query, keys, values, 180, mask, shared, 0.125)
    before = cpu_kernels.set_tiles(False)
    try:
        vector = cpu_kernels.decode_attention(query, keys, values, 180, mask, shared, 0.125)
    finally:
        cpu_kernels.set_tiles(before)
    want = _reference(query, keys, values, 180, mask, shared, 0.125)
    assert (tiles.float() - vector.float()).abs().max() < 1e-2
    tile_error = (tiles.float() - want).abs().mean()
    assert tile_error <= 1.05 * (vector.float() - want).abs().mean()


def _prefill_reference(query, keys, values, layout, scale):
    groups = query.shape[1] // keys.shape[1]
    out = torch.zeros(query.shape[0], query.shape[2], query.shape[1], query.shape[3])
    for key_row, start, stop, new, row, end in layout:
        k = keys[key_row, :, start:stop].float().repeat_interleave(groups, dim=0)
        v = values[key_row, :, start:stop].float().repeat_interleave(groups, dim=0)
        visible = torch.ones(new, stop - start, dtype=torch.bool).tril_(stop - start - new)
        q = query[row, :, end - new : end].float()
        attention = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=visible, scale=scale
        )
        out[row, end - new : end] = attention.transpose(0, 1)
    return out


def test_prefill_kernel_matches_float32_whatever_the_cut_or_company() -> None:
    """Chunks end to end in one sequence (``rows_attention``'s 6-number entries): each within the
    bfloat16 output's rounding of a float32 pass, and a query's result the same bits in a chunk
    alone, with other chunks, or with its prompt cut elsewhere."""
    if not cpu_kernels.tiles_available():
        assert cpu_kernels.prefill_attention(*_inputs(1, 1, 1, 64, 8, 0)[:3], [], 0.1) is None
        pytest.skip("no AMX tiles here")
    g = torch.Generator().manual_seed(5)
    keys = torch.randn((3, 2, 300, 64), generator=g).to(torch.bfloat16)
    values = torch.randn((3, 2, 300, 64), generator=g).to(torch.bfloat16)
    query = (torch.randn((1, 6, 70, 64), generator=g) * 2).to(torch.bfloat16)
    layout = [(2, 8, 120, 17, 0, 17), (0, 3, 45, 2, 0, 19), (1, 0, 290, 51, 0, 70)]
    got = cpu_kernels.prefill_attention(query, keys, values, layout, 0.125)
    assert got.shape == (1, 70, 6, 64) and got.dtype == torch.bfloat16
    want = _prefill_reference(query, keys, values, layout, 0.125)
    assert (got.float() - want).abs().max() < 1e-2
    alone = cpu_kernels.prefill_attention(query, keys, values, [layout[0]], 0.125)
    assert torch.equal(alone[0, :17], got[0, :17]) and alone[0, 17:].abs().max() == 0
    cut = [(1, 0, 250, 11, 0, 30), (1, 0, 290, 40, 0, 70)]  # the last chunk cut in two
    assert torch.equal(
        cpu_kernels.prefill_attention(query, keys, values, cut, 0.125)[0, 19:], got[0, 19:]
    )
    nothing = cpu_kernels.prefill_attention(query, keys, values, [], 0.125)
    assert nothing.shape == got.shape and nothing.abs().max() == 0  # no chunk: zeros
    four = [(key_row, start, stop, new) for key_row, start, stop, new, _, _ in layout]
    padded = query.expand(3, -1, -1, -1).contiguous()  # 4-number entries: row r, its last `new`
    by_rows = cpu_attention.rows_attention(padded, keys, values, four, 0.125, kernel=True)
    assert torch.equal(by_rows[2, 70 - 51 :], got[0, 19:])


def test_kernel_decoding_in_the_backend(tiny_model_dir) -> None:
    """With 4-bit decoding weights (whose products are row-independent: oneDNN's bfloat16
    ``linear`` is not, for some row counts on AMX CPUs) a row's reply is the same bits alone or
    batched, with or without the cascade's split."""
    kernel_settings = EngineSettings(sampler="torch")
    bf16 = {"device": "cpu", "dtype": "bfloat16"}
    kernel = TransformersPolicy(
        str(tiny_model_dir), **bf16, cpu_engine="auto", engine=kernel_settings
    )
    assert kernel.engine.kernel_attention
    greedy = SamplingParams(temperature=0, max_new_tokens=16)
    batched = kernel.generate(CONVERSATIONS, greedy)
    assert teacher_forced_diff(kernel, CONVERSATIONS, batched) < 0.05
    for i, conversation in enumerate(CONVERSATIONS):
        alone = kernel.generate([conversation], greedy)[0]
        assert (alone.token_ids, alone.logprobs) == (batched[i].token_ids, batched[i].logprobs)
    no_cascade = TransformersPolicy(
        str(tiny_model_dir),
        **bf16,
        cpu_engine="auto",
        engine=EngineSettings(sampler="torch", cascade=False),
    )
    assert no_cascade.generate(CONVERSATIONS, greedy) == batched  # the split changes nothing
    bmm = TransformersPolicy(
        str(tiny_model_dir),
        **bf16,
        cpu_engine="auto",
        engine=EngineSettings(decode_attention="bmm", sampler="torch"),
    )
    assert logprob_gap(bmm.generate(CONVERSATIONS, greedy), batched) < 0.05
    fp16 = TransformersPolicy(
        str(tiny_model_dir),
        device="cpu",
        dtype="float16",
        cpu_engine="auto",
        engine=kernel_settings,
    )
    line = fp16.run_metadata()["engine"]  # the kernel is bfloat16's and float32's
    assert not fp16.engine.kernel_attention and "float32" in line


def test_without_a_compiler_the_engine_keeps_the_bmm_path(
    tiny_model_dir, tmp_path, monkeypatch
) -> None:
    monkeypatch.setattr(cpu_kernels, "_STATE", {})
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    monkeypatch.setenv("AGENTENVS_CACHE", str(tmp_path / "cache"))
    assert cpu_kernels.load() is None
    assert "no-such-compiler" in cpu_kernels.load_error()
    policy = TransformersPolicy(str(tiny_model_dir), device="cpu", cpu_engine="auto")
    line = policy.run_metadata()["engine"]
    assert not policy.engine.kernel_attention and not policy.engine.compiled_sampler
    assert line.startswith("cpu engine:") and "no-such-compiler" in line
    outs = policy.generate(CONVERSATIONS, SamplingParams(temperature=0, max_new_tokens=8))
    assert all(o.token_ids for o in outs)


def _int4_case(n, k, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(0, 16, (n, k), generator=g, dtype=torch.int32)
    scales_zeros = torch.rand((k // 32, n, 2), generator=g) * torch.tensor([0.05, 0.2]) - 0.1
    groups = scales_zeros.repeat_interleave(32, dim=0).transpose(0, 1)
    weight = (q.float() - 8) * groups[..., 0] + groups[..., 1]
    return cpu_kernels.pack_int4(q, scales_zeros), weight


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("n,k", [(128, 64), (64, 96), (960, 576)])
def test_int4_product_matches_float32_and_gives_a_row_the_same_bits(n, k, dtype) -> None:
    """bfloat16 rows give bfloat16 sums, float32 rows (a float32 model's) float32 ones."""
    assert cpu_kernels.load() is not None, cpu_kernels.load_error()
    (packed, scales), weight = _int4_case(n, k)
    x = torch.randn((16, k), generator=torch.Generator().manual_seed(1)).to(dtype)
    got = cpu_kernels.int4_linear(x, packed, scales, n)
    assert got.dtype == dtype
    want = x.float() @ weight.T
    assert (got.float() - want).abs().max() <= 0.01 * want.abs().max() + 1e-3
    threads = torch.get_num_threads()
    try:
        for count in (1, 2):
            torch.set_num_threads(count)
            for rows in (1, 2, 3, 7):
                for start in (0, 16 - rows):
                    part = cpu_kernels.int4_linear(x[start : start + rows], packed, scales, n)
                    assert torch.equal(part, got[start : start + rows])
    finally:
        torch.set_num_threads(threads)


def test_int8_product_matches_float32_and_gives_a_row_the_same_bits() -> None:
    from agentenvs.agents.backends.cpu.int4 import quantize_q8

    g = torch.Generator().manual_seed(4)
    grid = torch.randint(-127, 128, (192, 96), generator=g).float()
    grid.view(192, 3, 32)[:, :, 5] = -127  # Q8_0's scale: each group's largest is 127 steps
    d = (torch.rand((192, 3, 1), generator=g) * 0.01).half().float()  # fp16 scales, as Q8_0
    weight = (grid.view(192, 3, 32) * d).view(192, 96)  # a Q8_0 grid: recovered exactly
    q, scales, error = quantize_q8(weight)
    assert error == 0.0
    x = torch.randn((9, 96), generator=g).to(torch.bfloat16)
    packed = cpu_kernels.pack_int8(q, scales)
    got = cpu_kernels.int8_linear(x, *packed, 192)
    want = x.float() @ weight.T
    assert (got.float() - want).abs().max() <= 0.01 * want.abs().max() + 1e-3
    for rows in (1, 4):
        part = cpu_kernels.int8_linear(x[2 : 2 + rows], *packed, 192)
        assert torch.equal(part, got[2 : 2 + rows])
    # float32 rows (a float32 model's LM head): float32 sums; the same rows as bfloat16 in
    # float32 give the same integer parts, so the unrounded sums of the bfloat16 call
    logits = cpu_kernels.int8_linear(x, *packed, 192, float32=True)
    rows32 = cpu_kernels.int8_linear(x.float(), *packed, 192)
    assert rows32.dtype == torch.float32 and torch.equal(rows32, logits)
    assert (rows32 - want).abs().max() <= 0.01 * want.abs().max() + 1e-3
    assert torch.equal(cpu_kernels.int8_linear(x.float()[3:4], *packed, 192)[0], rows32[3])


def test_int_dot_path_names_what_this_cpu_uses() -> None:
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    want = "vnni" if "avx512_vnni" in flags else "avx2" if " avx2" in flags else "none"
    assert cpu_kernels.int_dot_path() == want


def test_int4_product_refuses_shapes_it_does_not_take() -> None:
    (packed, scales), _ = _int4_case(64, 64)
    with pytest.raises(ValueError, match="N % 64"):
        cpu_kernels.pack_int4(torch.zeros((96, 64), dtype=torch.int32), torch.zeros((2, 96, 2)))
    too_many = torch.zeros((cpu_kernels.INT4_ROWS + 1, 64), dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="cannot take"):
        cpu_kernels.int4_linear(too_many, packed, scales, 64)


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_compiled_sampler_inverts_the_same_distribution_as_torch(temperature) -> None:
    """The same uniform draws give the tokens torch's softmax-cumsum-search gives (up to ties
    at a cumulative boundary: none in 1,500 draws here) and the temperature-1 log-probs."""
    from agentenvs.agents.backends.cpu.engine import CpuEngine
    from agentenvs.agents.backends.hf_loading import sample_with_logprobs

    engine = CpuEngine.__new__(CpuEngine)  # the sampler alone: no model needed
    engine.compiled_sampler = True

    def compiled(logits, sampling, generator):
        return engine.sample(logits, sampling, generator)

    logits = torch.randn((3, 997), generator=torch.Generator().manual_seed(2)) * 3
    logits[1, 5] = 40.0  # one row nearly certain
    sampling = SamplingParams(temperature=temperature, top_p=1.0, max_new_tokens=1)
    ours, theirs = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    for _ in range(500):
        tokens, logprobs = compiled(logits, sampling, ours)
        want, want_logprobs = sample_with_logprobs(logits, sampling, theirs)
        assert torch.equal(tokens, want)
        assert torch.allclose(logprobs, want_logprobs, atol=1e-5)
    per_row = [torch.Generator().manual_seed(s) for s in (1, 2, 3)]
    alone = [
        compiled(logits[i : i + 1], sampling, [torch.Generator().manual_seed(s)])[0].item()
        for i, s in enumerate((1, 2, 3))
    ]
    assert compiled(logits, sampling, per_row)[0].tolist() == alone


def test_a_new_build_prunes_all_but_the_most_recently_used(tmp_path, monkeypatch) -> None:
    """Every source edit, compiler or CPU adds a build to the cache; a new one keeps the
    KEPT_BUILDS most recently used (a cached build's use refreshes it)."""
    import os
    import time

    monkeypatch.setattr(cpu_kernels, "_STATE", {})
    monkeypatch.setenv("AGENTENVS_CACHE", str(tmp_path))
    folder = cpu_kernels.kernel_dir()
    folder.mkdir(parents=True)
    now = time.time()
    stale = [folder / f"decode_attention-old{i}.so" for i in range(cpu_kernels.KEPT_BUILDS + 1)]
    for age, path in enumerate(stale, start=1):
        path.write_bytes(b"an old build")
        os.utime(path, (now - 3600 * age, now - 3600 * age))
    os.utime(stale[-1], (now - 60, now - 60))  # the oldest build, used a minute ago
    unrelated = folder / "notes.txt"
    unrelated.write_text("not a build")
    assert cpu_kernels.load() is not None, cpu_kernels.load_error()
    left = sorted(p.name for p in folder.glob("decode_attention-*.so"))
    built = [name for name in left if "old" not in name]
    assert len(left) == cpu_kernels.KEPT_BUILDS and len(built) == 1
    kept = {stale[-1].name, *(p.name for p in stale[: cpu_kernels.KEPT_BUILDS - 2])}
    assert set(left) - set(built) == kept and unrelated.exists()
    monkeypatch.setattr(cpu_kernels, "_STATE", {})
    assert cpu_kernels.load() is not None  # the cached build, not a rebuild: nothing pruned
    assert sorted(p.name for p in folder.glob("decode_attention-*.so")) == left
