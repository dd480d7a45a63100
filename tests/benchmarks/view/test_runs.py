"""Reading runs for ``agentenvs view``: kinds told from their files, eval episodes counted as
eval counts them, the overview and the comparison's numbers (hand-computed cases and the
tables eval itself wrote), the export's inlined data, the server's routes and error shape."""

from __future__ import annotations

import base64
import gzip
import json
import math
import re
from pathlib import Path

import pytest

from agentenvs.agents.trajectory import (
    StepRecord,
    Trajectory,
    read_trajectories,
    write_trajectories,
)
from agentenvs.benchmarks.view.load import load_run
from agentenvs.benchmarks.view.page import dumps, export_html, index
from agentenvs.benchmarks.view.records import query_record
from agentenvs.benchmarks.view.report import compare, overview, task_rows
from agentenvs.benchmarks.view.runs import RunFormatError


def _traj(task: str, sample: int, won: bool, *, protocol="prefix-grpo", error=None, variant=None):
    steps = [StepRecord("obs", "get 1 stick", "Got 1 stick", float(won), True)]
    return Trajectory(
        env_id="TextCraft-v0", task_id=task, family=f"depth-{task[-1]}", group_id=task,
        sample_index=sample, agent="expert", won=won, turns=1, steps=steps, error=error,
        messages=[{"role": "system", "content": "sys"}, {"role": "user", "content": "obs"},
                  {"role": "assistant", "content": "Action: [[ get 1 stick ]]"},
                  {"role": "user", "content": "Got 1 stick"}],
        protocol=protocol, variant=variant or {},
    )  # fmt: skip


def _run(folder: Path, wins: dict[str, list[bool]], **kwargs) -> Path:
    write_trajectories(
        folder / "trajectories.jsonl",
        [_traj(t, i, w, **kwargs) for t, ws in wins.items() for i, w in enumerate(ws)],
    )
    return folder


def test_kinds_are_told_from_the_files(view_runs, tmp_path):
    assert load_run(view_runs.expert).kind == "eval"
    assert load_run(view_runs.expert / "trajectories.jsonl").kind == "eval"
    sft = load_run(view_runs.sft)  # the learning unit's evaluation, in eval/
    assert sft.kind == "eval" and sft.path == view_runs.sft / "eval" and sft.name == "sft/seed-0"
    assert sft.meta["k"] == 8 and sft.meta["n"] == 8  # the benchmark's eval_k, eval_n
    assert load_run(view_runs.ptgpo).kind == "train"
    assert load_run(view_runs.replay).kind == "replay"
    assert load_run(view_runs.replay.parent).meta["file"] == "validated.jsonl"  # latest stage
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(RunFormatError, match="not a run: expected an eval output folder") as e:
        load_run(tmp_path)
    assert "train rl run" in str(e.value) and "replay" in str(e.value)
    with pytest.raises(RunFormatError, match="does not exist"):
        load_run(tmp_path / "missing")


def test_eval_overview_is_the_table_eval_wrote(view_runs):
    run = load_run(view_runs.random)
    written = json.loads((view_runs.random / "results.json").read_text())
    (metric, errors) = overview(run)
    assert metric["columns"][4:6] == ["Avg@2", "Pass@2"]
    for row, rec in zip(metric["rows"], written["rows"], strict=True):
        assert row[0] == rec["family"] and row[2:4] == [rec["samples"], rec["successes"]]
        assert (
            row[4] == f"{100 * rec['avg_at_k']:.2f}" and row[5] == f"{100 * rec['pass_at_k']:.2f}"
        )
    assert errors["rows"] == [] and errors["note"] == "no episode ended in an error"
    meta = run.meta
    assert (meta["protocol"], meta["variant"], meta["agent"], meta["k"]) == (
        "prefix-grpo",
        {},
        "random:1",
        2,
    )
    assert [t["task_id"] for t in task_rows(run)] == written["task_ids"]


def test_eval_episodes_are_counted_as_eval_counts_them(tmp_path):
    path = tmp_path / "trajectories.jsonl"
    lines = [
        _traj("agentgym/1", 0, False, error="step failed: RuntimeError: worker lost"),
        _traj("agentgym/1", 0, True),  # the retried copy finished: it counts
        _traj("agentgym/1", 0, False),  # a later finished copy does not replace the first
        _traj("agentgym/2", 0, False, error="reset failed: ValueError: bad"),
    ]
    write_trajectories(path, lines)
    with path.open("a") as fh:
        fh.write('{"env_id": "TextCraft-v0", "task_')  # a write cut by a kill
    run = load_run(tmp_path)
    assert [(e["task_id"], e["won"], e["error"]) for e in run.episodes] == [
        ("agentgym/1", True, None),
        ("agentgym/2", False, "reset: ValueError"),
    ]
    assert run.notes and "cut short" in run.notes[0]
    errors = overview(run)[1]
    assert errors["rows"] == [["reset: ValueError", 1, "reset failed: ValueError: bad"]]
    # a bad line that is not the last: an error naming the file and line
    write_trajectories(path, lines)
    text = path.read_text().splitlines()
    path.write_text("\n".join([text[0], '{"schema_version": 2}', text[1]]) + "\n")
    with pytest.raises(RunFormatError, match=r"trajectories.jsonl:2: trajectory lacks"):
        load_run(tmp_path)


def test_paired_difference_flips_and_standard_error_by_hand(tmp_path):
    a = load_run(_run(tmp_path / "a", {
        "agentgym/1": [1, 1, 0, 0], "agentgym/2": [0, 0, 0, 0], "agentgym/3": [1, 1, 1, 1],
        "agentgym/4": [1, 0, 0, 0]}), "A")  # fmt: skip
    b = load_run(_run(tmp_path / "b", {
        "agentgym/1": [1, 1, 1, 0], "agentgym/2": [1, 1, 0, 0], "agentgym/3": [1, 1, 1, 1],
        "agentgym/4": [0, 0, 0, 0], "agentgym/5": [1, 1, 1, 1]}), "B")  # fmt: skip
    c = compare(a, b, 0, 1)
    diffs = [0.25, 0.5, 0.0, -0.25]  # task 5 is in b only: left out, and noted
    mean = sum(diffs) / 4
    se = math.sqrt(sum((d - mean) ** 2 for d in diffs) / 3) / 2
    p = c["paired"]
    assert p["mean_diff"] == pytest.approx(0.125) and p["se"] == pytest.approx(se)
    assert p["z"] == pytest.approx(mean / se)
    assert (p["pairs"], p["better"], p["worse"]) == (4, 2, 1)
    assert c["fixed"] == ["agentgym/2"] and c["broken"] == ["agentgym/4"]
    assert [t["diff"] for t in c["tasks"]] == diffs
    assert "tasks left out (in one run only, or no played sample): 0 of 'A', 1 of 'B'" in c["notes"]


def test_different_protocols_or_variants_are_refused(tmp_path):
    a = load_run(_run(tmp_path / "a", {"agentgym/1": [1]}))
    b = load_run(_run(tmp_path / "b", {"agentgym/1": [1]}, protocol="ptgpo"))
    v = load_run(_run(tmp_path / "v", {"agentgym/1": [1]}, variant={"rules": "fixed"}))
    refused = compare(a, b, 0, 1)["refused"]
    assert "differ in protocol: 'prefix-grpo' vs 'ptgpo'" in refused
    assert "differ in variant: {} vs {'rules': 'fixed'}" in compare(a, v, 0, 1)["refused"]


def test_train_run_saves_and_shows_its_sampled_episodes(view_runs):
    files = sorted((view_runs.ptgpo / "episodes").glob("step-*.jsonl.gz"))
    assert [f.name for f in files] == ["step-0000001.jsonl.gz", "step-0000002.jsonl.gz"]
    sampled = list(read_trajectories(files[0]))
    assert len(sampled) == 3 * 4 and all(t.steps for t in sampled)
    run = load_run(view_runs.ptgpo)
    t = run.training
    assert [it["step"] for it in t["iterations"]] == [1, 2]
    assert all(len(it["episodes"]) == 3 * 4 for it in t["iterations"])  # prompts x samples
    titles = [c["title"] for c in t["curves"]]
    assert titles[:2] == ["held-out Avg@k", "success (sampled episodes)"]
    assert [p["step"] for p in t["eval_points"]] == [0, 1, 2]
    record = run.record(t["iterations"][0]["episodes"][0])
    assert record["part"] == "train" and record["iteration"] == 1
    assert record["steps"][0]["tokens"] > 0 and record["steps"][0]["logprob_stats"]["sum"] < 0
    assert run.meta["algo"] == "ptgpo" and run.meta["protocol"] == "prefix-grpo"
    # evaluation episodes: the SFT unit and this one are comparable
    c = compare(load_run(view_runs.sft), run, 0, 1)
    assert c["refused"] is None and c["paired"]["pairs"] == 3


def test_replay_queries_show_their_prefix_and_cut(view_runs):
    run = load_run(view_runs.replay)
    cut = next(i for i, e in enumerate(run.episodes) if e["prefix_turns"] > 0)
    record = run.record(cut)
    assert len([m for m in record["prefix"] if m["role"] == "assistant"]) == record["prefix_turns"]
    assert record["status"] == "validated" and record["steps"][0]["info"]["probe"]
    assert overview(run)[0]["title"] == "queries by cut strategy and validation status"
    # a sidecar stage row holds the canonical prompt instead of the recorded messages
    row = json.loads(run.store.read(run.refs[cut]))
    sample = {k: v for k, v in row.items() if k != "messages"} | {
        "prompt_messages": row["messages"]
    }
    assert query_record(sample)["prefix"] == record["prefix"]


def test_export_inlines_the_same_index_and_gzipped_episodes(view_runs, tmp_path):
    runs = [load_run(view_runs.expert), load_run(view_runs.random)]
    html = export_html(runs, tmp_path / "view.html").read_text()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)  # nothing from the network
    data = json.loads(re.search(r'id="agentenvs-data"[^>]*>(.*?)</script>', html, re.S)[1])
    assert data == json.loads(json.dumps(index(runs)))
    packed = json.loads(re.search(r'id="agentenvs-episodes"[^>]*>(.*?)</script>', html, re.S)[1])
    first = json.loads(gzip.decompress(base64.b64decode(packed["runs"][1][0])))
    assert first[0] == json.loads(json.dumps(runs[1].record(0)))
    assert sum(
        len(json.loads(gzip.decompress(base64.b64decode(c)))) for c in packed["runs"][0]
    ) == len(runs[0].episodes)


def test_page_json_is_strict():
    """A non-finite number (a -inf log-prob, a NaN metric) would break the browser's parser."""
    assert dumps({"lp": [-0.5, float("-inf")], "m": float("nan")}) == '{"lp":[-0.5,null],"m":null}'


def test_eval_prints_the_view_command(tmp_path, capsys):
    from agentenvs.cli import main

    out = tmp_path / "run"
    assert main(["eval", "TextCraft-v0", "--agent", "expert", "-k", "1", "--limit", "2",
                 "--no-progress", "--out", str(out)]) == 0  # fmt: skip
    assert f"agentenvs view {out}" in capsys.readouterr().out
    from agentenvs.cli import main as cli

    assert cli(["view", str(tmp_path / "nothing-here")]) == 2
    assert "does not exist; expected an eval output folder" in capsys.readouterr().err


@pytest.fixture
def served(view_runs, serve_view):
    with serve_view(view_runs.expert) as url:
        yield url


def test_server_routes_and_one_error_shape(served, view_runs):
    import requests

    index_ = requests.get(served + "api/index", timeout=30).json()
    assert index_["runs"][0]["kind"] == "eval" and len(index_["runs"][0]["episodes"]) == 12
    episode = requests.get(served + "api/runs/0/episodes/11", timeout=30).json()
    assert episode["id"] == 11 and episode["steps"][0]["action"]
    for url, status in (("api/runs/3/episodes/0", 404), ("api/runs/0/episodes/12", 404),
                        ("api/runs/0/episodes/x", 422), ("api/nothing", 404)):  # fmt: skip
        response = requests.get(served + url, timeout=30)
        assert response.status_code == status, url
        assert set(response.json()) == {"error"} and set(response.json()["error"]) == {
            "type",
            "message",
        }
    page = requests.get(served, timeout=30).text
    assert '<script src="viewer.js"></script>' in page
    assert (
        requests.get(served + "viewer.js", timeout=30)
        .headers["content-type"]
        .startswith("text/javascript")
    )
