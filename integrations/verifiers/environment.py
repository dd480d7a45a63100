"""agentenvs environments as verifiers v1 environments (``verifiers`` 0.4, ``verifiers.v1``).

verifiers builds an environment from a taskset id (``vf-eval <taskset-id>``, prime-rl's
``[env.taskset] id``): it imports the installed package of that name and takes the ``Taskset``,
``Env`` and ``TasksetConfig`` subclasses it exports (``verifiers.v1.utils.loaders``). The package
``agentenvs-verifiers`` (``integrations/verifiers/package``, module ``agentenvs_verifiers``)
exports the classes here:

* :class:`AgentenvsTasksetConfig`: ``env`` (``TextCraft-v0``, ``BabyAI-Text-v0``,
  ``ALFWorld-v0``, ``WebShop-v0``, ``Sokoban-v0``), ``split`` (default ``test``), ``protocol``
  (default: the environment's, ``none``: none) and ``max_turns`` (default: the protocol's
  training limit, else the environment's);
* :class:`AgentenvsTaskset`: one task per task id of the split (``vf-eval -n`` takes the first
  n), the protocol's system prompt as the task's system prompt; the user opens the conversation;
* :class:`AgentenvsEnv`: the environment plays the user, host-side, as verifiers' TextArena and
  OpenEnv environments do: it resets to the task and sends our first user turn, each model reply
  goes through the protocol's parser and steps the environment (an unparseable one gets the
  protocol's feedback, or its projection is stepped, and uses a turn), the next user turn is
  our conversation's (:class:`agentenvs.agents.episode.TextEpisode`, as ``agentenvs train rl``
  plays it), and the episode's end ends the exchange.

The model plays in the ``player`` seat, by default verifiers' plain chat program (``null``
harness) in a local subprocess runtime.

Scoring: ``reward`` (weight 1) is the episode reward, the sum of the environment's rewards (our
trajectories' ``total_reward``); ``won`` (weight 0) is the success; ``trace.info["agentenvs"]``
records the task, turns, actions and per-step rewards.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import verifiers.v1 as vf

from agentenvs.agents.episode import TextEpisode, make_env
from agentenvs.agents.prompts import system_prompt
from agentenvs.agents.protocol_rules import ProtocolRules

__all__ = [
    "AgentenvsData",
    "AgentenvsEnv",
    "AgentenvsEnvConfig",
    "AgentenvsTask",
    "AgentenvsTaskset",
    "AgentenvsTasksetConfig",
]


class AgentenvsTasksetConfig(vf.TasksetConfig):
    env: str = "TextCraft-v0"
    """The agentenvs environment id."""
    split: str = "test"
    """The split whose tasks the taskset lists."""
    protocol: str = "default"
    """The benchmark protocol (``default``: the environment's; ``none``: none)."""
    max_turns: int | None = None
    """Replies per episode (None: the protocol's training limit, else the environment's)."""


class AgentenvsData(vf.TaskData):
    info: dict
    """The environment id, task id, split and protocol the episode is played from."""


class AgentenvsTask(vf.Task[AgentenvsData, vf.State, vf.TaskConfig]):
    pass


class AgentenvsEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig(harness={"id": "null"}, runtime=vf.SubprocessConfig())
    """The model's seat: verifiers' plain chat program (the ``null`` harness: no tools, the
    reply is the text the environment parses) in a local subprocess (no sandbox: nothing runs
    code); ``--env.player.harness.*`` and ``--env.player.runtime.*`` choose others."""


def _protocol(name: str | None) -> str | None:
    return None if name in (None, "none") else name


class AgentenvsEnv(vf.Env[AgentenvsEnvConfig]):
    """One agentenvs episode per task, the environment playing the user (module docstring)."""

    async def run(self, task: AgentenvsTask, agents: Any) -> None:
        info = task.data.info
        episode = TextEpisode(
            info["env_id"], max_turns=info.get("max_turns"), protocol=_protocol(info["protocol"])
        )
        try:
            messages = await asyncio.to_thread(episode.start, info["task_id"])
            async with agents.player.interaction(task) as interaction:
                segment = await interaction.turn(messages[-1]["content"])
                while not segment.terminated:
                    following = await asyncio.to_thread(episode.reply, segment.last_reply)
                    if following is None:  # the episode is over: end the exchange
                        break
                    segment = await interaction.turn(following)
        finally:
            await asyncio.to_thread(episode.env.close)
        trace = interaction.trace
        trace.record_reward("reward", float(episode.reward), 1.0)
        trace.record_reward("won", float(episode.won), 0.0)
        trace.info["agentenvs"] = {
            "env_id": info["env_id"],
            "task_id": episode.task_id,
            "protocol": episode.protocol,
            "won": episode.won,
            "turns": episode.turns,
            "actions": [s.action for s in episode.steps],
            "rewards": [s.reward for s in episode.steps],
            "valid": [s.valid for s in episode.steps],
        }


class AgentenvsTaskset(vf.Taskset[AgentenvsTask, AgentenvsTasksetConfig]):
    """The split's tasks of one agentenvs environment."""

    def load(self) -> Iterator[AgentenvsTask]:
        config = self.config
        rules = ProtocolRules.of(config.env, _protocol(config.protocol))
        env, _ = make_env(config.env, **rules.env_kwargs())
        try:
            task_ids = list(env.task_ids(config.split))
        finally:
            env.close()
        system = system_prompt(config.env, rules.prompt_name) or None
        for task_id in task_ids:
            yield AgentenvsTask(
                AgentenvsData(
                    id=str(task_id),
                    name=f"{config.env}/{task_id}",
                    prompt=None,  # the environment opens the conversation with its observation
                    system_prompt=system,
                    info={
                        "env_id": config.env,
                        "task_id": task_id,
                        "split": config.split,
                        "protocol": rules.name or "none",
                        "max_turns": config.max_turns,
                    },
                ),
                config.task,
            )
