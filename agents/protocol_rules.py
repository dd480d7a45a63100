"""A benchmark protocol applied to one environment: the one piece every driver of an episode uses.

:class:`ProtocolRules` turns a protocol's name (:mod:`agentenvs.agents.protocols`) into what playing an
episode needs: the prompt (:func:`agentenvs.agents.prompts.env_prompt` with the protocol's prompt name),
the history window, the parser, the feedback for an unparseable reply, what an unparseable reply
does (``unparseable``: ``"feedback"``, not stepped; ``"project"``, the parser's projection is
stepped and the step recorded invalid), the environment keywords (the variant), the turn limits
and the invalid-action penalty. :func:`agentenvs.agents.rollout.run_rollouts` and
:class:`agentenvs.integrations.episode.TextEpisode` (TRL, verl) both use it, so every driver plays the same
setup.

``ProtocolRules.of(env_id, "default")`` is the environment's default protocol (an environment
without one plays without a protocol); ``None`` is no protocol: the environment's default prompt
and reply format, an unparseable reply answered with :func:`agentenvs.agents.prompts.format_error_feedback`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from agentenvs.agents.parsing import ParseResult, get_parser
from agentenvs.agents.policy import Completion
from agentenvs.agents.prompts import (
    EnvPrompt,
    env_prompt,
    format_error_feedback,
    format_reply,
    parse_action,
)
from agentenvs.agents.protocols import DEFAULT_PROTOCOLS, EnvProtocol, Mode, env_protocol

__all__ = ["ProtocolRules"]


@dataclass(frozen=True)
class ProtocolRules:
    """What a run's protocol decides: prompt, parser, unparseable replies, env keywords."""

    env_id: str
    name: str | None
    setup: EnvProtocol | None
    prompt: EnvPrompt

    @classmethod
    def of(cls, env_id: str, protocol: str | None = "default") -> ProtocolRules:
        """The rules of ``protocol`` (a name, ``"default"`` or None) for ``env_id``; an unknown
        protocol or environment id is an error naming the valid ones."""
        name = protocol
        if name == "default":  # an environment without a default protocol plays without one
            name = DEFAULT_PROTOCOLS.get(env_id)
        setup = env_protocol(name, env_id) if name is not None else None
        return cls(env_id, name, setup, env_prompt(env_id, setup.prompt if setup else None))

    @property
    def prompt_name(self) -> str | None:
        return self.setup.prompt if self.setup else None

    @property
    def parser_name(self) -> str | None:
        return self.setup.parser if self.setup else None

    @property
    def unparseable(self) -> str:
        """``"feedback"`` or ``"project"`` (see the module docstring)."""
        return self.setup.unparseable if self.setup else "feedback"

    @property
    def invalid_penalty(self) -> float:
        """Subtracted from the reward of a reply that broke the format (0 without a protocol)."""
        return float(self.setup.invalid_penalty) if self.setup else 0.0

    def max_turns(self, mode: Mode) -> int | None:
        """The protocol's turn limit for ``mode`` (``eval`` or ``train``); None without one."""
        return self.setup.turns(mode) if self.setup else None

    def history(self, history: int | None | str) -> int | None | str:
        """``history="default"`` means the protocol's window (without one, the prompt's)."""
        return self.setup.history if self.setup is not None and history == "default" else history

    def parse(self, text: str) -> ParseResult:
        if self.setup is None:
            return parse_action(self.env_id, text)
        return get_parser(self.setup.parser)(text)

    def feedback(self, error: str | None) -> str:
        if self.setup is None or not self.setup.invalid_feedback:
            return format_error_feedback(self.env_id, error, self.prompt_name)
        return self.setup.invalid_feedback

    def env_kwargs(self) -> dict[str, Any]:
        return dict(self.setup.env_kwargs) if self.setup is not None else {}

    def format_reply(self, thought: str, action: str) -> str:
        """``action`` (and ``thought``) written in this protocol's reply format."""
        return format_reply(thought, action, self.env_id, self.prompt_name)

    def reformat(self, completion: Completion) -> Completion:
        """A scripted reply rewritten in this protocol's reply format."""
        action = completion.extra.get("action")
        if self.setup is None or completion.error is not None or action is None:
            return completion
        text = self.format_reply(str(completion.extra.get("thought", "")), str(action))
        return dataclasses.replace(completion, text=text)
