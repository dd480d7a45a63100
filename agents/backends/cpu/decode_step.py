"""The CPU engine's forward pass: one-token decoding steps and packed prefill chunks as a flat loop
over a Llama or Qwen3 model's layers (:class:`LeanModel`).

The same tensor operations in the same order and dtypes as transformers' Llama and Qwen3 code
(RMSNorm, rotary embedding, the cache layers' own ``update``, the MLP), with the engine's
attention (:mod:`agentenvs.agents.backends.cpu.attention`, :mod:`agentenvs.agents.backends.cpu.
kernels`) and every linear product through the engine's ``linear`` (its 4-bit copies or the
module's own weight): the model's modules are read, never changed. Two changes of grouping
only in decoding steps: the query, key and value projections are one 4-bit product, and so are
the MLP's gate and up projections (a column's sum is the same whichever columns share the
call). Why (a step's Python overhead was most of a batched step): ``docs/cpu-engine.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["MODEL_TYPES", "LeanModel"]

MODEL_TYPES = ("llama", "qwen3")


@dataclass
class _Layer:
    """One decoder layer's parts, bound once."""

    input_norm: Any  # RMSNorm.forward
    attention: Any  # the attention module (its scaling)
    q_norm: Any  # Qwen3's per-head RMSNorm.forward, else None
    k_norm: Any
    projections: tuple[Any, Any, Any]  # q, k, v nn.Linear
    o_proj: Any
    post_norm: Any
    gate_up: tuple[Any, Any]  # gate, up nn.Linear
    down: Any
    act: Any
    mlp: Any  # the MLP module (the key of its fused 4-bit copy)


class LeanModel:
    """``model``'s forward pass as a flat loop over its layers' weights (module docstring):
    :meth:`step` for one-token decoding steps, :meth:`prefill` for packed prefill chunks. Every
    linear product goes through ``linear(module, x, decoding)`` (the engine's 4-bit copies, or
    the module's own weight)."""

    def __init__(self, model: Any, linear: Any, fused: Any) -> None:
        base = model.model
        config = model.config
        self.model = model
        self.linear = linear
        self.fused = fused  # (module, group) -> a 4-bit copy or None
        self.embed = base.embed_tokens
        self.rotary = base.rotary_emb
        self.final_norm = base.norm.forward
        self.lm_head = model.lm_head
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
                    projections=(attn.q_proj, attn.k_proj, attn.v_proj),
                    o_proj=attn.o_proj,
                    post_norm=layer.post_attention_layernorm.forward,
                    gate_up=(mlp.gate_proj, mlp.up_proj),
                    down=mlp.down_proj,
                    act=mlp.act_fn,
                    mlp=mlp,
                )
            )
        self.head_dim = self.layers[0].attention.head_dim

    @staticmethod
    def unsupported(model: Any) -> str | None:
        """Why ``model`` cannot run as a lean model, or None when it can."""
        config = getattr(model, "config", None)
        kind = getattr(config, "model_type", None)
        if kind not in MODEL_TYPES:
            return f"model type {kind!r} (the engine knows {', '.join(MODEL_TYPES)})"
        if kind == "qwen3" and getattr(config, "use_sliding_window", False):
            return "sliding-window attention"
        base = getattr(model, "model", None)
        needed = ("embed_tokens", "rotary_emb", "norm", "layers")
        if base is None or not all(hasattr(base, n) for n in needed):
            return "not a decoder-only model of the expected layout"
        if not hasattr(model, "lm_head"):
            return "no lm_head"
        return None

    @staticmethod
    def takes(cache: Any) -> bool:
        """Whether ``cache`` is a buffer cache whose layers append in place."""
        from agentenvs.agents.backends.kv_cache import _growing_layer_class

        growing = _growing_layer_class()
        layers = getattr(cache, "layers", None)
        return bool(growing is not None and layers and all(type(la) is growing for la in layers))

    def prefill(self, input_ids: Any, position_ids: Any, cache: Any, attend: Any, ends: Any) -> Any:
        """Logits ``[1, len(ends), vocab]`` at positions ``ends`` of one packed sequence
        (``input_ids`` ``[1, tokens]``); ``attend(query, keys, values, scale)`` computes each
        layer's ``[1, tokens, heads, dim]`` attention; ``cache``'s layers get the keys and
        values (a packed cache, :func:`agentenvs.agents.backends.kv_cache.packed_cache`)."""
        linear = self.linear
        tokens, dim = input_ids.shape[1], self.head_dim
        hidden = self.embed(input_ids)
        cos, sin = self.rotary(hidden, position_ids=position_ids)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        for index, layer in enumerate(self.layers):
            residual = hidden
            x = layer.input_norm(hidden)
            q, k, v = (linear(m, x, False).view(1, tokens, -1, dim) for m in layer.projections)
            if layer.q_norm is not None:
                q, k = layer.q_norm(q), layer.k_norm(k)
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            keys, values = cache.layers[index].update(k, v)
            out = attend(q, keys, values, layer.attention.scaling)
            out = out.reshape(1, tokens, -1).contiguous()
            hidden = residual + linear(layer.o_proj, out, False)
            residual = hidden
            x = layer.post_norm(hidden)
            gate, up = (linear(m, x, False) for m in layer.gate_up)
            hidden = residual + linear(layer.down, layer.act(gate) * up, False)
        hidden = self.final_norm(hidden)
        return linear(self.lm_head, hidden[:, ends, :], False)

    def step(
        self,
        input_ids: Any,
        attention_mask: Any,
        position_ids: Any,
        cache: Any,
        *,
        kernel: bool,
        prefixes: Any = None,
    ) -> Any:
        """Logits ``[batch, vocab]`` of one token per row (``input_ids`` ``[batch, 1]``);
        ``cache``'s layers get the new keys and values. ``kernel``: attention in the compiled
        kernel (else two batched products); ``prefixes``: per layer the batch's shared
        prefix's (keys, values), read once for all rows (cascade), or None."""
        import torch

        from agentenvs.agents.backends.cpu import int4 as cpu_int4
        from agentenvs.agents.backends.cpu import kernels as cpu_kernels
        from agentenvs.agents.backends.cpu.attention import kernel_buffers, step_attention

        linear = self.linear
        batch = input_ids.shape[0]
        heads, kv_heads, dim = self.heads, self.kv_heads, self.head_dim
        hidden = self.embed(input_ids)
        cos, sin = self.rotary(hidden, position_ids=position_ids)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        mask = mask_bytes = None
        if not bool(attention_mask.all()):
            mask = attention_mask[:, None, None, :].bool()
        # the compiled kernel, its mask converted once per step
        kernel = kernel and cpu_kernels.takes_dtype(hidden.dtype) and dim <= cpu_kernels.MAX_DIM
        if kernel and mask is not None:
            mask_bytes = attention_mask.to(torch.uint8).contiguous()
        width = hidden.shape[-1]
        split_qkv = [heads * dim, kv_heads * dim, kv_heads * dim]
        for index, layer in enumerate(self.layers):
            residual = hidden
            x = layer.input_norm(hidden)
            qkv = self.fused(layer.attention, "qkv", batch)
            if qkv is not None:
                fused = cpu_int4.product(x.view(batch, width), *qkv)
                q, k, v = (t.view(batch, 1, -1, dim) for t in fused.split(split_qkv, dim=1))
            else:
                q, k, v = (linear(m, x, True).view(batch, 1, -1, dim) for m in layer.projections)
            if layer.q_norm is not None:
                q, k = layer.q_norm(q), layer.k_norm(k)
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            keys, values = cache.layers[index].update(k, v)
            scale = layer.attention.scaling
            prefix = prefixes[index] if prefixes is not None else None
            if kernel:
                if prefix is not None:
                    prefix = (prefix[0].contiguous(), prefix[1].contiguous())
                buffers = kernel_buffers(keys, values)
                out = cpu_kernels.decode_attention(
                    q, *buffers, keys.shape[2], mask_bytes, prefix, scale
                )
            else:
                out = step_attention(q, keys, values, mask, scale, prefix)
            out = out.reshape(batch, 1, -1).contiguous()
            hidden = residual + linear(layer.o_proj, out, True)
            residual = hidden
            x = layer.post_norm(hidden)
            gate_up = self.fused(layer.mlp, "gate_up", batch)
            if gate_up is not None:
                fused = cpu_int4.product(x.view(batch, width), *gate_up)
                gate, up = fused.view(batch, 1, -1).chunk(2, dim=-1)
            else:
                gate, up = (linear(m, x, True) for m in layer.gate_up)
            hidden = residual + linear(layer.down, layer.act(gate) * up, True)
        hidden = self.final_norm(hidden)
        return linear(self.lm_head, hidden, True)[:, -1, :]


def _rotate_half(x: Any) -> Any:
    import torch

    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
