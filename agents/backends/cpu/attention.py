"""The CPU engine's attention without the compiled kernel: two batched matrix products.

:func:`step_attention` (one query token per row): ``bmm(q, k^T)`` with the scores rounded to the
model dtype, a float32 softmax and ``bmm(p, v)`` over the whole preallocated cache buffer
(contiguous, so oneDNN's ``bmm`` takes its fast path; positions past the cache's length are
masked), optionally after the batch's shared prefix (cascade: one softmax over the prefix's and
the row's own scores, the prefix's keys read once for all rows). :func:`rows_attention`
(prefill chunks of at most :data:`MAX_PREFILL_QUERIES` queries): the same two products per chunk
over its own row's positions, causal among the new tokens, or the compiled kernel's where it
applies.

Each row's result comes from its own products, so a row's tokens and log-probs do not depend on
the other rows of the batch, and a chunk's do not depend on where its prompt was cut (bit for
bit: the tests check it). Why two products instead of SDPA's flash kernel, and the measurements:
``docs/cpu-engine.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["MAX_PREFILL_QUERIES", "kernel_buffers", "rows_attention", "step_attention"]

MAX_PREFILL_QUERIES = 256  # a prefill chunk's queries at most


def step_attention(
    query: Any, key: Any, value: Any, attention_mask: Any, scale: float, prefix: Any = None
) -> Any:
    """``[batch, 1, heads, dim]`` attention of one query token per row (``query``
    ``[batch, heads, 1, dim]``; ``key``/``value`` a cache layer's ``[batch, kv_heads, length,
    dim]`` views; ``attention_mask`` ``[batch, 1, 1, length]`` booleans or None) with two
    batched products; ``prefix``: the layer's shared prefix (keys, values) ``[kv_heads, P,
    dim]`` that every row also attends to first (cascade), or None."""
    import torch

    batch, heads, _, dim = query.shape
    kv_heads, length = key.shape[1], key.shape[2]
    groups = heads // kv_heads
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
    if prefix is not None:
        return _with_prefix(query, scores, values, prefix, scale)
    probs = torch.softmax(scores, dim=-1).to(query.dtype).view(batch * kv_heads, groups, width)
    out = torch.bmm(probs, values).view(batch, heads, 1, dim)
    return out.transpose(1, 2).contiguous()


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
    GEMM rounds a query's sums differently by the call's row count (on an AVX2 machine a row's
    reply alone and batched differed from its second token), oneDNN's
    bfloat16 one did not on the CPUs tested."""
    import torch

    if a.dtype != torch.float32 or batch == 1:
        return torch.bmm(a, b)
    m = a.shape[1] // batch
    return torch.cat([torch.bmm(a[:, i * m : (i + 1) * m], b) for i in range(batch)], dim=1)


def rows_attention(
    query: Any,
    key: Any,
    value: Any,
    rows: Sequence[tuple[int, ...]],
    scale: float,
    kernel: bool = False,
) -> Any:
    """``[batch, q_len, heads, dim]`` attention of prefill chunks (``query`` ``[batch, heads,
    q_len, dim]``, ``key``/``value`` the whole buffers). ``rows[r]`` = (``k``, ``start``,
    ``stop``, ``new``): query row ``r``'s keys are positions ``[start, stop)`` of row ``k`` (one
    block, no padding), its queries its last ``new``; or (``k``, ``start``, ``stop``, ``new``,
    ``row``, ``end``): the chunk's queries are positions ``[end - new, end)`` of query row
    ``row`` (several chunks end to end in one sequence). Causal among the new tokens, every
    earlier position visible. ``kernel``: the compiled kernel's
    (:func:`agentenvs.agents.backends.cpu.kernels.prefill_attention`) where it applies. Per row,
    ``bmm(q, k^T)`` rounded to the model
    dtype, the causal triangle over the new tokens, a float32 softmax and ``bmm(p, v)``, on that
    row's own positions only (so a row's result does not depend on the batch's other rows)."""
    import torch

    batch, heads, q_length, dim = query.shape
    if any(len(entry) == 4 for entry in rows) and len(rows) != batch:
        raise RuntimeError(f"a packed prefill of {len(rows)} rows got a batch of {batch}")
    # 4-number entries are query row `index`'s last `new` positions
    chunks = [entry if len(entry) == 6 else (*entry, i, q_length) for i, entry in enumerate(rows)]
    if kernel and query.dtype == torch.bfloat16:
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
