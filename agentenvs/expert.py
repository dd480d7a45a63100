"""The scripted-expert interface: teachers that act from the environment's state.

An expert looks at a live environment (not at messages) and says what to do next, with a short
reason that becomes the ``Think:`` line of an SFT-ready reply. It recovers from any reachable
state: after a restored snapshot or someone else's actions it replans from where the episode is.
When it cannot act it raises :class:`ExpertFailure` with the reason instead of hanging or guessing.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentenvs.plugins import LiveTable, PluginError, load_part, plugin, plugins, source

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


def _expert_table() -> dict[str, str]:
    return {env_id: p.expert for env_id, p in plugins().items() if p.expert is not None}


EXPERTS: LiveTable[str, str] = LiveTable(_expert_table, "experts")
"""env id -> its expert's ``"module:Class"`` (each plugin's ``expert``); imported only when that
expert is made."""


def make_expert(env_id: str) -> Expert:
    """The scripted expert of ``env_id``; an expert that does not load is a
    :class:`~agentenvs.plugins.PluginError` naming the plugin's distribution."""
    if env_id not in EXPERTS:
        plugin(env_id)  # an unknown or broken id says so
        raise ValueError(f"no expert for {env_id!r}; experts exist for {sorted(EXPERTS)}")
    cls = load_part(env_id, "expert")
    if not (isinstance(cls, type) and issubclass(cls, Expert)):
        raise PluginError(
            f"environment plugin {env_id!r} ({source(env_id)}) is broken: its expert "
            f"{EXPERTS[env_id]!r} is not a subclass of agentenvs.expert.Expert"
        )
    return cls()
