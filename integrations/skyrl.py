"""agentenvs environments as SkyRL-Gym text environments (``skyrl-gym`` 0.4, ``BaseTextEnv``).

SkyRL's generator makes one environment per dataset row and plays it as a conversation::

    env = skyrl_gym.make(row["env_class"], env_config=cfg, extras=row_without_prompt)
    messages, info = env.init(row["prompt"])
    out = env.step(model_reply)   # {"observations", "reward", "done", "metadata"}
    messages += [assistant_reply, *out["observations"]]

:func:`register` registers every agentenvs id (``TextCraft-v0``, ``BabyAI-Text-v0``,
``ALFWorld-v0``, ``WebShop-v0``, ``Sokoban-v0``) under its own name with
:class:`AgentenvsTextEnv`, so a row's ``env_class`` is the environment id:

* ``init`` loads the row's task (``extras["extra_info"]["task_id"]`` or ``extras["task_id"]``;
  none: a training task drawn from a seed that counts up) and returns our prompt as chat
  messages: the protocol's system prompt and the first user turn
  (:class:`agentenvs.agents.episode.TextEpisode`, as ``agentenvs train rl`` plays it);
* ``step`` takes the model's raw reply: the protocol's parser reads the action (an unparseable
  reply gets the protocol's feedback, or its projection is stepped, and uses a turn); the
  observation is the next user turn as one ``user`` message (after the last step too: the
  final observation, as our trajectories' messages end with it); ``reward`` is the environment's
  reward for the step; ``done`` is ours (terminated, truncated or out of turns);
  ``metadata`` holds the parsed action, ``valid``, ``won`` and the turn;
* the protocol is the row's (``extra_info["protocol"]``), else ``env_config["protocol"]``,
  else the environment's default; ``max_turns`` the row's (SkyRL sets ``extras["max_turns"]``),
  else the protocol's training limit.

:func:`dataset_rows` writes the rows SkyRL's dataset wants (``prompt``, ``env_class``,
``extra_info``) for a split.
"""

from __future__ import annotations

import itertools
from typing import Any

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

from agentenvs.agents.episode import TextEpisode, make_env
from agentenvs.agents.prompts import system_prompt
from agentenvs.agents.protocol_rules import ProtocolRules

__all__ = ["AgentenvsTextEnv", "dataset_rows", "env_ids", "register"]

_ENTRY_POINT = "agentenvs.integrations.skyrl:AgentenvsTextEnv"
_seeds = itertools.count()  # training tasks for rows that name none


def env_ids() -> list[str]:
    """The agentenvs environment ids."""
    import agentenvs  # noqa: F401  (registers the ids)
    from agentenvs.registration import ENVIRONMENTS

    return list(ENVIRONMENTS)


def _option(name: str, extras: dict[str, Any], env_config: Any, default: Any = None) -> Any:
    info = extras.get("extra_info") or {}
    for source in (info, extras):
        if name in source and source[name] is not None:
            return source[name]
    if env_config is not None and env_config.get(name) is not None:
        return env_config.get(name)
    return default


class AgentenvsTextEnv(BaseTextEnv):
    """One agentenvs episode as a SkyRL-Gym text environment (see the module docstring).

    ``env_id`` comes from the registration (:func:`register`); ``env_config`` is SkyRL's
    per-environment config (``protocol``, ``max_turns``, ``env_kwargs``), ``extras`` the row.
    """

    def __init__(
        self, env_id: str, env_config: Any = None, extras: dict[str, Any] | None = None
    ) -> None:
        super().__init__()
        extras = dict(extras or {})
        protocol = _option("protocol", extras, env_config, "default")
        max_turns = _option("max_turns", extras, env_config)
        env_kwargs = dict((env_config or {}).get("env_kwargs") or {})
        self.env_id = env_id
        self.task_id = _option("task_id", extras, env_config)
        self.episode = TextEpisode(
            env_id,
            max_turns=int(max_turns) if max_turns else None,
            env_kwargs=env_kwargs,
            protocol=None if protocol in (None, "none") else protocol,
        )
        self.max_turns = self.episode.max_turns

    def init(self, prompt: list[dict[str, str]]) -> tuple[list[dict[str, str]], dict[str, Any]]:
        """Reset to the row's task; returns our prompt (system and first user turn) in place of
        the row's placeholder ``prompt``, and the task in the metadata."""
        seed = None if self.task_id is not None else next(_seeds)
        messages = self.episode.start(self.task_id, seed=seed)
        self.turns = 0
        meta = {"env_id": self.env_id, "task_id": self.episode.task_id}
        return messages, {**meta, "protocol": self.episode.protocol}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """Take the model's reply (see the module docstring)."""
        episode = self.episode
        if episode.done:
            raise RuntimeError(f"the {self.env_id} episode is over; make a new environment")
        episode.reply(action if isinstance(action, str) else "")
        self.turns = episode.turns
        step = episode.steps[-1]
        observations = [{"role": "user", "content": episode.last_user_text()}]
        return BaseTextEnvStepOutput(
            observations=observations,
            reward=float(step.reward),
            done=episode.done,
            metadata={
                "task_id": episode.task_id,
                "turn": episode.turns,
                "action": step.action,
                "valid": step.valid,
                "format_valid": step.format_valid,
                "won": episode.won,
            },
            postprocessed_action=None,
        )

    def get_metrics(self) -> dict[str, Any]:
        """The episode's outcome: won (0/1), reward and turns."""
        ep = self.episode
        return {"won": float(ep.won), "reward": float(ep.reward), "turns": ep.turns}

    def close(self) -> None:
        self.episode.env.close()


def register(ids: list[str] | None = None) -> list[str]:
    """Register the agentenvs environments (default: all) with ``skyrl_gym``; an id already
    registered is kept. Returns the ids registered."""
    import skyrl_gym

    done = []
    for env_id in ids or env_ids():
        if env_id not in skyrl_gym.registry:
            skyrl_gym.register(id=env_id, entry_point=_ENTRY_POINT, kwargs={"env_id": env_id})
        done.append(env_id)
    return done


def dataset_rows(
    env_id: str,
    split: str = "train",
    *,
    limit: int | None = None,
    protocol: str | None = "default",
) -> list[dict[str, Any]]:
    """SkyRL dataset rows for the split's tasks: ``prompt`` (the protocol's system prompt and an
    empty user turn that ``init`` replaces), ``env_class`` (the id) and ``extra_info`` (task id,
    split, protocol)."""
    rules = ProtocolRules.of(env_id, protocol)
    env, _ = make_env(env_id, **rules.env_kwargs())
    task_ids = list(env.task_ids(split))[:limit]
    env.close()
    system = system_prompt(env_id, rules.prompt_name)
    head = [{"role": "system", "content": system}] if system else []
    name = rules.name or "none"
    return [
        {
            "prompt": [*head, {"role": "user", "content": ""}],
            "env_class": env_id,
            "extra_info": {"task_id": t, "split": split, "protocol": name},
        }
        for t in task_ids
    ]
