"""Policies: a batch of conversations in, a batch of completions out.

One interface, :class:`Policy`, covers both kinds of agents:

* language models (``hf:``, ``vllm:``, ``openai:``, ``embedded``) act from the messages only;
* scripted agents (``expert``, ``random``) act from the live environment's state
  (:attr:`Policy.acts_from_state` is True); the rollout hands them the environments (or runs
  them next to the environments, in a worker process).

Every completion carries the reply text and, where the backend gives them, the generated token
ids and their log-probabilities (:class:`Completion`).

Agents are named by a spec string, built by :func:`agentenvs.agents.registry.make_policy` from
its table of agent kinds; a new backend is a :class:`Policy` subclass added there with
:func:`agentenvs.agents.registry.register_policy` (docs/extending.md).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from agentenvs.core import TextEnv

__all__ = [
    "BackendError",
    "BackendUnavailableError",
    "Completion",
    "Policy",
    "PolicyError",
    "SamplingParams",
    "StatePolicy",
    "row_seed",
]

Message = dict[str, str]


class PolicyError(ValueError):
    """A bad agent spec or option; the message lists the valid forms."""


class BackendError(RuntimeError):
    """A generation backend failed (server unreachable, bad credentials, unknown model, ...)."""


class BackendUnavailableError(BackendError):
    """The backend stayed unreachable for longer than its retry window (an outage): the run
    stops with its finished episodes saved, to be resumed once the server is back."""


@dataclass(frozen=True)
class SamplingParams:
    """Sampling settings of one generation call (defaults: the paper's evaluation settings).

    ``temperature`` 0 means greedy decoding. ``max_new_tokens`` bounds each reply (the paper's
    TextCraft budget: 512 per turn). ``seed`` makes sampling repeatable where the backend can.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 512
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise PolicyError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise PolicyError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1:
            raise PolicyError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")


@dataclass
class Completion:
    """One generated reply.

    ``token_ids`` / ``logprobs``: the generated tokens (ending with the end-of-turn token when the
    reply finished) and each one's log-probability under the model's distribution at temperature
    1 without top-p (the policy's own log-probability, what RL importance ratios need); None where
    the backend gives none. ``finish_reason``: ``stop`` or ``length`` (hit ``max_new_tokens``).
    ``error``: set when a scripted agent could not act (the rollout ends that episode).
    """

    text: str
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    finish_reason: str | None = None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def row_seed(sampling: SamplingParams, row: int, seeds: Sequence[int] | None) -> int | None:
    """The sampling seed of row ``row`` of a call: ``seeds[row]`` when given, else
    ``sampling.seed + row`` (None without a seed)."""
    if seeds is not None:
        return int(seeds[row])
    return None if sampling.seed is None else int(sampling.seed) + row


class Policy(ABC):
    """Maps a batch of conversations to a batch of completions (see the module docstring)."""

    acts_from_state: ClassVar[bool] = False

    def __init__(self, spec: str = "") -> None:
        self.spec = spec

    @abstractmethod
    def generate(
        self,
        conversations: Sequence[Sequence[Message]],
        sampling: SamplingParams | None = None,
        *,
        envs: Sequence[TextEnv] | None = None,
        keys: Sequence[str] | None = None,
        seeds: Sequence[int] | None = None,
    ) -> list[Completion]:
        """One completion per conversation, in order.

        ``envs`` (the live environments, one per conversation) and ``keys`` (an id per episode)
        are given to policies that act from state and ignored by the others. ``seeds``: one
        sampling seed per conversation, instead of ``sampling.seed`` (each row's draws then come
        from its own seed, so its reply does not depend on the rest of the batch where the
        backend's rows are otherwise independent; :class:`agentenvs.agents.rollout.RolloutConfig`'s
        ``episode_seeds``).
        """

    def end_episodes(self, keys: Iterable[str]) -> None:  # noqa: B027 (optional hook)
        """Free per-episode backend state (e.g. KV caches) of these episodes."""

    def close(self) -> None:  # noqa: B027 (an optional hook: nothing to free by default)
        """Free the backend's resources (models, engines, connections)."""

    def run_metadata(self) -> dict[str, Any]:
        """What a run should record about the backend (e.g. dtype, whether a server returned
        log-probs); ``agentenvs eval`` writes it to ``run.json`` under ``backend``."""
        return {}

    def __enter__(self) -> Policy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.spec!r})"


class StatePolicy(Policy):
    """A policy that acts from environment state, one environment at a time."""

    acts_from_state: ClassVar[bool] = True

    def generate(
        self,
        conversations: Sequence[Sequence[Message]],
        sampling: SamplingParams | None = None,
        *,
        envs: Sequence[TextEnv] | None = None,
        keys: Sequence[str] | None = None,
        seeds: Sequence[int] | None = None,
    ) -> list[Completion]:
        if envs is None or len(envs) != len(conversations):
            raise PolicyError(
                f"{self.spec!r} acts from environment state: pass envs=, one per conversation"
            )
        keys = list(keys) if keys is not None else [str(id(env)) for env in envs]
        return [self.act(env, key) for env, key in zip(envs, keys, strict=True)]

    @abstractmethod
    def act(self, env: TextEnv, key: str) -> Completion:
        """The reply for ``env``'s current state; ``key`` identifies the episode."""

    def end_episode(self, key: str) -> None:  # noqa: B027 (an optional hook: no memory by default)
        """Forget the per-episode memory of ``key``."""
