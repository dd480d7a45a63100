"""The steps/s table: it runs on a machine without the originals (saying so in their cells),
plays an original in a process of its own that never imports agentenvs (minigrid, installed with
the BabyAI extra), refuses an original that plays another episode, and its page keeps the
sections it does not regenerate (no timed assertion: figures are reported, not asserted)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from agentenvs.benchmarks.speed import serve as serve_speed
from agentenvs.benchmarks.speed import steps_table
from agentenvs.benchmarks.speed.steps_table import BATCH_EPISODES, OriginalProcess, Row

ROOT = Path(__file__).resolve().parents[2]


def test_textcraft_rows_without_the_originals(tmp_path, capsys) -> None:
    out, rows_json = tmp_path / "steps.md", tmp_path / "steps.json"
    assert (
        steps_table.main(
            [
                "TextCraft-v0",
                "--seconds",
                "0.15",
                "--originals",
                str(tmp_path),
                "--out",
                str(out),
                "--json",
                str(rows_json),
            ]
        )
        == 0
    )
    rows = json.loads(rows_json.read_text())
    assert [r["workload"].split(",")[0] for r in rows] == ["`adapt/0`", "`agentgym/6`"]
    for row in rows:
        assert row["in_process"] > 0 and row["http_single"] > 0
        assert sorted(int(n) for n in row["batches"]) == list(BATCH_EPISODES)
        assert row["original_steps_per_s"] is None
        assert row["original_note"].startswith("not measured (no copy of ")
    # our --api agentgym routes, played by the client that plays AgentGym's server
    assert any("our `--api agentgym` routes" in n for n in rows[1]["notes"])
    table = out.read_text()
    assert "| TextCraft-v0 | `adapt/0`, the expert's" in table and "not measured" in table
    assert "load average" in capsys.readouterr().out


def test_minigrid_plays_the_primitives_of_our_text_actions_in_its_own_process() -> None:
    if importlib.util.find_spec("minigrid") is None:
        pytest.skip("needs minigrid (the BabyAI extra)")
    work = serve_speed.workload("BabyAI-Text-v0", candidates=1)
    minigrid_id, seed, primitives = steps_table._primitives(work)
    assert len(primitives) >= len(work.actions)
    original = OriginalProcess(
        sys.executable,
        {
            "original": "minigrid",
            "minigrid_id": minigrid_id,
            "seed": seed,
            "primitives": primitives,
            "steps_per_episode": len(work.actions),
        },
    )
    try:
        assert len(original.trace) == len(primitives)
        assert original.trace[-1][0] > 0 and original.trace[-1][1]  # the goal, as ours
        steps, seconds, step_seconds = original.run(0.1)
        assert steps % len(work.actions) == 0 and steps > 0 and 0 < step_seconds <= seconds
    finally:
        original.close()  # raises if the child imported agentenvs


def test_an_original_that_cannot_run_says_why() -> None:
    with pytest.raises(RuntimeError, match="ModuleNotFoundError"):  # no copy at that path
        OriginalProcess(
            sys.executable,
            {
                "original": "verl-agent-sokoban",
                "source": "/nonexistent",
                "dim_room": [6, 6],
                "num_boxes": 1,
                "search_depth": 30,
                "seed": 0,
                "actions": [],
            },
        )


def test_another_episode_is_refused() -> None:
    steps_table._same_steps("x", ["Got 1 sand", "Crafted 1 x"], ["Got 1 sand", "Crafted 1 x"])
    with pytest.raises(RuntimeError, match="after 1 actions it shows 'Crafted 2 x'"):
        steps_table._same_steps("x", ["Got 1 sand", "Crafted 1 x"], ["Got 1 sand", "Crafted 2 x"])


def test_table_cells() -> None:
    rows = [
        Row(
            "A-v0",
            "`t/1`, the expert's 3 actions",
            in_process=1000.0,
            http_single=20.0,
            batches={16: 250.0, 64: 500.0},
            original="theirs",
            original_steps_per_s=10.0,
            notes=["a note"],
        ),
        Row(
            "B-v0",
            "`t/2`",
            in_process=5.0,
            original="theirs",
            original_note="not measured (no copy of x)",
        ),
    ]
    table = steps_table.format_table(rows)
    assert (
        "| A-v0 | `t/1`, the expert's 3 actions | 1,000 | 20 (0.02x) | 250 (0.25x) | "
        "500 (0.5x) | theirs | 10 (0.01x) |" in table
    )
    assert "| B-v0 | `t/2` | 5 | - | - | - | theirs | not measured (no copy of x) |" in table
    assert "- A-v0 (`t/1`): a note" in table


def _doc_script():
    spec = importlib.util.spec_from_file_location(
        "write_benchmarks_doc", ROOT / "scripts" / "write_benchmarks_doc.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_page_keeps_the_sections_it_does_not_regenerate() -> None:
    doc = _doc_script()
    old = (
        "# Benchmarks\n\nGenerated by ...\n\n- machine: CPU X, 2 cores\n- date: 2026-01-01 "
        "10:00 UTC\n- commit: abc123\n\nEach table ...\n\n## env_speed: reset and step\n\n"
        "`python -m agentenvs.benchmarks.speed.envs`\n\n| a | b |\n|---|---|\n\n"
        "## ptgpo_speed: PTGPO\n\n`python -m x`\n\n| c |\n"
    )
    sections = doc.split_sections(old)
    assert list(sections) == ["env_speed", "ptgpo_speed"]
    assert (
        "- measured: 2026-01-01 10:00 UTC, commit abc123; CPU X, 2 cores\n\n| a | b |"
        in sections["env_speed"]
    )
    sections["steps_table"] = doc.render_section(
        "steps_table", "steps/s", "`cmd`", "| t |", "- measured: now"
    )
    page = doc.render(sections)
    assert page.index("## env_speed") < page.index("## ptgpo_speed") < page.index("## steps_")
    assert doc.split_sections(page) == sections  # a page it wrote splits back the same
