"""Sokoban-v0 speed: step, reset, room generation, snapshot/restore and the expert.

Each row names what it is compared with in the same run: the raw engine (``Board.step`` and its
rendering, without the ``TextEnv`` contract around it), room generation without the cache, or a
replay from reset. Target: a step of at most 30 us (:data:`STEP_TARGET_S`).
"""

from __future__ import annotations

import itertools

from agentenvs.benchmarks.speed.timing import SpeedRow, per_call
from agentenvs.sokoban import SokobanEnv, generate_room
from agentenvs.sokoban.expert import SokobanExpert

__all__ = ["STEP_TARGET_S", "bench"]

ENV_ID = "Sokoban-v0"
STEP_TARGET_S = 30e-6
_OPPOSITE = {"up": "down", "down": "up", "left": "right", "right": "left"}
_DIRECTION = {"up": 0, "down": 1, "left": 2, "right": 3}


def bench(quick: bool = False) -> list[SpeedRow]:
    """The speed rows of Sokoban-v0 (``quick``: shorter timing budgets)."""
    budget = 0.1 if quick else 0.5
    rows = [_step_row(budget), *_reset_rows(budget), _snapshot_row(budget), _expert_row(budget)]
    return rows


def _step_row(budget: float) -> SpeedRow:
    env = SokobanEnv(max_turns=10**9)
    task_id, move = _task_with_free_move(env)
    env.reset(options={"task_id": task_id})
    moves = itertools.cycle([move, _OPPOSITE[move]])
    ours = per_call(lambda: env.step(next(moves)), budget_s=budget)

    board = env.board
    directions = itertools.cycle([_DIRECTION[move], _DIRECTION[_OPPOSITE[move]]])

    def raw_step() -> None:
        nonlocal board
        board = board.step(next(directions))
        board.render()

    raw = per_call(raw_step, budget_s=budget)
    return SpeedRow(
        ENV_ID,
        "step",
        ours,
        "Board.step + render (raw engine)",
        raw,
        "<= 30 us",
        ours <= STEP_TARGET_S,
    )


def _reset_rows(budget: float) -> list[SpeedRow]:
    env = SokobanEnv()
    env.reset(options={"task_id": "seed/0"})
    cached = per_call(lambda: env.reset(options={"task_id": "seed/0"}), budget_s=budget)
    fresh_seeds = itertools.count(1_000_000)
    generate = per_call(lambda: generate_room(next(fresh_seeds)), budget_s=budget)
    deep_seeds = itertools.count(2_000_000)
    generate_deep = per_call(
        lambda: generate_room(next(deep_seeds), search_depth=300), budget_s=budget
    )
    return [
        SpeedRow(
            ENV_ID,
            "reset (task id, room cached)",
            cached,
            "generate_room, depth 30 (uncached)",
            generate,
        ),
        SpeedRow(
            ENV_ID, "generate_room, depth 300", generate_deep, "generate_room, depth 30", generate
        ),
    ]


def _snapshot_row(budget: float) -> SpeedRow:
    env = SokobanEnv()
    task_id, move = _task_with_free_move(env)
    prefix = [move, _OPPOSITE[move]] * 5
    env.replay(task_id, prefix)
    other = SokobanEnv()
    ours = per_call(lambda: other.restore(env.snapshot()), budget_s=budget)
    replay = per_call(lambda: other.replay(task_id, prefix), budget_s=budget)
    return SpeedRow(
        ENV_ID, f"snapshot + restore ({len(prefix)} steps in)", ours, "replay from reset", replay
    )


def _expert_row(budget: float) -> SpeedRow:
    env = SokobanEnv()
    expert = SokobanExpert()
    env.reset(options={"task_id": "seed/65536"})
    ours = per_call(lambda: expert.act(env), budget_s=budget)
    step = per_call(lambda: env.board.step(0), budget_s=budget)
    return SpeedRow(ENV_ID, "expert act (BFS from the start)", ours, "Board.step", step)


def _task_with_free_move(env: SokobanEnv) -> tuple[str, str]:
    """A test task and a move that the player can make and undo without touching a box."""
    for task_id in env.task_ids("test"):
        env.reset(options={"task_id": task_id})
        start = env.board
        for move, direction in _DIRECTION.items():
            there = start.step(direction)
            back = there.step(_DIRECTION[_OPPOSITE[move]])
            if there.player != start.player and there.boxes == start.boxes and back == start:
                return task_id, move
    raise RuntimeError("no test room with a free move; the generator changed")
