"""The Sokoban board: an immutable position, gym-sokoban's move rule, and the text rendering.

A :class:`Board` holds the room's fixed cells (walls, floors, targets) as flat bytes plus the
player's and the boxes' flat cell indices (``row * cols + col``). It is a named tuple: cheap to
make every step, hashable (so a solver can put positions in a set) and picklable.

The move rule is gym-sokoban's ``_push`` / ``_move``: a step towards a box pushes it when the cell
beyond is floor or an empty target; otherwise the player steps onto floor or an empty target;
otherwise nothing moves (the step still counts).

Text uses the benchmark's symbols, ``#`` wall, ``_`` floor, ``O`` target, ``√`` box on target,
``X`` box, ``P`` player, ``S`` player on target: ``compact`` (one character a cell, rows on lines;
RAGEN's text and the fixture's) or ``verl-agent`` (verl-agent's ``tiny_rgb_array`` text: each cell
as ``" # \\t"``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

from agentenvs.sokoban.generator import FLOOR, TARGET, WALL, Room

__all__ = ["ACTIONS", "GRID_STYLES", "Board", "parse_grid", "positions"]

# Action names in gym-sokoban's order (its actions 1-4; directions 0-3 of the generator).
ACTIONS: tuple[str, ...] = ("up", "down", "left", "right")
_CHANGES = ((-1, 0), (1, 0), (0, -1), (0, 1))

GRID_STYLES: tuple[str, ...] = ("compact", "verl-agent")
_SYMBOLS = {WALL: "#", FLOOR: "_", TARGET: "O"}
_BOX, _BOX_ON_TARGET, _PLAYER, _PLAYER_ON_TARGET = "X", "√", "P", "S"
_CELL_FORMAT = {"compact": "{}", "verl-agent": " {} \t"}


class Board(NamedTuple):
    """One Sokoban position: ``fixed`` cells (0 wall, 1 floor, 2 target) row by row, flat."""

    rows: int
    cols: int
    fixed: bytes
    player: int
    boxes: frozenset[int]

    @classmethod
    def from_room(cls, room: Room) -> Board:
        """The start position of a generated room."""
        rows, cols = room.shape
        player_row, player_col = room.player
        return cls(
            rows=rows,
            cols=cols,
            fixed=bytes(v for row in room.fixed for v in row),
            player=player_row * cols + player_col,
            boxes=frozenset(r * cols + c for r, c in room.boxes),
        )

    def step(self, direction: int) -> Board:
        """The position after one step in ``direction`` (0 up, 1 down, 2 left, 3 right)."""
        dr, dc = _CHANGES[direction]
        delta = dr * self.cols + dc
        target = self.player + delta
        if not self._inside(self.player, dr, dc):
            return self
        if target in self.boxes:
            beyond = target + delta
            if (
                self._inside(target, dr, dc)
                and self.fixed[beyond] != WALL
                and beyond not in self.boxes
            ):
                return self._replace(player=target, boxes=(self.boxes - {target}) | {beyond})
            return self
        if self.fixed[target] != WALL:
            return self._replace(player=target)
        return self

    @property
    def targets(self) -> frozenset[int]:
        return _targets(self.fixed)

    def boxes_on_target(self) -> int:
        """How many boxes stand on a target."""
        return len(self.boxes & _targets(self.fixed))

    def solved(self) -> bool:
        """Every target holds a box (gym-sokoban: no empty target and no player on one)."""
        return _targets(self.fixed) <= self.boxes

    def cell(self, index: int) -> tuple[int, int]:
        """(row, col) of a flat index."""
        return divmod(index, self.cols)

    def render(self, style: str = "compact") -> str:
        """The grid as text (see the module docstring for the styles)."""
        fixed = self.fixed
        cells = list(_fixed_cells(fixed, style))
        box, box_on_target, player, player_on_target = _MOVABLE_CELLS[style]
        for b in self.boxes:
            cells[b] = box_on_target if fixed[b] == TARGET else box
        p = self.player
        cells[p] = player_on_target if fixed[p] == TARGET else player
        cols = self.cols
        return "\n".join(["".join(cells[i : i + cols]) for i in range(0, len(cells), cols)])

    def _inside(self, index: int, dr: int, dc: int) -> bool:
        row, col = divmod(index, self.cols)
        return 0 <= row + dr < self.rows and 0 <= col + dc < self.cols


@functools.lru_cache(maxsize=1024)
def _targets(fixed: bytes) -> frozenset[int]:
    return frozenset(i for i, v in enumerate(fixed) if v == TARGET)


@functools.lru_cache(maxsize=1024)
def _fixed_cells(fixed: bytes, style: str) -> tuple[str, ...]:
    """Each fixed cell's text in ``style`` (a room's walls, floors and targets never change)."""
    fmt = _CELL_FORMAT[style]
    return tuple(fmt.format(_SYMBOLS[v]) for v in fixed)


_MOVABLE_CELLS = {  # style -> box, box on target, player, player on target
    style: tuple(fmt.format(s) for s in (_BOX, _BOX_ON_TARGET, _PLAYER, _PLAYER_ON_TARGET))
    for style, fmt in _CELL_FORMAT.items()
}


def parse_grid(text: str) -> Board | None:
    """The board a rendered grid shows (either style), or None if ``text`` is not a grid."""
    lines = [line.replace(" ", "").replace("\t", "") for line in text.strip("\n").split("\n")]
    if not lines or not lines[0] or any(len(line) != len(lines[0]) for line in lines):
        return None
    rows, cols = len(lines), len(lines[0])
    fixed = bytearray()
    players: list[int] = []
    boxes: list[int] = []
    for r, line in enumerate(lines):
        for c, ch in enumerate(line):
            index = r * cols + c
            code = _PARSE.get(ch)
            if code is None:
                return None
            cell, has_box, has_player = code
            fixed.append(cell)
            if has_box:
                boxes.append(index)
            if has_player:
                players.append(index)
    if len(players) != 1:
        return None
    return Board(rows, cols, bytes(fixed), players[0], frozenset(boxes))


def _parse_table() -> dict[str, tuple[int, bool, bool]]:
    table = {symbol: (code, False, False) for code, symbol in _SYMBOLS.items()}
    table[_BOX] = (FLOOR, True, False)
    table[_BOX_ON_TARGET] = (TARGET, True, False)
    table[_PLAYER] = (FLOOR, False, True)
    table[_PLAYER_ON_TARGET] = (TARGET, False, True)
    return table


_PARSE = _parse_table()


def positions(board: Board, cells: Sequence[int]) -> list[list[int]]:
    """``[[row, col], ...]`` of ``cells`` in row-major order (JSON-friendly)."""
    return [list(board.cell(i)) for i in sorted(cells)]
