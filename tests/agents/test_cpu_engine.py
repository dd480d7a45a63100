"""The CPU engine behind one switch (agents/backends/cpu/engine.py): a policy's own object, the
shared model untouched, two policies on one model independent of each other; its own forward
pass (cpu/decode_step.py's LeanModel) on a Qwen3 and a Llama model close to a teacher-forced
pass and a row's tokens the same alone and batched, with every part setting."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from agentenvs.agents.backends.cpu.engine import MEASURED, EngineSettings, start
from agentenvs.agents.backends.transformers_backend import TransformersPolicy
from agentenvs.agents.policy import SamplingParams

from .conftest import CONVERSATIONS, teacher_forced_diff

SAMPLED = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=12, seed=5)
SETTINGS = [
    MEASURED,
    EngineSettings(decode_attention="bmm", decode_weights="int4_torch", sampler="torch"),
    EngineSettings(
        decode_attention="bmm", prefill_attention="bmm", decode_weights="model", cascade=False
    ),
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


def _seeded(index: int) -> SamplingParams:
    return SamplingParams(**{**SAMPLED.__dict__, "seed": 11 + index})


def test_two_policies_on_one_model_do_not_affect_each_other(tiny_model_dir) -> None:
    """One policy with the engine and one without, on the same model object, interleaved:
    each generates what it generates alone (and the model is not changed)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.bfloat16)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    attention = model.config._attn_implementation

    def policy(engine: str) -> TransformersPolicy:
        return TransformersPolicy.from_model(model, tokenizer, cpu_engine=engine, device="cpu")

    alone = {}
    for engine in ("auto", "off"):
        p = policy(engine)
        alone[engine] = [p.generate(CONVERSATIONS, SAMPLED), p.generate(CONVERSATIONS[:2], SAMPLED)]
    fast, plain = policy("auto"), policy("off")
    assert fast.engine is not None and plain.engine is None
    assert plain.run_metadata()["engine"] == "off: cpu_engine=off"
    assert fast.run_metadata()["engine"].startswith("cpu engine: bfloat16")
    interleaved = {"auto": [], "off": []}
    for conversations in (CONVERSATIONS, CONVERSATIONS[:2]):
        for engine, p in (("auto", fast), ("off", plain)):
            interleaved[engine].append(p.generate(conversations, SAMPLED))
    assert interleaved == alone
    assert alone["auto"] != alone["off"]  # they do differ: the test could fail
    # nothing of the engine is in the model: the same parameters and state, the same
    # attention implementation, no module's forward replaced
    assert model.config._attn_implementation == attention
    assert set(model.state_dict()) == set(state)
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    assert not any("forward" in vars(m) for m in model.modules())


@needs_compiler
@pytest.mark.parametrize("settings", SETTINGS, ids=["measured", "bmm-int4_torch", "bmm-model"])
@pytest.mark.parametrize("which", ["qwen3", "llama"])
def test_the_engine_is_close_to_teacher_forcing_and_rows_independent(
    which, settings, tiny_model_dir, tiny_llama_dir
) -> None:
    directory = str(tiny_model_dir if which == "qwen3" else tiny_llama_dir)
    policy = TransformersPolicy(
        directory, device="cpu", dtype="bfloat16", cpu_engine="auto", engine=settings
    )
    assert policy.engine is not None and policy.engine.settings == settings
    greedy = SamplingParams(temperature=0, max_new_tokens=12)
    batched = policy.generate(CONVERSATIONS, greedy)
    assert policy.engine.steps > 0 and policy.engine.packed_rows > 0
    # bfloat16 scores, 4-bit weights on a random (not Q4) model: close, not equal
    assert teacher_forced_diff(policy, CONVERSATIONS, batched) < 0.5
    sampled = policy.generate(CONVERSATIONS, SAMPLED, seeds=[11, 12, 13, 14][: len(CONVERSATIONS)])
    for index, conversation in enumerate(CONVERSATIONS[:2]):
        alone = policy.generate([conversation], SAMPLED, seeds=[11 + index])[0]
        assert (alone.token_ids, alone.logprobs) == (
            sampled[index].token_ids,
            sampled[index].logprobs,
        )


def test_the_engine_says_why_it_is_off(tiny_model_dir) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64))
    engine, line = start(gpt2, None, "auto")
    assert engine is None and line.startswith("off: model type 'gpt2'")
    assert start(gpt2, None, "off") == (None, "off: cpu_engine=off")
    with pytest.raises(ValueError, match="cpu_engine"):
        TransformersPolicy(str(tiny_model_dir), device="cpu", cpu_engine="fast")
    with pytest.raises(ValueError, match="decode_weights"):
        EngineSettings(decode_weights="int8")
    with pytest.raises(ValueError, match="only with cpu_engine=auto"):  # never silently ignored
        TransformersPolicy(str(tiny_model_dir), device="cpu", engine=EngineSettings(cascade=False))
    fp16 = TransformersPolicy(str(tiny_model_dir), device="cpu", dtype="float16", cpu_engine="auto")
    assert fp16.engine is not None  # float16: two-bmm attention, no 4-bit copies
    assert "two-bmm decoding attention" in fp16.run_metadata()["engine"]
    assert fp16.generate(CONVERSATIONS[:1], SAMPLED)[0].token_ids


def test_backend_options_fill_the_engine_settings(tiny_model_dir) -> None:
    """``--agent-opt`` options come flat: the settings' fields among them make ``engine``,
    command-line strings read as their types; the constructor keeps at most 12 arguments."""
    import inspect

    settings = EngineSettings.of(prefix_cache="false", share_prefix="true", prefix_cache_mb="2.5")
    assert settings == EngineSettings(prefix_cache=False, share_prefix=True, prefix_cache_mb=2.5)
    with pytest.raises(ValueError, match="prefill must be"):
        EngineSettings.of(prefill="columns")
    with pytest.raises(ValueError, match="prefix_cache must be true or false"):
        EngineSettings.of(prefix_cache="maybe")
    policy = TransformersPolicy.with_options(
        str(tiny_model_dir), device="cpu", prefix_cache=False, share_prefix="false", prefill="batch"
    )
    assert policy.prefix_cache is None and policy.share_prefix is False
    assert policy.rowwise_prefill is False and policy.engine is None
    assert len(inspect.signature(TransformersPolicy.__init__).parameters) - 1 <= 12
