"""Memory per live session, for every environment: what a server or a GRPO batch pays per episode.

    python -m agentenvs.benchmarks.speed.session_memory            # every environment
    python -m agentenvs.benchmarks.speed.session_memory ALFWorld-v0 --out results/session_memory

The measure (a GRPO batch): 8 ``test`` tasks x 8 live sessions each (64 environments), every
session reset on its task and stepped a few times (commands drawn from its admissible list where
the environment has one, the same seeded draw for every run), all 64 kept open. Each environment
is measured in fresh processes of its own (``--child``), so nothing one environment imported or
cached counts for another:

* **baseline**: the process's resident memory (RSS) after importing the environment and playing
  one warm-up session on a task outside the measured ones (imports, per-process caches, the
  first grammar parse), that session closed;
* **RSS per session**: (RSS with the 64 sessions live - baseline) / 64; it includes what is
  per task (8 tasks), shared by that task's 8 sessions;
* **tracemalloc per session**: the same difference of Python's traced allocations / 64, from a
  second fresh process (tracemalloc slows the engine down); memory outside Python's allocator
  (a C library's heap and mappings) shows in RSS only.

``--games G --per-game S`` measures another layout: ``--games 1 --per-game 64`` is what one more
session of a game costs, ``--games 8 --per-game 1`` what a game's first session costs (its
per-game data included).

Writes ``<out>.md`` (a Markdown table with the machine and the date) and ``<out>.json``.
A figure, never an assertion: the ALFWorld row is compared with its target
(:data:`ALFWORLD_TARGET_MB`) in the table.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import subprocess
import sys
import time
import tracemalloc
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["ALFWORLD_TARGET_MB", "ENV_IDS", "SessionMemory", "measure", "run"]

ENV_IDS = ("TextCraft-v0", "Sokoban-v0", "BabyAI-Text-v0", "WebShop-v0", "ALFWorld-v0")
GAMES = 8  # distinct test tasks, as a GRPO batch of 8 groups holds them
PER_GAME = 8  # live sessions per task (the group size)
STEPS = 3  # steps after reset in every session
# A GiGPO-sized batch is 4,096 concurrent ALFWorld episodes; at <= 1 MB a session they fit in
# 4 GB beside the model server on one machine.
ALFWORLD_TARGET_MB = 1.0
_FALLBACK_ACTIONS = ("look", "inventory", "up", "left", "right")
_MB = 1e6


@dataclass(frozen=True)
class SessionMemory:
    """One environment's figures (bytes are decimal MB in the table)."""

    env_id: str
    sessions: int
    games: int
    baseline_rss: int
    rss_per_session: float
    tracemalloc_per_session: float | None
    seconds: float


def _rss() -> int:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _play(env: Any, task_id: str, k: int) -> None:
    """Reset ``env`` on ``task_id`` and take :data:`STEPS` steps (session ``k``'s draw)."""
    _, info = env.reset(options={"task_id": task_id})
    for i in range(STEPS):
        actions = info.get("admissible_actions") or _FALLBACK_ACTIONS
        _, _, terminated, truncated, info = env.step(actions[(7 * k + 3 * i) % len(actions)])
        if terminated or truncated:
            break


def _task_ids(env_id: str, games: int) -> tuple[str, list[str]]:
    """The warm-up task and the ``games`` measured ``test`` tasks."""
    import gymnasium as gym

    env = gym.make(env_id)
    ids = env.unwrapped.task_ids("test")
    env.close()
    if len(ids) <= games:
        raise RuntimeError(f"{env_id} has {len(ids)} test tasks; the measure needs {games + 1}")
    return ids[-1], list(ids[:games])


def measure(env_id: str, trace: bool, games: int = GAMES, per_game: int = PER_GAME) -> dict:
    """The child's measure (this process must be fresh): baseline and the 64 sessions' growth."""
    import gymnasium as gym

    import agentenvs  # noqa: F401  (registers the environments)

    warm_id, ids = _task_ids(env_id, games)
    warm = gym.make(env_id)
    _play(warm, warm_id, 0)
    warm.close()
    del warm
    gc.collect()
    if trace:
        tracemalloc.start()
    baseline = _rss()
    traced0 = tracemalloc.get_traced_memory()[0] if trace else 0
    start = time.perf_counter()
    sessions = []
    for task_id in ids:
        for k in range(per_game):
            env = gym.make(env_id)
            _play(env, task_id, k)
            sessions.append(env)
    seconds = time.perf_counter() - start
    gc.collect()
    grown = _rss() - baseline
    traced = tracemalloc.get_traced_memory()[0] - traced0 if trace else 0
    for env in sessions:
        env.close()
    return {
        "baseline_rss": baseline,
        "rss_per_session": grown / len(sessions),
        "tracemalloc_per_session": traced / len(sessions) if trace else None,
        "sessions": len(sessions),
        "seconds": seconds,
    }


def _child(env_id: str, trace: bool, games: int, per_game: int) -> dict[str, Any]:
    cmd = [sys.executable, "-m", __spec__.name if __spec__ else __name__, "--child", env_id]
    cmd += ["--games", str(games), "--per-game", str(per_game)]
    if trace:
        cmd.append("--trace")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run(env_ids: list[str], games: int = GAMES, per_game: int = PER_GAME) -> list[SessionMemory]:
    """Each environment in two fresh processes (RSS, then tracemalloc)."""
    rows = []
    for env_id in env_ids:
        try:
            plain = _child(env_id, False, games, per_game)
            traced = _child(env_id, True, games, per_game)
        except subprocess.CalledProcessError as exc:
            print(f"skipping {env_id}: {exc.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
            continue
        rows.append(
            SessionMemory(
                env_id=env_id,
                sessions=plain["sessions"],
                games=games,
                baseline_rss=plain["baseline_rss"],
                rss_per_session=plain["rss_per_session"],
                tracemalloc_per_session=traced["tracemalloc_per_session"],
                seconds=plain["seconds"],
            )
        )
        print(format_row(rows[-1]), file=sys.stderr)
    return rows


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            names = [ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")]
        cpu = f"{names[0]}, {len(names)} cores" if names else cpu
    except OSError:
        pass
    return f"{cpu}, Python {platform.python_version()}, {platform.system()}"


def format_row(row: SessionMemory) -> str:
    traced = (
        "-" if row.tracemalloc_per_session is None else f"{row.tracemalloc_per_session / _MB:.3f}"
    )
    target = ""
    if row.env_id == "ALFWorld-v0" and (row.games, row.sessions) == (GAMES, GAMES * PER_GAME):
        met = row.rss_per_session <= ALFWORLD_TARGET_MB * _MB
        target = f"<= {ALFWORLD_TARGET_MB:g} MB: {'met' if met else 'not met'}"
    return (
        f"| {row.env_id} | {row.games} x {row.sessions // row.games} | "
        f"{row.rss_per_session / _MB:.3f} | {traced} | {row.baseline_rss / _MB:.0f} | "
        f"{row.seconds:.1f} | {target} |"
    )


def format_table(rows: list[SessionMemory]) -> str:
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [
        f"Memory per live session ({machine()}; {date}; "
        f"`python -m agentenvs.benchmarks.speed.session_memory`). Each session reset on a "
        f"`test` task and stepped {STEPS} times, all live at once; MB = 10^6 bytes.",
        "",
        "| environment | tasks x sessions | RSS MB / session | tracemalloc MB / session "
        "| baseline RSS MB (process) | seconds (all sessions) | target |",
        "|---|---|---|---|---|---|---|",
        *(format_row(r) for r in rows),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("env_ids", nargs="*", default=list(ENV_IDS))
    parser.add_argument("--out", type=Path, default=None, help="write <out>.md and <out>.json")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--trace", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--games", type=int, default=GAMES, help="distinct test tasks (8)")
    parser.add_argument("--per-game", type=int, default=PER_GAME, help="live sessions per task (8)")
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child, args.trace, args.games, args.per_game)))
        return 0
    rows = run(args.env_ids, args.games, args.per_game)
    table = format_table(rows)
    print(table)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".md").write_text(table, encoding="utf-8")
        payload = {"machine": machine(), "date": time.strftime("%Y-%m-%d", time.gmtime())}
        payload["rows"] = [asdict(r) for r in rows]
        args.out.with_suffix(".json").write_text(json.dumps(payload, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
