"""The scripted-expert interface: teachers that act from the environment's state.

An expert looks at a live environment (not at messages) and says what to do next, with a short
reason that becomes the ``Think:`` line of an SFT-ready reply. It recovers from any reachable
state: after a restored snapshot or someone else's actions it replans from where the episode is.
When it cannot act it raises :class:`ExpertFailure` with the reason instead of hanging or guessing.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentenvs.core import TextEnv

__all__ = ["EXPERTS", "Expert", "ExpertDecision", "ExpertFailure", "make_expert"]


class ExpertFailure(RuntimeError):
    """The expert cannot act in this state (unsolvable by design, step cap, time limit)."""


@dataclass(frozen=True)
class ExpertDecision:
    """The next action (a clean action string for ``env.step``) and a one-line reason."""

    action: str
    thought: str


class Expert(ABC):
    """A scripted teacher for one environment id."""

    env_id: str = ""

    @abstractmethod
    def act(self, env: TextEnv) -> ExpertDecision:
        """The next action in ``env``'s current state (``env`` is reset and not done)."""

    def reset(self) -> None:  # noqa: B027 (optional hook, empty by default)
        """Forget any per-episode memory (called before each new episode)."""


# env id -> "module:Class"; imported only when that expert is made.
EXPERTS: dict[str, str] = {
    "TextCraft-v0": "agentenvs.textcraft.expert:TextCraftExpert",
    "Sokoban-v0": "agentenvs.sokoban.expert:SokobanExpert",
    "ALFWorld-v0": "agentenvs.alfworld.expert:ALFWorldExpert",
    "WebShop-v0": "agentenvs.webshop.expert:WebShopExpert",
    "BabyAI-Text-v0": "agentenvs.babyai.expert:BabyAIExpert",
}


def make_expert(env_id: str) -> Expert:
    """The scripted expert of ``env_id``."""
    try:
        module, _, name = EXPERTS[env_id].partition(":")
    except KeyError:
        raise ValueError(f"no expert for {env_id!r}; experts exist for {sorted(EXPERTS)}") from None
    return getattr(importlib.import_module(module), name)()
