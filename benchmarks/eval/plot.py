"""The bar plot of a results table (``results.png`` of ``agentenvs eval``). Optional: matplotlib
comes with the ``train`` extra; without it no plot is drawn and :func:`plot_rows` says how to get
one."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from agentenvs.benchmarks.eval.metrics import MetricRow

__all__ = ["PLOT_EXTRA", "plot_rows"]

PLOT_EXTRA = "train"  # the extra that installs matplotlib


def plot_rows(rows: Sequence[MetricRow], path: Path, title: str) -> str | None:
    """A grouped bar plot of Avg@k and Pass@k per family (percent; a figure that is None, every
    episode of the family having errored, is drawn as 0). Returns None, or, when matplotlib is
    not installed, why ``path`` was not written and how to get it."""
    try:
        import matplotlib
    except ImportError:
        return (
            f"no {path.name}: matplotlib is not installed; pip install 'agentenvs[{PLOT_EXTRA}]' "
            "and rerun the same command (a finished run only redraws)"
        )

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k = rows[0].k if rows else 0
    names = [r.family for r in rows]
    xs = range(len(rows))
    width = 0.38
    fig, ax = plt.subplots(figsize=(max(5.0, 1.1 * len(rows) + 2), 3.8))
    avg_values = [100 * (r.avg_at_k or 0.0) for r in rows]
    pass_values = [100 * (r.pass_at_k or 0.0) for r in rows]
    avg = ax.bar([x - width / 2 for x in xs], avg_values, width, label=f"Avg@{k}")
    pas = ax.bar([x + width / 2 for x in xs], pass_values, width, label=f"Pass@{k}")
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
    return None
