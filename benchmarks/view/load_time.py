"""How fast ``agentenvs view`` opens a run of 10,000 episodes, measured in Chromium.

    python -m agentenvs.benchmarks.view.load_time --out results/view-load --publish docs/viewer

1. The run: ``agentenvs eval Sokoban-v0 --agent random:1 --split train --limit 10000 -k 1``
   (10,000 tasks, one episode each, so the task list has 10,000 rows; kept in ``OUT/run`` and
   reused by a rerun).
2. Python: reading the run (:func:`agentenvs.benchmarks.view.load.load_run`, what the server
   does before it listens) and writing the export.
3. Chromium (the system's, headless, through Playwright: :mod:`agentenvs.benchmarks.view.browser`):
   the exported file (``file://``) and the served page (``agentenvs view RUN --port 0`` on
   127.0.0.1) are each opened :data:`OPENS` times (``--opens``) in a fresh tab; "open" is the
   page's own clock (``performance.now()``, from the start of navigation) when the overview and
   the task list are on screen (the frame after the first render), and the wall time of
   Playwright's ``goto`` until then. Then the last episode is opened (decoded from its
   gzipped chunk, or fetched), and the task list is scrolled from top to bottom, 20 rows per
   animation frame, recording every frame's interval and the rows the page holds (the list
   renders only what is in view).

The figures go to ``OUT/load_time.json`` and, with ``--publish DIR``, ``DIR/load-time.md`` and
``DIR/load-time.json`` (with the machine, the browser and the date). The target is
:data:`TARGET_OPEN_S`: the median open under 2 s.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from agentenvs.benchmarks.machine import cpu_model

__all__ = ["OPENS", "TARGET_OPEN_S", "build_run", "main", "measure_page"]

TARGET_OPEN_S = 2.0  # a 10,000-episode run opens in under 2 s (what a person waits for)
OPENS = 5  # fresh tabs per page kind; the median is reported
SCROLL_ROWS_PER_FRAME = 20

_SCROLL = """async (rows) => {
  const list = document.querySelector('.vlist');
  const step = rows * 28, frames = [], held = [];
  let last = performance.now();
  while (list.scrollTop + list.clientHeight < list.scrollHeight - 1) {
    list.scrollTop += step;
    await new Promise((done) => requestAnimationFrame(done));
    const now = performance.now();
    frames.push(now - last);
    held.push(list.querySelectorAll('.vrow').length);
    last = now;
  }
  return {frames, held, height: list.scrollHeight};
}"""


def build_run(out: Path, episodes: int) -> Path:
    """The benchmark's run in ``out`` (played once; a rerun resumes or reuses it)."""
    command = [
        sys.executable, "-m", "agentenvs.cli", "eval", "Sokoban-v0", "--agent", "random:1",
        "--split", "train", "--limit", str(episodes), "-k", "1", "--out", str(out),
    ]  # fmt: skip
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)  # its progress bar shows
    return out


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure_page(browser: Any, url: str, last_episode: int, times: int = OPENS) -> dict[str, Any]:
    """Open ``url`` ``times`` times; then one episode and a full scroll of the task list."""
    opens, walls = [], []
    for _ in range(times):
        page = browser.new_page(viewport={"width": 1300, "height": 900})
        clock = time.perf_counter()
        page.goto(url)
        page.wait_for_selector("body[data-ready]")
        walls.append(time.perf_counter() - clock)
        opens.append(page.evaluate("window.agentenvsReadyMs") / 1000)
        page.close()
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    page.goto(url)
    page.wait_for_selector("body[data-ready]")
    clock = time.perf_counter()
    page.evaluate(f"location.hash = '#run/0/episode/{last_episode}'")
    page.wait_for_selector(".turn")
    episode_s = time.perf_counter() - clock
    page.evaluate("location.hash = '#run/0'")
    page.wait_for_selector(".vrow")
    scroll = page.evaluate(_SCROLL, SCROLL_ROWS_PER_FRAME)
    page.close()
    frames = scroll["frames"] or [0.0]  # a list that fits its box does not scroll
    return {
        "open_s_median": statistics.median(opens),
        "open_s": opens,
        "wall_s_median": statistics.median(walls),
        "episode_open_s": episode_s,
        "scroll_frames": len(frames),
        "frame_ms_median": statistics.median(frames),
        "frame_ms_p95": _percentile(frames, 0.95),
        "frame_ms_max": max(frames),
        "rows_in_page_max": max(scroll["held"] or [0]),
    }


def _serve(run: Path) -> tuple[subprocess.Popen, str, float]:
    clock = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentenvs.cli", "view", str(run), "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    for line in proc.stdout:  # type: ignore[union-attr]
        if line.startswith("serving"):
            return proc, line.split(" at ")[1].strip(), time.perf_counter() - clock
    proc.kill()
    raise RuntimeError("agentenvs view exited before it served")


def _machine(browser_version: str) -> dict[str, Any]:
    return {
        "cpu_model": cpu_model(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "chromium": browser_version,
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def format_report(record: dict[str, Any]) -> str:
    """``load-time.md``: what was measured and the figures."""
    rows = [
        f"| page | open (median of {record['opens']}) | wall, goto to rendered | open the last "
        "episode | scroll frame median / p95 / max | rows in the page |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, r in record["pages"].items():
        rows.append(
            f"| {name} | {r['open_s_median']:.3f} s | {r['wall_s_median']:.3f} s | "
            f"{r['episode_open_s']:.3f} s | {r['frame_ms_median']:.1f} / {r['frame_ms_p95']:.1f}"
            f" / {r['frame_ms_max']:.1f} ms | {r['rows_in_page_max']} |"
        )
    m, p = record["machine"], record["python"]
    met = all(r["open_s_median"] < TARGET_OPEN_S for r in record["pages"].values())
    return "\n".join(
        [
            f"# agentenvs view: load time of a {record['episodes']:,}-episode run",
            "",
            f"Written by `python -m agentenvs.benchmarks.view.load_time` on {record['date']}: "
            f"{m['cpu_model']} ({m['cpus']} CPUs, load average {m['load_average']}), "
            f"Chromium {m['chromium']} headless, {m['platform']}.",
            "",
            f"The run: {record['episodes']} episodes of `{record['command']}` "
            f"({record['trajectory_mb']:.0f} MB of trajectories); the export is "
            f"{record['export_mb']:.1f} MB. Reading the run took {p['load_s']:.1f} s (the "
            f"server does it once before it listens; it listened after {p['serve_s']:.1f} s), "
            f"writing the export {p['export_s']:.1f} s.",
            "",
            *rows,
            "",
            "Open: the page's `performance.now()` (from the start of navigation) in the frame "
            "after the overview and the task list are rendered; each open in a fresh tab. "
            "Scroll: the task list from top to bottom, "
            f"{SCROLL_ROWS_PER_FRAME} rows per animation frame.",
            "",
            f"Target: opens in under {TARGET_OPEN_S:.0f} s: {'met' if met else 'NOT met'}.",
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results/view-load"))
    parser.add_argument("--episodes", type=int, default=10_000)
    parser.add_argument("--opens", type=int, default=OPENS, help=f"opens per page ({OPENS})")
    parser.add_argument("--publish", type=Path, default=None, help="copy the report here")
    args = parser.parse_args(argv)
    from agentenvs.benchmarks.view.browser import launch, sync_playwright
    from agentenvs.benchmarks.view.load import load_run
    from agentenvs.benchmarks.view.page import export_html

    print(f"the run: {args.episodes} episodes in {args.out / 'run'}", flush=True)
    run_dir = build_run(args.out / "run", args.episodes)
    print("reading it, exporting it, serving it", flush=True)
    clock = time.perf_counter()
    run = load_run(run_dir)
    load_s = time.perf_counter() - clock
    clock = time.perf_counter()
    exported = export_html([run], args.out / "view.html").resolve()
    last = len(run.episodes) - 1
    export_s = time.perf_counter() - clock
    server, url, serve_s = _serve(run_dir)
    try:
        with sync_playwright() as playwright:
            browser = launch(playwright)
            print(f"Chromium {browser.version}: {args.opens} opens of each page", flush=True)
            pages = {
                "exported file": measure_page(browser, exported.as_uri(), last, args.opens),
                "served": measure_page(browser, url, last, args.opens),
            }
            version = browser.version
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    record = {
        "benchmark": "view_load_time",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": _machine(version),
        "episodes": len(run.episodes),
        "command": f"agentenvs eval Sokoban-v0 --agent random:1 --split train --limit "
        f"{args.episodes} -k 1",
        "trajectory_mb": (run_dir / "trajectories.jsonl").stat().st_size / 1e6,
        "export_mb": exported.stat().st_size / 1e6,
        "python": {"load_s": load_s, "export_s": export_s, "serve_s": serve_s},
        "pages": pages,
        "opens": args.opens,
        "target_open_s": TARGET_OPEN_S,
    }
    (args.out / "load_time.json").write_text(json.dumps(record, indent=2) + "\n")
    report = format_report(record)
    print(report)
    if args.publish:
        args.publish.mkdir(parents=True, exist_ok=True)
        (args.publish / "load-time.md").write_text(report)
        (args.publish / "load-time.json").write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
