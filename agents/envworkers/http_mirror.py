"""Local mirrors of an http pool's episodes, for scripted policies that act from state.

The expert and the random agent read the environment object, which does not travel over HTTP.
:class:`Mirrors` keeps, per slot, the server's results of the episode (log-aligned) and an
environment of this process that replays the episode's reset and steps before each ``act``: the
mirror must reach the server's observations, rewards and flags, else the ``act`` is an
:class:`~agentenvs.agents.envworkers.host.EnvFailure` saying where they part. The mirror costs one
local step per step; language-model policies need none. The same local environments serve the
pool's cut-state matching (:meth:`Mirrors.env`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from agentenvs.agents.envworkers.host import EnvFailure, EnvHost, slot_of

__all__ = ["Mirrors"]


class Mirrors:
    """One local environment per slot (made on first use) and what the server answered.

    ``env_id`` and ``env_kwargs``: the environment the servers make. The pool calls
    :meth:`record` with every result it takes from a server and :meth:`forget` when an episode is
    released.
    """

    def __init__(self, env_id: str, env_kwargs: dict[str, Any]) -> None:
        self.host = EnvHost(env_id, env_kwargs)
        self._seen: dict[int, list[Any]] = {}  # slot -> the server's results, log-aligned
        self._mirrored: dict[int, int] = {}  # slot -> log operations applied to its mirror

    def env(self, slot: int) -> Any:
        """The slot's local environment (its ``match`` checks a cut state reached remotely)."""
        return self.host.env(slot)

    def record(self, op: str, item: tuple, result: Any) -> None:
        """Keep a server's result of ``op`` on ``item`` (a reset starts the slot's record)."""
        slot = slot_of(op, item)
        if op == "reset":
            self._seen[slot] = [result]
            self._mirrored.pop(slot, None)
        elif op == "step" and slot in self._seen:
            self._seen[slot].append(result)

    def forget(self, slot: int) -> None:
        """The slot's episode is over: drop its record (its environment stays for the next)."""
        self._seen.pop(slot, None)
        self._mirrored.pop(slot, None)

    def act(self, ref: Any, slot: int, key: str) -> Any:
        """``ref``'s action on the slot's mirror (brought up to date first by the caller)."""
        return self.host.run("act", [(ref, slot, key)])[0]

    def end(self, ref: Any, items: Sequence[tuple[int, str]]) -> None:
        """Forget a scripted policy's episode memory for every ``(slot, key)``."""
        self.host.run("end", [(ref, slot, key) for slot, key in items])

    def drop(self, slot: int) -> None:
        """Close the slot's local environment (the next use makes a new one)."""
        self.host.run("drop", [(slot,)])

    def sync(
        self, slot: int, operations: Sequence[tuple[str, tuple]] | None, where: Callable[[], str]
    ) -> str | None:
        """Bring the slot's mirror to the server's state: ``operations`` is the episode's log
        (None: no episode), ``where()`` names the server it ran on. A problem as text, else
        None."""
        if operations is None:
            return f"slot {slot} has no episode (reset it first)"
        done = self._mirrored.get(slot, 0)
        todo = list(operations[done:])
        if not todo:
            return None
        answers = self.host.replay(todo)
        seen = [_comparable(result) for result in self._seen[slot][done:]]
        for n, (answer, expected) in enumerate(zip(answers, seen, strict=True), start=done):
            if isinstance(answer, EnvFailure) or _comparable(answer) != expected:
                self._mirrored.pop(slot, None)
                got = answer.error if isinstance(answer, EnvFailure) else repr(answer[0])
                return (
                    f"the local copy of the episode that the scripted policy acts on differs "
                    f"from the server's ({where()}) after operation "
                    f"{n}: {got} here, {expected[0]!r} there (same agentenvs version and "
                    "environment data on both?)"
                )
        self._mirrored[slot] = done + len(todo)
        return None

    def close(self) -> None:
        self.host.close()


def _comparable(result: Any) -> tuple:
    """What a mirror must reproduce of a server's result: observation, reward and flags."""
    if isinstance(result, EnvFailure):
        return ("failure",)
    if len(result) == 2:
        return (result[0],)
    return (result[0], float(result[1]), bool(result[2]), bool(result[3]))
