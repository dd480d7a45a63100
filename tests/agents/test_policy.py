"""Agent spec strings and the policy factory."""

from __future__ import annotations

import pytest

from agentenvs.agents.policy import PolicyError, SamplingParams
from agentenvs.agents.registry import make_policy, parse_spec
from agentenvs.agents.scripted import ExpertPolicy, RandomPolicy


@pytest.mark.parametrize(
    ("spec", "parsed"),
    [
        ("expert", ("expert", "")),
        ("random", ("random", "")),
        ("random:7", ("random", "7")),
        ("hf:Qwen/Qwen3-1.7B", ("hf", "Qwen/Qwen3-1.7B")),
        ("hf:/models/sft", ("hf", "/models/sft")),
        ("vllm:/models/sft", ("vllm", "/models/sft")),
        (
            "openai:MiniMax-M2.1@https://api.example.com/v1",
            ("openai", "MiniMax-M2.1@https://api.example.com/v1"),
        ),
        (
            "openai:org/model@http://127.0.0.1:8000/v1",
            ("openai", "org/model@http://127.0.0.1:8000/v1"),
        ),
        ("embedded", ("embedded", "")),
    ],
)
def test_parse_spec(spec: str, parsed: tuple[str, str]) -> None:
    assert parse_spec(spec) == parsed


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "an agent spec is required"),
        ("gpt4", "unknown agent kind"),
        ("hf:", "needs a model directory"),
        ("openai:gpt-4o", "needs <model>@<base url>"),
        ("openai:gpt-4o@localhost:8000", "needs <model>@<base url>"),
        ("random:abc", "integer seed"),
        ("expert:x", "takes no target"),
    ],
)
def test_bad_specs_list_the_valid_forms(spec: str, message: str) -> None:
    with pytest.raises(PolicyError, match=message) as info:
        parse_spec(spec)
    assert "Valid agent specs" in str(info.value) and "openai:<model>@<base url>" in str(info.value)


def test_make_scripted_policies() -> None:
    assert isinstance(make_policy("expert"), ExpertPolicy)
    random = make_policy("random:3")
    assert isinstance(random, RandomPolicy) and random.seed == 3 and random.acts_from_state
    with pytest.raises(PolicyError, match="takes no options"):
        make_policy("expert", device="cuda")
    with pytest.raises(PolicyError, match="acts from environment state"):
        random.generate([[{"role": "user", "content": "hi"}]])


def test_sampling_params_are_checked() -> None:
    assert SamplingParams() == SamplingParams(1.0, 1.0, 512, None)
    for bad in ({"temperature": -1}, {"top_p": 0}, {"top_p": 1.5}, {"max_new_tokens": 0}):
        with pytest.raises(PolicyError):
            SamplingParams(**bad)


def test_transformers_backend_reports_a_missing_model(tmp_path) -> None:
    from agentenvs.agents.models import ModelNotFoundError

    with pytest.raises(ModelNotFoundError, match="no such directory") as info:
        make_policy(f"hf:{tmp_path / 'missing'}")
    assert "\n" not in str(info.value) and "accepted: 'embedded'" in str(info.value)
