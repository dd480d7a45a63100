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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentenvs.agents.parsing import ParseResult, ReplyFormat, parse_reply
from agentenvs.agents.prompts import alfworld, babyai, sokoban, textcraft, webshop
from agentenvs.agents.prompts.alfworld import alfworld_task
from agentenvs.agents.prompts.base import (
    ALL_TURNS,
    EnvPrompt,
    PastStep,
    UnknownPromptError,
    with_admissible_line,
)
from agentenvs.agents.prompts.webshop import webshop_page, webshop_task

__all__ = [
    "ALL_TURNS",
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

INVALID_ACTION_PLACEHOLDER = "<invalid format>"

Message = dict[str, str]

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
    """The action of a reply, parsed by ``env_id``'s reply format (:mod:`agentenvs.agents.parsing`)."""
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


# --------------------------------------------------------------------------------------------
# Conversations


def _window(messages: Sequence[Message], history: int | None) -> list[Message]:
    """Keep the system turn, the first user turn and the last ``history`` exchanges."""
    messages = list(messages)
    if history is None:
        return messages
    head = 1 if messages and messages[0]["role"] == "system" else 0
    keep_first = messages[: head + 1]
    rest = messages[head + 1 :]
    if history <= 0:
        return keep_first[:head] + rest[-1:] if rest else keep_first
    return keep_first + rest[max(0, len(rest) - 2 * history) :]


def prompt_messages(
    env_id: str,
    messages: Sequence[Message],
    turn: int,
    history: int | None = ALL_TURNS,
    prompt: str | None = None,
) -> list[Message]:
    """The prompt the model saw before its reply number ``turn`` (0-based), from stored messages.

    ``history`` and ``prompt`` must be the window and prompt the episode was played with
    (``Trajectory.metadata["history"]`` and ``["prompt"]``).
    """
    user_positions = [i for i, m in enumerate(messages) if m["role"] == "user"]
    if not 0 <= turn < len(user_positions):
        raise IndexError(
            f"turn {turn} out of range: the messages have {len(user_positions)} user turns"
        )
    end = user_positions[turn] + 1
    head = [messages[0]] if messages and messages[0]["role"] == "system" else []
    if env_prompt(env_id, prompt).style == "template":
        return [dict(m) for m in head] + [dict(messages[end - 1])]
    return [dict(m) for m in _window(messages[:end], history)]


class Conversation:
    """The messages of one episode, built turn by turn.

    Call :meth:`start` with the reset observation (or :meth:`resume` with the messages of a
    cut state), then per turn :meth:`prompt` (what the model
    sees), :meth:`add_reply` with its reply, and :meth:`add_observation` (the environment
    stepped) or :meth:`add_format_error` (it was not). :attr:`messages` is the full list that
    goes into the trajectory file.
    """

    def __init__(
        self, env_id: str, history: int | None | str = "default", prompt: str | None = None
    ) -> None:
        self.env_id = env_id
        self.prompt_name = prompt
        self.spec = env_prompt(env_id, prompt)
        self.history: int | None = self.spec.default_history if history == "default" else history  # type: ignore[assignment]
        if self.history is not None and self.history < 0:
            raise ValueError(f"history must be None (all turns) or >= 0, got {self.history}")
        self.messages: list[Message] = []
        self._past: list[PastStep] = []
        self._task = ""
        self._observation = ""
        self._pending_action: str | None = None

    def start(self, observation: str, info: Mapping[str, Any] | None = None) -> None:
        info = info or {}
        self.messages = (
            [{"role": "system", "content": self.spec.system}] if self.spec.system else []
        )
        self._past = []
        self._task = self.spec.task_of(observation, info) if self.spec.render else ""
        self._observation = observation
        self.messages.append(
            {"role": "user", "content": self._render(observation, info, first=True)}
        )

    def resume(self, messages: Sequence[Mapping[str, str]], observation: str) -> None:
        """Start from earlier ``messages`` instead of :meth:`start` (an episode that begins at a
        cut state): they are kept as they are and must end with the user turn that shows
        ``observation``, the current one. Chat-style prompts only (a template prompt is rebuilt
        from the environment's steps, which messages do not hold)."""
        if self.spec.render is not None:
            raise ValueError(
                f"{self.env_id} has a template-style prompt; a conversation can resume from "
                "messages only with a chat-style prompt (TextCraft, BabyAI, ALFWorld)"
            )
        if not messages or messages[-1].get("role") != "user":
            raise ValueError("resume() needs messages that end with the current user turn")
        self.messages = [dict(m) for m in messages]
        self._past = []
        self._task = ""
        self._observation = observation
        self._pending_action = None

    def prompt(self) -> list[Message]:
        """The messages the model is given now (the history window applied)."""
        if not self.messages or self.messages[-1]["role"] != "user":
            raise RuntimeError("prompt() is for after start() or an observation, not after a reply")
        return prompt_messages(
            self.env_id, self.messages, self.user_turns - 1, self.history, self.prompt_name
        )

    @property
    def user_turns(self) -> int:
        return sum(1 for m in self.messages if m["role"] == "user")

    def add_reply(self, text: str, action: str | None) -> None:
        """Record the model's reply and the action parsed from it (None: unparseable)."""
        self.messages.append({"role": "assistant", "content": text})
        self._pending_action = action

    def add_observation(self, observation: str, info: Mapping[str, Any] | None = None) -> None:
        """The environment stepped with the last reply's action and answered ``observation``."""
        action = (
            self._pending_action if self._pending_action is not None else INVALID_ACTION_PLACEHOLDER
        )
        self._past.append(PastStep(self._observation, action))
        self._observation = observation
        self.messages.append({"role": "user", "content": self._render(observation, info or {})})

    def add_format_error(self, feedback: str, info: Mapping[str, Any] | None = None) -> None:
        """The last reply had no action: answer with ``feedback`` (the environment unchanged)."""
        if self.spec.render is None:
            content = feedback
        else:  # a template prompt must show the state again: feedback, then the prompt
            content = f"{feedback}\n{self._render(self._observation, info or {})}"
        self.messages.append({"role": "user", "content": content})

    def _render(self, observation: str, info: Mapping[str, Any], first: bool = False) -> str:
        return render_observation(
            self.env_id,
            observation,
            info,
            first=first,
            past=self._past,
            task=self._task,
            history=self.history,
            prompt=self.prompt_name,
        )
