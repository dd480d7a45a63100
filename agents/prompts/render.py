"""The texts of one turn: an observation as the user turn, a reply in the environment's reply
format, the action parsed from a reply, and the feedback that answers an unparseable one."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentenvs.agents.parsing import ParseResult, ReplyFormat, parse_reply
from agentenvs.agents.prompts.base import ALL_TURNS, PastStep, with_admissible_line
from agentenvs.agents.prompts.registry import env_prompt

__all__ = ["format_error_feedback", "format_reply", "parse_action", "render_observation"]


def render_observation(
    env_id: str,
    observation: str,
    info: Mapping[str, Any] | None = None,
    *,
    first: bool = False,
    past: Sequence[PastStep] = (),
    task: str | None = None,
    history: int | None = ALL_TURNS,
    prompt: str | None = None,
) -> str:
    """The user-turn text for ``observation``.

    ``chat`` style: the observation itself (the first one behind the fixed user message where
    the prompt has one; followed by the admissible-actions line where the prompt has one).
    ``template`` style: the template with ``past`` steps (history window ``history``) and
    ``task`` (found in the observation when not given).
    """
    spec = env_prompt(env_id, prompt)
    info = info or {}
    if spec.render is None:
        if spec.admissible_line:
            observation = with_admissible_line(spec.admissible_line, observation, info)
        if first and spec.first_user_prefix:
            return f"{spec.first_user_prefix}\n\n{observation}"
        return observation
    if task is None:
        task = spec.task_of(observation, info)
    return spec.render(observation, info, past, task, history)


def format_reply(
    thought: str, action: str, env_id: str | None = None, prompt: str | None = None
) -> str:
    """An assistant reply carrying ``thought`` and ``action`` in ``env_id``'s reply format.

    Without ``env_id``: the paper's ``Think: ...`` / ``Action: [[ ... ]]`` (TextCraft's).
    """
    reply_format = env_prompt(env_id, prompt).reply_format if env_id else ReplyFormat.THINK_BRACKETS
    thought = " ".join(thought.split()) or "I take the next step."
    if reply_format is ReplyFormat.THOUGHT_BRACKETS:
        return f"Thought:\n{thought}\n\nAction:\n[[ {action} ]]"
    if reply_format is ReplyFormat.PLAIN:
        return action
    if reply_format is ReplyFormat.TAGS:
        return f"<think>{thought}</think>\n<action>{action}</action>"
    return f"Think: {thought}\nAction: [[ {action} ]]"


def parse_action(env_id: str, text: str, prompt: str | None = None) -> ParseResult:
    """The action of a reply, parsed by ``env_id``'s reply format
    (:mod:`agentenvs.agents.parsing`)."""
    return parse_reply(text, env_prompt(env_id, prompt).reply_format)


def format_error_feedback(env_id: str, error: str | None, prompt: str | None = None) -> str:
    """The user turn that answers an unparseable reply (the environment is not stepped)."""
    spec = env_prompt(env_id, prompt)
    why = f" ({error})" if error else ""
    if spec.reply_format is ReplyFormat.TAGS:
        return (
            f"Invalid response format{why}. First reason inside <think> </think> tags, then give "
            "exactly one admissible action inside <action> </action> tags, e.g. "
            f"<action>{spec.example_action}</action>."
        )
    if spec.reply_format is ReplyFormat.PLAIN:
        return (
            f"Invalid response{why}. Your response should contain only the action, e.g. "
            f"{spec.example_action}"
        )
    if spec.reply_format is ReplyFormat.THOUGHT_BRACKETS:
        return (
            f"Invalid response format{why}. Use exactly this format:\nThought:\nyour thoughts.\n\n"
            f"Action:\n[[ your next action ]]\nOutput exactly one executable action and always "
            f"wrap it "
            f"in [[ ]], e.g. [[ {spec.example_action} ]]"
        )
    return (
        f"Invalid response format{why}. Think first, then output exactly one action wrapped in "
        f"[[ ]], e.g. Action: [[ {spec.example_action} ]]"
    )
