"""A benchmark protocol resolved for one environment, once per run.

:meth:`ProtocolRules.of` turns a protocol's name (:mod:`agentenvs.agents.protocols`; ``"default"``
and None resolved by :func:`agentenvs.agents.protocols.resolve_protocol`, the one place that
does) into everything playing an episode needs, as plain values: the prompt
(:func:`agentenvs.agents.prompts.env_prompt` with the protocol's prompt name), the history window,
the parser, the feedback for an unparseable reply, what an unparseable reply does
(``unparseable``: ``"feedback"``, not stepped; ``"project"``, the parser's projection is stepped
and the step recorded invalid), the environment keywords (the variant), the turn limits and the
invalid-action penalty. Without a protocol the same fields hold the environment's default prompt,
its reply format's parser and :func:`agentenvs.agents.prompts.format_error_feedback`, so nothing
that plays an episode asks again whether there is one. :class:`agentenvs.agents.episode.Episode`
(rollouts, the TRL adapter, the verl agent loop) plays by it.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentenvs.agents.parsing import ParseResult, get_parser, parse_reply
from agentenvs.agents.policy import Completion
from agentenvs.agents.prompts import EnvPrompt, env_prompt, format_error_feedback, format_reply
from agentenvs.agents.protocols import Mode, env_protocol, resolve_protocol

__all__ = ["ProtocolRules"]


@dataclass(frozen=True)
class ProtocolRules:
    """What a run's protocol decides: prompt, parser, unparseable replies, env keywords."""

    env_id: str
    name: str | None
    """The protocol's name (None: the run plays without one)."""
    prompt: EnvPrompt
    parser_name: str | None
    """The protocol's parser (None: the prompt's reply format decides)."""
    unparseable: str
    """``"feedback"`` or ``"project"`` (see the module docstring)."""
    invalid_penalty: float
    """Subtracted from the reward of a reply that broke the format (0 without a protocol)."""
    window: int | None | str
    """The protocol's history window (``"default"`` without one: the prompt's)."""
    turn_limits: Mapping[str, int]
    """Replies per episode by mode (``eval``, ``train``); empty without a protocol."""
    variant_kwargs: Mapping[str, Any]
    parse: Callable[[str], ParseResult] = field(repr=False, compare=False)
    """The action of a reply (the protocol's parser, or the prompt's reply format's)."""
    feedback_text: str = ""
    """The protocol's fixed answer to an unparseable reply ("": the prompt's, with the error)."""

    @classmethod
    def of(cls, env_id: str, protocol: str | None = "default") -> ProtocolRules:
        """The rules of ``protocol`` (a name, ``"default"`` or None) for ``env_id``; an unknown
        protocol or environment id is an error naming the valid ones."""
        name = resolve_protocol(env_id, protocol)
        if name is None:
            prompt = env_prompt(env_id)
            return cls(
                env_id, None, prompt, None, "feedback", 0.0, "default", {}, {},
                functools.partial(parse_reply, reply_format=prompt.reply_format),
            )  # fmt: skip
        setup = env_protocol(name, env_id)
        return cls(
            env_id,
            name,
            env_prompt(env_id, setup.prompt),
            setup.parser,
            setup.unparseable,
            float(setup.invalid_penalty),
            setup.history,
            dict(setup.max_turns),
            dict(setup.env_kwargs),
            get_parser(setup.parser),
            setup.invalid_feedback,
        )

    @property
    def prompt_name(self) -> str | None:
        """The protocol's named prompt (None: the environment's default prompt)."""
        return self.prompt.name if self.name is not None else None

    def max_turns(self, mode: Mode) -> int | None:
        """The protocol's turn limit for ``mode`` (``eval`` or ``train``); None without one."""
        return self.turn_limits.get(mode)

    def history(self, history: int | None | str) -> int | None | str:
        """``history="default"`` means the protocol's window (without one, the prompt's)."""
        return self.window if history == "default" else history

    def feedback(self, error: str | None) -> str:
        """The user turn that answers an unparseable reply."""
        return self.feedback_text or format_error_feedback(self.env_id, error, self.prompt_name)

    def env_kwargs(self) -> dict[str, Any]:
        return dict(self.variant_kwargs)

    def format_reply(self, thought: str, action: str) -> str:
        """``action`` (and ``thought``) written in this protocol's reply format."""
        return format_reply(thought, action, self.env_id, self.prompt_name)

    def reformat(self, completion: Completion) -> Completion:
        """A scripted reply rewritten in this protocol's reply format (without a protocol, the
        environment's: the text the scripted policy wrote)."""
        action = completion.extra.get("action")
        if completion.error is not None or action is None:
            return completion
        text = self.format_reply(str(completion.extra.get("thought", "")), str(action))
        return dataclasses.replace(completion, text=text)
