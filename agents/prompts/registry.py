"""The prompts by environment and by name: each environment's default prompt
(:data:`PROMPTS`) and every named prompt the benchmark protocols choose from
(:data:`NAMED_PROMPTS`), read from the environment plugins' ``prompts`` (ours name the
per-environment modules of this package)."""

from __future__ import annotations

import warnings

from agentenvs.agents.prompts.base import EnvPrompt, UnknownPromptError
from agentenvs.plugins import LiveTable, PluginError, PluginWarning, load_part, plugins, source

__all__ = ["NAMED_PROMPTS", "PROMPTS", "default_history", "env_prompt", "system_prompt"]


def plugin_prompts(env_id: str) -> tuple[EnvPrompt, ...]:
    """``env_id``'s plugin's prompts, its default first (empty where the plugin names none),
    checked: a non-empty sequence of :class:`EnvPrompt` for ``env_id`` (a
    :class:`~agentenvs.plugins.PluginError` naming the distribution else)."""
    found = load_part(env_id, "prompts")
    if found is None:
        return ()
    prompts = tuple(found) if isinstance(found, (list, tuple)) else (found,)
    bad = [p for p in prompts if not isinstance(p, EnvPrompt) or p.env_id != env_id]
    if not prompts or bad:
        raise PluginError(
            f"environment plugin {env_id!r} ({source(env_id)}) is broken: its prompts must be "
            f"a non-empty sequence of EnvPrompt for {env_id}; got {bad or found!r}"
        )
    return prompts


def _all_prompts() -> dict[str, tuple[EnvPrompt, ...]]:
    table = {}
    for env_id in plugins():
        try:
            table[env_id] = plugin_prompts(env_id)
        except PluginError as exc:  # that environment alone has no prompt; it says why on use
            warnings.warn(str(exc), PluginWarning, stacklevel=2)
    return {env_id: prompts for env_id, prompts in table.items() if prompts}


PROMPTS: LiveTable[str, EnvPrompt] = LiveTable(
    lambda: {env_id: prompts[0] for env_id, prompts in _all_prompts().items()}, "prompts"
)
"""Each environment's default prompt (used when no ``prompt=`` name is given)."""

NAMED_PROMPTS: LiveTable[str, EnvPrompt] = LiveTable(
    lambda: {p.name: p for prompts in _all_prompts().values() for p in prompts if p.name},
    "named prompts",
)
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
        if env_id in plugins():
            plugin_prompts(env_id)  # a plugin whose prompts do not load says why
        raise UnknownPromptError(
            f"no prompt is defined for {env_id!r}; prompts exist for {sorted(PROMPTS)} (an "
            "environment plugin names its prompts in its 'prompts' field: docs/extending.md)"
        ) from None


def system_prompt(env_id: str, prompt: str | None = None) -> str:
    """The system message of ``env_id`` ("" where its prompt has none)."""
    return env_prompt(env_id, prompt).system


def default_history(env_id: str, prompt: str | None = None) -> int | None:
    """The history window ``env_id`` uses by default (None: every turn)."""
    return env_prompt(env_id, prompt).default_history
