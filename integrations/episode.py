"""One agentenvs episode driven by a foreign trainer's generation loop, under a benchmark protocol.

Both engine adapters (:mod:`agentenvs.integrations.trl`, :mod:`agentenvs.integrations.verl.agent_loop`) play an
episode the way :func:`agentenvs.agents.rollout.run_rollouts` does, one reply at a time, with the same
protocol application (:class:`agentenvs.agents.protocol_rules.ProtocolRules`; ``protocol="default"``: the
environment's default protocol, :data:`agentenvs.agents.protocols.DEFAULT_PROTOCOLS`; None: none):

* the environment is made with the protocol's keywords (its variant, e.g. ALFWorld's
  ``game_version``), then ``env_kwargs``;
* the prompt is :class:`agentenvs.agents.prompts.Conversation`'s with the protocol's prompt and history
  window (system prompt, first user turn, each observation rendered by
  :func:`agentenvs.agents.prompts.render_observation`);
* a reply is parsed by the protocol's parser. An unparseable one is, under ``unparseable =
  "feedback"``, answered with the protocol's feedback without stepping the environment
  (recorded with ``valid=False`` and the action ``"<invalid format>"``); under ``"project"``
  (verl-agent's) the parser's projection is stepped and recorded with ``valid=False``,
  ``projected=True`` and the projected action. Either way it counts as a turn, and
  ``format_valid`` is False (the step the protocol's invalid-action penalty applies to);
* the episode ends when the environment terminates or truncates, or after ``max_turns`` replies
  (default: the protocol's training turn limit, else the environment's ``default_max_turns``);
* ``reward`` is the undiscounted sum of the environment's rewards (what our trajectories record
  as ``total_reward``; no penalty in it); ``steps`` keeps, per reply, the anchor observation it
  was chosen from, the parsed action and the reward (GiGPO / PTGPO group steps by them).

:meth:`TextEpisode.act` takes an action that is already separate from any thought (TRL's tool
argument): it goes through the same parser, and a bare action that the reply format would wrap
(written with :func:`agentenvs.agents.prompts.format_reply` and parsed again) is taken as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentenvs.agents.parsing import ParseResult, ReplyFormat, parse_reply
from agentenvs.agents.prompts import INVALID_ACTION_PLACEHOLDER, Conversation
from agentenvs.agents.protocol_rules import ProtocolRules

__all__ = ["INVALID_ACTION", "EpisodeStep", "TextEpisode", "make_env"]

INVALID_ACTION = INVALID_ACTION_PLACEHOLDER


@dataclass(frozen=True)
class EpisodeStep:
    """One reply of an episode: where it was chosen, what it did, what it earned."""

    anchor: str
    """The raw observation the reply was chosen from (PTGPO / GiGPO anchor state)."""
    action: str
    """The parsed (or projected) action, or ``"<invalid format>"`` when the reply had none."""
    reward: float
    valid: bool
    """As our trajectories' ``StepRecord.valid``: False when the reply broke the format (not
    stepped, or projected) or the environment marked the action invalid."""
    observation: str = ""
    """What followed: the environment's observation, or the feedback to an unparseable reply."""
    stepped: bool = True
    """Whether the environment was stepped (False: an unparseable reply under ``feedback``)."""
    projected: bool = False
    """Whether the stepped action is the protocol's projection of a reply that broke the
    format (``unparseable="project"``)."""
    format_error: str | None = None
    """Why the reply broke the format (None: it did not)."""

    @property
    def format_valid(self) -> bool:
        """False for a reply the protocol's invalid-action penalty applies to (as
        ``agentenvs.train.rl.batch`` decides: unparseable, or projected)."""
        return self.stepped and not self.projected


def make_env(env_id: str, max_turns: int | None = None, **env_kwargs: Any) -> Any:
    """``gym.make(env_id, max_turns=..., **env_kwargs)`` with agentenvs registered; returns the
    environment and the reply budget it was made with."""
    import gymnasium as gym

    import agentenvs  # noqa: F401  (registers the ids)
    from agentenvs.registration import env_class

    budget = int(max_turns or env_class(env_id).default_max_turns)
    return gym.make(env_id, max_turns=budget, **env_kwargs), budget


class TextEpisode:
    """An environment plus its conversation under a protocol; :meth:`start`, then :meth:`reply`
    or :meth:`act` until :attr:`done`.

    ``protocol``: a protocol's name, ``"default"`` (the environment's) or None (see the module
    docstring). ``max_turns``: replies per episode (None: the protocol's training limit, else
    the environment's own). ``history``: the prompt's window (``"default"``: the protocol's).
    ``env_kwargs`` go to ``gym.make`` after the protocol's keywords.
    """

    def __init__(
        self,
        env_id: str,
        *,
        max_turns: int | None = None,
        history: int | None | str = "default",
        env_kwargs: dict[str, Any] | None = None,
        protocol: str | None = "default",
    ) -> None:
        self.rules = ProtocolRules.of(env_id, protocol)  # an unknown id or protocol fails here
        self.env_id = env_id
        self.protocol = self.rules.name
        self.history = self.rules.history(history)
        self.env_kwargs = {**self.rules.env_kwargs(), **(env_kwargs or {})}
        budget = max_turns or self.rules.max_turns("train")
        self.env, self.max_turns = make_env(env_id, budget, **self.env_kwargs)
        self.variant: dict[str, Any] = dict(getattr(self.env.unwrapped, "variant", {}) or {})
        self.conversation = Conversation(env_id, self.history, self.rules.prompt_name)
        self.task_id: str | None = None
        self.steps: list[EpisodeStep] = []
        self.reward = 0.0
        self.done = True
        self.won = False
        self._observation = ""
        self._info: dict[str, Any] = {}

    def start(self, task_id: str | None = None, *, seed: int | None = None) -> list[dict[str, str]]:
        """Reset to ``task_id`` (or a training task drawn from ``seed``); returns the prompt."""
        options = {"task_id": task_id} if task_id is not None else None
        observation, info = self.env.reset(seed=seed, options=options)
        self.task_id = str(info.get("task_id", task_id))
        self.conversation.start(observation, info)
        self.steps = []
        self.reward = 0.0
        self.done = False
        self.won = False
        self._observation, self._info = observation, dict(info)
        return self.conversation.prompt()

    @property
    def turns(self) -> int:
        return len(self.steps)

    @property
    def invalid_penalty(self) -> float:
        """The protocol's invalid-action penalty (0 without one); see :attr:`EpisodeStep.
        format_valid` for the steps it applies to."""
        return self.rules.invalid_penalty

    def prompt(self) -> list[dict[str, str]]:
        """The messages the model is given now (history window applied)."""
        return self.conversation.prompt()

    def reply(self, text: str) -> str | None:
        """Take a full model reply (thought and action); returns the next user turn's text, or
        None when the episode is over."""
        self._check_running()
        return self._take(text, self.rules.parse(text))

    def act(self, action: str) -> str | None:
        """Take an action given on its own (a tool argument); see the module docstring."""
        self._check_running()
        text = action if isinstance(action, str) else ""
        parsed = self.rules.parse(text)
        if parsed.error is not None:
            plain = parse_reply(text, ReplyFormat.PLAIN).action
            if plain is not None:
                again = self.rules.parse(self.rules.format_reply("", plain))
                if again.action is not None and again.error is None:
                    parsed = again
        return self._take(text, parsed)

    def last_user_text(self) -> str:
        return self.conversation.messages[-1]["content"]

    def _check_running(self) -> None:
        if self.done:
            raise RuntimeError(
                f"the {self.env_id} episode is over (or was never started); call start()"
            )

    def _take(self, text: str, parsed: ParseResult) -> str | None:
        anchor, action = self._observation, parsed.action
        self.conversation.add_reply(text, action)
        if action is None:
            feedback = self.rules.feedback(parsed.error)
            self.steps.append(
                EpisodeStep(
                    anchor, INVALID_ACTION, 0.0, False, feedback, False, False, parsed.error
                )
            )
            self.conversation.add_format_error(feedback, self._info)
            ended = False
        else:
            observation, reward, terminated, truncated, info = self.env.step(action)
            projected = parsed.error is not None
            valid = bool(info.get("valid", True)) and not projected
            self.steps.append(
                EpisodeStep(
                    anchor,
                    action,
                    float(reward),
                    valid,
                    observation,
                    True,
                    projected,
                    parsed.error,
                )
            )
            self.reward += float(reward)
            self.won = self.won or bool(info.get("won", False))
            self._observation, self._info = observation, dict(info)
            self.conversation.add_observation(observation, info)
            ended = terminated or truncated
        self.done = bool(ended) or self.turns >= self.max_turns
        return None if self.done else self.last_user_text()
