"""Scripted policies that act from environment state: the expert and the random agent.

Both write their replies in the environment's reply format
(:func:`agentenvs.agents.prompts.format_reply`), so their trajectories look exactly like a model's
and expert ones are ready for SFT; the thought and action also go in ``Completion.extra``, so a
rollout under a benchmark protocol rewrites the reply in that protocol's format.

The random agent picks uniformly among the environment's admissible actions; where the
environment lists none (TextCraft), among the well-formed actions its observation suggests
(:data:`RANDOM_ACTION_MAKERS`). Its draws come from a generator seeded by the agent's seed and
the episode key, so a run is repeatable in any process.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from agentenvs.agents.policy import Completion, PolicyError, StatePolicy
from agentenvs.agents.prompts import format_reply
from agentenvs.expert import Expert, ExpertFailure, make_expert

if TYPE_CHECKING:
    from agentenvs.core import TextEnv

__all__ = ["ExpertPolicy", "RANDOM_ACTION_MAKERS", "RandomPolicy", "textcraft_actions"]

_COUNT_ITEM = re.compile(r"^\s*(\d+)\s+(.+?)\s*$")
_PLACEHOLDER = re.compile(r"<[^<>]*>")


class ExpertPolicy(StatePolicy):
    """The environment's scripted teacher (one :class:`~agentenvs.expert.Expert` per episode)."""

    def __init__(self, spec: str = "expert") -> None:
        super().__init__(spec)
        self._experts: dict[str, Expert] = {}

    def act(self, env: TextEnv, key: str) -> Completion:
        expert = self._experts.get(key)
        if expert is None:
            expert = make_expert(env.env_id)
            expert.reset()
            self._experts[key] = expert
        try:
            decision = expert.act(env)
        except ExpertFailure as failure:
            return Completion(text="", error=f"ExpertFailure: {failure}")
        return Completion(
            text=format_reply(decision.thought, decision.action, env.env_id),
            finish_reason="stop",
            extra={"thought": decision.thought, "action": decision.action},
        )

    def end_episode(self, key: str) -> None:
        self._experts.pop(key, None)


def textcraft_actions(env: TextEnv) -> list[str]:
    """Well-formed TextCraft actions suggested by the shown crafting commands.

    ``inventory``, every shown ``craft`` command as it is written, and ``get <n> <item>`` for each
    input of a shown command (``n`` as the command needs it).
    """
    commands = list(getattr(env, "commands", ()))
    actions = ["inventory"]
    seen = set(actions)
    for command in commands:
        _, _, inputs = command.partition(" using ")
        candidates = [command] + [
            f"get {m.group(1)} {m.group(2)}" for m in map(_COUNT_ITEM.match, inputs.split(",")) if m
        ]
        for action in candidates:
            if action not in seen:
                seen.add(action)
                actions.append(action)
    return actions


# env id -> the well-formed actions to draw from where the environment lists no admissible ones.
RANDOM_ACTION_MAKERS: dict[str, Callable[[TextEnv], list[str]]] = {
    "TextCraft-v0": textcraft_actions,
}


class RandomPolicy(StatePolicy):
    """A uniformly random admissible (or well-formed) action each turn."""

    def __init__(self, spec: str = "random", seed: int = 0) -> None:
        super().__init__(spec)
        self.seed = int(seed)
        self._rngs: dict[str, random.Random] = {}

    def act(self, env: TextEnv, key: str) -> Completion:
        rng = self._rngs.get(key)
        if rng is None:
            rng = self._rngs[key] = random.Random(f"{self.seed}|{key}")
        choices = self.choices(env)
        action = choices[rng.randrange(len(choices))]
        if _PLACEHOLDER.search(action):  # e.g. search[<your query>]: fill in words of the page
            words = re.findall(r"[a-z]+", env.observation.lower()) or ["item"]
            query = " ".join(rng.choice(words) for _ in range(3))
            action = _PLACEHOLDER.sub(query, action)
        thought = f"I choose one of {len(choices)} possible actions at random."
        return Completion(
            text=format_reply(thought, action, env.env_id),
            finish_reason="stop",
            extra={"thought": thought, "action": action},
        )

    def choices(self, env: TextEnv) -> list[str]:
        """The actions drawn from: admissible ones, else the environment's well-formed ones."""
        admissible = env.admissible_actions()
        if admissible:
            return list(admissible)
        maker = RANDOM_ACTION_MAKERS.get(env.env_id)
        if maker is None:
            raise PolicyError(
                f"the random agent needs admissible actions, and {env.env_id} lists none now; "
                f"add a maker of well-formed actions to RANDOM_ACTION_MAKERS (has "
                f"{sorted(RANDOM_ACTION_MAKERS)})"
            )
        actions = maker(env)
        if not actions:
            raise PolicyError(f"no well-formed action to draw from in {env.env_id}'s state")
        return actions

    def end_episode(self, key: str) -> None:
        self._rngs.pop(key, None)
