"""The prompts by environment and by name: each environment's default prompt
(:data:`PROMPTS`) and every named prompt the benchmark protocols choose from
(:data:`NAMED_PROMPTS`), from the per-environment modules of this package."""

from __future__ import annotations

from agentenvs.agents.prompts import alfworld, babyai, sokoban, textcraft, webshop
from agentenvs.agents.prompts.base import EnvPrompt, UnknownPromptError

__all__ = ["NAMED_PROMPTS", "PROMPTS", "default_history", "env_prompt", "system_prompt"]

_MODULES = (textcraft, babyai, alfworld, webshop, sokoban)

PROMPTS: dict[str, EnvPrompt] = {m.PROMPTS[0].env_id: m.PROMPTS[0] for m in _MODULES}
"""Each environment's default prompt (used when no ``prompt=`` name is given)."""

NAMED_PROMPTS: dict[str, EnvPrompt] = {p.name: p for m in _MODULES for p in m.PROMPTS}
"""Every prompt by name (the defaults among them); the protocols choose from these."""


def env_prompt(env_id: str, prompt: str | None = None) -> EnvPrompt:
    """The :class:`EnvPrompt` called ``prompt`` (None: ``env_id``'s default), for ``env_id``."""
    if prompt is not None:
        spec = NAMED_PROMPTS.get(prompt)
        if spec is None:
            raise UnknownPromptError(
                f"no prompt is called {prompt!r}; named prompts: {sorted(NAMED_PROMPTS)}"
            )
        if spec.env_id != env_id:
            raise UnknownPromptError(f"prompt {prompt!r} is {spec.env_id}'s, not {env_id}'s")
        return spec
    try:
        return PROMPTS[env_id]
    except KeyError:
        raise UnknownPromptError(
            f"no prompt is defined for {env_id!r}; prompts exist for {sorted(PROMPTS)} "
            "(add a module with its EnvPrompt to agentenvs/agents/prompts/)"
        ) from None


def system_prompt(env_id: str, prompt: str | None = None) -> str:
    """The system message of ``env_id`` ("" where its prompt has none)."""
    return env_prompt(env_id, prompt).system


def default_history(env_id: str, prompt: str | None = None) -> int | None:
    """The history window ``env_id`` uses by default (None: every turn)."""
    return env_prompt(env_id, prompt).default_history
