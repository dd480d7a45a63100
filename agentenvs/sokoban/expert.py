"""The Sokoban expert: an optimal breadth-first solver over positions.

Breadth-first search over (player, boxes) positions, trying ``up``, ``down``, ``left``, ``right``
in that order, gives a shortest move sequence; it is the same sequence verl-agent's
``get_shortest_action_path`` finds (same move order, same first-found path). The expert replans
from the environment's current position at every call, so it recovers after restored snapshots
or anyone else's moves.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from agentenvs.expert import Expert, ExpertDecision, ExpertFailure
from agentenvs.sokoban.board import ACTIONS, Board

if TYPE_CHECKING:
    from agentenvs.core import TextEnv

__all__ = ["DEFAULT_MAX_POSITIONS", "SokobanExpert", "shortest_solution"]

DEFAULT_MAX_POSITIONS = 2_000_000


def shortest_solution(board: Board, max_positions: int = DEFAULT_MAX_POSITIONS) -> list[str] | None:
    """A shortest list of moves that puts every box on a target, or None if there is none.

    Raises :class:`ExpertFailure` when more than ``max_positions`` positions would be searched.
    """
    if board.solved():
        return []
    start = (board.player, board.boxes)
    parent: dict[tuple[int, frozenset[int]], tuple[tuple[int, frozenset[int]], int] | None] = {
        start: None
    }
    frontier = deque([board])
    while frontier:
        here = frontier.popleft()
        here_key = (here.player, here.boxes)
        for direction in range(len(ACTIONS)):
            there = here.step(direction)
            key = (there.player, there.boxes)
            if key in parent:
                continue
            parent[key] = (here_key, direction)
            if there.solved():
                return _path(parent, key)
            if len(parent) > max_positions:
                raise ExpertFailure(
                    f"searched more than {max_positions} positions without a solution"
                )
            frontier.append(there)
    return None


class SokobanExpert(Expert):
    """Plays a shortest solution of the current position of a ``Sokoban-v0`` environment."""

    env_id = "Sokoban-v0"

    def __init__(self, max_positions: int = DEFAULT_MAX_POSITIONS) -> None:
        self.max_positions = max_positions

    def act(self, env: TextEnv) -> ExpertDecision:
        board = getattr(env, "board", None)
        if not isinstance(board, Board):
            raise ExpertFailure(f"the Sokoban expert needs a Sokoban-v0 environment, got {env!r}")
        plan = shortest_solution(board, self.max_positions)
        if plan is None:
            raise ExpertFailure("no sequence of moves solves this position (a box is stuck)")
        if not plan:
            raise ExpertFailure("every box is already on a target; nothing to do")
        moves = "move" if len(plan) == 1 else "moves"
        return ExpertDecision(
            action=plan[0],
            thought=f"The shortest solution from here takes {len(plan)} {moves}; first {plan[0]}.",
        )


def _path(
    parent: dict[tuple[int, frozenset[int]], tuple[tuple[int, frozenset[int]], int] | None],
    key: tuple[int, frozenset[int]],
) -> list[str]:
    moves: list[str] = []
    link = parent[key]
    while link is not None:
        key, direction = link
        moves.append(ACTIONS[direction])
        link = parent[key]
    return moves[::-1]
