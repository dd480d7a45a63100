"""BabyAI-Text's prompt: the paper's system prompt (the Prefix-GRPO paper, §7.4) and
Prefix-GRPO's answer to a reply without an action (``verl/verl/interactions/babyai_interaction.py``,
``get_invalid_action_prompt``)."""

# ruff: noqa: E501  (the prompt texts are kept verbatim, long lines included)

from __future__ import annotations

from agentenvs.agents.parsing import ReplyFormat
from agentenvs.agents.prompts.base import EnvPrompt

__all__ = ["BABYAI_INVALID_ACTION", "BABYAI_SYSTEM", "PROMPTS"]

BABYAI_SYSTEM = """You are an exploration master in the BabyAI environment. Every round I will give you an observation and the currently available actions. Your goal is to complete the given navigation or object-manipulation task.

Common actions include:
- turn left
- turn right
- move forward
- go to <object> <id>
- pickup <object> <id>
- drop
- toggle
- go through <door> <id>
- toggle and go through <door> <id>
- check available actions

Your response should use exactly this format:
Thought:
your thoughts.

Action:
[[ your next action ]]

IMPORTANT: Output exactly one executable action and always wrap it in [[ ]]."""

BABYAI_INVALID_ACTION = (
    "Please provide a valid action wrapped in [[ ]].\n"
    "Example actions:\n"
    "- [[ turn left ]] or [[ turn right ]]\n"
    "- [[ move forward ]]\n"
    "- [[ pickup red ball 1 ]]\n"
    "- [[ go to blue key 1 ]]\n"
    "- [[ toggle ]]\n"
    "- [[ check available actions ]]"
)


_BABYAI = EnvPrompt(
    "BabyAI-Text-v0",
    BABYAI_SYSTEM,
    "chat",
    ReplyFormat.THOUGHT_BRACKETS,
    "turn left",
    name="babyai-paper",
)

PROMPTS = (_BABYAI,)
"""BabyAI-Text's prompts, its default first."""
