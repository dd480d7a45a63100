"""The learning benchmark's own environment ids, registered in the process that runs it.

The benchmark's controls need environments the package does not ship: Sokoban whose every step
also reports the expert's judgement of the action (``info["step_credit"]``, read by the ``oracle``
arm's estimator), Sokoban rooms of another generator setting, and the credit testbed
(:mod:`agentenvs.benchmarks.learning.keydoor`). The trainer and the rollout code find an
environment by its id (its class, prompt, protocol and expert), so :func:`register_benchmark_env`
adds each id to those tables of this process: ``agentenvs list`` and ``gym.make`` in another
process do not know them. They are benchmark controls, not environments users pick.

Ids: ``Sokoban-<rows>x<cols>-<boxes>box-d<depth>[-oracle]-v0`` (:func:`sokoban_env_id`), and
``KeyDoor-v0`` / ``KeyDoor-oracle-v0`` (the testbed; its credit is always in ``info``, the
``-oracle`` id exists so the arms' ids name what they train on).

**Sokoban's oracle credit** (:func:`sokoban_step_credit`), with ``L(s)`` the length of a
shortest solution from position ``s`` (:func:`agentenvs.sokoban.expert.shortest_solution`) and
``s'`` the position after the action (an unknown action moves nothing):

* ``L(s) - L(s')`` while ``s'`` is solvable: +1 for a move of a shortest plan, 0 for a bump
  into a wall, -1 for a step away, less for a push that lengthens the solution by more;
* :data:`FATAL_CREDIT` (-3) for the action that makes a solvable room unsolvable;
* 0 once the room is unsolvable (no action can change the outcome) and on reset.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any, ClassVar

from agentenvs.core import Outcome
from agentenvs.sokoban.board import ACTIONS, Board
from agentenvs.sokoban.env import SokobanEnv

__all__ = [
    "FATAL_CREDIT",
    "SokobanOracleEnv",
    "register_benchmark_env",
    "sokoban_env_id",
    "sokoban_step_credit",
]

FATAL_CREDIT = -3.0
"""Credit of the push that makes a solvable room unsolvable: three times a step away from the
goal (-1), so that within the 10-15 turn limits it outweighs any detour but one that pushes the
box three squares the wrong way, which a fatal push also is in effect."""

ORACLE_SUFFIX = "-oracle"


@functools.lru_cache(maxsize=200_000)
def _shortest_length(board: Board) -> int | None:
    from agentenvs.sokoban.expert import shortest_solution

    plan = shortest_solution(board)
    return None if plan is None else len(plan)


def sokoban_step_credit(before: Board, action: str | None) -> float:
    """The oracle's credit of ``action`` taken in ``before`` (module docstring)."""
    length = _shortest_length(before)
    if length is None:
        return 0.0
    move = (action or "").strip().lower()
    after = before.step(ACTIONS.index(move)) if move in ACTIONS else before
    then = _shortest_length(after)
    if then is None:
        return FATAL_CREDIT
    return float(length - then)


class SokobanOracleEnv(SokobanEnv):
    """Sokoban-v0 whose info also has ``step_credit`` (:func:`sokoban_step_credit`)."""

    env_id: ClassVar[str] = "Sokoban-oracle-v0"  # replaced per registered id

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._step_credit = 0.0

    def _start_task(self, task_id: str) -> str:
        self._step_credit = 0.0
        return super()._start_task(task_id)

    def _apply(self, action: str) -> Outcome:
        self._step_credit = sokoban_step_credit(self.board, action)
        return super()._apply(action)

    def _extra_info(self) -> dict[str, Any]:
        return {"step_credit": self._step_credit}


def sokoban_env_id(
    dim_room: tuple[int, int] = (6, 6), num_boxes: int = 1, search_depth: int = 30, *, oracle=False
) -> str:
    """The registered id of Sokoban rooms of this generator setting (``Sokoban-v0`` itself for
    the default rooms without oracle credit); registers it in this process."""
    rows, cols = dim_room
    default = (rows, cols, num_boxes, search_depth) == (6, 6, 1, 30)
    if default and not oracle:
        return "Sokoban-v0"
    env_id = f"Sokoban-{rows}x{cols}-{num_boxes}box-d{search_depth}"
    env_id += f"{ORACLE_SUFFIX}-v0" if oracle else "-v0"
    kwargs = {"dim_room": (rows, cols), "num_boxes": num_boxes, "search_depth": search_depth}
    cls = SokobanOracleEnv if oracle else SokobanEnv
    register_benchmark_env(env_id, _subclass(cls, env_id), "Sokoban-v0", kwargs=kwargs)
    return env_id


def _subclass(cls: type, env_id: str) -> type:
    """``cls`` under its own ``env_id`` (snapshots name it), cached so an id has one class."""
    key = (cls, env_id)
    if key not in _CLASSES:
        name = "".join(c for c in env_id.title() if c.isalnum())
        _CLASSES[key] = type(name, (cls,), {"env_id": env_id, "__module__": __name__})
        globals()[name] = _CLASSES[key]  # importable as module:name (gym's entry point)
    return _CLASSES[key]


_CLASSES: dict[tuple[type, str], type] = {}


def register_benchmark_env(
    env_id: str,
    cls: type,
    like: str,
    *,
    kwargs: dict[str, Any] | None = None,
    prompt: Any = None,
    setup: Any = None,
    protocol: str | None = None,
    expert: str | None = None,
) -> None:
    """Make ``env_id`` (class ``cls``, made with ``kwargs``) known to this process's tables:
    the environment table and Gymnasium, the prompts, the protocols and the experts. ``like``:
    an id whose prompt, protocol setup and expert it shares (its prompt and setup renamed to
    ``env_id``), unless ``prompt`` / ``setup`` / ``protocol`` / ``expert`` give its own.
    Idempotent."""
    import gymnasium as gym

    from agentenvs import expert as experts
    from agentenvs import registration
    from agentenvs.agents import protocols
    from agentenvs.agents.prompts import registry as prompts

    if env_id in registration.ENVIRONMENTS:
        return
    kwargs = dict(kwargs or {})
    entry_point = f"{cls.__module__}:{cls.__name__}"
    if like in prompts.PROMPTS and prompt is None:
        base = prompts.PROMPTS[like]
        prompt = replace(base, env_id=env_id, name=f"{base.name}@{env_id}")
    protocol = protocol or protocols.DEFAULT_PROTOCOLS[like]
    if setup is None:
        base_setup = protocols.get_protocol(protocol).for_env(like)
        setup = replace(base_setup, env_id=env_id, prompt=prompt.name)
    prompts.PROMPTS[env_id] = prompt
    prompts.NAMED_PROMPTS[prompt.name] = prompt
    envs = protocols.PROTOCOLS[protocol].envs
    envs[env_id] = setup  # type: ignore[index]  (a dict: the table this process reads)
    protocols.DEFAULT_PROTOCOLS[env_id] = protocol
    experts.EXPERTS[env_id] = expert or experts.EXPERTS[like]
    registration.ENVIRONMENTS[env_id] = registration.EnvEntry(env_id, entry_point, kwargs=kwargs)
    if env_id not in gym.registry:
        gym.register(
            id=env_id,
            entry_point=cls,
            kwargs=kwargs,
            order_enforce=False,
            disable_env_checker=True,
        )
