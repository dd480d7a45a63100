"""The definition of an ``agentenvs eval`` run: :class:`EvalSettings`, recorded in ``run.json``.

A benchmark protocol (:mod:`agentenvs.agents.protocols`) fixes the evaluation's turn limit,
history window and sampling; a setting left at None (or ``history="default"``) takes the
protocol's value, one given explicitly and different from it is an ``override``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentenvs.agents.envworkers import DEFAULT_ENV_TIMEOUT_S
from agentenvs.agents.protocols import default_protocol, env_protocol

__all__ = ["PROTOCOL_FIELDS", "EvalSettings"]

# the settings a protocol fixes and a flag may override
PROTOCOL_FIELDS = ("max_turns", "history", "temperature", "top_p", "max_new_tokens")


@dataclass
class EvalSettings:
    """Everything that defines an evaluation run (recorded in ``run.json``).

    ``protocol``: a benchmark protocol (None: the environment's default one); the settings
    left at None (or ``history="default"``) take its evaluation values, the others are
    ``overrides``. ``limit``: play a sample of that many tasks across the families, drawn with
    ``task_seed`` (:func:`agentenvs.agents.task_sample.sample_tasks`). Each reply is drawn with its
    own seed (:func:`agentenvs.agents.rollout.episode_seed` of ``seed``, the episode and its turn),
    so an episode samples the same replies whatever shares its batch, ``max_active``, or whether
    the run was interrupted and resumed (with a backend whose rows are batch-independent, as the
    transformers backend's bfloat16 paths and the embedded agent are). ``env_timeout``: seconds
    an environment operation may take on remote workers (None: no limit).
    """

    env_id: str
    agent: str
    split: str = "test"
    k: int = 8
    n: int | None = None
    limit: int | None = None
    history: int | None | str = "default"
    max_turns: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_new_tokens: int | None = None
    seed: int | None = 0
    workers: int | str = 0
    env_timeout: float | None = DEFAULT_ENV_TIMEOUT_S
    max_active: int = 64
    agent_options: dict[str, Any] = field(default_factory=dict)
    protocol: str | None = None
    task_seed: int = 0
    overrides: dict[str, Any] = field(default_factory=dict)
    protocol_settings: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.n = self.n if self.n is not None else self.k
        if self.k < 1 or self.n < self.k:
            raise ValueError(f"need 1 <= k <= n, got k={self.k}, n={self.n}")
        if self.protocol is None:
            self.protocol = default_protocol(self.env_id)
        setup = env_protocol(self.protocol, self.env_id)  # bad names: an error listing them
        self.protocol_settings = setup.settings("eval")
        given = {
            name: getattr(self, name)
            for name in PROTOCOL_FIELDS
            if getattr(self, name) not in (None, "default")
        }
        self.overrides = {k: v for k, v in given.items() if v != self.protocol_settings[k]}
        for name in PROTOCOL_FIELDS:
            if name not in given:
                setattr(self, name, self.protocol_settings[name])

    @property
    def title(self) -> str:
        """The results table's title: environment, agent, split, n and k."""
        return f"{self.env_id} / {self.agent} / {self.split} (n={self.n}, k={self.k})"
