"""ALFWorld-v0 speed: against the original engine in its own process, and against replays.

The two target rows put ALFWorld-v0 beside the original engine (textworld's ``PddlEnv`` in
alfworld's ``AlfredDemangler(shuffle=False)`` and ``AlfredInfos``), run in a process of its own
that never imports agentenvs (:mod:`agentenvs.benchmarks.speed.alfworld_original`). In each
round both play the same test games, new to both processes: the original loads and resets each
game and plays commands drawn from its admissible lists (a seeded generator, one in six an
invalid command); then ALFWorld-v0 resets the same games (``reset(options={"task_id": ...})``)
and plays the same commands, and every observation, admissible list and ``won`` must be the
original's (the benchmark fails otherwise). The rows compare medians over all rounds: a reset of
a game new to the process (the original's load + reset), and a step. Both processes first play
one warm-up game (imports, the grammar form's parse); the original gets the machine to itself
while it plays, and so does ALFWorld-v0.

The other rows compare with the raw engine called directly in this process: a reset of the same
game, snapshot and restore (a restore replays the commands from reset, its texts served by the
derivation memo of :mod:`agentenvs.alfworld.restore` when the path was played before), a
replayed path, and the expert's decision.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

from agentenvs.alfworld import ALFWorldEnv, data
from agentenvs.alfworld.engine import import_engine
from agentenvs.alfworld.expert import ALFWorldExpert
from agentenvs.alfworld.observation import first_observation
from agentenvs.alfworld.restore import MEMO
from agentenvs.benchmarks.speed import alfworld_original
from agentenvs.benchmarks.speed.timing import SpeedRow
from agentenvs.core import Snapshot

__all__ = [
    "FIRST_RESET_TARGET",
    "STEP_TARGET",
    "OriginalComparison",
    "bench",
    "compare_with_original",
]

import_engine()  # without the engine: MissingDependencyError (an ImportError) naming the extra

ENV_ID = "ALFWorld-v0"
# A step costs the original engine 40-70 ms, nearly all of it re-parsing the same templates and
# deep-copying contexts; rollouts (GiGPO: 512 episodes of up to 50 steps an iteration) are
# dominated by steps, so the fast path has to make them at least 5x cheaper.
STEP_TARGET = 5.0  # original step / ours
# A reset of a new game is the grammar parse plus the PDDL translations (the original translates
# the same PDDL on load and again on reset); training resets a new game every episode.
FIRST_RESET_TARGET = 2.0  # original load + reset / ours
_COMMANDS = 12  # commands per game and round
_JUNK_ONE_IN = 6
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
    comparison = compare_with_original(rounds=3 if quick else 5, games_per_round=2 if quick else 4)
    env = ALFWorldEnv(max_turns=10**9)
    files = [str(data.resolve_game_file(env.game(t))) for t in _TASKS]
    raw = _RawEngine()
    try:
        return [
            *comparison.rows(),
            _reset_row(env, raw, files[0], rounds),
            *_snapshot_rows(env, raw, files[0], rounds),
            _replay_row(env, raw, files[0], rounds),
            _expert_row(env, rounds),
        ]
    finally:
        env.close()


# --------------------------------------------------------------------------------------------
# Against the original engine in its own process


@dataclass(frozen=True)
class OriginalComparison:
    """Times of the same resets and steps, ALFWorld-v0 and the original engine (seconds)."""

    games: int
    ours_resets: list[float]
    original_resets: list[float]  # load + reset
    ours_steps: list[float]
    original_steps: list[float]

    @property
    def step_ratio(self) -> float:
        return statistics.median(self.original_steps) / statistics.median(self.ours_steps)

    @property
    def reset_ratio(self) -> float:
        return statistics.median(self.original_resets) / statistics.median(self.ours_resets)

    def steps_per_second(self) -> tuple[float, float]:
        """(ours, the original's) steps per second, from the median step."""
        return 1 / statistics.median(self.ours_steps), 1 / statistics.median(self.original_steps)

    def rows(self) -> list[SpeedRow]:
        baseline = "original engine, own process"
        n = f"{self.games} test games"
        return [
            SpeedRow(
                ENV_ID,
                f"reset, a game new to the process ({n}; original: load + reset)",
                statistics.median(self.ours_resets),
                baseline,
                statistics.median(self.original_resets),
                f">= {FIRST_RESET_TARGET:g}x faster",
                self.reset_ratio >= FIRST_RESET_TARGET,
            ),
            SpeedRow(
                ENV_ID,
                f"step, the same commands ({len(self.ours_steps)} steps, {n}; same text)",
                statistics.median(self.ours_steps),
                baseline,
                statistics.median(self.original_steps),
                f">= {STEP_TARGET:g}x faster",
                self.step_ratio >= STEP_TARGET,
            ),
        ]


def compare_with_original(
    *, rounds: int, games_per_round: int, commands: int = _COMMANDS, seed: int = 0
) -> OriginalComparison:
    """Play the same test games and commands on the original engine (its own process) and on
    ALFWorld-v0, alternating round by round, each round on games new to both; raises
    :class:`RuntimeError` if any text, admissible list or win differs."""
    env = ALFWorldEnv(max_turns=10**9)
    task_ids = env.task_ids("test")[: 1 + rounds * games_per_round]
    files = [str(data.resolve_game_file(env.game(t))) for t in task_ids]
    original = alfworld_original.launch()
    times: dict[str, list[float]] = {k: [] for k in ("ours_r", "orig_r", "ours_s", "orig_s")}
    try:
        batches = [[0]] + [
            list(range(1 + r * games_per_round, 1 + (r + 1) * games_per_round))
            for r in range(rounds)
        ]
        for r, batch in enumerate(batches):
            answers = [_ask(original, files[i], seed + i, commands) for i in batch]
            played = [
                _play_ours(env, task_ids[i], answer)
                for i, answer in zip(batch, answers, strict=True)
            ]
            if r == 0:
                continue  # the warm-up game
            for answer, (reset_s, step_s) in zip(answers, played, strict=True):
                episode = answer["episodes"][0]
                times["orig_r"].append(answer["load_s"] + episode["reset_s"])
                times["orig_s"] += episode["step_s"]
                times["ours_r"].append(reset_s)
                times["ours_s"] += step_s
    finally:
        original.stdin.close()
        original.wait(timeout=60)
        env.close()
    return OriginalComparison(
        rounds * games_per_round, times["ours_r"], times["orig_r"], times["ours_s"], times["orig_s"]
    )


def _ask(original: subprocess.Popen, game: str, seed: int, commands: int) -> dict:
    """One game on the original engine: load, reset, ``commands`` drawn random commands."""
    spec = {"seed": seed, "steps": commands, "junk": _JUNK_ONE_IN}
    job = {"id": seed, "game": game, "episodes": [{"random": spec}]}
    original.stdin.write(json.dumps(job) + "\n")
    original.stdin.flush()
    line = original.stdout.readline()
    if not line:
        raise RuntimeError(f"the original engine's process ended (exit {original.wait()})")
    return json.loads(line)


def _play_ours(env: ALFWorldEnv, task_id: str, answer: dict) -> tuple[float, list[float]]:
    """The original's episode on ALFWorld-v0: (reset time, step times), checking every text."""
    episode = answer["episodes"][0]
    trace = episode["trace"]
    start = time.perf_counter()
    obs, info = env.reset(options={"task_id": task_id})
    reset_s = time.perf_counter() - start
    _same(
        task_id, 0, (obs, info["admissible_actions"]), (first_observation(trace[0][0]), trace[0][1])
    )
    step_s = []
    for n, (action, row) in enumerate(zip(episode["actions"], trace[1:], strict=True), 1):
        start = time.perf_counter()
        obs, _, _, _, info = env.step(action)
        step_s.append(time.perf_counter() - start)
        _same(task_id, n, (obs, info["admissible_actions"], info["won"]), (row[0], row[1], row[3]))
    return reset_s, step_s


def _same(task_id: str, n: int, ours: tuple, original: tuple) -> None:
    if ours != original:
        raise RuntimeError(
            f"ALFWorld-v0 differs from the original engine on {task_id} after {n} commands"
        )


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


def _reset_row(env: ALFWorldEnv, raw: _RawEngine, file: str, rounds: int) -> SpeedRow:
    raw.env.load(file)
    ours, base = _alternating(
        lambda: env.reset(options={"task_id": _TASKS[0]}), raw.env.reset, rounds
    )
    return SpeedRow(ENV_ID, "reset, same game", ours, "raw reset", base)


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
    return [SpeedRow(ENV_ID, "snapshot", take, "step (look)", step), *rows]


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
