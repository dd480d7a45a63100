"""End to end: expert rollouts of two environments -> cuts -> validate -> sidecar, via the CLI."""

from __future__ import annotations

from collections import Counter

import pytest

from agentenvs.agents.trajectory import write_trajectories
from agentenvs.cli import COMMANDS, main
from agentenvs.replay.io import QUERY_SCHEMA, SAMPLE_SCHEMA, VALIDATED_SCHEMA, read_rows


@pytest.fixture(scope="module")
def expert_file(tmp_path_factory):
    """Expert trajectories written by the agents' rollouts: TextCraft (chat-style prompts) and
    Sokoban (template-style prompts)."""
    from agentenvs.agents.rollout import plan_episodes, run_rollouts
    from agentenvs.agents.scripted import ExpertPolicy

    trajectories = []
    for env_id, ids in [
        ("TextCraft-v0", ["agentgym/421", "agentgym/427", "agentgym/140"]),
        ("Sokoban-v0", ["seed/65546", "seed/65539"]),
    ]:
        trajectories += run_rollouts(ExpertPolicy(), env_id, plan_episodes(ids, 1))
    assert all(t.won and t.error is None for t in trajectories)
    path = tmp_path_factory.mktemp("e2e") / "expert.jsonl"
    write_trajectories(path, trajectories)
    return path, trajectories


def test_commands_are_registered() -> None:
    for name in ("replay cuts", "replay validate", "replay sidecar"):
        assert COMMANDS[name][0].startswith("agentenvs.replay.cli:")


def test_end_to_end(expert_file, tiny_model_dir, tmp_path, capsys) -> None:
    path, trajectories = expert_file
    queries, validated, samples = (tmp_path / f for f in ("q.jsonl", "v.jsonl", "s.jsonl"))
    model = ["--model", tiny_model_dir]
    argv = [
        "replay",
        "cuts",
        str(path),
        "-o",
        str(queries),
        *model,
        "--no-progress",
        "--strategy",
        "entropy-change",
        "--strategy",
        "fixed-ratio",
        "--ratios",
        "paper-b",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "| env | strategy | queries | dropped cuts |" in out
    rows = list(read_rows(queries, QUERY_SCHEMA))
    by = Counter((r["env_id"], r["strategy"]) for r in rows)
    assert by[("TextCraft-v0", "raw")] == 3 and by[("Sokoban-v0", "raw")] == 2
    for env_id, n in (("TextCraft-v0", 3), ("Sokoban-v0", 2)):
        # at most k = 3 cuts a trajectory, the cut after the winning step dropped
        assert 0 < by[(env_id, "entropy-change")] <= 3 * n
        assert 0 < by[(env_id, "fixed-ratio")] <= 3 * n
    tokens = [r["cut_token"] for r in rows if r["strategy"] == "entropy-change"]
    assert all(t and t["score"] >= 0 and t["entropy"] > 0 for t in tokens)

    assert main(["replay", "validate", str(queries), "-o", str(validated), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "| env | strategy | validated | mismatch | unverifiable | error |" in out
    assert "| TextCraft-v0 | 100.0% | 100.0% |" in out
    statuses = Counter(r["status"] for r in read_rows(validated, VALIDATED_SCHEMA))
    assert statuses == {"validated": len(rows)}  # deterministic experts: every cut replays

    assert (
        main(["replay", "sidecar", str(validated), "-o", str(samples), *model, "--no-progress"])
        == 0
    )
    out = capsys.readouterr().out
    assert "invariant violations" in out
    written = list(read_rows(samples, SAMPLE_SCHEMA))
    assert len(written) == len(rows)
    for s in written:
        assert s["sidecar_violations"] == []
        chat = s["env_id"] == "TextCraft-v0"
        # chat-style prompts carry the teacher's turns; Sokoban's template prompt quotes them
        assert s["prompt_prefix_turns"] == (s["prefix_turns"] if chat else 0)
        assert (s["prefix_token_count"] > 0) == (chat and s["prefix_turns"] > 0)


def test_limit_and_fixed_ratio_without_a_model(expert_file, tmp_path, capsys) -> None:
    path, _ = expert_file
    queries, validated = tmp_path / "q.jsonl", tmp_path / "v.jsonl"
    argv = [
        "replay",
        "cuts",
        str(path),
        "-o",
        str(queries),
        "--strategy",
        "fixed-ratio",
        "--limit",
        "2",
        "--no-progress",
    ]
    assert main(argv) == 0
    rows = list(read_rows(queries, QUERY_SCHEMA))
    assert {r["trajectory_index"] for r in rows} == {0, 1}
    assert (
        main(
            [
                "replay",
                "validate",
                str(queries),
                "-o",
                str(validated),
                "--limit",
                "3",
                "--no-progress",
            ]
        )
        == 0
    )
    assert len(list(read_rows(validated, VALIDATED_SCHEMA))) == 3
    capsys.readouterr()


def test_cli_errors_are_clear(expert_file, tmp_path, capsys) -> None:
    path, _ = expert_file
    with pytest.raises(SystemExit):
        main(["replay", "cuts", str(path), "-o", str(tmp_path / "q.jsonl"), "--no-progress"])
    assert "pass its path (--model)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["replay", "validate", str(path), "-o", str(tmp_path / "v.jsonl"), "--no-progress"])
    assert "expected a 'replay.query' row" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(
            ["replay", "cuts", str(path), "-o", "x", "--strategy", "fixed-ratio", "--ratios", "a,b"]
        )
    assert "preset" in capsys.readouterr().err


def test_bad_inputs_are_counted_not_dropped(expert_file, tiny_model_dir, tmp_path, capsys) -> None:
    from agentenvs.replay.cuts import CutConfig, CutStrategy
    from agentenvs.replay.io import write_rows
    from agentenvs.replay.stages import run_cuts, run_sidecar

    _, trajectories = expert_file
    broken = trajectories[0].__class__(**{**trajectories[0].__dict__})
    broken.steps = broken.steps[:-1]
    source = tmp_path / "t.jsonl"
    write_trajectories(source, [broken, trajectories[1]])
    summary = run_cuts(
        [source], tmp_path / "q.jsonl", [CutConfig(CutStrategy.FIXED_RATIO)], progress=False
    )
    assert summary.trajectories == 2
    assert summary.skipped == {"messages and steps misaligned": 1}
    assert "assistant messages but" in summary.table()

    # a validated row whose prompt does not end at an observation: flagged, written, exit 1
    rows = list(read_rows(tmp_path / "q.jsonl", QUERY_SCHEMA))
    good = {**rows[1], "status": "validated", "replayed_observation": rows[1]["cut_observation"]}
    bad = {**good, "query_id": "bad", "messages": good["messages"][:-1]}
    validated = tmp_path / "v.jsonl"
    write_rows(validated, VALIDATED_SCHEMA, [good, bad])
    sidecar = run_sidecar(
        validated, tmp_path / "s.jsonl", model_path=tiny_model_dir, progress=False
    )
    assert sidecar.violation_rows == 1 and "bad: cannot build" in sidecar.table()
    written = {r["query_id"]: r for r in read_rows(tmp_path / "s.jsonl", SAMPLE_SCHEMA)}
    assert (
        written["bad"]["sidecar_violations"] and not written[good["query_id"]]["sidecar_violations"]
    )
    argv = [
        "replay",
        "sidecar",
        str(validated),
        "-o",
        str(tmp_path / "s2.jsonl"),
        "--model",
        tiny_model_dir,
        "--no-progress",
    ]
    assert main(argv) == 1
    capsys.readouterr()
