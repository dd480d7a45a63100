"""One episode under a protocol: the stepper every driver uses.

:class:`Episode` holds one episode's conversation and step records and applies the run's
:class:`~agentenvs.agents.protocol_rules.ProtocolRules` (resolved once per run) to each reply:

* the prompt is :class:`agentenvs.agents.prompts.Conversation`'s with the protocol's prompt and
  history window;
* :meth:`Episode.reply` parses a reply with the protocol's parser. An unparseable one is, under
  ``unparseable = "feedback"``, answered with the protocol's feedback without stepping the
  environment (recorded with ``valid=False``, ``action=None`` and ``info["format_error"]``), and
  :meth:`~Episode.reply` returns None; otherwise it returns the parsed action (under
  ``"project"``, verl-agent's, the parser's projection of a reply that broke the format);
* :meth:`Episode.observe` records what the environment answered: a step is valid when the
  environment says so and the reply did not break the format (a projected step keeps the
  ``format_error``, which the trainer's invalid-action penalty reads).

The environment is stepped by the driver, so a batched driver steps many episodes' environments
at once: :func:`agentenvs.agents.rollout.run_rollouts` (in worker processes or on Ray actors),
and :class:`TextEpisode` (one environment of its own, stepped right away), which the TRL adapter
(:mod:`agentenvs.integrations.trl`) and the verl agent loop
(:mod:`agentenvs.integrations.verl.agent_loop`) drive one reply at a time. Both therefore give the
same prompts, actions, rewards and validity for the same replies.

:class:`TextEpisode`: the environment is made with the protocol's keywords (its variant), then
``env_kwargs``; the episode ends when the environment terminates or truncates, or after
``max_turns`` replies (default: the protocol's training turn limit, else the environment's
``default_max_turns``); ``reward`` is the undiscounted sum of the environment's rewards;
``steps`` keeps, per reply, the anchor observation, the action (``"<invalid format>"`` for an
unparseable reply under ``feedback``) and the reward (GiGPO / PTGPO group steps by them).
:meth:`TextEpisode.act` takes an action that is already separate from any thought (TRL's tool
argument): it goes through the same parser, and a bare action that the reply format would wrap
(written with :func:`agentenvs.agents.prompts.format_reply` and parsed again) is taken as it is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentenvs.agents.parsing import ParseResult, ReplyFormat, parse_reply
from agentenvs.agents.policy import Completion
from agentenvs.agents.prompts import INVALID_ACTION_PLACEHOLDER, Conversation
from agentenvs.agents.protocol_rules import ProtocolRules
from agentenvs.agents.trajectory import StepRecord

__all__ = ["INVALID_ACTION", "Episode", "EpisodeStep", "TextEpisode", "make_env"]

INVALID_ACTION = INVALID_ACTION_PLACEHOLDER
_INFO_KEYS = ("turn", "won", "step_credit")
"""Step info kept in a step record: ``step_credit`` is the learning benchmark's oracle credit of
the action, where an environment reports one (``agentenvs.train``'s ``oracle`` estimator reads
it)."""


class Episode:
    """One episode's conversation and step records under ``rules`` (see the module docstring).

    :meth:`start` (or :meth:`resume`), then per reply :meth:`prompt`, :meth:`reply` and, when it
    returned an action, :meth:`observe` with what the environment answered.
    """

    def __init__(self, rules: ProtocolRules, history: int | None | str = "default") -> None:
        self.rules = rules
        self.conversation = Conversation(rules.env_id, rules.history(history), rules.prompt_name)
        self.steps: list[StepRecord] = []
        self.observation = ""
        self.info: dict[str, Any] = {}
        self.total_reward = 0.0
        self.won = False
        self.terminated = False
        self.truncated = False

    def start(self, observation: str, info: Mapping[str, Any]) -> None:
        self.observation, self.info = observation, dict(info)
        self.conversation.start(observation, info)

    def resume(self, messages: Sequence[Mapping[str, str]], observation: str,
               info: Mapping[str, Any]) -> None:  # fmt: skip
        """Start from a cut state's messages (see :meth:`Conversation.resume`)."""
        self.observation, self.info = observation, dict(info)
        self.conversation.resume(messages, observation)

    def prompt(self) -> list[dict[str, str]]:
        """The messages the model is given now (history window applied)."""
        return self.conversation.prompt()

    def reply(self, completion: Completion, parsed: ParseResult | None = None) -> str | None:
        """Take a reply; returns the action to step, or None when it was answered with the
        feedback (the environment not stepped). ``parsed``: the reply already parsed."""
        parsed = parsed if parsed is not None else self.rules.parse(completion.text)
        self.conversation.add_reply(completion.text, parsed.action)
        self._parsed, self._completion = parsed, completion
        if parsed.action is None:
            feedback = self.rules.feedback(parsed.error)
            info = {"format_error": parsed.error}
            self.steps.append(
                _record(
                    completion,
                    anchor=self.observation,
                    action=None,
                    observation=feedback,
                    reward=0.0,
                    valid=False,
                    fields={},
                    info=info,
                )
            )
            self.conversation.add_format_error(feedback, self.info)
        return parsed.action

    def observe(
        self,
        observation: str,
        reward: float,
        terminated: bool,
        truncated: bool,
        info: Mapping[str, Any],
    ) -> None:
        """The environment stepped with the last reply's action and answered this."""
        parsed, completion = self._parsed, self._completion
        extra = {k: info[k] for k in _INFO_KEYS if k in info}
        if parsed.error is not None:  # a projected reply: stepped, but it broke the format
            extra["format_error"] = parsed.error
        valid = bool(info.get("valid", True)) and parsed.error is None
        fields = dict(info.get("fields") or {})
        self.steps.append(
            _record(
                completion,
                anchor=self.observation,
                action=parsed.action,
                observation=observation,
                reward=reward,
                valid=valid,
                fields=fields,
                info=extra,
            )
        )
        self.total_reward += float(reward)
        self.won = self.won or bool(info.get("won", False))
        self.terminated, self.truncated = bool(terminated), bool(truncated)
        self.observation, self.info = observation, dict(info)
        self.conversation.add_observation(observation, info)


def _record(
    completion: Completion,
    *,
    anchor: str,
    action: str | None,
    observation: str,
    reward: float,
    valid: bool,
    fields: dict[str, Any],
    info: dict[str, Any],
) -> StepRecord:
    """The trajectory's record of one reply (its tokens and log-probs from ``completion``)."""
    if completion.finish_reason:
        info = {**info, "finish_reason": completion.finish_reason}
    return StepRecord(
        anchor=anchor,
        action=action,
        observation=observation,
        reward=float(reward),
        valid=valid,
        fields=fields,
        completion=completion.text,
        token_ids=completion.token_ids,
        logprobs=completion.logprobs,
        info=info,
    )


@dataclass(frozen=True)
class EpisodeStep:
    """One reply of a :class:`TextEpisode`: where it was chosen, what it did, what it earned."""

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

    @classmethod
    def of(cls, record: StepRecord) -> EpisodeStep:
        error = record.info.get("format_error")
        if record.action is None:
            return cls(record.anchor, INVALID_ACTION, 0.0, False, record.observation, False,
                       False, error)  # fmt: skip
        return cls(record.anchor, record.action, record.reward, record.valid, record.observation,
                   True, error is not None, error)  # fmt: skip


def make_env(env_id: str, max_turns: int | None = None, **env_kwargs: Any) -> Any:
    """``gym.make(env_id, max_turns=..., **env_kwargs)`` with agentenvs registered; returns the
    environment and the reply budget it was made with."""
    import gymnasium as gym

    import agentenvs  # noqa: F401  (registers the ids)
    from agentenvs.registration import env_class

    budget = int(max_turns or env_class(env_id).default_max_turns)
    return gym.make(env_id, max_turns=budget, **env_kwargs), budget


class TextEpisode:
    """An environment plus its :class:`Episode` under a protocol; :meth:`start`, then
    :meth:`reply` or :meth:`act` until :attr:`done`.

    ``protocol``: a protocol's name, ``"default"`` (the environment's) or None (none).
    ``max_turns``: replies per episode (None: the protocol's training limit, else the
    environment's own). ``history``: the prompt's window (``"default"``: the protocol's).
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
        self.episode = Episode(self.rules, self.history)
        self.task_id: str | None = None
        self.steps: list[EpisodeStep] = []
        self.done = True

    @property
    def conversation(self) -> Conversation:
        return self.episode.conversation

    def start(self, task_id: str | None = None, *, seed: int | None = None) -> list[dict[str, str]]:
        """Reset to ``task_id`` (or a training task drawn from ``seed``); returns the prompt."""
        options = {"task_id": task_id} if task_id is not None else None
        observation, info = self.env.reset(seed=seed, options=options)
        self.task_id = str(info.get("task_id", task_id))
        self.episode = Episode(self.rules, self.history)
        self.episode.start(observation, info)
        self.steps = []
        self.done = False
        return self.episode.prompt()

    @property
    def turns(self) -> int:
        return len(self.steps)

    @property
    def reward(self) -> float:
        return self.episode.total_reward

    @property
    def won(self) -> bool:
        return self.episode.won

    @property
    def invalid_penalty(self) -> float:
        """The protocol's invalid-action penalty (0 without one); see :attr:`EpisodeStep.
        format_valid` for the steps it applies to."""
        return self.rules.invalid_penalty

    def prompt(self) -> list[dict[str, str]]:
        """The messages the model is given now (history window applied)."""
        return self.episode.prompt()

    def reply(self, text: str) -> str | None:
        """Take a full model reply (thought and action); returns the next user turn's text, or
        None when the episode is over."""
        self._check_running()
        return self._take(text, None)

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

    def _take(self, text: str, parsed: ParseResult | None) -> str | None:
        episode = self.episode
        action = episode.reply(Completion(text=text), parsed)
        ended = False
        if action is not None:
            observation, reward, terminated, truncated, info = self.env.step(action)
            episode.observe(observation, reward, terminated, truncated, info)
            ended = terminated or truncated
        self.steps.append(EpisodeStep.of(episode.steps[-1]))
        self.done = bool(ended) or self.turns >= self.max_turns
        return None if self.done else self.last_user_text()
