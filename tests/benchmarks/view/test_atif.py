"""ATIF out and in: ``agentenvs export RUN --format atif OUT/`` writes one ATIF v1.8 trajectory per
episode that the ``atif`` package's models validate, and ``agentenvs view`` opens a folder of
them (ours, or another harness's) with the same episode page. Runs are made by the real
commands: the expert's ``agentenvs eval`` of each environment, and the tiny local model's (token
ids and log-probs recorded)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

atif = pytest.importorskip("atif")

from agentenvs.agents.atif import ACT_TOOL, atif_to_trajectory  # noqa: E402
from agentenvs.agents.trajectory import read_trajectories  # noqa: E402
from agentenvs.benchmarks.view.load import load_run  # noqa: E402
from agentenvs.benchmarks.view.runs import RunFormatError  # noqa: E402
from agentenvs.cli import main  # noqa: E402

ENV_IDS = ("TextCraft-v0", "BabyAI-Text-v0", "ALFWorld-v0", "WebShop-v0", "Sokoban-v0")
FIXTURES = Path(__file__).parent / "atif"  # another harness's trajectory (a coding agent's)


def _eval_and_export(env_id: str, root: Path, *agent: str, limit: int = 2) -> tuple[Path, Path]:
    run, out = root / "run", root / "atif"
    args = ["eval", env_id, "-k", "1", "--limit", str(limit), "--no-progress", "--out", str(run)]
    assert main([*args, "--agent", *agent]) == 0
    assert main(["export", str(run), "--format", "atif", str(out)]) == 0
    return run, out


def _episodes(run: Path, out: Path) -> list[tuple[dict, object]]:
    """Each exported document beside the episode it came from (by its episode key)."""
    trajs = {t.episode_key: t for t in read_trajectories(run / "trajectories.jsonl")}
    docs = [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]
    assert len(docs) == len(trajs)
    keys = [tuple(d["extra"]["agentenvs"][k] for k in ("task_id", "group_id", "sample_index"))
            for d in docs]  # fmt: skip
    return [(d, trajs[k]) for d, k in zip(docs, keys, strict=True)]


def _check_document(doc: dict, traj) -> None:
    """What an exported document says of its episode, field by field."""
    atif.Trajectory.model_validate(doc)  # the atif package's own checks
    assert doc["schema_version"] == "ATIF-v1.8" and doc["agent"]["name"] == "agentenvs"
    assert doc["agent"]["extra"]["agentenvs"] == {"agent": traj.agent, "protocol": traj.protocol}
    steps = doc["steps"]
    shown = [(s["source"], s["message"]) for s in steps if s["source"] != "agent"]
    assert shown == [(m["role"], m["content"]) for m in traj.messages if m["role"] != "assistant"]
    assert steps[0]["source"] == ("system" if traj.messages[0]["role"] == "system" else "user")
    agent = [s for s in steps if s["source"] == "agent"]
    assert len(agent) == traj.turns == len(traj.steps)
    for step, record in zip(agent, traj.steps, strict=True):
        ours = step["extra"]["agentenvs"]
        assert step["message"] == record.completion
        calls = step.get("tool_calls") or []
        assert [c["arguments"]["action"] for c in calls] == (
            [record.action] if record.action is not None else []
        )
        assert all(c["function_name"] == ACT_TOOL for c in calls)
        assert step["observation"]["results"][0]["content"] == record.observation
        assert (ours["reward"], ours["valid"], ours["won"]) == (
            record.reward,
            record.valid,
            record.info.get("won"),
        )
        assert ours["anchor"] == record.anchor
        if record.token_ids is None:
            assert "metrics" not in step
        else:
            assert step["metrics"]["completion_tokens"] == len(record.token_ids)
            assert step["metrics"]["completion_token_ids"] == record.token_ids
            assert step["metrics"]["logprobs"] == pytest.approx(record.logprobs)
    episode = doc["extra"]["agentenvs"]
    assert (episode["env_id"], episode["task_id"], episode["won"]) == (
        traj.env_id,
        traj.task_id,
        traj.won,
    )
    assert doc["final_metrics"]["extra"]["won"] == traj.won
    assert doc["final_metrics"]["extra"]["reward"] == traj.total_reward


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_export_writes_a_valid_atif_file_per_episode_and_view_shows_the_same(env_id, tmp_path):
    run, out = _eval_and_export(env_id, tmp_path, "expert")
    episodes = _episodes(run, out)
    assert len(episodes) == 2
    for doc, traj in episodes:
        _check_document(doc, traj)
        assert traj.won  # the expert's episodes
        assert atif_to_trajectory(doc).to_dict() == traj.to_dict()  # the round trip is exact
    ours, back = load_run(run), load_run(out)
    assert back.kind == "eval" and back.meta["env_id"] == env_id
    assert back.episodes == ours.episodes
    for i in range(len(episodes)):
        assert back.record(i) == ours.record(i)  # the same episode page


def test_token_ids_and_logprobs_are_exported(tmp_path):
    """The tiny model's episodes: every reply's token ids, count and log-probs, and the
    unparseable replies (no tool call) as they were recorded."""
    from agentenvs.agents.tiny_model import build_tiny_model

    model = build_tiny_model(tmp_path / "tiny")
    options = ["--max-turns", "3", "--max-new-tokens", "24", "--temperature", "1.0"]
    run, out = _eval_and_export("TextCraft-v0", tmp_path, f"hf:{model}", *options, limit=1)
    episodes = _episodes(run, out)
    assert all(s.token_ids and s.logprobs for _, t in episodes for s in t.steps)
    for doc, traj in episodes:
        _check_document(doc, traj)
        total = sum(len(s.token_ids) for s in traj.steps)
        assert doc["final_metrics"]["total_completion_tokens"] == total
        assert atif_to_trajectory(doc).to_dict() == traj.to_dict()
    assert load_run(out).episodes == load_run(run).episodes


def test_view_opens_another_harness_trajectory(tmp_path):
    """A coding agent's ATIF file (tool calls, a user message mid-way, no environment fields):
    each agent step is a turn, its tool calls the action, its tool results the answer."""
    folder = tmp_path / "foreign"
    shutil.copytree(FIXTURES, folder)
    (folder / "notes.json").write_text('{"not": "ATIF"}')  # other JSON is left alone
    doc = json.loads((folder / "coding-agent.json").read_text())
    atif.Trajectory.model_validate(doc)
    run = load_run(folder)
    assert len(run.episodes) == 1 and run.meta["model"] == "claude-sonnet-4-5"
    record = run.record(0)
    agent_steps = [s for s in doc["steps"] if s["source"] == "agent"]
    assert record["turns"] == len(record["steps"]) == len(agent_steps) == 4
    assert record["system"] == "You are a coding agent working in /repo."
    first, second, third, last = record["steps"]
    assert first["observation"] == "The test in tests/test_sum.py fails. Fix it."
    assert first["action"] == 'Bash {"command": "pytest -q tests/test_sum.py"}'
    assert first["result"] == "E   assert 3 == 4\n1 failed in 0.02s"
    assert first["info"]["reasoning_content"] == "Start by reproducing the failure."
    assert first["info"]["completion_tokens"] == 41
    assert second["observation"] == first["result"]  # what the agent was shown last
    assert second["result"] == "def add(a, b):\n    return a + b - 1"  # a content-part array
    assert third["observation"] == "Keep the signature as it is."  # the user's message
    assert last["action"] is None and last["reply"].startswith("Fixed:")
    assert record["agent"] == "claude-code 2.1.0 (claude-sonnet-4-5)"


def test_an_invalid_atif_file_is_an_error_naming_it(tmp_path):
    doc = json.loads((FIXTURES / "coding-agent.json").read_text())
    doc["steps"][2]["step_id"] = 9  # not sequential
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(RunFormatError, match=r"bad\.json is not a valid ATIF trajectory"):
        load_run(tmp_path)


def test_export_refuses_what_is_not_a_run(tmp_path, capsys):
    assert main(["export", str(tmp_path / "missing"), "--format", "atif", str(tmp_path)]) == 2
    assert "does not exist" in capsys.readouterr().err


def _episode_turns(browser, path: Path, task_id: str) -> tuple[list[str], list[str]]:
    """The turns an exported page shows for the first episode of ``task_id`` (its text per
    turn), and the page's console errors."""
    errors: list[str] = []
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-ready]")
    page.click(f".vrow:has-text('{task_id}')")
    page.wait_for_selector(".line")
    page.locator(".line").first.click()
    page.wait_for_selector(".turn")
    turns = page.locator(".turn").all_inner_texts()
    page.close()
    return turns, errors


def test_the_browser_shows_the_same_turns_after_the_round_trip(tmp_path):
    """Our run and its ATIF export, each as the viewer's exported page in headless Chromium:
    the episode page shows the same turns; another harness's file opens too."""
    from agentenvs.benchmarks.view.browser import ChromiumMissing, find_chromium, launch
    from agentenvs.benchmarks.view.page import export_html

    try:
        find_chromium()
        from agentenvs.benchmarks.view.browser import sync_playwright
    except (ChromiumMissing, ImportError) as exc:
        pytest.skip(f"no browser for the page tests: {exc}")
    run, out = _eval_and_export("TextCraft-v0", tmp_path, "expert")
    ours, back = load_run(run), load_run(out)
    task = ours.episodes[0]["task_id"]
    playwright = sync_playwright().start()
    browser = launch(playwright)
    try:
        shown, errors = _episode_turns(browser, export_html([ours], tmp_path / "run.html"), task)
        again, errors_back = _episode_turns(
            browser, export_html([back], tmp_path / "atif.html"), task
        )
        assert shown and again == shown and errors == errors_back == []
        assert all(a in "\n".join(shown) for a in ours.record(0)["steps"][0]["action"].split())
        foreign = export_html([load_run(FIXTURES)], tmp_path / "foreign.html")
        turns, errors = _episode_turns(browser, foreign, "coding-agent")
        assert len(turns) == 4 and errors == []
        assert "pytest -q tests/test_sum.py" in turns[0] and "1 passed" in turns[3]
    finally:
        browser.close()
        playwright.stop()
