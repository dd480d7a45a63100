"""Prompts per environment: system prompt, observation rendering, reply format, history window.

The public API (used by rollouts here and by ``replay``):

* :func:`system_prompt` ``(env_id) -> str``: the system message ("" where the environment's
  prompt has none: verl-agent's WebShop and Sokoban templates are one user message).
* :func:`render_observation` ``(env_id, observation, info, *, first, past, task, history)``:
  the user-turn text for an observation.
* :func:`format_reply` ``(thought, action, env_id=None)``: an assistant reply in the
  environment's reply format (experts write their replies with it, so expert trajectories are
  SFT-ready).
* :func:`parse_action` ``(env_id, text) -> ParseResult``: the action of a reply.
* :func:`format_error_feedback` ``(env_id, error)``: the user turn sent instead of stepping the
  environment when a reply cannot be parsed.
* :class:`Conversation`: builds the message list of one episode turn by turn and gives the
  prompt the model sees now (:meth:`Conversation.prompt`), with the history window applied.
* :func:`prompt_messages` ``(env_id, messages, turn, history)``: the same prompt rebuilt from a
  stored trajectory's messages (what the model saw before its reply number ``turn``).

Two prompt styles (:class:`EnvPrompt`):

* ``chat`` (TextCraft, BabyAI, ALFWorld; the paper's): system prompt, then alternating user
  observations and assistant replies. A history window of N keeps the system prompt, the first
  user turn (it states the task: TextCraft's crafting commands, ALFWorld's goal) and the last N
  (assistant, user) exchanges; ``None`` keeps every turn (the paper's setting).
* ``template`` (WebShop, Sokoban; verl-agent's): every step is one user message, the template
  filled with the current observation and the last N (observation, action) pairs, formatted as
  verl-agent's ``SimpleMemory.fetch`` does; the stored message list holds each step's user
  message and reply, and the prompt at a step is that step's user message alone.

Stored messages (``Trajectory.messages``) hold the user turns exactly as the model saw them, so
:func:`prompt_messages` needs nothing else to rebuild any step's prompt.

One module per environment holds its prompts (texts verbatim, renderers, :class:`EnvPrompt`
entries): :mod:`.textcraft`, :mod:`.babyai`, :mod:`.alfworld`, :mod:`.webshop`,
:mod:`.sokoban`; each one's ``PROMPTS`` lists its prompts, its default first. Besides each
environment's default prompt (:data:`PROMPTS`, by env id) there are named prompts
(:data:`NAMED_PROMPTS`, by prompt name) that the benchmark protocols
(:mod:`agentenvs.agents.protocols`) choose: e.g. ``alfworld-verl-agent`` (verl-agent's template
with the admissible actions) and
``alfworld-agentgym`` (the paper's prompt, every observation followed by Prefix-GRPO's
``AVAILABLE ACTIONS:`` line). Every function takes ``prompt=`` (a name; None: the environment's
default), and a trajectory records the name in ``metadata["prompt"]``.

The package's own modules: :mod:`.base` (:class:`EnvPrompt`, the history text),
:mod:`.registry` (the prompts by environment and by name), :mod:`.render` (one turn's texts) and
:mod:`.conversation` (an episode's messages and the prompt at any turn); this package exports
their public API.
"""

from __future__ import annotations

from agentenvs.agents.prompts.alfworld import alfworld_task
from agentenvs.agents.prompts.base import ALL_TURNS, EnvPrompt, PastStep, UnknownPromptError
from agentenvs.agents.prompts.conversation import (
    INVALID_ACTION_PLACEHOLDER,
    Conversation,
    prompt_messages,
)
from agentenvs.agents.prompts.registry import (
    NAMED_PROMPTS,
    PROMPTS,
    default_history,
    env_prompt,
    system_prompt,
)
from agentenvs.agents.prompts.render import (
    format_error_feedback,
    format_reply,
    parse_action,
    render_observation,
)
from agentenvs.agents.prompts.webshop import webshop_page, webshop_task

__all__ = [
    "ALL_TURNS",
    "INVALID_ACTION_PLACEHOLDER",
    "NAMED_PROMPTS",
    "PROMPTS",
    "Conversation",
    "EnvPrompt",
    "PastStep",
    "UnknownPromptError",
    "alfworld_task",
    "default_history",
    "env_prompt",
    "format_error_feedback",
    "format_reply",
    "parse_action",
    "prompt_messages",
    "render_observation",
    "system_prompt",
    "webshop_page",
    "webshop_task",
]
