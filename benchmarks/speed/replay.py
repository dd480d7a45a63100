"""Replay-validation speed on TextCraft: queries validated per second, and what snapshots save.

    python -m agentenvs.benchmarks.speed.replay                 # the full table
    python -m agentenvs.benchmarks.speed.replay --quick         # fewer repeats
    python -m agentenvs.benchmarks.speed.replay --out results/replay_speed.md

Teacher trajectories are the scripted expert's on TextCraft's 100 test tasks, played by
:func:`agentenvs.agents.rollout.run_rollouts` (so their messages are the paper's format). Two
query sets:

* ``paper``: per trajectory the raw query and the fixed-ratio cuts of ``paper-a`` (0.1, 0.3,
  0.5): at most 3 + 1 queries, the size of the default entropy-change top-3;
* ``every turn``: the raw query and a cut after every turn (the worst case for replaying from
  reset: its cost grows with the square of the trajectory length).

Each is validated with snapshot reuse (one walk per trajectory) and, in the same run, with every
query replayed from reset (the baseline). A third row times the whole ``validate`` stage, JSONL
file in and out. Target: :data:`TARGET_PER_SECOND`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from agentenvs.benchmarks.speed.timing import SpeedRow, format_table, median_time, report
from agentenvs.replay.cuts import CutConfig, CutStrategy, queries_for_trajectory
from agentenvs.replay.io import QUERY_SCHEMA, write_rows
from agentenvs.replay.query import CutQuery, DroppedCut, build_query, raw_query
from agentenvs.replay.stages import run_validate
from agentenvs.replay.validate import EnvPool, ReplayStats, ValidationStatus, validate_queries

__all__ = ["ENV_ID", "TARGET_PER_SECOND", "bench", "expert_trajectories", "main"]

ENV_ID = "TextCraft-v0"
TARGET_PER_SECOND = 500.0
"""At least 500 queries validated per second, so that the queries of a few thousand teacher
trajectories (about four each) validate in under a minute, far below the cost of playing them."""


def expert_trajectories(split: str = "test") -> list:
    """The expert's trajectories on every task of ``split``, one sample each."""
    from agentenvs import make
    from agentenvs.agents.rollout import plan_episodes, run_rollouts
    from agentenvs.agents.scripted import ExpertPolicy

    ids = make(ENV_ID).task_ids(split)
    return run_rollouts(ExpertPolicy(), ENV_ID, plan_episodes(ids, 1))


def paper_queries(trajectories: Sequence) -> list[CutQuery]:
    config = CutConfig(CutStrategy.FIXED_RATIO)
    return [
        q for i, t in enumerate(trajectories) for q in queries_for_trajectory(t, i, [config])[0]
    ]


def every_turn_queries(trajectories: Sequence) -> list[CutQuery]:
    queries = []
    for i, traj in enumerate(trajectories):
        queries.append(raw_query(traj, i))
        made = (build_query(traj, i, t, "every-turn") for t in range(len(traj.steps)))
        queries += [q for q in made if not isinstance(q, DroppedCut)]
    return queries


def _validate_all(queries: list[CutQuery], reuse: bool, stats: ReplayStats | None = None) -> int:
    results = list(validate_queries(queries, pool=_POOL, reuse_snapshots=reuse, stats=stats))
    bad = sum(1 for _, r in results if r.status is not ValidationStatus.VALIDATED)
    if bad:
        raise RuntimeError(f"{bad} expert queries did not validate; the benchmark needs them to")
    return len(results)


_POOL = EnvPool()


def _pair(name: str, queries: list[CutQuery], repeats: int) -> tuple[SpeedRow, str]:
    ours = median_time(lambda: _validate_all(queries, True), repeats=repeats) / len(queries)
    base = median_time(lambda: _validate_all(queries, False), repeats=repeats) / len(queries)
    with_reuse, from_reset = ReplayStats(), ReplayStats()
    _validate_all(queries, True, with_reuse)
    _validate_all(queries, False, from_reset)
    row = SpeedRow(
        ENV_ID,
        f"validate 1 query, {name} ({len(queries)} queries), snapshot reuse",
        ours,
        baseline="every cut replayed from reset",
        baseline_seconds=base,
        target=f">= {TARGET_PER_SECOND:.0f} queries/s",
        met=1.0 / ours >= TARGET_PER_SECOND,
    )
    saved = from_reset.steps / with_reuse.steps
    note = (
        f"{name}: {1 / ours:,.0f} queries/s with reuse, {1 / base:,.0f}/s from reset; env steps "
        f"{with_reuse.steps:,} vs {from_reset.steps:,} ({saved:.2f}x), "
        f"resets {with_reuse.resets:,} vs {from_reset.resets:,}"
    )
    return row, note


def bench(quick: bool = False) -> tuple[list[SpeedRow], list[str]]:
    """The table's rows and one line of figures per query set."""
    repeats = 3 if quick else 7
    trajectories = expert_trajectories()
    rows, notes = [], []
    for name, queries in (
        ("paper cuts", paper_queries(trajectories)),
        ("every turn", every_turn_queries(trajectories)),
    ):
        row, note = _pair(name, queries, repeats)
        rows.append(row)
        notes.append(note)
    queries = paper_queries(trajectories)
    with tempfile.TemporaryDirectory() as tmp:
        source, out = Path(tmp) / "q.jsonl", Path(tmp) / "v.jsonl"
        write_rows(source, QUERY_SCHEMA, (q.to_row() for q in queries))
        stage = median_time(lambda: run_validate(source, out, progress=False), repeats=repeats)
    per_query = stage / len(queries)
    rows.append(
        SpeedRow(
            ENV_ID,
            f"'replay validate' stage, JSONL in and out ({len(queries)} queries)",
            per_query,
            target=f">= {TARGET_PER_SECOND:.0f} queries/s",
            met=1.0 / per_query >= TARGET_PER_SECOND,
        )
    )
    notes.append(f"validate stage with files: {1 / per_query:,.0f} queries/s")
    return rows, notes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument("--out", type=Path, help="also write the table to this Markdown file")
    args = parser.parse_args(argv)
    rows, notes = bench(quick=args.quick)
    text = format_table(rows) + "\n\n" + "\n".join(f"- {n}" for n in notes)
    report(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
