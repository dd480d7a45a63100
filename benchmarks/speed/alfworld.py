"""ALFWorld-v0 speed: load, reset, step, snapshot/restore, against the raw engine in the same run.

The baseline of each row is the raw engine as alfworld and AgentGym build it (textworld's
``PddlEnv`` wrapped in alfworld's ``AlfredDemangler`` and ``AlfredInfos``), called directly:
``load`` + ``reset`` for a new game, ``reset``, ``step``, and reset + replay of the same commands
for a restore (ours: the first restore of a path, which fills the derivation memo of
:mod:`agentenvs.alfworld.restore`, and a restore of a path restored before). Ours and the
baseline are timed in alternating rounds (the machine is shared), and each row reports medians.
Target: our wrapper adds at most 10% to a step (:data:`STEP_OVERHEAD_TARGET`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from agentenvs.alfworld import ALFWorldEnv, data
from agentenvs.alfworld.engine import clear_process_cache, import_engine
from agentenvs.alfworld.expert import ALFWorldExpert
from agentenvs.alfworld.restore import MEMO
from agentenvs.benchmarks.timing import SpeedRow
from agentenvs.core import Snapshot

__all__ = ["STEP_OVERHEAD_TARGET", "bench"]

import_engine()  # without the engine: MissingDependencyError (an ImportError) naming the extra

ENV_ID = "ALFWorld-v0"
STEP_OVERHEAD_TARGET = 1.10  # ours / raw
_TASKS = (  # two small bedroom games of valid_unseen
    "alfworld/valid_unseen/look_at_obj_in_light-AlarmClock-None-DeskLamp-308/"
    "trial_T20190908_222917_366542",
    "alfworld/valid_unseen/pick_and_place_simple-Mug-None-Desk-308/trial_T20190908_125200_737896",
)
_PREFIX = [
    "go to desk 2",
    "take alarmclock 1 from desk 2",
    "go to shelf 1",
    "inventory",
    "go to drawer 1",
    "open drawer 1",
]
_LONG_PREFIX = [  # 20 valid commands, a mid-episode cut
    *_PREFIX,
    "close drawer 1",
    "go to bed 1",
    "go to desk 1",
    "look",
    "go to drawer 2",
    "go to shelf 3",
    "go to shelf 2",
    "inventory",
    "go to desk 2",
    "examine desk 2",
    "go to drawer 1",
    "open drawer 1",
    "look",
    "go to shelf 1",
]


class _RawEngine:
    """The raw engine chain, no agentenvs code in the timed calls."""

    def __init__(self) -> None:
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
        from textworld.envs.pddl import PddlEnv

        infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
        self.env = AlfredInfos(AlfredDemangler(PddlEnv(infos), shuffle=False))


def bench(quick: bool = False) -> list[SpeedRow]:
    """The speed rows of ALFWorld-v0 (``quick``: fewer rounds)."""
    rounds = 3 if quick else 7
    env = ALFWorldEnv(max_turns=10**9)
    files = [str(data.resolve_game_file(env.game(t))) for t in _TASKS]
    raw = _RawEngine()
    try:
        return [
            *_load_rows(env, raw, files, rounds),
            _reset_row(env, raw, files[0], rounds),
            *_step_rows(env, raw, files[0], rounds),
            *_snapshot_rows(env, raw, files[0], rounds),
            _replay_row(env, raw, files[0], rounds),
            _expert_row(env, rounds),
        ]
    finally:
        env.close()


def _alternating(
    ours: Callable[[], object], base: Callable[[], object], rounds: int, number: int = 1
) -> tuple[float, float]:
    """Median seconds per call of ``ours`` and ``base``, timed in alternating batches."""
    ours(), base()  # warm-up
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(rounds):
        for fn, out in ((ours, times[0]), (base, times[1])):
            start = time.perf_counter()
            for _ in range(number):
                fn()
            out.append((time.perf_counter() - start) / number)
    return statistics.median(times[0]), statistics.median(times[1])


def _load_rows(env: ALFWorldEnv, raw: _RawEngine, files: list[str], rounds: int) -> list[SpeedRow]:
    which = [0]

    def ours_cold() -> None:
        clear_process_cache()
        which[0] ^= 1
        env.reset(options={"task_id": _TASKS[which[0]]})

    def ours_warm() -> None:
        which[0] ^= 1
        env.reset(options={"task_id": _TASKS[which[0]]})

    def raw_load_reset() -> None:
        which[0] ^= 1
        raw.env.load(files[which[0]])
        raw.env.reset()

    cold, base = _alternating(ours_cold, raw_load_reset, rounds)
    warm, base2 = _alternating(ours_warm, raw_load_reset, rounds)
    baseline = "raw load + reset"
    return [
        SpeedRow(ENV_ID, "reset, new game (cold process cache)", cold, baseline, base),
        SpeedRow(ENV_ID, "reset, new game (game cached in process)", warm, baseline, base2),
    ]


def _reset_row(env: ALFWorldEnv, raw: _RawEngine, file: str, rounds: int) -> SpeedRow:
    raw.env.load(file)
    ours, base = _alternating(
        lambda: env.reset(options={"task_id": _TASKS[0]}), raw.env.reset, rounds
    )
    return SpeedRow(ENV_ID, "reset, same game", ours, "raw reset", base)


def _step_rows(env: ALFWorldEnv, raw: _RawEngine, file: str, rounds: int) -> list[SpeedRow]:
    env.reset(options={"task_id": _TASKS[0]})
    raw.env.load(file)
    raw.env.reset()
    pair = ("go to desk 1", "go to desk 2")
    flip = [0, 0]

    def ours_step() -> None:
        flip[0] ^= 1
        env.step(pair[flip[0]])

    def raw_step() -> None:
        flip[1] ^= 1
        raw.env.step(pair[flip[1]])

    ours, base = _alternating(ours_step, raw_step, rounds * 3, number=4)
    bad, bad_base = _alternating(
        lambda: env.step("jump"), lambda: raw.env.step("jump"), rounds * 3, number=4
    )
    target = f"<= {STEP_OVERHEAD_TARGET:.2f}x raw"
    return [
        SpeedRow(
            ENV_ID,
            "step (go to, valid; a new state)",
            ours,
            "raw step",
            base,
            target,
            ours <= STEP_OVERHEAD_TARGET * base,
        ),
        SpeedRow(
            ENV_ID,
            "step (invalid command; state seen, memo)",
            bad,
            "raw step",
            bad_base,
            target,
            bad <= STEP_OVERHEAD_TARGET * bad_base,
        ),
    ]


def _snapshot_rows(env: ALFWorldEnv, raw: _RawEngine, file: str, rounds: int) -> list[SpeedRow]:
    other = ALFWorldEnv(max_turns=10**9)
    other.reset(options={"task_id": _TASKS[0]})
    raw.env.load(file)
    rows = []
    for prefix in (_PREFIX, _LONG_PREFIX):
        env.replay(_TASKS[0], prefix)
        snap = env.snapshot()

        def ours_restore(clear: bool = False, snap: Snapshot = snap) -> None:
            if clear:
                MEMO.clear()  # a first restore of this path: replay and fill the memo
            other.step("go to bed 1")  # leave the snapshot's path, so restore must replay
            other.restore(snap)

        def raw_replay(prefix: list[str] = prefix) -> None:
            raw.env.reset()
            raw.env.step("go to bed 1")
            for action in prefix:
                raw.env.step(action)

        n = len(prefix)
        baseline = f"raw step + reset + {n} steps"
        first, replay = _alternating(lambda: ours_restore(clear=True), raw_replay, rounds)
        again, replay2 = _alternating(ours_restore, raw_replay, rounds)
        rows += [
            SpeedRow(ENV_ID, f"step + restore ({n} steps in, first)", first, baseline, replay),
            SpeedRow(ENV_ID, f"step + restore ({n} steps in, again)", again, baseline, replay2),
        ]
    take, step = _alternating(env.snapshot, lambda: env.step("look"), rounds, number=4)
    other.close()
    return [SpeedRow(ENV_ID, "snapshot", take, "raw step (look)", step), *rows]


def _replay_row(env: ALFWorldEnv, raw: _RawEngine, file: str, rounds: int) -> SpeedRow:
    """Play a path already played in this process (a group's samples, a validation walk): the
    texts of its states come from the derivation memo."""
    raw.env.load(file)

    def raw_play() -> None:
        raw.env.reset()
        for action in _LONG_PREFIX:
            raw.env.step(action)

    ours, base = _alternating(lambda: env.replay(_TASKS[0], _LONG_PREFIX), raw_play, rounds)
    n = len(_LONG_PREFIX)
    return SpeedRow(ENV_ID, f"reset + {n} steps, a path played before", ours, "raw", base)


def _expert_row(env: ALFWorldEnv, rounds: int) -> SpeedRow:
    expert = ALFWorldExpert()
    env.reset(options={"task_id": _TASKS[0]})
    act, step = _alternating(lambda: expert.act(env), lambda: env.step("look"), rounds, number=4)
    return SpeedRow(ENV_ID, "expert act (on the walkthrough)", act, "step (look)", step)
