"""Lean decoding steps (agents/backends/cpu/decode_step.py): the same tokens and log-probs, bit
for bit, as transformers' own forward pass, on a Qwen3 and a Llama model, alone and batched,
with the 4-bit copies (compiled or torch's), bfloat16 weights, the kernel or the bmm attention."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from agentenvs.agents.backends.transformers_backend import TransformersPolicy
from agentenvs.agents.policy import SamplingParams

from .conftest import CONVERSATIONS

SAMPLED = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=12, seed=5)
OPTIONS = [
    {"decode_attention": "kernel", "decode_weights": "int4"},
    {"decode_attention": "bmm", "decode_weights": "int4_torch"},
    {"decode_attention": "bmm", "decode_weights": "model", "cascade": False},
]
needs_compiler = pytest.mark.skipif(
    shutil.which("gcc") is None and shutil.which("cc") is None, reason="no C compiler"
)


@pytest.fixture(scope="module")
def tiny_llama_dir(tmp_path_factory, tiny_model_dir):
    """A tiny random Llama model with the tiny Qwen3 model's tokenizer."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    source = json.loads((tiny_model_dir / "config.json").read_text())
    config = LlamaConfig(
        vocab_size=source["vocab_size"],
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=source["max_position_embeddings"],
        tie_word_embeddings=True,
        bos_token_id=source["bos_token_id"],
        eos_token_id=source["eos_token_id"],
        pad_token_id=source["pad_token_id"],
    )
    torch.manual_seed(3)
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    out = tmp_path_factory.mktemp("tiny-llama")
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(out)
    return out


@needs_compiler
@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: "-".join(map(str, o.values())))
@pytest.mark.parametrize("which", ["qwen3", "llama"])
def test_lean_steps_give_the_model_forward_pass_bits(
    which, options, tiny_model_dir, tiny_llama_dir
) -> None:
    directory = str(tiny_model_dir if which == "qwen3" else tiny_llama_dir)
    common = {"device": "cpu", "dtype": "bfloat16", **options}
    lean = TransformersPolicy(directory, **common)
    plain = TransformersPolicy(directory, **common, decode_step="model")
    assert lean.run_metadata()["decode_step"] == "lean", lean.lean_error
    assert plain.run_metadata()["decode_step"] == "model"
    batched = lean.generate(CONVERSATIONS, SAMPLED)
    assert lean.lean_steps > 0 and plain.lean_steps == 0
    heads = {"int4": "int8", "int4_torch": "model", "model": None}  # the 8-bit head: compiled
    assert lean.run_metadata().get("lm_head") == heads[options["decode_weights"]]
    assert plain.generate(CONVERSATIONS, SAMPLED) == batched
    for index, conversation in enumerate(CONVERSATIONS[:2]):
        seeded = SamplingParams(**{**SAMPLED.__dict__, "seed": 11 + index})
        assert lean.generate([conversation], seeded) == plain.generate([conversation], seeded)


def test_lean_steps_apply_only_where_they_give_the_same_results(tiny_model_dir) -> None:
    fp32 = TransformersPolicy(str(tiny_model_dir), device="cpu", dtype="float32")
    assert fp32.lean_decoder is None and fp32.run_metadata()["decode_step"] == "model"
    assert "attention" in fp32.lean_error  # SDPA's attention, not the CPU module's
    with pytest.raises(ValueError, match="decode_step"):
        TransformersPolicy(str(tiny_model_dir), device="cpu", decode_step="fast")
