"""Sokoban's prompt: verl-agent's template (``agent_system/environments/prompts/sokoban.py``, kept
to the character, the "observaitons" typo included: the text GiGPO ran), filled the way its
environment manager's ``build_text_obs`` does (:func:`render_sokoban`)."""

# ruff: noqa: E501  (the prompt texts are kept verbatim, long lines included)

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentenvs.agents.parsing import ReplyFormat
from agentenvs.agents.prompts.base import EnvPrompt, PastStep, history_text

__all__ = ["PROMPTS", "SOKOBAN_TEMPLATE", "SOKOBAN_TEMPLATE_NO_HIS", "render_sokoban"]

_SOKOBAN_HEAD = """
You are an expert agent operating in the Sokoban environment.

# Symbols and Their Meaning
- Walls (`#`): These block movement. You can't move through or push anything into walls.
- Floor (`_`): Open spaces where you can walk and move boxes.
- Targets (`O`): The spots where boxes need to go.
- Boxes (`X`): These are what you need to push onto the targets.
- Player (`P`): That's you! You'll move around the grid to push boxes.
- Box on Target (`\u221a`): A box successfully placed on a target.
- Player on Target (`S`): You standing on a target.

# Your Goal
Your goal is to push all the boxes (`X`) onto the target spots (`O`). Once all boxes are on the targets, you win!

# Rules
You can only push boxes. You can't pull them, so plan ahead to avoid getting stuck.
You can't walk through or push boxes into walls (`#`).
To avoid traps, do not push boxes into corners or against walls where they can't be moved again.

# Current Step
"""

_SOKOBAN_TAIL = """Your admissible actions are ["up", "down", "left", "right"].

Now it's your turn to make a move (choose ONE action only for the current step).
You should first reason step-by-step about the current situation \u2014 observe the positions of boxes and targets, plan a path to push a box toward a target, and avoid traps like corners or walls. This reasoning process MUST be enclosed within <think> </think> tags. 
Once you've finished your reasoning, you should choose an admissible action for current step and present it within <action> </action> tags.
"""

SOKOBAN_TEMPLATE_NO_HIS = (
    _SOKOBAN_HEAD
    + """Your current observation is:
{current_observation}
"""
    + _SOKOBAN_TAIL
)

SOKOBAN_TEMPLATE = (
    _SOKOBAN_HEAD
    + """Prior to this step, you have already taken {step_count} step(s). Below are the most recent {history_length} observaitons and the corresponding actions you took: {action_history}
You are now at step {current_step} and your current observation is:
{current_observation}
"""
    + _SOKOBAN_TAIL
)


def render_sokoban(
    observation: str,
    info: Mapping[str, Any],
    past: Sequence[PastStep],
    task: str,
    history: int | None,
) -> str:
    if not past or history == 0:
        return SOKOBAN_TEMPLATE_NO_HIS.format(current_observation=observation)
    action_history, shown = history_text(past, history)
    return SOKOBAN_TEMPLATE.format(
        step_count=len(past),
        history_length=shown,
        action_history=action_history,
        current_step=len(past) + 1,
        current_observation=observation,
    )


_SOKOBAN = EnvPrompt(
    "Sokoban-v0",
    "",
    "template",
    ReplyFormat.TAGS,
    "up",
    default_history=3,
    render=render_sokoban,
    name="sokoban-verl-agent",
)

PROMPTS = (_SOKOBAN,)
"""Sokoban's prompts, its default first."""
