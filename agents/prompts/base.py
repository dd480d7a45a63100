"""What every environment's prompt module builds on: :class:`EnvPrompt` (how one environment is
prompted), :class:`PastStep` and verl-agent's history text for template prompts, and
Prefix-GRPO's admissible-actions line for chat prompts."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentenvs.agents.parsing import ReplyFormat

__all__ = [
    "ALL_TURNS",
    "EnvPrompt",
    "PastStep",
    "UnknownPromptError",
    "history_text",
    "with_admissible_line",
]

ALL_TURNS = None  # a history window that keeps every turn


class UnknownPromptError(KeyError):
    """No prompt is defined for an environment id; the message lists the ones that exist."""

    def __str__(self) -> str:  # KeyError quotes its argument; show the sentence as it is
        return str(self.args[0])


@dataclass(frozen=True)
class PastStep:
    """One earlier step as a template prompt's history shows it."""

    observation: str
    action: str


def history_text(past: Sequence[PastStep], history: int | None) -> tuple[str, int]:
    """verl-agent's ``SimpleMemory.fetch``: the last ``history`` steps, numbered from 1."""
    recent = list(past) if history is None else list(past)[-history:] if history > 0 else []
    start = len(past) - len(recent)
    lines = [
        f"[Observation {n}: '{step.observation}', Action {n}: '{step.action}']"
        for n, step in enumerate(recent, start=start + 1)
    ]
    return "\n".join(lines), len(recent)


def with_admissible_line(label: str, observation: str, info: Mapping[str, Any]) -> str:
    """Prefix-GRPO's ALFWorld ``_format_observation``: ``obs\\nAVAILABLE ACTIONS: a,b,...``."""
    actions = [str(a).strip() for a in info.get("admissible_actions") or [] if str(a).strip()]
    if not actions:
        return observation
    observation = observation.rstrip()
    if "available actions:" in observation.lower():
        return observation
    return f"{observation}\n{label}{','.join(actions)}"


TemplateRenderer = Callable[[str, Mapping[str, Any], Sequence[PastStep], str, "int | None"], str]


@dataclass(frozen=True)
class EnvPrompt:
    """How one environment is prompted.

    ``system``: the system message ("" for none). ``style``: ``chat`` or ``template``.
    ``reply_format``: what a reply must look like. ``default_history``: the history window used
    when a caller gives none (None: all turns). ``example_action``: used in format-error
    feedback. ``first_user_prefix``: a fixed text put before the first observation (ALFWorld's
    fixed user message). ``render``: for ``template`` style, ``(observation, info, past, task,
    history) -> user text``; for ``chat`` style None (the observation is the user turn).
    ``task_of``: how a template prompt finds the task statement in the first observation.
    ``name``: the prompt's name in :data:`NAMED_PROMPTS`. ``admissible_line``: for ``chat``
    style, when set, every observation is followed by a line of this label and the admissible
    actions joined by commas (Prefix-GRPO's ALFWorld interaction; nothing is added when the
    observation has no admissible actions or already lists them).
    """

    env_id: str
    system: str
    style: str
    reply_format: ReplyFormat
    example_action: str
    default_history: int | None = ALL_TURNS
    first_user_prefix: str = ""
    render: TemplateRenderer | None = None
    task_of: Callable[[str, Mapping[str, Any]], str] = field(default=lambda obs, info: "")
    name: str = ""
    admissible_line: str = ""

    def __post_init__(self) -> None:
        if self.style not in ("chat", "template"):
            raise ValueError(f"style must be 'chat' or 'template', got {self.style!r}")
        if (self.style == "template") != (self.render is not None):
            raise ValueError(
                "a 'template' prompt needs render=..., a 'chat' prompt must not have one"
            )
