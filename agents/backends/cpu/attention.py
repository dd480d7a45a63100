"""Attention of decoding steps and prefill chunks on CPU: two batched matrix products.

Profile (SmolLM2-135M, bfloat16, 8 rows of 900-1,200 cached tokens, one thread, torch 2.13,
load 2-4 on 2 cores): a decoding step spent about 60% of its time in
``scaled_dot_product_attention``'s CPU flash kernel (1.4-2.2 ms per layer call, 3 query heads
per key head after transformers' ``pack_gqa``), 34% in the weights' matrix products and little
else. For one query token that kernel's blocking does not pay: ``bmm(q, k^T)``, a float32
softmax and ``bmm(p, v)`` take 0.25-0.35 ms on contiguous keys. oneDNN's bf16 ``bmm`` is slow
on the cache's strided ``[:, :, :length]`` views (1.5 ms) and a copy costs 0.2-0.5 ms, so the
products read the whole preallocated buffer (contiguous; the positions past ``length`` are
masked, and buffers are zeroed, never garbage). Measured in one run (TextCraft, 8 episodes x 3
turns, 128 tokens, one thread): 107 tok/s against 82 with SDPA, both bfloat16. A decoding
step is then memory-bound: the weights (270 MB) and the 8 rows' keys and values (about 240 MB)
are read once per step.

Prefill (``prefill_attention="bmm"``, :func:`prefill_rows`): the same two products per row for
chunks of at most :data:`MAX_PREFILL_QUERIES` query tokens. A turn's prefill is mostly short
(45 new tokens past 900 cached): there the flash kernel took 1.4 ms a layer, 42 of the forward
pass's 94 ms (one thread), and the bmm path about half that. For one long chunk the flash
kernel is faster (645 tokens from scratch, two threads: 429 ms against 640), so a long prompt
runs in chunks of 256, which cost about what one flash pass does. The bmm results do not
depend on where a prompt was cut: on this CPU a query's scores, softmax and weighted sum come
out bit for bit the same whether its chunk is longer, its keys have more masked positions after
it, or other queries share the product (the tests check a prompt alone against the same prompt
split at the batch's shared prefix and packed with other rows).

With ``prefill_attention="kernel"`` (:func:`prefill_rows` with ``kernel=True``) the chunks'
attention is the compiled kernel's (:func:`agentenvs.agents.backends.cpu.kernels.prefill_attention`: AMX
tiles, float32 scores and sums, about 3.5-5x faster than the two products here) where it
applies.

The scores of the first product are rounded to the model dtype before the float32 softmax
(bfloat16 keeps 8 bits; the flash kernel accumulates them in float32): the sampled tokens'
log-probs are those of the distribution sampled from, within about 0.01 of a teacher-forced
SDPA pass (1e-4 with SDPA), hence opt-in (``decode_attention="bmm"``, the embedded agent's
default). Each row's result comes from its own matrix products: a row's tokens and log-probs
do not depend on the other rows of the batch, bit for bit (the tests check it).

With ``bmm_decoding(kernel=True)`` (``decode_attention="kernel"``) the one-token steps run the
compiled kernel of :mod:`agentenvs.agents.backends.cpu.kernels` instead of the two products, where it
applies (bfloat16 or float32, a boolean or no mask); everything else here stays as it is.

:func:`install` registers the function with transformers' attention interface under
:data:`NAME` (calls with more than one query token outside :func:`prefill_rows`, gradients, a
position bias or softcapping go to transformers' own SDPA function unchanged) and switches a
model using ``sdpa`` to it, in bfloat16, float16 or float32. A float32 model is the embedded
agent's on a CPU without native bfloat16 (AVX2 only): there the same steps, without rounding
(the scores are float32 already), keep its rows independent of the batch, which its SDPA path
did not (3% of the benchmark's replies the same alone and batched on the AVX2 machine of
December 2026, 100% on this path; the shared prefix's products are then one per row,
:func:`_rows_product`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

__all__ = [
    "MAX_PREFILL_QUERIES",
    "NAME",
    "bmm_decoding",
    "decode_attention",
    "install",
    "installable",
    "kernel_buffers",
    "kernel_step_prefixes",
    "prefill_rows",
    "shared_prefix",
]

NAME = "agentenvs_cpu_decode"
MAX_PREFILL_QUERIES = 256  # a prefill chunk's queries at most (longer calls: SDPA)
_REGISTERED = False
_PREFIX: list[Any] = [None]  # the shared prefix's (keys, values) per layer, inside shared_prefix()
_ACTIVE = [False]  # inside bmm_decoding(True)
_KERNEL = [False]  # inside bmm_decoding(True, kernel=True): the compiled kernel's steps
_ROWS: list[Any] = [None]  # per row (key row, start, stop, new tokens): prefill_rows()
_ROWS_KERNEL = [False]  # inside prefill_rows(kernel=True): the compiled prefill kernel


@contextmanager
def bmm_decoding(active: bool = True, kernel: bool = False) -> Iterator[None]:
    """Inside (``active``): one-token steps of a switched model take the two-bmm path, or with
    ``kernel`` the compiled kernel (:mod:`agentenvs.agents.backends.cpu.kernels`) where it applies;
    outside, or with ``active=False``, every call goes to transformers' SDPA function
    unchanged. The switch is the model's, the choice the calling policy's: a policy without
    ``bmm`` on a model another policy switched gets exactly SDPA's results."""
    saved = _ACTIVE[0], _KERNEL[0]
    _ACTIVE[0], _KERNEL[0] = bool(active), bool(active and kernel)
    try:
        yield
    finally:
        _ACTIVE[0], _KERNEL[0] = saved


def kernel_step_prefixes() -> tuple[bool, Sequence[tuple[Any, Any]] | None]:
    """(whether one-token steps take the compiled kernel now, the shared prefix's keys and
    values per layer or None): what :func:`decode_attention` would use, for callers that call
    the kernel themselves (:mod:`agentenvs.agents.backends.cpu.decode_step`)."""
    return _KERNEL[0], _PREFIX[0]


@contextmanager
def shared_prefix(layers: Sequence[tuple[Any, Any]] | None) -> Iterator[None]:
    """Inside: every row of a one-token step also attends to ``layers[i]`` = (keys, values)
    ``[kv_heads, P, dim]`` in layer ``i`` before its own cached positions (the batch's common
    prompt prefix, kept once instead of once per row: cascade attention). The backend enters
    it around decoding steps whose cache holds only the positions after that prefix."""
    saved, _PREFIX[0] = _PREFIX[0], list(layers) if layers is not None else None
    try:
        yield
    finally:
        _PREFIX[0] = saved


@contextmanager
def prefill_rows(layout: Sequence[tuple[int, ...]] | None, kernel: bool = False) -> Iterator[None]:
    """Inside: calls whose chunks have at most :data:`MAX_PREFILL_QUERIES` query tokens each (a
    prefill chunk past a cached prefix) take the two-bmm path chunk by chunk. ``layout[r]`` =
    (``k``, ``start``, ``stop``, ``new``): query row ``r``'s keys are positions ``[start, stop)``
    of row ``k`` of the keys passed in (one block, no padding), its queries are its last ``new``
    (the rest of a left-padded row are padding: their output is zero and nothing reads it), the
    keys of those new tokens the block's last ``new``; or (``k``, ``start``, ``stop``, ``new``,
    ``row``, ``end``): the chunk's queries are positions ``[end - new, end)`` of query row
    ``row`` (several chunks end to end in one sequence). Causal among the new tokens, every
    earlier position visible (the module docstring says why, and why the results do not depend
    on the cut).
    With ``kernel``, :func:`agentenvs.agents.backends.cpu.kernels.prefill_attention` computes it where it
    applies (AMX tiles, heads of 64; float32 scores and sums, not rounded to the model dtype),
    else the two products do."""
    saved = _ROWS[0], _ROWS_KERNEL[0]
    _ROWS[0], _ROWS_KERNEL[0] = (list(layout) if layout is not None else None), bool(kernel)
    try:
        yield
    finally:
        _ROWS[0], _ROWS_KERNEL[0] = saved


def decode_attention(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[Any, None]:
    """transformers' attention-function signature; ``[batch, queries, heads, dim]`` output."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    q_length = query.shape[2]
    rows = _ROWS[0]
    if rows is not None and max(entry[3] for entry in rows) > MAX_PREFILL_QUERIES:
        rows = None
    if (
        not (rows is not None or (_ACTIVE[0] and q_length == 1))
        or query.dtype not in (torch.bfloat16, torch.float16, torch.float32)
        or query.device.type != "cpu"
        or dropout
        or kwargs.get("position_bias") is not None
        or kwargs.get("softcap") is not None
        or torch.is_grad_enabled()
    ):
        if _PREFIX[0] is not None and q_length == 1:
            raise RuntimeError("a shared prefix is set but this step cannot use the bmm path")
        if _ROWS[0] is not None:  # its keys are whole buffers: only the bmm path reads them right
            raise RuntimeError("a packed prefill is set but this call cannot use the bmm path")
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs
        )
    if rows is not None:
        scale = scaling if scaling is not None else query.shape[-1] ** -0.5
        return _rows_attention(query, key, value, rows, scale), None
    batch, heads, _, dim = query.shape
    kv_heads, length = key.shape[1], key.shape[2]
    groups = heads // kv_heads
    scale = scaling if scaling is not None else dim**-0.5
    if _KERNEL[0]:
        out = _kernel_step(module, query, key, value, attention_mask, scale)
        if out is not None:
            return out, None
    keys, values = _whole_buffer(key), _whole_buffer(value)
    if keys is None or values is None or keys.shape[1] != values.shape[1]:
        keys = key.contiguous().view(batch * kv_heads, length, dim)
        values = value.contiguous().view(batch * kv_heads, length, dim)
    width = keys.shape[1]  # the buffer's capacity: positions past `length` are masked out
    queries = query.reshape(batch * kv_heads, groups, dim)  # query head h reads kv head h // groups
    scores = torch.bmm(queries, keys.transpose(1, 2)).float().mul_(scale)
    scores = scores.view(batch, kv_heads, groups, width)
    if width > length:
        scores[..., length:] = float("-inf")
    if attention_mask is not None:
        view = scores[..., :length]
        if attention_mask.dtype == torch.bool:
            view.masked_fill_(~attention_mask, float("-inf"))
        else:
            view.add_(attention_mask.float())
    prefix = _PREFIX[0]
    if prefix is not None:
        return _with_prefix(query, scores, values, prefix[module.layer_idx], scale), None
    probs = torch.softmax(scores, dim=-1).to(query.dtype).view(batch * kv_heads, groups, width)
    out = torch.bmm(probs, values).view(batch, heads, 1, dim)
    return out.transpose(1, 2).contiguous(), None


def _kernel_step(
    module: Any, query: Any, key: Any, value: Any, attention_mask: Any, scale: float
) -> Any:
    """The compiled kernel's ``[batch, 1, heads, dim]`` output, or None where it does not
    apply (another dtype, a float mask, keys that are not a buffer's prefix)."""
    import torch
    from agentenvs.agents.backends.cpu import kernels as cpu_kernels

    batch, length = key.shape[0], key.shape[2]
    if not cpu_kernels.takes_dtype(query.dtype) or key.dtype != query.dtype:
        return None
    if query.shape[-1] > cpu_kernels.MAX_DIM or cpu_kernels.load() is None:
        return None
    keys, values = kernel_buffers(key, value)
    mask = None
    if attention_mask is not None:
        if attention_mask.dtype != torch.bool or attention_mask.dim() != 4:
            return None
        if attention_mask.shape[1] != 1 or attention_mask.shape[2] != 1:
            return None
        if attention_mask.shape[3] != length:
            return None
        mask = attention_mask[:, 0, 0, :].expand(batch, length).to(torch.uint8).contiguous()
    prefix = _PREFIX[0][module.layer_idx] if _PREFIX[0] is not None else None
    if prefix is not None:
        prefix = (prefix[0].contiguous(), prefix[1].contiguous())
    return cpu_kernels.decode_attention(query, keys, values, length, mask, prefix, scale)


def kernel_buffers(key: Any, value: Any) -> tuple[Any, Any]:
    """The compiled kernel's ``[batch, kv_heads, capacity, dim]`` keys and values for a cache
    layer's ``[batch, kv_heads, length, dim]`` views: the whole buffers they start
    (no copy), else contiguous copies."""
    batch = key.shape[0]
    keys, values = _whole_buffer(key), _whole_buffer(value)
    if keys is None or values is None or keys.shape[1] != values.shape[1]:
        return key.contiguous(), value.contiguous()
    keys = keys.view(batch, key.shape[1], keys.shape[1], key.shape[3])
    values = values.view(batch, value.shape[1], values.shape[1], value.shape[3])
    return keys, values


def _with_prefix(query: Any, scores: Any, values: Any, prefix: Any, scale: float) -> Any:
    """Cascade attention: one softmax over the shared prefix's and each row's own scores; the
    prefix's keys and values are read once for all ``batch x heads`` queries."""
    import torch

    keys_p, values_p = prefix  # [kv_heads, P, dim]
    batch, kv_heads, groups, width = scores.shape
    heads, dim, p = kv_heads * groups, query.shape[-1], keys_p.shape[1]
    q = query.reshape(batch, kv_heads, groups, dim).transpose(0, 1)
    q = q.reshape(kv_heads, batch * groups, dim)
    scores_p = _rows_product(q, keys_p.transpose(1, 2), batch).float().mul_(scale)
    scores_p = scores_p.view(kv_heads, batch, groups, p).transpose(0, 1)
    probs = torch.softmax(torch.cat([scores_p, scores], dim=-1), dim=-1).to(query.dtype)
    probs_p = probs[..., :p].transpose(0, 1).reshape(kv_heads, batch * groups, p)
    out_p = _rows_product(probs_p, values_p, batch)
    out_p = out_p.view(kv_heads, batch, groups, dim).transpose(0, 1)
    probs_s = probs[..., p:].reshape(batch * kv_heads, groups, width)
    out_s = torch.bmm(probs_s, values).view(batch, kv_heads, groups, dim)
    out = (out_p.float() + out_s.float()).to(query.dtype).reshape(batch, heads, 1, dim)
    return out.transpose(1, 2).contiguous()


def _rows_product(a: Any, b: Any, batch: int) -> Any:
    """``bmm(a, b)`` for ``a`` ``[heads, batch * m, k]`` holding ``batch`` rows' ``m`` queries:
    one product for all rows, except in float32, where it is one product per row. MKL's float32
    GEMM rounds a query's sums differently by the call's row count (on the AVX2 machine of
    December 2026 a row's reply alone and batched differed from its second token), oneDNN's
    bfloat16 one did not on the CPUs tested."""
    import torch

    if a.dtype != torch.float32 or batch == 1:
        return torch.bmm(a, b)
    m = a.shape[1] // batch
    return torch.cat([torch.bmm(a[:, i * m : (i + 1) * m], b) for i in range(batch)], dim=1)


def _rows_attention(
    query: Any, key: Any, value: Any, rows: Sequence[tuple[int, int, int, int]], scale: float
) -> Any:
    """Short prefills (:func:`prefill_rows`): per row, ``bmm(q, k^T)`` rounded to the model
    dtype, the causal triangle over the new tokens, a float32 softmax and ``bmm(p, v)``, on that
    row's own positions only (so a row's result does not depend on the batch's other rows)."""
    import torch

    batch, heads, q_length, dim = query.shape
    if any(len(entry) == 4 for entry in rows) and len(rows) != batch:
        raise RuntimeError(f"a packed prefill of {len(rows)} rows got a batch of {batch}")
    # 4-number entries are query row `index`'s last `new` positions
    chunks = [entry if len(entry) == 6 else (*entry, i, q_length) for i, entry in enumerate(rows)]
    if _ROWS_KERNEL[0] and query.dtype == torch.bfloat16:
        from agentenvs.agents.backends.cpu.kernels import prefill_attention

        if key.is_contiguous() and value.is_contiguous():  # packed passes' whole buffers
            out = prefill_attention(query, key, value, chunks, scale)
            if out is not None:
                return out
    kv_heads = key.shape[1]
    groups = heads // kv_heads
    out = query.new_zeros((batch, q_length, heads, dim))
    for key_row, start, stop, new, row, end in chunks:
        span = stop - start
        keys = key[key_row, :, start:stop].contiguous()  # [kv_heads, span, dim]
        values = value[key_row, :, start:stop].contiguous()
        queries = query[row, :, end - new : end].reshape(kv_heads, groups * new, dim)
        scores = torch.bmm(queries, keys.transpose(1, 2)).float().mul_(scale)
        scores = scores.view(kv_heads, groups, new, span)
        scores[..., span - new :].masked_fill_(_upper_triangle(new, query.device), float("-inf"))
        # over a 2-D view: the same bits, and 3.1 against 0.5 ms for [3, 3, 88, 972] scores
        probs = torch.softmax(scores.view(-1, span), dim=-1).to(query.dtype)
        probs = probs.view(kv_heads, groups * new, span)
        result = torch.bmm(probs, values).view(heads, new, dim)
        out[row, end - new : end] = result.transpose(0, 1)
    return out


_TRIANGLES: dict[tuple[int, str], Any] = {}


def _upper_triangle(n: int, device: Any) -> Any:
    """``[n, n]`` booleans, True above the diagonal (a new token's later new tokens)."""
    import torch

    key = (n, str(device))
    if key not in _TRIANGLES:
        if len(_TRIANGLES) > 512:
            _TRIANGLES.clear()
        _TRIANGLES[key] = torch.ones((n, n), dtype=torch.bool, device=device).triu_(1)
    return _TRIANGLES[key]


def _whole_buffer(view: Any) -> Any:
    """``[batch * heads, capacity, dim]`` over the whole preallocated buffer that a cache layer's
    ``[batch, heads, length, dim]`` view starts at (contiguous, so oneDNN's ``bmm`` takes its
    fast path without a copy); None when ``view`` is not such a prefix of a buffer."""
    batch, heads, _, dim = view.shape
    s0, s1, s2, s3 = view.stride()
    if s3 != 1 or s2 != dim or s1 % dim or s0 != heads * s1 or view.storage_offset():
        return None
    capacity = s1 // dim
    needed = batch * heads * capacity * dim * view.element_size()
    if view.untyped_storage().nbytes() < needed:
        return None
    return view.as_strided((batch * heads, capacity, dim), (s1, dim, 1))


def installable(model: Any) -> bool:
    """Whether ``model`` runs transformers' SDPA attention (or already this module's) in
    bfloat16, float16 or float32 on CPU."""
    import torch

    try:
        param = next(model.parameters())
    except (StopIteration, AttributeError):
        return False
    config = getattr(model, "config", None)
    return (
        param.device.type == "cpu"
        and param.dtype in (torch.bfloat16, torch.float16, torch.float32)
        and getattr(config, "_attn_implementation", None) in ("sdpa", NAME)
        and hasattr(model, "set_attn_implementation")
    )


def install(model: Any) -> bool:
    """Switch ``model`` to :func:`decode_attention` when :func:`installable`; True if it did."""
    global _REGISTERED
    if not installable(model):
        return False
    try:
        from transformers import AttentionInterface, AttentionMaskInterface
        from transformers.masking_utils import sdpa_mask
    except ImportError:
        return False
    if not _REGISTERED:
        AttentionInterface.register(NAME, decode_attention)
        AttentionMaskInterface.register(NAME, sdpa_mask)
        _REGISTERED = True
    model.set_attn_implementation(NAME)
    return model.config._attn_implementation == NAME
