"""ALFWorld's prompts: the paper's (the Prefix-GRPO paper, §7.4, the default), Prefix-GRPO's
(the paper's, every observation followed by the ``AVAILABLE ACTIONS:`` line of
``verl/verl/interactions/alfworld_interaction.py``'s ``_format_observation``; its answer to a
reply without an action from the same file's ``get_invalid_action_prompt``) and verl-agent's
template (``agent_system/environments/prompts/alfworld.py``, kept to the character, the
"observaitons" typo included: the text GiGPO ran; the manager's ``build_text_obs`` in
:func:`render_alfworld`)."""

# ruff: noqa: E501  (the prompt texts are kept verbatim, long lines included)

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentenvs.agents.parsing import ReplyFormat
from agentenvs.agents.prompts.base import EnvPrompt, PastStep, history_text

__all__ = [
    "AGENTGYM_AVAILABLE_ACTIONS",
    "ALFWORLD_INVALID_ACTION",
    "ALFWORLD_SYSTEM",
    "ALFWORLD_TEMPLATE",
    "ALFWORLD_TEMPLATE_NO_HIS",
    "ALFWORLD_USER",
    "PROMPTS",
    "alfworld_task",
    "render_alfworld",
]

ALFWORLD_SYSTEM = """You are an agent in the ALFWorld environment. Your goal is to complete household tasks by interacting with objects in various rooms.

You can use actions like:
- go to [location]
- take [object] from [location]
- put [object] in/on [location]
- open [object]
- close [object]
- toggle [object]
- clean [object] with [location]
- heat [object] with [location]
- cool [object] with [location]
- examine [object]
- inventory

Instructions:
- Read the task instruction carefully.
- Plan your actions to complete the task.
- Navigate between rooms as needed.
- Manipulate objects correctly.

Your response should contain only the action."""

ALFWORLD_USER = (
    "Please help me complete the household task. I will provide you with the task description."
)

ALFWORLD_TEMPLATE_NO_HIS = """
You are an expert agent operating in the ALFRED Embodied Environment.
Your current observation is: {current_observation}
Your admissible actions of the current situation are: [{admissible_actions}].

Now it's your turn to take an action.
You should first reason step-by-step about the current situation. This reasoning process MUST be enclosed within <think> </think> tags. 
Once you've finished your reasoning, you should choose an admissible action for current step and present it within <action> </action> tags.
"""

ALFWORLD_TEMPLATE = """
You are an expert agent operating in the ALFRED Embodied Environment. Your task is to: {task_description}
Prior to this step, you have already taken {step_count} step(s). Below are the most recent {history_length} observaitons and the corresponding actions you took: {action_history}
You are now at step {current_step} and your current observation is: {current_observation}
Your admissible actions of the current situation are: [{admissible_actions}].

Now it's your turn to take an action.
You should first reason step-by-step about the current situation. This reasoning process MUST be enclosed within <think> </think> tags. 
Once you've finished your reasoning, you should choose an admissible action for current step and present it within <action> </action> tags.
"""

ALFWORLD_INVALID_ACTION = (
    "Please provide a valid action. "
    "Example actions: go to <object>, take <object> from <receptacle>, "
    "put <object> in/on <receptacle>, examine <object>"
)

# Prefix-GRPO's ALFWorld interaction appends the admissible commands to every observation.
AGENTGYM_AVAILABLE_ACTIONS = "AVAILABLE ACTIONS: "


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
        return ALFWORLD_TEMPLATE_NO_HIS.format(
            current_observation=observation, admissible_actions=actions
        )
    action_history, shown = history_text(past, history)
    return ALFWORLD_TEMPLATE.format(
        task_description=task,
        step_count=len(past),
        history_length=shown,
        action_history=action_history,
        current_step=len(past) + 1,
        current_observation=observation,
        admissible_actions=actions,
    )


_ALFWORLD = EnvPrompt(
    "ALFWorld-v0",
    ALFWORLD_SYSTEM,
    "chat",
    ReplyFormat.PLAIN,
    "look",
    first_user_prefix=ALFWORLD_USER,
    name="alfworld-paper",
)

_AGENTGYM = EnvPrompt(
    "ALFWorld-v0",
    ALFWORLD_SYSTEM,
    "chat",
    ReplyFormat.PLAIN,
    "look",
    first_user_prefix=ALFWORLD_USER,
    name="alfworld-agentgym",
    admissible_line=AGENTGYM_AVAILABLE_ACTIONS,
)

_VERL_AGENT = EnvPrompt(
    "ALFWorld-v0",
    "",
    "template",
    ReplyFormat.TAGS,
    "look",
    default_history=2,
    render=render_alfworld,
    task_of=alfworld_task,
    name="alfworld-verl-agent",
)

PROMPTS = (_ALFWORLD, _AGENTGYM, _VERL_AGENT)
"""ALFWorld's prompts, its default first."""
