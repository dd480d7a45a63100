"""The result files of ``agentenvs eval``: ``results.md``, ``results.csv``, ``results.json`` and
``results.png`` (:func:`write_tables`), and the Markdown tables the command prints."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from agentenvs.benchmarks.eval.metrics import OVERALL, ErrorCount, MetricRow
from agentenvs.benchmarks.eval.plot import plot_rows
from agentenvs.benchmarks.eval.resume import SEEDING
from agentenvs.benchmarks.eval.settings import EvalSettings

__all__ = [
    "format_errors",
    "format_markdown",
    "run_metadata",
    "write_csv",
    "write_tables",
]


def _figure(value: float | None, over: int, tasks: int) -> str:
    """A percentage; ``-`` when no task qualified; with the tasks it covers when not all."""
    if value is None:
        return "-"
    return f"{100 * value:.2f}" + (f" ({over}/{tasks} tasks)" if over != tasks else "")


def format_markdown(rows: Sequence[MetricRow], title: str = "") -> str:
    """A Markdown table of ``rows`` (percentages). ``samples`` are the played episodes; the
    ``errors`` beside them (episodes that ended in an error) are left out of Avg@k and Pass@k,
    which then name the tasks they cover."""
    k = rows[0].k if rows else 0
    lines = [f"### {title}", ""] if title else []
    lines += [
        f"| family | tasks | samples | successes | Avg@{k} | Pass@{k} | errors |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        name = f"**{r.family}**" if r.family == OVERALL else r.family
        lines.append(
            f"| {name} | {r.tasks} | {r.samples} | {r.successes} | "
            f"{_figure(r.avg_at_k, r.avg_tasks, r.tasks)} | "
            f"{_figure(r.pass_at_k, r.pass_tasks, r.tasks)} | {r.errors} |"
        )
    return "\n".join(lines)


def format_errors(errors: Sequence[ErrorCount]) -> str:
    """The errored episodes per error type, with the first message of each (empty: none)."""
    if not errors:
        return ""
    total = sum(e.episodes for e in errors)
    lines = [
        f"{total} episode(s) ended in an error: not results, left out of Avg@k and Pass@k, "
        "played again by the next run into the same --out.",
        "",
        "| error | episodes | first message |",
        "|---|---:|---|",
    ]
    for e in errors:
        first = " ".join(e.first.split()).replace("|", "\\|")
        lines.append(f"| {e.type} | {e.episodes} | {first} |")
    return "\n".join(lines)


def run_metadata(settings: EvalSettings, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a result table records besides its rows: the protocol, every setting it fixed, the
    overrides, the environment variant and the tasks."""
    return {
        "env_id": settings.env_id,
        "agent": settings.agent,
        "split": settings.split,
        "n": settings.n,
        "k": settings.k,
        "protocol": settings.protocol,
        "protocol_settings": settings.protocol_settings,
        "overrides": settings.overrides,
        "limit": settings.limit,
        "task_seed": settings.task_seed,
        "seed": settings.seed,
        "seeding": SEEDING,
        **(meta or {}),
    }


def _describe(metadata: dict[str, Any]) -> str:
    """The line under the Markdown title: protocol, variant, overrides, task sample."""
    variant = metadata.get("variant") or {}
    parts = [f"protocol `{metadata['protocol']}`"]
    parts.append("variant " + (", ".join(f"`{k}={v}`" for k, v in variant.items()) or "default"))
    if metadata.get("overrides"):
        parts.append(
            "overrides " + ", ".join(f"`{k}={v}`" for k, v in metadata["overrides"].items())
        )
    if metadata.get("limit") is not None:
        parts.append(
            f"{len(metadata.get('task_ids', []))} sampled tasks (task seed {metadata['task_seed']})"
        )
    return "; ".join(parts)


def _fraction(value: float | None) -> str:
    return "" if value is None else f"{value:.6f}"


def write_csv(rows: Sequence[MetricRow], path: Path, k: int) -> None:
    """``rows`` as CSV: counts, the two figures as fractions (empty: none), the tasks each
    figure covers."""
    header = ["family", "tasks", "samples", "successes", "errors", f"avg@{k}", f"pass@{k}"]
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow([*header, "avg_tasks", "pass_tasks"])
        for r in rows:
            writer.writerow(
                [
                    *(r.family, r.tasks, r.samples, r.successes, r.errors),
                    *(_fraction(r.avg_at_k), _fraction(r.pass_at_k)),
                    *(r.avg_tasks, r.pass_tasks),
                ]
            )


def write_tables(
    rows: Sequence[MetricRow],
    out: Path,
    settings: EvalSettings,
    meta: dict[str, Any] | None = None,
    errors: Sequence[ErrorCount] = (),
) -> str | None:
    """``results.md``, ``results.csv``, ``results.json`` and ``results.png`` in ``out``;
    returns why the PNG was not drawn (matplotlib not installed), or None."""
    metadata = run_metadata(settings, meta)
    head, _, body = format_markdown(rows, settings.title).partition("\n\n")
    error_table = format_errors(errors)
    error_part = f"\n{error_table}\n" if error_table else ""  # after the table's newline
    (out / "results.md").write_text(f"{head}\n\n{_describe(metadata)}\n\n{body}\n{error_part}")
    record = {
        **metadata,
        "rows": [asdict(r) for r in rows],
        "errors": [asdict(e) for e in errors],
    }
    (out / "results.json").write_text(json.dumps(record, indent=2) + "\n")
    write_csv(rows, out / "results.csv", settings.k)
    return plot_rows(rows, out / "results.png", settings.title)
