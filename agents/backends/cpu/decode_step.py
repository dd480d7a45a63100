"""One-token decoding steps without transformers' module stack (``decode_step="lean"``).

Why (SmolLM2-135M, bfloat16, the embedded options, two threads, one row of about 1,000 cached
tokens, December 2026): a decoding step took 29-30 ms, of which the tensor operations' own
time was 15.4 ms (torch profiler: 5.3 ms 4-bit products, 3.6 ms the LM head, 1.0 ms copies,
about 5 ms small element-wise operations) and the compiled attention kernel about 2 ms. The
rest, about 12 ms a step, was Python: 30 decoder layers of module calls, keyword plumbing,
decorators, mask and cache bookkeeping, the same for one row as for eight. In an eight-episode
batched eval (128-token replies) a step of 2 rows cost 35 ms and one of 8 rows 47 ms, so this
fixed part was most of every step.

:class:`LeanDecoder` runs the same step as a flat loop over the layers' weights: the same
tensor operations in the same order and dtypes as transformers' Llama and Qwen3 code (RMSNorm,
rotary embedding, the cache layers' own ``update``, :func:`agentenvs.agents.backends.cpu.attention.
decode_attention`, the MLP), so the logits are bit for bit those of ``model(...)`` (the tests
compare them, alone, batched, padded and with a shared prefix). Two changes of grouping only:
the query, key and value projections are one 4-bit product, and so are the MLP's gate and up
projections (:func:`agentenvs.agents.backends.cpu.int4.install` packs the fused copies; a column's sum is
the same whichever columns share the call, checked by the tests).

It applies to a ``llama`` or ``qwen3`` model whose attention is
:mod:`agentenvs.agents.backends.cpu.attention`'s and whose cache is a preallocated buffer cache
(:func:`agentenvs.agents.backends.kv_cache.buffer_cache`); :func:`LeanDecoder.build` says why not
otherwise, and the backend then calls the model as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["MODEL_TYPES", "LeanDecoder"]

MODEL_TYPES = ("llama", "qwen3")


@dataclass
class _Layer:
    """One decoder layer's parts, bound once."""

    input_norm: Any  # RMSNorm.forward
    attention: Any  # the attention module (decode_attention reads its layer_idx)
    q_norm: Any  # Qwen3's per-head RMSNorm.forward, else None
    k_norm: Any
    projections: tuple[Any, Any, Any]  # q, k, v Linear.forward
    o_proj: Any
    post_norm: Any
    gate_up: tuple[Any, Any]  # gate, up Linear.forward
    down: Any
    act: Any
    mlp: Any  # the MLP module (its fused 4-bit copy is looked up per step: a re-install
    # after a weight update replaces it)
    q_proj: Any  # the q projection module: its int4_max_rows, once 4-bit copies are installed


class LeanDecoder:
    """One-token decoding steps of ``model`` as a flat loop (module docstring)."""

    def __init__(self, model: Any) -> None:
        base = model.model
        config = model.config
        self.model = model
        self.embed = base.embed_tokens
        self.rotary = base.rotary_emb
        self.final_norm = base.norm.forward
        self.lm_head = model.lm_head.forward
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.layers: list[_Layer] = []
        for layer in base.layers[: config.num_hidden_layers]:
            attn, mlp = layer.self_attn, layer.mlp
            self.layers.append(
                _Layer(
                    input_norm=layer.input_layernorm.forward,
                    attention=attn,
                    q_norm=attn.q_norm.forward if hasattr(attn, "q_norm") else None,
                    k_norm=attn.k_norm.forward if hasattr(attn, "k_norm") else None,
                    projections=(attn.q_proj.forward, attn.k_proj.forward, attn.v_proj.forward),
                    o_proj=attn.o_proj.forward,
                    post_norm=layer.post_attention_layernorm.forward,
                    gate_up=(mlp.gate_proj.forward, mlp.up_proj.forward),
                    down=mlp.down_proj.forward,
                    act=mlp.act_fn,
                    mlp=mlp,
                    q_proj=attn.q_proj,
                )
            )
        self.head_dim = self.layers[0].attention.head_dim

    @staticmethod
    def unsupported(model: Any) -> str | None:
        """Why ``model`` cannot take lean steps, or None when it can."""
        from agentenvs.agents.backends.cpu import attention as cpu_attention

        config = getattr(model, "config", None)
        kind = getattr(config, "model_type", None)
        if kind not in MODEL_TYPES:
            return f"model type {kind!r} (lean steps know {', '.join(MODEL_TYPES)})"
        if getattr(config, "_attn_implementation", None) != cpu_attention.NAME:
            return "the model's attention is not agentenvs.agents.backends.cpu.attention's"
        if kind == "qwen3" and getattr(config, "use_sliding_window", False):
            return "sliding-window attention"
        base = getattr(model, "model", None)
        needed = ("embed_tokens", "rotary_emb", "norm", "layers")
        if base is None or not all(hasattr(base, n) for n in needed):
            return "not a decoder-only model of the expected layout"
        if not hasattr(model, "lm_head"):
            return "no lm_head"
        return None

    @classmethod
    def build(cls, model: Any) -> tuple[LeanDecoder | None, str | None]:
        """(a decoder, None), or (None, the reason it does not apply)."""
        reason = cls.unsupported(model)
        return (cls(model), None) if reason is None else (None, reason)

    @staticmethod
    def takes(cache: Any) -> bool:
        """Whether ``cache`` is a buffer cache whose layers append in place."""
        from agentenvs.agents.backends.kv_cache import _growing_layer_class

        growing = _growing_layer_class()
        layers = getattr(cache, "layers", None)
        return bool(
            growing is not None
            and layers
            and all(type(la) is growing and la.row_writes is None for la in layers)
        )

    def step(self, input_ids: Any, attention_mask: Any, position_ids: Any, cache: Any) -> Any:
        """Logits ``[batch, vocab]`` of one token per row (``input_ids`` ``[batch, 1]``);
        ``cache``'s layers get the new keys and values, as ``model(...)`` would write them."""
        import torch
        from agentenvs.agents.backends.cpu import int4 as cpu_int4
        from agentenvs.agents.backends.cpu import kernels as cpu_kernels
        from agentenvs.agents.backends.cpu.attention import (
            decode_attention,
            kernel_buffers,
            kernel_step_prefixes,
        )

        batch = input_ids.shape[0]
        heads, kv_heads, dim = self.heads, self.kv_heads, self.head_dim
        hidden = self.embed(input_ids)
        cos, sin = self.rotary(hidden, position_ids=position_ids)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        mask = mask_bytes = None
        if not bool(attention_mask.all()):
            mask = attention_mask[:, None, None, :].bool()
        kernel, prefixes = kernel_step_prefixes()
        # the compiled kernel called directly, its mask converted once per step: the inputs
        # decode_attention would give it (its own checks and conversions ran once per layer)
        kernel = kernel and cpu_kernels.takes_dtype(hidden.dtype) and dim <= cpu_kernels.MAX_DIM
        if kernel and mask is not None:
            mask_bytes = attention_mask.to(torch.uint8).contiguous()
        width = hidden.shape[-1]
        int4 = cpu_int4.decoding_active()
        split_qkv = [heads * dim, kv_heads * dim, kv_heads * dim]
        for index, layer in enumerate(self.layers):
            residual = hidden
            x = layer.input_norm(hidden)
            small = int4 and batch <= getattr(layer.q_proj, "int4_max_rows", 0)
            qkv = _fused(layer.attention, "qkv") if small else None
            if qkv is not None:
                fused = cpu_int4.product(x.view(batch, width), *qkv)
                q, k, v = (t.view(batch, 1, -1, dim) for t in fused.split(split_qkv, dim=1))
            else:
                q, k, v = (f(x).view(batch, 1, -1, dim) for f in layer.projections)
            if layer.q_norm is not None:
                q, k = layer.q_norm(q), layer.k_norm(k)
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            keys, values = cache.layers[index].update(k, v)
            attention = layer.attention
            if kernel:
                prefix = prefixes[attention.layer_idx] if prefixes is not None else None
                buffers = kernel_buffers(keys, values)
                out = cpu_kernels.decode_attention(
                    q, *buffers, keys.shape[2], mask_bytes, prefix, attention.scaling
                )
            else:
                out, _ = decode_attention(
                    attention, q, keys, values, mask, scaling=attention.scaling
                )
            out = out.reshape(batch, 1, -1).contiguous()
            hidden = residual + layer.o_proj(out)
            residual = hidden
            x = layer.post_norm(hidden)
            gate_up = _fused(layer.mlp, "gate_up") if small else None
            if gate_up is not None:
                fused = cpu_int4.product(x.view(batch, width), *gate_up)
                gate, up = fused.view(batch, 1, -1).chunk(2, dim=-1)
            else:
                gate, up = (f(x) for f in layer.gate_up)
            hidden = residual + layer.down(layer.act(gate) * up)
        hidden = self.final_norm(hidden)
        return self.lm_head(hidden)[:, -1, :]


def _rotate_half(x: Any) -> Any:
    import torch

    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _fused(module: Any, name: str) -> tuple[Any, Any, int, bool] | None:
    """``module``'s fused 4-bit copy as :func:`agentenvs.agents.backends.cpu.int4.product`'s arguments
    after ``x`` (None if it has none)."""
    packed = getattr(module, f"int4_{name}_weight", None)
    scales = getattr(module, f"int4_{name}_scales", None)
    if packed is None or scales is None:
        return None
    compiled = bool(getattr(module, f"int4_{name}_compiled", False))
    outputs = int(getattr(module, f"int4_{name}_outputs"))
    return packed, scales, outputs, compiled
