"""The bar plot of a results table (``results.png`` of ``agentenvs eval``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from agentenvs.benchmarks.metrics import MetricRow

__all__ = ["plot_rows"]


def plot_rows(rows: Sequence[MetricRow], path: Path, title: str) -> None:
    """A grouped bar plot of Avg@k and Pass@k per family (percent)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k = rows[0].k if rows else 0
    names = [r.family for r in rows]
    xs = range(len(rows))
    width = 0.38
    fig, ax = plt.subplots(figsize=(max(5.0, 1.1 * len(rows) + 2), 3.8))
    avg = ax.bar(
        [x - width / 2 for x in xs], [100 * r.avg_at_k for r in rows], width, label=f"Avg@{k}"
    )
    pas = ax.bar(
        [x + width / 2 for x in xs], [100 * r.pass_at_k for r in rows], width, label=f"Pass@{k}"
    )
    ax.bar_label(avg, fmt="%.1f", fontsize=7)
    ax.bar_label(pas, fmt="%.1f", fontsize=7)
    ax.set_xticks(list(xs), names, rotation=20, ha="right")
    ax.set_ylim(0, 105)
    ax.set_ylabel("%")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
