"""The learning benchmark's own environment ids, registered in the process that runs it.

``Sokoban-oracle-v0`` (:class:`SokobanOracleEnv`) is Sokoban-v0 whose every step also reports the
expert's judgement of the action in ``info["step_credit"]``, which the ``oracle`` arm's estimator
reads (the other arms ignore it). It is a control of the learning benchmark, registered in the
process that runs it (:mod:`agentenvs.benchmarks.learning.plugins`), not an environment users
pick.

**Sokoban's oracle credit** (:func:`sokoban_step_credit`), with ``L(s)`` the length of a
shortest solution from position ``s`` (:func:`agentenvs.sokoban.expert.shortest_solution`) and
``s'`` the position after the action (an unknown action moves nothing): minus the turns the
action added to the shortest possible episode, ``-(1 + L(s') - L(s))``:

* ``L(s) - L(s') - 1`` while ``s'`` is solvable: 0 for a move of a shortest plan, -1 for a move
  that changes nothing (a bump into a wall), -2 for a step away, less for a push that lengthens
  the solution by more;
* :data:`FATAL_CREDIT` (-3) for the action that makes a solvable room unsolvable;
* 0 once the room is unsolvable (no action can change the outcome) and on reset.

``info["solvable"]`` says whether the room could still be solved before the step's action.
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar

from agentenvs.core import Outcome
from agentenvs.sokoban.board import ACTIONS, Board
from agentenvs.sokoban.env import SokobanEnv

__all__ = [
    "FATAL_CREDIT",
    "ORACLE_SOKOBAN_ID",
    "PROMPTS",
    "PROTOCOLS",
    "SokobanOracleEnv",
    "sokoban_step_credit",
]

FATAL_CREDIT = -3.0
"""Credit of the action that makes a solvable task unsolvable: below a step away (-2) and a
wasted turn (-1), equal to a push that costs two extra moves; the episode's outcome term adds
the rest of the blame (its return is lost)."""

ORACLE_SOKOBAN_ID = "Sokoban-oracle-v0"


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
    return float(length - then - 1)


class SokobanOracleEnv(SokobanEnv):
    """Sokoban-v0 whose info also has ``step_credit`` (:func:`sokoban_step_credit`) and
    ``solvable`` (the room could still be solved before the action)."""

    env_id: ClassVar[str] = ORACLE_SOKOBAN_ID

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._step_credit = 0.0
        self._solvable = True

    def _start_task(self, task_id: str) -> str:
        self._step_credit, self._solvable = 0.0, True
        return super()._start_task(task_id)

    def _apply(self, action: str) -> Outcome:
        self._step_credit = sokoban_step_credit(self.board, action)
        self._solvable = _shortest_length(self.board) is not None
        return super()._apply(action)

    def _extra_info(self) -> dict[str, Any]:
        return {"step_credit": self._step_credit, "solvable": self._solvable}

    def _get_state(self) -> Any:
        return (super()._get_state(), self._step_credit, self._solvable)

    def _set_state(self, task_id: str, state: Any) -> None:
        inner, self._step_credit, self._solvable = state
        super()._set_state(task_id, inner)


def _oracle_prompts() -> tuple[Any, ...]:
    from dataclasses import replace

    from agentenvs.agents.prompts.sokoban import PROMPTS

    return (replace(PROMPTS[0], env_id=ORACLE_SOKOBAN_ID, name="sokoban-verl-agent-oracle"),)


def _oracle_protocols() -> tuple[Any, ...]:
    from dataclasses import replace

    from agentenvs.agents.protocols import SOKOBAN, Protocol

    return tuple(
        Protocol(
            p.name,
            p.title,
            {
                ORACLE_SOKOBAN_ID: replace(
                    p.envs["Sokoban-v0"], env_id=ORACLE_SOKOBAN_ID, prompt=PROMPTS[0].name
                )
            },
        )
        for p in SOKOBAN
    )


PROMPTS = _oracle_prompts()
"""Sokoban-v0's prompt under this id (the same text: a model plays both alike)."""
PROTOCOLS = _oracle_protocols()
"""Sokoban-v0's protocols, each with its setup under this id."""
