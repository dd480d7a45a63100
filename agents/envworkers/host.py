"""What an environment worker runs: the environments of its slots and the batched operations.

An :class:`EnvHost` owns one environment per *slot* (an episode in flight) and, for scripted
policies that act from state (``expert``, ``random``), the policy instances, built from their
spec strings next to the environments. It applies a batch of operations and returns one result
per item: the Gymnasium return value, or an :class:`EnvFailure` where that item raised (one
slot's exception never stops the others). A reset may start an episode at a cut state: the
task's reset followed by a replay of prefix actions, checked against the recorded cut
observation (:func:`start_at_cut`), so that the replay runs next to the environment.

:func:`result_digest` gives a short fingerprint of a result; a pool that replays a slot's
operations after a worker died compares the replayed fingerprints with the original ones to
prove that the restored episode is exactly the one that was lost.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "OPERATIONS",
    "CutStateError",
    "EnvFailure",
    "EnvHost",
    "result_digest",
    "slot_of",
    "start_at_cut",
]

# The operations of a worker, and the position of the slot in each one's item tuple.
OPERATIONS: dict[str, int] = {"reset": 0, "step": 0, "act": 1, "end": 1, "drop": 0}


class CutStateError(RuntimeError):
    """A prefix replay that does not reach its recorded cut state (or ends the episode)."""


@dataclass(frozen=True)
class EnvFailure:
    """An environment (or scripted policy) exception for one slot, or a lost worker.

    ``worker_lost`` is True when the episode's environment died with its worker and could not be
    restored (the episode was already retried once, or its replay did not reproduce it).
    """

    error: str
    worker_lost: bool = False


def slot_of(op: str, item: Sequence[Any]) -> int:
    """The slot an operation's item addresses."""
    return int(item[OPERATIONS[op]])


class EnvHost:
    """The environments (and scripted policies) of a set of slots; the operations run here.

    ``env_factory`` (an importable ``"module:function"``, called with ``env_kwargs``) replaces
    ``agentenvs.make(env_id, **env_kwargs)`` where a custom or wrapped environment is wanted.
    """

    def __init__(
        self, env_id: str, env_kwargs: dict[str, Any], env_factory: str | None = None
    ) -> None:
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs)
        self.env_factory = env_factory
        self.envs: dict[int, Any] = {}
        self.policies: dict[str, Any] = {}

    def preload(self) -> None:
        """Import the environment's module now rather than on the first reset (best effort: an
        import error shows up later, as the resets' :class:`EnvFailure`)."""
        try:
            if self.env_factory is None:
                from agentenvs.registration import env_class

                env_class(self.env_id)
            else:
                importlib.import_module(self.env_factory.partition(":")[0])
        except Exception:  # reported per episode by the first reset
            pass

    def env(self, slot: int) -> Any:
        """The environment of ``slot``, made on first use."""
        env = self.envs.get(slot)
        if env is None:
            env = self.envs[slot] = self._make_env()
        return env

    def run(self, op: str, items: Sequence[tuple]) -> list[Any]:
        """Apply ``op`` to every item; an item that raises gives an :class:`EnvFailure`."""
        method = getattr(self, f"_op_{op}")
        results: list[Any] = []
        for item in items:
            try:
                results.append(method(*item))
            except Exception as exc:  # one slot's failure must not stop the others
                detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
                results.append(EnvFailure(detail))
        return results

    def replay(self, operations: Sequence[tuple[str, tuple]]) -> list[Any]:
        """Apply ``(op, item)`` pairs in order (one slot's history); one result per pair."""
        return [self.run(op, [item])[0] for op, item in operations]

    def close(self) -> None:
        for env in self.envs.values():
            env.close()
        self.envs.clear()
        for policy in self.policies.values():
            policy.close()
        self.policies.clear()

    # ----- the operations ---------------------------------------------------------------------

    def _op_reset(
        self,
        slot: int,
        task_id: str,
        prefix_actions: Sequence[str] = (),
        cut_observation: str | None = None,
    ) -> tuple[str, dict[str, Any]]:
        env = self.env(slot)
        if not prefix_actions and cut_observation is None:
            return env.reset(options={"task_id": task_id})
        return start_at_cut(env, task_id, prefix_actions, cut_observation)

    def _op_step(self, slot: int, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return self.env(slot).step(action)

    def _op_act(self, policy: Any, slot: int, key: str) -> Any:
        return self._policy(policy).act(self.env(slot), key)

    def _op_replay(self, operations: Sequence[tuple[str, tuple]]) -> list[Any]:
        return self.replay(operations)

    def _op_drop(self, slot: int) -> None:
        env = self.envs.pop(slot, None)
        if env is not None:
            env.close()

    def _op_end(self, policy: Any, slot: int, key: str) -> None:
        if isinstance(policy, str):
            policy = self.policies.get(policy)
        if policy is not None:
            policy.end_episode(key)

    # ----- helpers ----------------------------------------------------------------------------

    def _policy(self, policy: Any) -> Any:
        if not isinstance(policy, str):
            return policy
        if policy not in self.policies:
            from agentenvs.agents.registry import make_policy

            self.policies[policy] = make_policy(policy)
        return self.policies[policy]

    def _make_env(self) -> Any:
        if self.env_factory is None:
            from agentenvs.registration import make

            return make(self.env_id, **self.env_kwargs)
        module, sep, name = self.env_factory.partition(":")
        if not sep or not module or not name:
            raise ValueError(f"env_factory must be 'module:function', got {self.env_factory!r}")
        return getattr(importlib.import_module(module), name)(**self.env_kwargs)


def start_at_cut(
    env: Any, task_id: str, prefix_actions: Sequence[str], cut_observation: str | None = None
) -> tuple[str, dict[str, Any]]:
    """Reset ``env`` to ``task_id`` and replay ``prefix_actions``; returns the reached
    (observation, info) like a reset.

    Raises :class:`CutStateError` when the reached observation is neither ``cut_observation``
    (if given) nor a match of it (``env.match``), or when the episode is already over there;
    the environment's own error (e.g. ``EpisodeOverError``) when the prefix ends the episode
    before its last action.
    """
    result = env.replay(task_id, list(prefix_actions))
    reached = result.last_observation
    info = result.steps[-1].info if result.steps else result.info
    if (
        cut_observation is not None
        and reached != cut_observation
        and not env.match(cut_observation, reached)
    ):
        raise CutStateError(
            f"replaying {len(prefix_actions)} prefix actions of {task_id} reaches {reached!r}, "
            f"not the recorded cut observation {cut_observation!r}"
        )
    if env.done:
        raise CutStateError(
            f"the episode of {task_id} is over at the cut (after {len(prefix_actions)} prefix "
            "actions): nothing is left to play"
        )
    return reached, info


def result_digest(result: Any) -> str:
    """A short fingerprint of an operation's result (observation, reward, flags, info, reply)."""
    if isinstance(result, EnvFailure):
        text = "failure\0" + result.error
    elif isinstance(result, tuple) and len(result) in (2, 5):
        text = "\0".join(
            json.dumps(part, sort_keys=True, default=repr) if isinstance(part, dict) else repr(part)
            for part in result
        )
    elif hasattr(result, "text") and hasattr(result, "error"):  # a policy's Completion
        text = f"completion\0{result.text}\0{result.error}"
    else:
        text = repr(result)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
