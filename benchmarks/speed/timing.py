"""Small timing helpers shared by the speed benchmarks.

Figures are medians of repeated batches (robust to a noisy shared machine) and every target is a
ratio or a bound printed next to a baseline measured in the same run, never a timed assertion.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "SpeedRow",
    "format_table",
    "median_time",
    "per_call",
    "report",
    "snapshot_times",
    "step_time_along",
]


@dataclass(frozen=True)
class SpeedRow:
    """One line of a speed table.

    ``seconds`` is the measured time of one call of ``operation``; ``baseline`` /
    ``baseline_seconds`` name and time what it is compared with in the same run (empty where
    there is none);
    ``target`` says the goal in words (e.g. ``"<= 50 us"`` or ``">= 10x faster"``) and ``met``
    whether this run met it (None where there is no target).
    """

    env_id: str
    operation: str
    seconds: float
    baseline: str = ""
    baseline_seconds: float | None = None
    target: str = ""
    met: bool | None = None

    @property
    def ratio(self) -> float | None:
        """baseline time / our time (above 1: we are faster than the baseline)."""
        if not self.baseline_seconds:
            return None
        return self.baseline_seconds / self.seconds


def median_time(fn: Callable[[], object], *, repeats: int = 7, number: int = 1) -> float:
    """The median over ``repeats`` batches of the time of one call (each batch runs ``number``)."""
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - start) / number)
    return statistics.median(times)


def per_call(fn: Callable[[], object], *, budget_s: float = 0.5, repeats: int = 7) -> float:
    """Like :func:`median_time`, choosing ``number`` so that all batches take about ``budget_s``."""
    start = time.perf_counter()
    fn()
    one = max(time.perf_counter() - start, 1e-7)
    number = max(1, int(budget_s / repeats / one))
    return median_time(fn, repeats=repeats, number=number)


def step_time_along(env: Any, task_id: str, actions: Sequence[str], *, budget_s: float) -> float:
    """One ``env.step`` along ``actions`` from ``task_id``'s start, over and over: the start is
    restored whenever the list ends, and that restore's cost (spread over the list) is taken off."""
    env.reset(options={"task_id": task_id})
    start = env.snapshot()
    position = [0]

    def step() -> None:
        if position[0] == len(actions):
            env.restore(start)
            position[0] = 0
        env.step(actions[position[0]])
        position[0] += 1

    total = per_call(step, budget_s=budget_s)
    return total - per_call(lambda: env.restore(start), budget_s=budget_s) / len(actions)


def snapshot_times(
    env: Any, task_id: str, prefix: Sequence[str], *, budget_s: float
) -> tuple[float, float, float]:
    """(snapshot, restore, replay) times after ``prefix``: taking a snapshot there, restoring
    it, and replaying ``prefix`` from reset (what a restore replaces)."""
    env.replay(task_id, list(prefix))
    snap = env.snapshot()
    snapshot = per_call(env.snapshot, budget_s=budget_s)
    restore = per_call(lambda: env.restore(snap), budget_s=budget_s)
    replay = per_call(lambda: env.replay(task_id, list(prefix)), budget_s=budget_s)
    return snapshot, restore, replay


def _fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return ""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def format_table(rows: Sequence[SpeedRow]) -> str:
    """A Markdown table of ``rows``."""
    header = "| env | operation | time | baseline | baseline time | baseline/ours | target | met |"
    lines = [header, "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = f"{r.ratio:.2f}x" if r.ratio is not None else ""
        met = "" if r.met is None else ("yes" if r.met else "no")
        lines.append(
            f"| {r.env_id} | {r.operation} | {_fmt_time(r.seconds)} | {r.baseline} | "
            f"{_fmt_time(r.baseline_seconds)} | {ratio} | {r.target} | {met} |"
        )
    return "\n".join(lines)


def report(text: str, out: Path | None) -> None:
    """Print a benchmark's result, and write it to ``out`` (a Markdown file) when given."""
    print(text)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
