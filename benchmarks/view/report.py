"""The numbers ``agentenvs view`` shows: a run's overview and task list, and two runs compared.

* Overview of the evaluation episodes: Avg@k and Pass@k per task family and overall
  (:func:`agentenvs.benchmarks.eval.metrics.summarize`, the table ``agentenvs eval`` writes) and the
  errored episodes by type (:func:`agentenvs.benchmarks.eval.metrics.count_errors`). ``k`` is the
  run's recorded ``k``, else its fewest samples of a task; a task with fewer samples (an
  unfinished run) lowers it, and a note says so. A replay run's overview counts its queries by
  strategy and validation status.
* Task list: per task its samples ``n``, successes ``c``, errored episodes, success rate c / n,
  Pass@k, and its episodes.
* Comparison of run B against run A (:func:`compare`): per shared task both success rates and
  their difference; the tasks that flipped (no success in one run, some in the other); and the
  paired difference over tasks with its standard error, the learning benchmark's statistic
  (:func:`agentenvs.benchmarks.learning.report.paired`: mean of the per-task differences of
  success rates, SE = their standard deviation (ddof 1) / sqrt(pairs), z = mean / SE). Runs of
  different environments, protocols or variants are not compared: the refusal names the
  difference.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from agentenvs.benchmarks.eval.metrics import (
    count_errors,
    pass_at_k,
    summarize,
    task_outcomes,
)
from agentenvs.benchmarks.learning.report import paired
from agentenvs.benchmarks.view.runs import Run

__all__ = ["compare", "overview", "run_k", "task_rows"]

Table = dict[str, Any]  # {title, columns, rows, note}


def _eval(run: Run) -> list[dict[str, Any]]:
    return [e for e in run.episodes if e["part"] in ("eval", "replay")]


def _outcomes(run: Run) -> list[Any]:
    return task_outcomes(
        (e["task_id"], e["family"], e["won"], e["error"] is not None) for e in _eval(run)
    )


def run_k(run: Run) -> tuple[int, str | None]:
    """(k, note) of a run's Avg@k / Pass@k: the recorded k, lowered to the fewest samples of a
    task when a task has fewer (with a note)."""
    outcomes = _outcomes(run)
    if not outcomes:
        return 0, None
    fewest = min(o.n + o.errors for o in outcomes)
    k = int(run.meta.get("k") or fewest)
    if fewest < k:
        return fewest, f"a task has only {fewest} of k={k} samples (unfinished run): k={fewest}"
    return k, None


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}"


def task_rows(run: Run) -> list[dict[str, Any]]:
    """One entry per task of the run's evaluation episodes (see the module docstring)."""
    tasks: dict[str, dict[str, Any]] = {}
    for i, e in enumerate(run.episodes):
        if e["part"] not in ("eval", "replay"):
            continue
        row = tasks.setdefault(
            e["task_id"],
            {"task_id": e["task_id"], "family": e["family"], "n": 0, "c": 0, "errors": 0,
             "episodes": []},
        )  # fmt: skip
        row["episodes"].append(i)
        if run.kind == "replay":
            row["n"] += 1
            row["c"] += int(e["status"] == "validated")
        elif e["error"] is not None:
            row["errors"] += 1
        else:
            row["n"] += 1
            row["c"] += int(e["won"])
    k = run_k(run)[0] if run.kind != "replay" else 0
    for row in tasks.values():
        row["rate"] = row["c"] / row["n"] if row["n"] else None
        row["pass"] = pass_at_k(row["n"], row["c"], k) if k and row["n"] >= k else None
    return list(tasks.values())


def overview(run: Run) -> list[Table]:
    """The overview tables of a run; empty when it has no evaluation episodes."""
    episodes = _eval(run)
    if not episodes:
        return []
    if run.kind == "replay":
        return [_replay_table(episodes)]
    k, note = run_k(run)
    rows = summarize(_outcomes(run), k)
    metric = {
        "title": "Avg@k and Pass@k by task family",
        "columns": ["family", "tasks", "samples", "successes", f"Avg@{k}", f"Pass@{k}", "errors"],
        "rows": [
            [
                r.family,
                r.tasks,
                r.samples,
                r.successes,
                _pct(r.avg_at_k),
                _pct(r.pass_at_k),
                r.errors,
            ]
            for r in rows
        ],  # fmt: skip
        "note": note,
    }
    errors = count_errors(e["error_message"] for e in episodes if e["error_message"])
    error_table = {
        "title": "errored episodes by type (left out of Avg@k and Pass@k)",
        "columns": ["error", "episodes", "first message"],
        "rows": [[e.type, e.episodes, e.first[:300]] for e in errors],
        "note": None if errors else "no episode ended in an error",
    }
    return [metric, error_table]


def _replay_table(episodes: list[dict[str, Any]]) -> Table:
    statuses = sorted({e["status"] or "not validated" for e in episodes})
    counts = Counter((e["strategy"], e["status"] or "not validated") for e in episodes)
    strategies = sorted({e["strategy"] for e in episodes}, key=str)
    return {
        "title": "queries by cut strategy and validation status",
        "columns": ["strategy", *statuses, "total"],
        "rows": [
            [s, *(counts[(s, st)] for st in statuses), sum(counts[(s, st)] for st in statuses)]
            for s in strategies
        ],
        "note": None,
    }


_SAME = ("env_id", "protocol", "variant")  # what two compared runs must share


def _refusal(a: Run, b: Run) -> str | None:
    for run in (a, b):
        if run.kind == "replay" or not _eval(run):
            return f"run {run.name!r} has no evaluation episodes to compare"
    for key in _SAME:
        va, vb = a.meta.get(key), b.meta.get(key)
        if json.dumps(va, sort_keys=True) != json.dumps(vb, sort_keys=True):
            return (
                f"runs {a.name!r} and {b.name!r} differ in {key}: {va!r} vs {vb!r}; a paired "
                "comparison needs the same environment, protocol and variant"
            )
    return None


def compare(a: Run, b: Run, ia: int, ib: int) -> dict[str, Any]:
    """Run ``b`` against run ``a`` (indices ``ia``, ``ib``); see the module docstring."""
    refused = _refusal(a, b)
    if refused:
        return {"a": ia, "b": ib, "refused": refused}
    rows_a = {r["task_id"]: r for r in task_rows(a)}
    rows_b = {r["task_id"]: r for r in task_rows(b)}
    shared = [t for t in rows_a if t in rows_b and rows_a[t]["n"] and rows_b[t]["n"]]
    per_task = {
        "a": {"0": {t: [rows_a[t]["c"], rows_a[t]["n"]] for t in shared}},
        "b": {"0": {t: [rows_b[t]["c"], rows_b[t]["n"]] for t in shared}},
    }
    stats = paired(per_task, base="a")["b"]
    tasks = [
        {
            "task_id": t,
            "family": rows_a[t]["family"],
            "a": [rows_a[t]["c"], rows_a[t]["n"]],
            "b": [rows_b[t]["c"], rows_b[t]["n"]],
            "diff": rows_b[t]["rate"] - rows_a[t]["rate"],
            "episodes_a": rows_a[t]["episodes"],
            "episodes_b": rows_b[t]["episodes"],
        }
        for t in shared
    ]
    notes = [
        f"{key} differs: {a.meta.get(key)!r} vs {b.meta.get(key)!r}"
        for key in ("split", "overrides")
        if a.meta.get(key) != b.meta.get(key)
    ]
    only_a, only_b = len(rows_a) - len(shared), len(rows_b) - len(shared)
    if only_a or only_b:
        notes.append(f"tasks left out (in one run only, or no played sample): {only_a} of "
                     f"{a.name!r}, {only_b} of {b.name!r}")  # fmt: skip
    return {
        "a": ia,
        "b": ib,
        "refused": None,
        "paired": stats,
        "tasks": tasks,
        "fixed": [t["task_id"] for t in tasks if t["a"][0] == 0 and t["b"][0] > 0],
        "broken": [t["task_id"] for t in tasks if t["a"][0] > 0 and t["b"][0] == 0],
        "notes": notes,
    }
