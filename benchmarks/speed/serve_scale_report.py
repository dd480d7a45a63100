"""The Markdown of a ``serve_scale`` report, and its place in docs/serving.md."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentenvs.benchmarks.speed.serve_scale_limits import (
    ALFWORLD_MEMORY_BUDGET,
    ALFWORLD_SESSION_BYTES,
    SUCCESS_FLOOR,
)

__all__ = [
    "DOC_END",
    "DOC_START",
    "doc_markers",
    "format_doc",
    "largest_passing",
    "write_doc",
]

DOC_START, DOC_END = "<!-- serve-scale:start -->", "<!-- serve-scale:end -->"


def doc_markers(section: str | None = None) -> tuple[str, str]:
    """The comments around a report in a doc: the main one, or a named further ``section``."""
    if section is None:
        return DOC_START, DOC_END
    return f"<!-- serve-scale-{section}:start -->", f"<!-- serve-scale-{section}:end -->"


def format_memory(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    lines = [
        "",
        "Memory per live session of every environment, in the same run "
        "(`benchmarks/speed/session_memory.py`: 8 `test` tasks x 8 sessions, each reset and "
        "stepped 3 times, all 64 live, in a fresh process per environment; MB = 10^6 bytes):",
        "",
        "| environment | RSS MB / session | tracemalloc MB / session |",
        "|---|---|---|",
    ]
    for r in rows:
        traced = r["tracemalloc_per_session"]
        traced_text = "" if traced is None else f"{traced / 1e6:.3f}"
        lines.append(f"| {r['env_id']} | {r['rss_per_session'] / 1e6:.3f} | {traced_text} |")
    return lines


def largest_passing(results: list[dict[str, Any]], series: str) -> int:
    """The largest level of ``series`` at >= 95% success (0 if none)."""
    passing = [
        r["sessions"] for r in results if r["series"] == series and r["success"] >= SUCCESS_FLOOR
    ]
    return max(passing, default=0)


def format_doc(report: dict[str, Any]) -> str:
    m, s = report["machine"], report["settings"]
    lines = [
        f"Measured {report['started']} to {report['finished']} on {m['cpu']} ({m['cpus']} cores,"
        f" shared; load average {m['load_average_start'][0]} at the start and "
        f"{m['load_average_end'][0]} at the end), open-file limit {m['open_file_limit']}; "
        f"think time {s['think']:g} s, {s['steps']} steps after the ramp, ramp "
        f"{s['ramp_rate']:g} sessions/s (ALFWorld {s['alfworld_ramp_rate']:g}/s), "
        f"`--workers {s['workers']}` behind HAProxy, {s['http_connections']} HTTP connections, "
        f"batches of {s['batch']}, request timeout {s['timeout']:g} s. Clients and servers "
        "share the machine's cores. Regenerate with `nice -n 10 python -m "
        "agentenvs.benchmarks.speed.serve_scale --write-doc docs/serving.md`.",
        "",
        *_results_table(report["results"]),
    ]
    series = sorted({r["series"] for r in report["results"]})
    lines.append("")
    lines.append(
        "Largest level at >= 95% success: "
        + ", ".join(f"{name} {largest_passing(report['results'], name)}" for name in series)
        + "."
    )
    lines += format_memory(report.get("session_memory", []))
    if report["skipped"]:
        lines.append("")
        lines.append(
            f"Not run (ALFWorld levels run only while sessions x {ALFWORLD_SESSION_BYTES / 1e6:g}"
            f" MB fit in {ALFWORLD_MEMORY_BUDGET / 2**30:g} GiB): {', '.join(report['skipped'])}."
        )
    return "\n".join(lines)


def _results_table(results: list[dict[str, Any]]) -> list[str]:
    """One row per level; the columns a report lacks (an older run's) are left out."""
    after = any(r.get("p99_after_ramp_ms") is not None for r in results)
    clients = any("client_processes" in r for r in results)
    head = ["series", "sessions", "success", "p50 ms", "p99 ms"]
    head += ["p99 after ramp ms"] * after + ["requests/s", "RSS KiB/session", "wall s"]
    head += ["client processes"] * clients
    head += ["CPU ms/request: workers, proxy, client", "errors"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        errors = "; ".join(f"{k} x{v}" for k, v in r["errors"].items()) or ""
        if r.get("ws_left_open") is not None:
            errors = (errors + "; " if errors else "") + f"ws open after: {r['ws_left_open']}"
        rss = "" if r["rss_per_session_kib"] is None else f"{r['rss_per_session_kib']:g}"
        c = r.get("cpu_ms_per_request") or {}
        cpu = ", ".join(f"{c[k]:g}" for k in ("workers", "proxy", "client") if k in c)
        cells = [r["series"], str(r["sessions"]), f"{r['success'] * 100:.2f}%"]
        cells += [f"{r['p50_ms']:g}", f"{r['p99_ms']:g}"]
        cells += [_ms(r.get("p99_after_ramp_ms"))] * after
        cells += [f"{r['requests_per_s']:g}", rss, f"{r['wall_s']:g}"]
        cells += [str(r.get("client_processes", ""))] * clients
        cells += [cpu, errors.replace("|", "/")]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value:g}"


def write_doc(path: Path, text: str, section: str | None = None) -> None:
    """Replace the report between the markers of ``section`` (:func:`doc_markers`) in ``path``."""
    start, end = doc_markers(section)
    doc = path.read_text()
    if start not in doc or end not in doc:
        raise ValueError(f"{path} has no {start} ... {end} section")
    head, rest = doc.split(start, 1)
    tail = rest.split(end, 1)[1]
    path.write_text(f"{head}{start}\n{text}\n{end}{tail}")
