"""The training-speed benchmark: FLOP counting, and the GPU mode's code path run on CPU."""

from __future__ import annotations

import math

import pytest

from agentenvs.benchmarks.speed.model_shapes import (
    BF16_DENSE_PEAK_TFLOPS,
    QWEN3_1P7B,
    ModelShape,
    peak_tflops_for,
    update_flops,
)
from agentenvs.benchmarks.speed.train import generate_speed, update_speed

pytest.importorskip("transformers")


def test_update_flops_by_hand():
    shape = ModelShape(8, 16, 2, 2, 1, 4, 100)
    train, forward = update_flops(shape, n_body=1000, prompt=3, response=2)
    # 2*N*S + 2*d*V*R + 2*L*d_attn*S^2 = 2*1000*5 + 2*8*100*2 + 2*2*8*25
    assert forward == 10_000 + 3_200 + 800
    assert train == 3 * forward


def test_the_mfu_peak_is_the_dense_bf16_peak_of_h100_and_h200():
    assert peak_tflops_for("NVIDIA H200") == peak_tflops_for("NVIDIA H100 80GB HBM3") == 989.0
    assert BF16_DENSE_PEAK_TFLOPS == 989.0 and peak_tflops_for("NVIDIA A10G") is None


def test_qwen3_shape_has_the_published_parameter_count():
    """Qwen3-1.7B's model card: 1.7B parameters, 1.4B of them outside the (tied) embedding."""
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(QWEN3_1P7B.config())
    total = sum(p.numel() for p in model.parameters())
    body = sum(p.numel() for n, p in model.named_parameters() if "embed_tokens" not in n)
    assert round(total / 1e9, 1) == 1.7 and round(body / 1e9, 1) == 1.4


def test_gpu_mode_code_path_on_cpu():
    speed = update_speed(
        ModelShape(32, 64, 1, 2, 1, 16, 300),
        device="cpu",
        rows=4,
        prompt=12,
        response=6,
        micro_batch_size=2,
        precision="fp32",
        peak_tflops=1.0,
    )
    assert speed.tokens_per_s > 0 and math.isfinite(speed.tokens_per_s)
    assert speed.update_tflops > 0 and speed.mfu == pytest.approx(speed.update_tflops)
    assert speed.peak_memory_gib is None


def test_generate_mode_code_path_on_cpu():
    speed = generate_speed(
        ModelShape(32, 64, 1, 2, 1, 16, 300),
        device="cpu",
        rows=3,
        prompt=10,
        new_tokens=5,
        micro_batch_size=2,
        precision="fp32",
    )
    assert speed.rows == 3 and speed.new_tokens == 5
    assert speed.generate_tokens_per_s == pytest.approx(15 / speed.generate_s)
    assert speed.forward_tokens_per_s == pytest.approx(45 / speed.forward_s)
    assert speed.forward_over_generate == pytest.approx(
        speed.forward_tokens_per_s / speed.generate_tokens_per_s
    )
