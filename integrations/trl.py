"""agentenvs environments for TRL's ``GRPOTrainer(environment_factory=...)`` (TRL 1.16.0).

TRL's multi-turn environment interface (``trl/trainer/grpo_trainer.py``): the factory is a
zero-argument callable returning an environment object; per rollout TRL calls
``reset(**row)`` with the dataset row's columns and appends the string it returns to the
prompt's last user message; every public method of the class is a tool the model calls with
the chat template's tool-call syntax, and its return value is the tool message; ``get_reward()``
(no argument) scores the finished rollout, logged as ``rewards/<class name>/mean``.

:func:`environment_factory` builds that class for any agentenvs id::

    from agentenvs.integrations.trl import environment_factory, train_dataset
    trainer = GRPOTrainer(
        model=model, processing_class=tokenizer, args=GRPOConfig(...),
        train_dataset=train_dataset("TextCraft-v0", split="train"),
        environment_factory=environment_factory("TextCraft-v0"),
    )

* the prompt is ours: :func:`train_dataset` rows carry the environment's system prompt and the
  ``task_id``; ``reset`` loads that task and returns the first user turn
  (:class:`agentenvs.agents.prompts.Conversation`), followed by one sentence that says to act
  through the ``act`` tool (:data:`TOOL_NOTE`);
* the episode plays under a benchmark protocol (``protocol``, default: the environment's,
  :data:`agentenvs.agents.protocols.DEFAULT_PROTOCOLS`; None: none): its environment keywords,
  prompt, parser, unparseable-reply handling and training turn limit, as ``agentenvs train rl``
  plays it (:class:`agentenvs.agents.episode.TextEpisode`);
* the model acts with one tool, ``act(action)``; the action goes through the protocol's parser
  (:meth:`agentenvs.agents.episode.TextEpisode.act`: the reply format, e.g. ``[[ x ]]``, or a bare
  ``x``); an unparseable one gets the protocol's feedback (or, under a projecting protocol, its
  projection is stepped) and uses a turn, as in our rollouts;
* ``act`` returns the environment's next observation (TRL keeps the conversation, so the tool
  message is the observation itself, not the whole template that WebShop's and Sokoban's
  one-message prompts re-render each step); when the episode ends it says so, and later calls
  return :data:`EPISODE_OVER` without stepping;
* ``get_reward`` is the episode reward, the sum of the environment's rewards (our trajectories'
  ``total_reward``); every finished episode is also appended to :attr:`episodes` of its
  environment object (``(task_id, reward, won, turns)``) for inspection.

The task split is the environment's own (``env.task_ids(split)``); without a dataset TRL passes
no ``task_id`` and ``reset`` draws a training task from a seed that counts up per instance.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from agentenvs.agents.episode import TextEpisode, make_env
from agentenvs.agents.prompts import system_prompt
from agentenvs.agents.protocol_rules import ProtocolRules

__all__ = [
    "EPISODE_OVER",
    "TOOL_NOTE",
    "AgentenvsEnvironment",
    "FinishedEpisode",
    "environment_factory",
    "train_dataset",
]

TOOL_NOTE = "Take each action by calling the act tool with the action as its argument."
EPISODE_OVER = "The episode is over; no further action is taken."


@dataclass(frozen=True)
class FinishedEpisode:
    task_id: str
    reward: float
    won: bool
    turns: int


class AgentenvsEnvironment:
    """One agentenvs episode per rollout, as TRL's environment interface wants it.

    Use :func:`environment_factory` (it sets :attr:`env_id` on a subclass named after the id).
    """

    env_id: ClassVar[str] = ""
    protocol: ClassVar[str | None] = "default"
    max_turns: ClassVar[int | None] = None
    env_kwargs: ClassVar[dict[str, Any]] = {}
    _seeds: ClassVar[itertools.count] = itertools.count()

    def __init__(self) -> None:
        if not self.env_id:
            raise TypeError(
                "use agentenvs.integrations.trl.environment_factory(env_id) to make this class"
            )
        self._episode = TextEpisode(
            self.env_id,
            max_turns=self.max_turns,
            env_kwargs=dict(self.env_kwargs),
            protocol=self.protocol,
        )
        self.episodes: list[FinishedEpisode] = []
        self._recorded = False

    def reset(self, task_id: str | None = None, **row: Any) -> str:
        """Start the row's task (TRL passes every dataset column); returns the first user turn."""
        if not self._recorded:
            self._record()
        seed = None if task_id is not None else next(self._seeds)
        messages = self._episode.start(task_id, seed=seed)
        self._recorded = False
        return f"{messages[-1]['content']}\n\n{TOOL_NOTE}"

    def act(self, action: str) -> str:
        """Take one action in the environment.

        Args:
            action: Exactly one admissible action, as the task describes them.

        Returns:
            The environment's observation after the action.
        """
        episode = self._episode
        if episode.done:
            return EPISODE_OVER
        answer = episode.act(action)
        last = episode.steps[-1]
        text = episode.last_user_text() if not last.stepped else last.observation
        if answer is None:
            return f"{text}\n\nThe episode is over (reward {episode.reward:g})."
        return text

    def get_reward(self) -> float:
        """The episode reward: the sum of the environment's rewards so far."""
        self._record()
        return float(self._episode.reward)

    def _record(self) -> None:
        """Put the current episode in :attr:`episodes` (replacing its earlier entry: TRL scores
        a rollout once, at its end, but a caller may ask for the reward more than once)."""
        ep = self._episode
        if ep.task_id is None:
            return
        entry = FinishedEpisode(str(ep.task_id), ep.reward, ep.won, ep.turns)
        if self._recorded:
            self.episodes[-1] = entry
        else:
            self.episodes.append(entry)
            self._recorded = True


def environment_factory(
    env_id: str,
    *,
    protocol: str | None = "default",
    max_turns: int | None = None,
    **env_kwargs: Any,
) -> Callable[[], AgentenvsEnvironment]:
    """TRL's ``environment_factory`` for ``env_id``: a class (zero-argument callable) whose
    instances play one episode per ``reset`` under ``protocol`` (a name, ``"default"``: the
    environment's, None: none). ``max_turns`` bounds the replies per episode (default: the
    protocol's training limit, else the environment's); ``env_kwargs`` go to ``gym.make`` after
    the protocol's keywords."""
    # fail now on an unknown id, protocol or bad kwargs
    TextEpisode(env_id, max_turns=max_turns, env_kwargs=env_kwargs, protocol=protocol).env.close()
    name = env_id.replace("-", "_").replace(":", "_")
    return type(
        name,
        (AgentenvsEnvironment,),
        {
            "env_id": env_id,
            "protocol": protocol,
            "max_turns": max_turns,
            "env_kwargs": dict(env_kwargs),
            "_seeds": itertools.count(),
            "__module__": __name__,
        },
    )


def train_dataset(
    env_id: str,
    split: str = "train",
    *,
    limit: int | None = None,
    repeat: int = 1,
    protocol: str | None = "default",
) -> Any:
    """A ``datasets.Dataset`` of the split's tasks: ``prompt`` (the protocol's system prompt,
    where it has one, and an empty user turn that ``reset`` fills) and ``task_id``. ``limit``
    keeps the first tasks; ``repeat`` lists each task that many times in a row. Pass the
    ``protocol`` that :func:`environment_factory` gets."""
    from datasets import Dataset

    rules = ProtocolRules.of(env_id, protocol)
    env, _ = make_env(env_id, **rules.env_kwargs())
    task_ids = list(env.task_ids(split))[:limit]
    env.close()
    system = system_prompt(env_id, rules.prompt_name)
    head = [{"role": "system", "content": system}] if system else []
    prompt = [*head, {"role": "user", "content": ""}]
    rows = [t for t in task_ids for _ in range(repeat)]
    return Dataset.from_dict({"prompt": [prompt] * len(rows), "task_id": rows})
