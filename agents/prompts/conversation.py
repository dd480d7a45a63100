"""The messages of one episode (:class:`Conversation`), and the prompt the model saw at any turn
of stored messages (:func:`prompt_messages`), the history window applied."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentenvs.agents.prompts.base import ALL_TURNS, PastStep
from agentenvs.agents.prompts.registry import env_prompt
from agentenvs.agents.prompts.render import render_observation

__all__ = ["INVALID_ACTION_PLACEHOLDER", "Conversation", "prompt_messages"]

INVALID_ACTION_PLACEHOLDER = "<invalid format>"
"""The action a template prompt's history shows for a reply that had none."""

Message = dict[str, str]


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
