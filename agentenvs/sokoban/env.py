"""Sokoban-v0: the text Sokoban of verl-agent and RAGEN, on gym-sokoban's room generator."""

from __future__ import annotations

import functools
import re
from typing import Any, ClassVar

from agentenvs.core import Outcome, ResetNeededError, SnapshotError, TextEnv
from agentenvs.sokoban.board import ACTIONS, GRID_STYLES, Board, parse_grid, positions
from agentenvs.sokoban.generator import Room, generate_room

__all__ = [
    "STEP_PENALTY",
    "BOX_ON_TARGET_REWARD",
    "BOX_OFF_TARGET_PENALTY",
    "SOLVED_REWARD",
    "TEST_SEEDS",
    "TRAIN_SEEDS",
    "SokobanEnv",
]

# gym-sokoban's rewards (verl-agent keeps them).
STEP_PENALTY = -0.1
BOX_ON_TARGET_REWARD = 1.0
BOX_OFF_TARGET_PENALTY = -1.0
SOLVED_REWARD = 10.0

# verl-agent draws training seeds from [0, 2**16) and validation seeds from [2**16, 2**32);
# our test split is the first 100 of the validation range.
TRAIN_SEEDS = range(0, 2**16)
TEST_SEEDS = range(2**16, 2**16 + 100)

_TASK_ID = re.compile(r"seed/(0|[1-9][0-9]{0,9})")
_MAX_SEED = 2**32
_ACTION_INDEX = {name: i for i, name in enumerate(ACTIONS)}


@functools.lru_cache(maxsize=8192)
def _room(seed: int, shape: tuple[int, int], num_boxes: int, search_depth: int) -> Room:
    return generate_room(seed, shape=shape, num_boxes=num_boxes, search_depth=search_depth)


@functools.lru_cache(maxsize=8)
def _split_ids(split: str) -> tuple[str, ...]:
    seeds = TRAIN_SEEDS if split == "train" else TEST_SEEDS
    return tuple(f"seed/{s}" for s in seeds)


class SokobanEnv(TextEnv):
    """Push every box onto a target in a small generated room.

    ## Description
    The Sokoban of verl-agent (GiGPO) and RAGEN: a ``6x6`` room with one box by default, made by
    gym-sokoban's generator (a random-walk room, then reverse play from the solved state to depth
    ``search_depth``, then 0-3 random player steps). Task ``seed/<n>`` is the room verl-agent's
    ``SokobanEnv.reset(seed=n)`` makes; :mod:`agentenvs.sokoban.generator` reproduces it.

    ## Action Space
    ``up``, ``down``, ``left``, ``right`` (case-insensitive, surrounding whitespace ignored).
    Stepping towards a box pushes it if the cell beyond is free. Any other string is invalid:
    nothing moves, reward -0.1, the turn is not consumed, ``info["valid"]`` is False.

    ## Observation Space
    The grid as text, one row a line: ``#`` wall, ``_`` floor, ``O`` target, ``√`` box on target,
    ``X`` box, ``P`` player, ``S`` player on target (``grid_style="verl-agent"``: each cell as
    ``" # \\t"``, verl-agent's ``tiny_rgb_array`` text).

    ## Starting State
    The generated room of the task; ``reset(seed=s)`` draws a training task from ``s``.

    ## Rewards
    -0.1 every step, +1 when a box goes onto a target, -1 when one leaves a target, +10 when
    every target holds a box (gym-sokoban's, so a solving push earns 10.9).

    ## Episode End
    Terminated when every box is on a target; truncated after ``max_turns`` valid actions.

    ## Information
    - ``task_id`` (str), ``family`` (str, e.g. ``6x6-1box``), ``won`` (bool), ``valid`` (bool),
      ``turn`` (int), ``admissible_actions`` (list[str]: the four moves),
    - ``fields`` (dict): ``player`` ([row, col]), ``boxes`` (list of [row, col], row-major),
      ``boxes_on_target`` (int).

    ## Arguments
    - ``dim_room`` (tuple[int, int]): room shape, default ``(6, 6)``.
    - ``num_boxes`` (int): boxes (and targets), default 1.
    - ``search_depth`` (int): reverse-play depth, default 30 (verl-agent; RAGEN uses 300).
    - ``grid_style`` (str): ``"compact"`` (default) or ``"verl-agent"``.
    - ``max_turns`` (int): turn budget, default 15.
    - ``render_mode`` (str | None): ``"ansi"`` returns the observation.

    :attr:`variant` records ``dim_room``, ``num_boxes``, ``search_depth`` (they choose the
    rooms, so change scores) and ``grid_style``: the engine's outcome for an action sequence
    does not depend on it, but a language model sees a different grid, so its numbers under
    the two styles are not comparable and the tables say which ran.

    ## Version History
    - v0: initial version.
    """

    env_id: ClassVar[str] = "Sokoban-v0"
    splits: ClassVar[tuple[str, ...]] = ("train", "test")
    default_max_turns: ClassVar[int] = 15
    task_id_forms: ClassVar[tuple[str, ...]] = ("seed/<0-4294967295>",)

    def __init__(
        self,
        dim_room: tuple[int, int] = (6, 6),
        num_boxes: int = 1,
        search_depth: int = 30,
        grid_style: str = "compact",
        max_turns: int | None = None,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(max_turns=max_turns, render_mode=render_mode)
        dim_room = tuple(int(d) for d in dim_room)
        if len(dim_room) != 2 or min(dim_room) < 4:
            raise ValueError(f"dim_room is (rows, cols), each at least 4, got {dim_room}")
        if num_boxes < 1:
            raise ValueError(f"num_boxes must be at least 1, got {num_boxes}")
        if search_depth < 2:
            raise ValueError(f"search_depth must be at least 2, got {search_depth}")
        if grid_style not in GRID_STYLES:
            raise ValueError(f"unknown grid_style {grid_style!r}; choose one of {GRID_STYLES}")
        self.dim_room: tuple[int, int] = dim_room  # type: ignore[assignment]
        self.num_boxes = int(num_boxes)
        self.search_depth = int(search_depth)
        self.grid_style = grid_style
        self._family = f"{dim_room[0]}x{dim_room[1]}-{num_boxes}box"
        self._board: Board | None = None
        self._rewarded_boxes = 0  # gym-sokoban's boxes_on_target: 0 at reset, then counted

    @property
    def variant(self) -> dict[str, Any]:
        return {
            "dim_room": list(self.dim_room),
            "num_boxes": self.num_boxes,
            "search_depth": self.search_depth,
            "grid_style": self.grid_style,
        }

    # ----- tasks --------------------------------------------------------------------------

    def task_ids(self, split: str) -> list[str]:
        if split not in self.splits:
            raise self._unknown_split(split)
        return list(_split_ids(split))

    def _draw_train_task(self) -> str:
        return f"seed/{TRAIN_SEEDS[int(self.np_random.integers(len(TRAIN_SEEDS)))]}"

    def family(self, task_id: str) -> str:
        if task_id != self._task_id:  # the current task's id was checked when it started
            self._seed_of(task_id)
        return self._family

    def room(self, task_id: str) -> Room:
        """The generated room of ``task_id``."""
        return _room(self._seed_of(task_id), self.dim_room, self.num_boxes, self.search_depth)

    @property
    def board(self) -> Board:
        """The current position (for experts and tests)."""
        if self._board is None:
            raise ResetNeededError("call reset() before reading the board")
        return self._board

    # ----- the benchmark --------------------------------------------------------------------

    def _start_task(self, task_id: str) -> str:
        self._board = Board.from_room(self.room(task_id))
        self._rewarded_boxes = 0
        return self._board.render(self.grid_style)

    def _apply(self, action: str) -> Outcome:
        board = self._board
        assert board is not None
        direction = _ACTION_INDEX.get(action.strip().lower())
        if direction is None:
            return Outcome(self._observation, STEP_PENALTY, valid=False, consumes_turn=False)
        board = board.step(direction)
        self._board = board
        reward = STEP_PENALTY
        on_target = board.boxes_on_target()
        if on_target > self._rewarded_boxes:
            reward += BOX_ON_TARGET_REWARD
        elif on_target < self._rewarded_boxes:
            reward += BOX_OFF_TARGET_PENALTY
        solved = board.solved()
        if solved:
            reward += SOLVED_REWARD
        self._rewarded_boxes = on_target
        return Outcome(board.render(self.grid_style), reward, won=solved, terminated=solved)

    def _admissible_actions(self) -> list[str]:
        return list(ACTIONS)

    def _get_state(self) -> Any:
        assert self._board is not None
        return (self._config(), tuple(self._board), self._rewarded_boxes)

    def _set_state(self, task_id: str, state: Any) -> None:
        config, board, rewarded = state
        if config != self._config():
            raise SnapshotError(
                f"the snapshot is of a Sokoban with (dim_room, num_boxes, search_depth, "
                f"grid_style) = {config}, this one is {self._config()}; make the environment "
                "with the snapshot's arguments"
            )
        self._seed_of(task_id)
        self._board = Board(*board)
        self._rewarded_boxes = rewarded

    def fields(self, observation: str) -> dict[str, Any]:
        """``player``, ``boxes`` and ``boxes_on_target`` of a grid observation ({} otherwise)."""
        if self._board is not None and observation == self._observation:
            board: Board | None = self._board
        else:
            board = parse_grid(observation)
        if board is None:
            return {}
        return {
            "player": list(board.cell(board.player)),
            "boxes": positions(board, board.boxes),
            "boxes_on_target": board.boxes_on_target(),
        }

    # ----- private helpers --------------------------------------------------------------------

    def _config(self) -> tuple:
        return (self.dim_room, self.num_boxes, self.search_depth, self.grid_style)

    def _seed_of(self, task_id: str) -> int:
        if not isinstance(task_id, str):
            raise self._unknown_task(str(task_id), "a task id is a string")
        found = _TASK_ID.fullmatch(task_id)
        if found is None:
            raise self._unknown_task(task_id)
        seed = int(found.group(1))
        if seed >= _MAX_SEED:
            raise self._unknown_task(task_id, "the seed must be below 2**32")
        return seed
