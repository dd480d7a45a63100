"""Template renderers: verl-agent's environment managers' ``build_text_obs`` (WebShop, Sokoban,
ALFWorld), formatting the same way, and Prefix-GRPO's ALFWorld admissible-actions line.
:mod:`agentenvs.agents.prompts` puts them into its prompt table; the texts are in
:mod:`agentenvs.agents.prompt_templates`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentenvs.agents import prompt_templates as T

__all__ = [
    "PastStep",
    "alfworld_task",
    "render_alfworld",
    "render_sokoban",
    "render_webshop",
    "webshop_page",
    "webshop_task",
    "with_admissible_line",
]


@dataclass(frozen=True)
class PastStep:
    """One earlier step as a template prompt's history shows it."""

    observation: str
    action: str


def _history_text(past: Sequence[PastStep], history: int | None) -> tuple[str, int]:
    """verl-agent's ``SimpleMemory.fetch``: the last ``history`` steps, numbered from 1."""
    recent = list(past) if history is None else list(past)[-history:] if history > 0 else []
    start = len(past) - len(recent)
    lines = [
        f"[Observation {n}: '{step.observation}', Action {n}: '{step.action}']"
        for n, step in enumerate(recent, start=start + 1)
    ]
    return "\n".join(lines), len(recent)


def render_sokoban(
    observation: str,
    info: Mapping[str, Any],
    past: Sequence[PastStep],
    task: str,
    history: int | None,
) -> str:
    if not past or history == 0:
        return T.SOKOBAN_TEMPLATE_NO_HIS.format(current_observation=observation)
    action_history, shown = _history_text(past, history)
    return T.SOKOBAN_TEMPLATE.format(
        step_count=len(past),
        history_length=shown,
        action_history=action_history,
        current_step=len(past) + 1,
        current_observation=observation,
    )


_SEP = " [SEP] "


def webshop_task(observation: str, info: Mapping[str, Any]) -> str:
    """The shopping instruction: ``info``'s ``instruction`` (or ``fields["instruction"]``), else
    the text after ``Instruction:`` in a ``[SEP]``-joined page (verl-agent's ``extract_task``)."""
    for source in (info, info.get("fields") or {}):
        text = source.get("instruction") if isinstance(source, Mapping) else None
        if isinstance(text, str) and text:
            return text
    parts = observation.split(_SEP)
    for i, part in enumerate(parts[:-1]):
        if part.strip() == "Instruction:":
            return parts[i + 1].strip()
    return ""


def webshop_page(observation: str, task: str) -> str:
    """verl-agent's ``format_obs``: the page after the instruction, each part quoted."""
    parts = observation.split(_SEP)
    if task and task in parts:
        index = parts.index(task)
        return _SEP.join(f"'{p}'" for p in parts[index + 1 :])
    return observation


def _webshop_actions(info: Mapping[str, Any]) -> str:
    """verl-agent's available-action list: ``'search[<your query>]',`` / ``'click[...]',`` lines."""
    actions = info.get("admissible_actions") or []
    lines = []
    for action in actions:
        action = str(action)
        if action == "search":
            action = "search[<your query>]"
        elif "[" not in action:
            action = f"click[{action}]"
        lines.append(f"'{action}',")
    return "\n".join(lines)


def render_webshop(
    observation: str,
    info: Mapping[str, Any],
    past: Sequence[PastStep],
    task: str,
    history: int | None,
) -> str:
    page = webshop_page(observation, task)
    actions = _webshop_actions(info)
    if not past or history == 0:
        return T.WEBSHOP_TEMPLATE_NO_HIS.format(
            task_description=task, current_observation=page, available_actions=actions
        )
    shown_past = [PastStep(webshop_page(p.observation, task), p.action) for p in past]
    action_history, shown = _history_text(shown_past, history)
    return T.WEBSHOP_TEMPLATE.format(
        task_description=task,
        step_count=len(past),
        history_length=shown,
        action_history=action_history,
        current_step=len(past) + 1,
        current_observation=page,
        available_actions=actions,
    )


def alfworld_task(observation: str, info: Mapping[str, Any]) -> str:
    """verl-agent's ``extract_task``: the text after ``Your task is to: `` ("" if absent)."""
    start = observation.find("Your task is to: ")
    return observation[start + len("Your task is to: ") :].strip() if start != -1 else ""


def render_alfworld(
    observation: str,
    info: Mapping[str, Any],
    past: Sequence[PastStep],
    task: str,
    history: int | None,
) -> str:
    """verl-agent's ``AlfWorldEnvironmentManager.build_text_obs``: the admissible actions
    quoted, one per line, ``help`` left out."""
    actions = "\n ".join(f"'{a}'" for a in info.get("admissible_actions") or [] if a != "help")
    if not past or history == 0:
        return T.ALFWORLD_TEMPLATE_NO_HIS.format(
            current_observation=observation, admissible_actions=actions
        )
    action_history, shown = _history_text(past, history)
    return T.ALFWORLD_TEMPLATE.format(
        task_description=task,
        step_count=len(past),
        history_length=shown,
        action_history=action_history,
        current_step=len(past) + 1,
        current_observation=observation,
        admissible_actions=actions,
    )


def with_admissible_line(label: str, observation: str, info: Mapping[str, Any]) -> str:
    """Prefix-GRPO's ALFWorld ``_format_observation``: ``obs\\nAVAILABLE ACTIONS: a,b,...``."""
    actions = [str(a).strip() for a in info.get("admissible_actions") or [] if str(a).strip()]
    if not actions:
        return observation
    observation = observation.rstrip()
    if "available actions:" in observation.lower():
        return observation
    return f"{observation}\n{label}{','.join(actions)}"
