"""Steps per second of each environment, ours and the original benchmark's, as one table.

    python -m agentenvs.benchmarks.speed.steps_table                      # every environment
    python -m agentenvs.benchmarks.speed.steps_table --quick --out steps.md
    python -m agentenvs.benchmarks.speed.steps_table --originals /path/to/originals TextCraft-v0

Per row, one workload (a test task and the scripted expert's actions on it, played again and
again: its reset, then its actions; steps per second count the actions over the whole time,
resets included), measured in the same run:

* **ours in process**: one environment in this process (every ratio is against this);
* **HTTP, one step a request**: one client of ``agentenvs serve`` (its own process; one
  keep-alive ``http.client`` connection, native routes ``/reset`` and ``/step``);
* **step_batch, E episodes**: E sessions of that server playing the workload together, one
  ``step_batch`` request per turn (one ``reset_batch`` per episode start);
* **the original**: the original benchmark's environment, in a process of its own that never
  imports agentenvs (:mod:`agentenvs.benchmarks.speed.originals`,
  :mod:`agentenvs.benchmarks.speed.alfworld_original`), playing the same task and actions; its
  texts are checked against ours (the row fails if they differ).

The measurements take turns (:data:`ROUNDS` rounds, each a share of ``--seconds``) and each keeps
its best round, so a load spike on a shared machine hits them alike.

The originals' code is not part of agentenvs. ``--originals DIR`` (default
``$AGENTENVS_SPEED_ORIGINALS``) names a folder with copies of their repositories, by GitHub name:
``archiki+ADaPT`` (ADaPT's TextCraft), ``WooooDyy+AgentGym`` (the ``agentenv-textcraft`` server,
and the recipes ADaPT reads), ``xlan156+verl-agent`` (its Sokoban), ``princeton-nlp+WebShop``;
and ``venv/``, a virtual environment with their requirements, whose Python runs them (default:
this Python). minigrid and alfworld are the packages installed here. An original that is absent
or cannot run here is "not measured", with the reason; the table is made all the same.

What the copies need beyond their code: the venv holds gymnasium and numpy (ADaPT), fastapi and
uvicorn (AgentGym's server), gym 0.26, gym-sokoban, torch, transformers and matplotlib
(verl-agent's Sokoban module imports them), and WebShop's requirements (flask, beautifulsoup4,
cleantext, rank-bm25, thefuzz, rich, selenium, torch, spaCy with ``en_core_web_sm``, pyserini
0.17 with a Java runtime); WebShop's copy needs its ``data/`` files (``items_shuffle_1000.json``,
``items_ins_v2_1000.json``, ``items_human_ins.json``) and the Lucene index that its
``search_engine/run_indexing.sh`` builds (``indexes_1k``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentenvs.benchmarks.speed import serve as serve_speed
from agentenvs.benchmarks.speed.serve import BIG_BUDGET, Server, Stats, Workload
from agentenvs.benchmarks.speed.timing import report

__all__ = ["BATCH_EPISODES", "ORIGINALS_ENV", "ROUNDS", "Row", "format_table", "main", "measure"]

ORIGINALS_ENV = "AGENTENVS_SPEED_ORIGINALS"
BATCH_EPISODES = (16, 64)
ROUNDS = 3
DEFAULT_ENVS = ("TextCraft-v0", "ALFWorld-v0", "BabyAI-Text-v0", "WebShop-v0", "Sokoban-v0")
ADAPT_TASK = "adapt/0"  # ADaPT's reset(seed=0): the expert's 21 actions


@dataclass
class Row:
    """One line of the table: steps per second by way of measuring (None: not measured)."""

    env_id: str
    workload: str
    in_process: float | None = None
    http_single: float | None = None
    batches: dict[int, float] = field(default_factory=dict)
    original: str = ""
    original_steps_per_s: float | None = None
    original_note: str = ""  # "not measured (why)", or what the figure is
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}


Run = tuple[int, float, float | None]
"""A measurement's (steps, seconds, seconds of the steps alone or None where not known)."""


class Measure:
    """Named measurements ``name -> fn(seconds) -> Run``, run in turns."""

    def __init__(self) -> None:
        self.fns: dict[str, Callable[[float], Run]] = {}

    def add(self, name: str, fn: Callable[[float], Run]) -> None:
        self.fns[name] = fn

    def best(self, seconds: float, rounds: int = ROUNDS) -> dict[str, Run]:
        """Each one's best round (most steps per second) of ``rounds`` rounds of
        ``seconds / rounds``."""
        best: dict[str, Run] = {}
        for _ in range(rounds):
            for name, fn in self.fns.items():
                run = fn(seconds / rounds)
                if name not in best or _rate(run) > _rate(best[name]):
                    best[name] = run
        return best


def _rate(run: Run) -> float:
    return run[0] / run[1] if run[1] else 0.0


def _steps_alone(run: Run) -> float | None:
    return run[0] / run[2] if run[2] else None


def _stats(fn: Callable[[float], Stats], timed_steps: bool = False) -> Callable[[float], Run]:
    def run(seconds: float) -> Run:
        stats = fn(seconds)
        return stats.steps, stats.seconds, sum(stats.latencies) if timed_steps else None

    return run


def expert_workload(env_id: str, task_id: str) -> Workload:
    """The scripted expert's actions on ``task_id`` (to its episode's end)."""
    from agentenvs import build_env
    from agentenvs.expert import make_expert

    env = build_env(env_id, max_turns=BIG_BUDGET)
    expert = make_expert(env_id)
    env.reset(options={"task_id": task_id})
    actions = []
    while not env.done and len(actions) < 200:
        actions.append(expert.act(env).action)
        env.step(actions[-1])
    env.close()
    return Workload(env_id, task_id, tuple(actions))


def our_trace(work: Workload, **env_kwargs: Any) -> list[str]:
    """Our observations of one play of the workload: the reset's, then each step's."""
    from agentenvs import build_env

    env = build_env(work.env_id, max_turns=BIG_BUDGET, **env_kwargs)
    trace = [env.reset(options={"task_id": work.task_id})[0]]
    trace += [env.step(action)[0] for action in work.actions]
    env.close()
    return trace


# ----- the originals -------------------------------------------------------------------------


class Originals:
    """Where the originals' copies are (``root``), and the Python that runs them."""

    def __init__(self, root: Path | None) -> None:
        self.root = root
        venv = root / "venv" / "bin" / "python" if root else None
        self.python = str(venv) if venv is not None and venv.exists() else sys.executable

    def copy(self, name: str) -> Path:
        """The copy of repository ``name`` (FileNotFoundError naming what is missing)."""
        if self.root is None:
            raise FileNotFoundError(f"no copy of {name}: give --originals DIR or ${ORIGINALS_ENV}")
        path = self.root / name
        if not path.is_dir():
            raise FileNotFoundError(f"no copy of {name} under {self.root}")
        return path


class OriginalProcess:
    """A child of :mod:`agentenvs.benchmarks.speed.originals` set up for one workload."""

    def __init__(self, python: str, setup: dict[str, Any]) -> None:
        from agentenvs.benchmarks.speed import originals

        self.proc = originals.launch(python)
        answer = self._ask(setup)
        if "error" in answer:
            self.close()
            raise RuntimeError(answer["error"])
        self.trace: list = answer["trace"]

    def _ask(self, job: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            from agentenvs.benchmarks.speed.originals import stderr_tail

            raise RuntimeError(
                f"the original's process ended (exit {self.proc.wait()}): {stderr_tail(self.proc)}"
            )
        return json.loads(line)

    def run(self, seconds: float) -> Run:
        answer = self._ask({"seconds": seconds})
        return answer["steps"], answer["seconds"], answer["seconds"] - answer["reset_seconds"]

    def close(self) -> None:
        """End the child; RuntimeError if it imported agentenvs (then it was no original)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        last = self.proc.stdout.readline()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        if last and json.loads(last).get("agentenvs_imported"):
            raise RuntimeError("the original's process imported agentenvs")


def _same_steps(name: str, ours: list, theirs: list) -> None:
    if ours != theirs:
        first = next(i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b)
        raise RuntimeError(
            f"{name} played another episode than ours: after {first} actions it shows "
            f"{theirs[first]!r}, ours {ours[first]!r}"
        )


# ----- per environment -------------------------------------------------------------------------


@dataclass
class Context:
    seconds: float
    rounds: int
    originals: Originals


def _ours(row: Row, measure: Measure, work: Workload, server: Server) -> None:
    """Add our measurements of ``work`` (in process, HTTP single, step batches)."""
    measure.add("in_process", _stats(lambda s: serve_speed.run_in_process(work, s), True))
    measure.add("http_single", _stats(lambda s: serve_speed.run_through_server(work, server, 1, s)))
    for n in BATCH_EPISODES:
        measure.add(
            f"batch_{n}",
            _stats(lambda s, n=n: serve_speed.run_batch_through_server(work, server, n, s)),
        )


def _guarded(run: Callable[[float], Run], failed: list[str]) -> Callable[[float], Run]:
    """``run``, or after its first failure nothing (the failure kept in ``failed``)."""

    def guarded(seconds: float) -> Run:
        if failed:
            return 0, 0.0, None
        try:
            return run(seconds)
        except Exception as exc:
            failed.append(f"it failed: {type(exc).__name__}: {exc}"[:300])
            return 0, 0.0, None

    return guarded


def _fill(row: Row, best: dict[str, Run], original_in_process: bool) -> None:
    rate = {name: _rate(run) for name, run in best.items()}
    row.in_process = rate.get("in_process")
    row.http_single = rate.get("http_single")
    row.batches = {n: rate[f"batch_{n}"] for n in BATCH_EPISODES if f"batch_{n}" in rate}
    row.original_steps_per_s = rate.get("original")
    ours, theirs = _steps_alone(best["in_process"]), best.get("original")
    if ours and theirs and _steps_alone(theirs) and original_in_process:
        row.notes.append(
            f"steps alone (resets left out): ours {ours:,.0f}/s, the original "
            f"{_steps_alone(theirs):,.0f}/s ({ours / _steps_alone(theirs):.3g}x)"
        )
    for name, run in best.items():
        if name.startswith("extra:"):
            row.notes.append(f"{name[6:]}: {_rate(run):,.0f} steps/s")


def measure_row(
    ctx: Context,
    work: Workload,
    original: str,
    start_original: Callable[[], Any],
    extra: Callable[[Measure, Server, Row], None] | None = None,
    original_in_process: bool = True,
) -> Row:
    """One row: ours four ways and the original (``start_original()`` returns a handle with
    ``run(seconds)`` and ``close()``, or raises: then "not measured", with the reason)."""
    label = f"`{work.task_id}`, the expert's {len(work.actions)} actions"
    row = Row(work.env_id, label, original=original)
    measure = Measure()
    handle = None
    try:
        handle = start_original()
    except Exception as exc:  # absent, or it cannot run here: the table says why
        row.original_note = f"not measured ({exc})"
    failed: list[str] = []
    if handle is not None:
        measure.add("original", _guarded(handle.run, failed))
    server = Server(work.env_id, 1)
    try:
        serve_speed.run_batch_through_server(work, server, 1, 0.2)  # warm: imports, data
        _ours(row, measure, work, server)
        if extra is not None:
            extra(measure, server, row)
        best = measure.best(ctx.seconds, ctx.rounds)
    finally:
        server.close()
        if handle is not None:
            handle.close()
    _fill(row, best, original_in_process)
    if failed:
        row.original_steps_per_s, row.original_note = None, f"not measured ({failed[0]})"
    return row


def textcraft_rows(ctx: Context) -> list[Row]:
    adapt = expert_workload("TextCraft-v0", ADAPT_TASK)

    def start_adapt() -> OriginalProcess:
        source = ctx.originals.copy("archiki+ADaPT")
        recipes = ctx.originals.copy("WooooDyy+AgentGym") / "agentenv-textcraft/agentenv_textcraft"
        setup = {
            "original": "adapt-textcraft",
            "source": str(source),
            "minecraft_dir": str(recipes),
            "seed": int(ADAPT_TASK.split("/")[1]),
            "actions": list(adapt.actions),
        }
        original = OriginalProcess(ctx.originals.python, setup)
        _same_steps("ADaPT's TextCraft", our_trace(adapt)[1:], original.trace[1:])
        return original

    rows = [measure_row(ctx, adapt, "ADaPT's `TextCraft/env.py`, in process", start_adapt)]
    work = serve_speed.workload("TextCraft-v0")
    data_idx = int(work.task_id.split("/")[1])

    def start_agentgym() -> OriginalProcess:
        setup = {
            "original": "agentgym-textcraft",
            "source": str(ctx.originals.copy("WooooDyy+AgentGym")),
            "data_idx": data_idx,
            "actions": list(work.actions),
        }
        original = OriginalProcess(ctx.originals.python, setup)
        _same_steps("AgentGym's TextCraft server", our_trace(work)[1:], original.trace[1:])
        return original

    def our_agentgym_routes(measure: Measure, server: Server, row: Row) -> None:
        from agentenvs.benchmarks.speed.originals import agentgym_client

        play, _close = agentgym_client(*server.urls[0], data_idx, list(work.actions))
        measure.add("extra:our `--api agentgym` routes, the same client", _repeat(play, work))

    rows.append(
        measure_row(
            ctx,
            work,
            "AgentGym's `agentenv-textcraft` server, HTTP, one step a request",
            start_agentgym,
            our_agentgym_routes,
            original_in_process=False,
        )
    )
    return rows


def _repeat(play: Callable[[], object], work: Workload) -> Callable[[float], Run]:
    def run(seconds: float) -> Run:
        clock = time.perf_counter
        steps, start = 0, clock()
        while clock() - start < seconds:
            play()
            steps += len(work.actions)
        return steps, clock() - start, None

    return run


def sokoban_rows(ctx: Context) -> list[Row]:
    work = serve_speed.workload("Sokoban-v0")
    moves = {"up": 1, "down": 2, "left": 3, "right": 4}

    def start() -> OriginalProcess:
        setup = {
            "original": "verl-agent-sokoban",
            "source": str(ctx.originals.copy("xlan156+verl-agent")),
            "dim_room": [6, 6],
            "num_boxes": 1,
            "search_depth": 30,
            "seed": int(work.task_id.split("/")[1]),
            "actions": [moves[a] for a in work.actions],
        }
        original = OriginalProcess(ctx.originals.python, setup)
        _same_steps(
            "verl-agent's Sokoban", our_trace(work, grid_style="verl-agent"), original.trace
        )
        return original

    return [measure_row(ctx, work, "verl-agent's `SokobanEnv`, in process", start)]


def _primitives(work: Workload) -> tuple[str, int, list[int]]:
    """(minigrid id, seed, the primitive actions) that our text actions of ``work`` run."""
    from agentenvs.babyai import BabyAITextEnv
    from agentenvs.benchmarks.speed.babyai import logged_primitives

    env = BabyAITextEnv(max_turns=BIG_BUDGET)
    env.reset(options={"task_id": work.task_id})
    with logged_primitives(env) as ran:
        for action in work.actions:
            env.step(action)
    level, seed = env._level_of(work.task_id)
    return level.minigrid_id, seed, ran


def babyai_rows(ctx: Context) -> list[Row]:
    work = serve_speed.workload("BabyAI-Text-v0")

    def start() -> OriginalProcess:
        import importlib.util

        if importlib.util.find_spec("minigrid") is None:
            raise FileNotFoundError("minigrid is not installed here")
        minigrid_id, seed, primitives = _primitives(work)
        setup = {
            "original": "minigrid",
            "minigrid_id": minigrid_id,
            "seed": seed,
            "primitives": primitives,
            "steps_per_episode": len(work.actions),
        }
        original = OriginalProcess(sys.executable, setup)
        if not original.trace or original.trace[-1][0] <= 0:
            original.close()
            raise RuntimeError("minigrid's run of the same primitives did not reach the goal")
        return original

    row = measure_row(ctx, work, "minigrid, the same primitive actions (no text)", start)
    row.notes.append(
        "minigrid's figure counts our text actions: each runs the primitives "
        "that text action ran here (a `go to` runs several)"
    )
    return [row]


class _AlfworldOriginal:
    """The unmodified ALFWorld engine in its own process, replaying the workload."""

    def __init__(self, work: Workload) -> None:
        from agentenvs.alfworld import ALFWorldEnv, data
        from agentenvs.benchmarks.speed import alfworld_original

        env = ALFWorldEnv(max_turns=BIG_BUDGET)
        self.game = str(data.resolve_game_file(env.game(work.task_id)))
        env.close()
        self.actions = list(work.actions)
        self.proc = alfworld_original.launch()
        answer = self._job(1)
        trace = answer["episodes"][0]["trace"]
        _same_steps("the original ALFWorld engine", our_trace(work)[1:], [r[0] for r in trace[1:]])
        self.episode_s = answer["episodes"][0]["reset_s"] + sum(answer["episodes"][0]["step_s"])

    def _job(self, episodes: int) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        job = {"id": 0, "game": self.game, "episodes": [{"actions": self.actions}] * episodes}
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the original engine's process ended (exit {self.proc.wait()})")
        return json.loads(line)

    def run(self, seconds: float) -> Run:
        episodes = self._job(max(1, round(seconds / self.episode_s)))["episodes"]
        steps = sum(len(e["step_s"]) for e in episodes)
        step_s = sum(sum(e["step_s"]) for e in episodes)
        return steps, sum(e["reset_s"] for e in episodes) + step_s, step_s

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def alfworld_rows(ctx: Context) -> list[Row]:
    from agentenvs.benchmarks.speed import alfworld

    work = serve_speed.workload("ALFWorld-v0")
    row = measure_row(
        ctx,
        work,
        "the alfworld engine (textworld `PddlEnv`), own process",
        lambda: _AlfworldOriginal(work),
    )
    row.notes.append(
        "ours replays a path played before: its texts come from the step memo "
        "(the next row: first plays)"
    )
    quick = ctx.seconds < 2
    comparison = alfworld.compare_with_original(
        rounds=1 if quick else 2, games_per_round=2 if quick else 3
    )
    ours, original = comparison.steps_per_second()
    first = Row(
        "ALFWorld-v0",
        f"{comparison.games} test games new to both processes, "
        f"{len(comparison.ours_steps) // comparison.games} commands each (first plays; "
        "steps only, from the median step)",
        in_process=ours,
        original="the alfworld engine, own process",
        original_steps_per_s=original,
    )
    return [row, first]


def webshop_rows(ctx: Context) -> list[Row]:
    from agentenvs.webshop.catalog import GOAL_SEED

    work = serve_speed.workload("WebShop-v0")

    def start() -> OriginalProcess:
        setup = {
            "original": "webshop-text",
            "source": str(ctx.originals.copy("princeton-nlp+WebShop")),
            "seed": GOAL_SEED,
            "session": int(work.task_id.split("/")[1]),
            "actions": list(work.actions),
        }
        original = OriginalProcess(ctx.originals.python, setup)
        _same_steps("WebShop's text env", our_trace(work), original.trace)
        return original

    return [
        measure_row(
            ctx,
            work,
            "WebShop's `WebAgentTextEnv` (text mode; Lucene search through pyserini), in process",
            start,
        )
    ]


ROWS: dict[str, Callable[[Context], list[Row]]] = {
    "TextCraft-v0": textcraft_rows,
    "ALFWorld-v0": alfworld_rows,
    "BabyAI-Text-v0": babyai_rows,
    "WebShop-v0": webshop_rows,
    "Sokoban-v0": sokoban_rows,
}


# ----- the table -------------------------------------------------------------------------------

HOW_THE_ORIGINALS_RAN = (
    "ADaPT's TextCraft: `TextCraft(minecraft_dir)` of its `TextCraft/env.py` with the recipes "
    "of AgentGym's `agentenv_textcraft/recipes`; its `reset(seed=i)` is our `adapt/i` (its reset "
    "builds the task's recipe set anew every time).",
    "AgentGym's TextCraft server: `uvicorn agentenv_textcraft.server:app` as shipped (it prints "
    "every request), `/create` once, then `/reset {id, data_idx}` and `/step {id, action}` from "
    "one keep-alive `http.client` connection; `data_idx` i is our `agentgym/i`.",
    "alfworld: textworld's `PddlEnv` in alfworld's `AlfredDemangler(shuffle=False)` and "
    "`AlfredInfos`, as its `AlfredTWEnv` builds it, the game loaded once per round (not timed).",
    "minigrid: `gymnasium.make(level).unwrapped`, `reset(seed)` and `step(primitive)`.",
    'WebShop: `WebAgentTextEnv(observation_mode="text", num_products=1000)` with its Lucene '
    "index built by its `search_engine/` scripts (pyserini 0.17, Java 17) from the 1,000 "
    "products, spaCy's `en_core_web_sm` for its reward, and Python's global generator seeded "
    "with 233 before it loads (it draws prices and price ceilings unseeded); `reset(session=i)` "
    "is our `synthetic/i`.",
    'verl-agent\'s Sokoban: `SokobanEnv("tiny_rgb_array", dim_room=(6, 6), num_boxes=1, '
    "search_depth=30)`, whose `reset(seed=n)` generates our room `seed/n` anew every time; actions "
    "1-4 for up, down, left, right.",
)


def _cell(value: float | None, base: float | None) -> str:
    if value is None:
        return "-"
    ratio = f" ({value / base:.3g}x)" if base else ""
    return f"{value:,.0f}{ratio}"


def format_table(rows: list[Row]) -> str:
    lines = [
        "| env | workload | ours in process | HTTP, one step a request | "
        + " | ".join(f"step_batch, {n} episodes" for n in BATCH_EPISODES)
        + " | original | original's steps/s |",
        "|---" * (6 + len(BATCH_EPISODES)) + "|",
    ]
    notes = []
    for row in rows:
        base = row.in_process
        original = (
            row.original_note
            if row.original_steps_per_s is None
            else _cell(row.original_steps_per_s, base)
        )
        cells = [
            row.env_id,
            row.workload,
            _cell(row.in_process, None),
            _cell(row.http_single, base),
            *(_cell(row.batches.get(n), base) for n in BATCH_EPISODES),
            row.original,
            original,
        ]
        lines.append("| " + " | ".join(cells) + " |")
        notes += [f"- {row.env_id} ({row.workload.split(',')[0]}): {n}" for n in row.notes]
    return "\n".join(lines + ([""] + notes if notes else []))


def _versions() -> str:
    """The versions of the originals that are packages installed here."""
    from importlib import metadata

    found = []
    for name in ("alfworld", "textworld", "minigrid"):
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pass
    return f"Installed here: {', '.join(found)}." if found else ""


def measure(
    env_ids: list[str], seconds: float, originals: Path | None, rounds: int = ROUNDS
) -> list[Row]:
    ctx = Context(seconds, rounds, Originals(originals))
    rows: list[Row] = []
    for env_id in env_ids:
        try:
            rows += ROWS[env_id](ctx)
        except ImportError as exc:  # an optional extra that is not installed
            print(f"skipping {env_id}: {exc}", file=sys.stderr)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("env_ids", nargs="*", help=f"default: {list(DEFAULT_ENVS)}")
    parser.add_argument("--quick", action="store_true", help="1 s per measurement, not 3")
    parser.add_argument("--seconds", type=float, help="per measurement, over all rounds")
    parser.add_argument(
        "--originals",
        type=Path,
        default=os.environ.get(ORIGINALS_ENV),
        help=f"the originals' copies and venv (default ${ORIGINALS_ENV})",
    )
    parser.add_argument("--out", type=Path, help="also write the table to this Markdown file")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    unknown = [e for e in args.env_ids if e not in ROWS]
    if unknown:
        parser.error(f"no steps/s rows for {unknown}; choose from {sorted(ROWS)}")
    seconds = args.seconds or (1.0 if args.quick else 3.0)
    load = os.getloadavg()
    rows = measure(args.env_ids or [e for e in DEFAULT_ENVS if e in ROWS], seconds, args.originals)
    table = format_table(rows) + (
        f"\n\nSteps per second (the ratio to ours in process); {seconds:g} s per measurement "
        f"in {ROUNDS} rounds, best round; load average {load[0]:.2f} at the start, "
        f"{os.getloadavg()[0]:.2f} at the end ({os.cpu_count()} cores). Each original played "
        "the same task and actions as ours, in a process of its own, and showed the same texts "
        f"(checked before timing). {_versions()}\n\n"
        + "\n".join(f"- {line}" for line in HOW_THE_ORIGINALS_RAN)
    )
    report(table, args.out)
    if args.json:
        args.json.write_text(json.dumps([r.to_json() for r in rows], indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
