"""Model shapes of the GPU measurements, their FLOPs, and the peak MFU is counted against.

One record, :class:`ModelShape`, describes a decoder-only model by the attribute names of its
``transformers`` config; the published shapes (:data:`SMOLLM2_135M`, :data:`QWEN3_1P7B`) are
read from the models' ``config.json`` files. :func:`update_flops` counts a training row's FLOPs:

    forward = 2 * N_nonembedding * S + 2 * d * V * R + 2 * L * d_attn * S^2
    training = 3 * forward

for a row of S tokens, R of them reply tokens (logits are computed only where a log-prob is
needed), L layers, d_attn = heads x head_dim (causal attention). MFU divides the FLOPs per second
by :data:`BF16_DENSE_PEAK_TFLOPS`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BF16_DENSE_PEAK_TFLOPS",
    "QWEN3_1P7B",
    "SMOLLM2_135M",
    "ModelShape",
    "nonembedding_parameters",
    "peak_tflops_for",
    "update_flops",
]

BF16_DENSE_PEAK_TFLOPS = 989.0
"""The MFU denominator (TFLOP/s): NVIDIA's dense BF16 tensor-core peak of an H100 or H200 SXM
(datasheet, without sparsity; the two chips share the compute die). MFU is, by its definition
(Chowdhery et al. 2022, PaLM, appendix B), the achieved FLOPs over the hardware's theoretical
peak, not over a measured matrix-product rate, so figures compare across papers and machines.
An 8192^3 bf16 matrix product reaches about 80% of it on an H200 (769-798 TFLOP/s measured),
which bounds the MFU a training step can show. ``--peak-tflops`` sets another (another chip)."""

# device names whose dense BF16 peak is BF16_DENSE_PEAK_TFLOPS
_PEAK_DEVICES = ("H100", "H200", "H800")


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only model's shape and architecture (the attribute names of ``transformers``
    configs; tied input and output embeddings)."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    name: str = ""
    architecture: str = "qwen3"
    """``llama`` (``LlamaForCausalLM``) or ``qwen3`` (``Qwen3ForCausalLM``)."""
    max_position_embeddings: int = 40960
    rope_theta: float = 1_000_000.0
    rms_norm_eps: float = 1e-6

    def config(self, tokenizer: Any = None) -> Any:
        """The ``transformers`` config of this shape, with ``tokenizer``'s special token ids
        when one is given."""
        from transformers import LlamaConfig, Qwen3Config

        cls = {"llama": LlamaConfig, "qwen3": Qwen3Config}[self.architecture]
        fields = dataclasses.asdict(self)
        for name in ("name", "architecture", "rope_theta"):
            del fields[name]
        special = {}
        if tokenizer is not None:
            special = {
                "bos_token_id": tokenizer.convert_tokens_to_ids("<|endoftext|>"),
                "eos_token_id": tokenizer.convert_tokens_to_ids("<|im_end|>"),
                "pad_token_id": tokenizer.pad_token_id,
            }
        config = cls(**fields, tie_word_embeddings=True, **special)
        # transformers 5 keeps rope_theta under rope_parameters; older ones as an attribute
        rope = getattr(config, "rope_parameters", None)
        if isinstance(rope, dict):
            rope["rope_theta"] = self.rope_theta
        else:
            config.rope_theta = self.rope_theta
        return config


# HuggingFaceTB/SmolLM2-135M config.json (LlamaForCausalLM; head_dim 576 / 9 = 64)
SMOLLM2_135M = ModelShape(
    576,
    1536,
    30,
    9,
    3,
    64,
    49152,
    name="smollm2_135m",
    architecture="llama",
    max_position_embeddings=8192,
    rope_theta=100_000.0,
    rms_norm_eps=1e-5,
)
# Qwen/Qwen3-1.7B config.json
QWEN3_1P7B = ModelShape(2048, 6144, 28, 16, 8, 128, 151936, name="qwen3_1p7b")


def update_flops(shape: ModelShape, n_body: int, prompt: int, response: int) -> tuple[float, float]:
    """(training FLOPs, forward-only FLOPs) of one row of ``prompt + response`` tokens (module
    docstring); ``n_body``: the non-embedding parameters."""
    seq = prompt + response
    d_attn = shape.num_attention_heads * shape.head_dim
    forward = (
        2 * n_body * seq
        + 2 * shape.hidden_size * shape.vocab_size * response
        + 2 * shape.num_hidden_layers * d_attn * seq * seq
    )
    return 3.0 * forward, float(forward)


def nonembedding_parameters(model: Any) -> int:
    """Parameters outside the token embedding (tied: the head is the embedding)."""
    return sum(p.numel() for n, p in model.named_parameters() if "embed_tokens" not in n)


def peak_tflops_for(device_name: str) -> float | None:
    """:data:`BF16_DENSE_PEAK_TFLOPS` for an H100, H200 or H800, else None (unknown)."""
    return BF16_DENSE_PEAK_TFLOPS if any(n in device_name for n in _PEAK_DEVICES) else None
