"""WebShop's prompt: verl-agent's template (``agent_system/environments/prompts/webshop.py``, kept
to the character, the non-breaking hyphen of "e\u2011commerce" and the trailing spaces
included), filled the way its environment manager's ``build_text_obs`` does
(:func:`render_webshop`)."""

# ruff: noqa: E501  (the prompt texts are kept verbatim, long lines included)

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentenvs.agents.parsing import ReplyFormat
from agentenvs.agents.prompts.base import EnvPrompt, PastStep, history_text

__all__ = [
    "PROMPTS",
    "WEBSHOP_TEMPLATE",
    "WEBSHOP_TEMPLATE_NO_HIS",
    "render_webshop",
    "webshop_page",
    "webshop_task",
]

WEBSHOP_TEMPLATE_NO_HIS = """
You are an expert autonomous agent operating in the WebShop e\u2011commerce environment. 
Your task is to: {task_description}.
Your current observation is: {current_observation}.
Your admissible actions of the current situation are: 
[
{available_actions}
].

Now it's your turn to take one action for the current step.
You should first reason step-by-step about the current situation, then think carefully which admissible action best advances the shopping goal. This reasoning process MUST be enclosed within <think> </think> tags. 
Once you've finished your reasoning, you should choose an admissible action for current step and present it within <action> </action> tags.
"""

WEBSHOP_TEMPLATE = """
You are an expert autonomous agent operating in the WebShop e\u2011commerce environment.
Your task is to: {task_description}.
Prior to this step, you have already taken {step_count} step(s). Below are the most recent {history_length} observations and the corresponding actions you took: {action_history}
You are now at step {current_step} and your current observation is: {current_observation}.
Your admissible actions of the current situation are: 
[
{available_actions}
].

Now it's your turn to take one action for the current step.
You should first reason step-by-step about the current situation, then think carefully which admissible action best advances the shopping goal. This reasoning process MUST be enclosed within <think> </think> tags. 
Once you've finished your reasoning, you should choose an admissible action for current step and present it within <action> </action> tags.
"""


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
        return WEBSHOP_TEMPLATE_NO_HIS.format(
            task_description=task, current_observation=page, available_actions=actions
        )
    shown_past = [PastStep(webshop_page(p.observation, task), p.action) for p in past]
    action_history, shown = history_text(shown_past, history)
    return WEBSHOP_TEMPLATE.format(
        task_description=task,
        step_count=len(past),
        history_length=shown,
        action_history=action_history,
        current_step=len(past) + 1,
        current_observation=page,
        available_actions=actions,
    )


_WEBSHOP = EnvPrompt(
    "WebShop-v0",
    "",
    "template",
    ReplyFormat.TAGS,
    "search[red running shoes]",
    default_history=2,
    render=render_webshop,
    task_of=webshop_task,
    name="webshop-verl-agent",
)

PROMPTS = (_WEBSHOP,)
"""WebShop's prompts, its default first."""
