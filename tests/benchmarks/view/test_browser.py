"""``agentenvs view`` in a real browser: the system's headless Chromium, driven by Playwright,
opens the exported file (``file://``) and the page a real server serves on 127.0.0.1, clicks
into tasks, episodes and comparisons, and checks what is on screen against the runs' files and
the Python statistics; no JavaScript console error; screenshots kept (the folder is printed).

Skipped, with the reason, where Chromium or Playwright is not installed."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentenvs.agents.trajectory import read_trajectories
from agentenvs.benchmarks.view.browser import ChromiumMissing, find_chromium
from agentenvs.benchmarks.view.load import load_run
from agentenvs.benchmarks.view.page import export_html
from agentenvs.benchmarks.view.report import compare


@pytest.fixture(scope="module")
def chromium() -> str:
    """The system's Chromium, and Playwright to drive it; else the tests skip, saying why."""
    try:
        path = find_chromium()
        import playwright  # noqa: F401
    except ChromiumMissing as exc:
        pytest.skip(f"no browser for the page tests: {exc}")
    except ImportError:
        pytest.skip("no Playwright for the page tests: pip install playwright")
    return path


@pytest.fixture(scope="module")
def browser(chromium) -> Iterator[Any]:
    from agentenvs.benchmarks.view.browser import launch, sync_playwright

    playwright = sync_playwright().start()
    browser = launch(playwright)
    yield browser
    browser.close()
    playwright.stop()


class Page:
    """A tab that records console errors and page exceptions."""

    def __init__(self, browser: Any, url: str, shots: Path) -> None:
        self.errors: list[str] = []
        self.page = browser.new_page(viewport={"width": 1280, "height": 900})
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.shots = shots
        self.page.goto(url)
        self.page.wait_for_selector("body[data-ready]")

    def text(self) -> str:
        return self.page.inner_text("main")

    def shot(self, name: str) -> None:
        self.page.screenshot(path=str(self.shots / f"{name}.png"), full_page=True)

    def close(self) -> None:
        self.page.close()
        assert self.errors == [], self.errors


def _signed(x: float) -> str:
    return f"{'+' if x > 0 else ''}{x:.3f}"


@pytest.fixture(scope="module")
def served_learning(view_runs, serve_view) -> Iterator[str]:
    """``agentenvs view`` of the learning benchmark's SFT and PTGPO units of seed 0 and the
    replay queries, served."""
    with serve_view(view_runs.sft, view_runs.ptgpo, view_runs.replay) as url:
        yield url


def test_exported_expert_run_and_comparison(browser, view_runs, artifacts, tmp_path):
    expert, random = load_run(view_runs.expert), load_run(view_runs.random)
    path = export_html([expert, random], tmp_path / "expert-vs-random.html")
    tab = Page(browser, path.as_uri(), artifacts)
    text = tab.text()
    assert "Avg@2" in text and "prefix-grpo" in text
    tasks = [e["task_id"] for e in expert.episodes]
    for task in dict.fromkeys(tasks):
        assert task in text
    tab.shot("export-overview")
    # a task, its k samples side by side, then one episode's turns
    first = next(read_trajectories(view_runs.expert / "trajectories.jsonl"))
    tab.page.click(f".vrow:has-text('{tasks[0]}')")
    tab.page.wait_for_selector(".line")
    assert tab.page.locator(".line").count() == 2
    tab.page.locator(".line").first.click()
    tab.page.wait_for_selector(".turn")
    text = tab.text()
    for step in first.steps:
        assert step.action in text
    assert "parsed action" in text and "raw reply" in text
    tab.shot("export-episode")
    # the comparison: the paired difference the Python statistic gives, the flipped tasks
    c = compare(expert, random, 0, 1)
    tab.page.click("#tabs a:has-text('compare')")
    tab.page.wait_for_selector(".paired")
    paired = tab.page.inner_text(".paired")
    assert (
        paired == f"paired difference {_signed(c['paired']['mean_diff'])} ± {c['paired']['se']:.3f}"
    )
    assert c["broken"] and all(t in tab.text() for t in c["broken"])
    tab.shot("export-compare")
    tab.page.click(f".chip:has-text('{c['broken'][0]}')")
    tab.page.wait_for_function("document.querySelectorAll('.side .line').length >= 4")
    assert tab.page.locator(".side .line").count() == 4  # both runs' k = 2 samples
    assert "lost" in tab.page.inner_text(".side") and "won" in tab.page.inner_text(".side")
    tab.shot("export-compare-task")
    # the task list filters: tasks no random sample solved
    tab.page.click("#tabs a:has-text('random')")
    tab.page.select_option("select[data-filter=outcome]", "none")
    none = [t for t in c["tasks"] if t["b"][0] == 0]
    assert f"{len(none)} of 6 tasks" in tab.text()
    tab.close()


def test_served_learning_runs_training_and_replay(browser, served_learning, view_runs, artifacts):
    sft, ptgpo = load_run(view_runs.sft), load_run(view_runs.ptgpo)
    tab = Page(browser, served_learning, artifacts)
    assert tab.page.inner_text("#source") == "served"
    tab.page.click("#tabs a:has-text('ptgpo/seed-0')")
    tab.page.wait_for_selector(".chart")
    text = tab.text()
    assert "held-out Avg@k" in text and "success (sampled episodes)" in text
    assert "training protocol" in text and "algorithm\tptgpo" in text
    tab.shot("served-train-run")
    tab.page.click("a:has-text('iteration 1')")
    tab.page.wait_for_selector(".line")
    assert tab.page.locator(".line").count() == 12
    tab.page.locator(".line").first.click()
    tab.page.wait_for_selector(".turn")
    text = tab.text()
    assert "tokens" in text and "log-prob sum" in text and "raw reply" in text
    tab.shot("served-sampled-episode")
    c = compare(sft, ptgpo, 0, 1)
    tab.page.click("#tabs a:has-text('compare')")
    tab.page.wait_for_selector(".paired")
    assert tab.page.inner_text(".paired") == (
        f"paired difference {_signed(c['paired']['mean_diff'])} ± {c['paired']['se']:.3f}"
    )
    tab.page.click(f".vrow:has-text('{c['tasks'][0]['task_id']}')")
    # both sides render on their own: wait for the second before counting
    tab.page.wait_for_function("document.querySelectorAll('.side .line').length >= 16")
    assert tab.page.locator(".side .line").count() == 16  # 8 evaluation samples of each
    tab.shot("served-compare-task")
    # a run that cannot be compared says why
    tab.page.goto(served_learning + "#compare/0/2")
    tab.page.wait_for_selector(".refused")
    assert "has no evaluation episodes to compare" in tab.page.inner_text(".refused")
    # the replay queries: the teacher prefix up to the cut point
    replay = load_run(view_runs.replay)
    cut = next(i for i, e in enumerate(replay.episodes) if e["prefix_turns"] > 1)
    tab.page.goto(served_learning + f"#run/2/episode/{cut}")
    tab.page.wait_for_selector(".cut")
    assert f"after teacher turn {replay.episodes[cut]['prefix_turns']}" in tab.text()
    assert "teacher prefix" in tab.text() and "validated" in tab.text()
    tab.shot("served-replay-query")
    tab.close()


def test_load_time_benchmark_runs(chromium, tmp_path):
    """The load-time benchmark's command end to end on a small run: its report, and a list
    that holds only the rows in view."""
    doc = tmp_path / "doc"
    command = ["-m", "agentenvs.benchmarks.view.load_time", "--out", str(tmp_path)]
    command += ["--episodes", "60", "--opens", "1", "--publish", str(doc)]
    subprocess.run([sys.executable, *command], check=True, timeout=300)
    record = json.loads((doc / "load-time.json").read_text())
    assert record["episodes"] == 60 and set(record["pages"]) == {"exported file", "served"}
    for page in record["pages"].values():
        assert 0 < page["open_s_median"] and page["scroll_frames"] >= 1
        assert page["rows_in_page_max"] < 60
    assert "load time of a 60-episode run" in (doc / "load-time.md").read_text()
