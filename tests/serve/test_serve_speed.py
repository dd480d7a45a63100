"""benchmarks/speed/serve.py on a tiny setting: it runs, measures every row it promises and
writes its JSON (no timed assertion: the targets are reported, not asserted)."""

from __future__ import annotations

import json

from agentenvs.benchmarks.speed import serve as serve_speed


def test_serve_speed_tiny(tmp_path, capsys) -> None:
    out = tmp_path / "serve_speed.json"
    assert (
        serve_speed.main(
            [
                "TextCraft-v0",
                "--seconds",
                "0.2",
                "--clients",
                "1,3",
                "--workers",
                "1,2",
                "--batch-episodes",
                "1,3",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    record = json.loads(out.read_text())
    assert record["machine"]["cpus"] and record["date"] and record["batch_episodes"] == [1, 3]
    (result,) = record["results"]
    assert set(result["in_process"]) == {"1", "2"}
    rows = {(r["workers"], r["clients"]): r for r in result["server"]}
    assert set(rows) == {(1, 1), (1, 3), (2, 3)}
    for row in rows.values():
        assert row["steps"] > 0 and row["p50_ms"] > 0 and row["p99_ms"] >= row["p50_ms"]
        assert 0 < row["ratio_steps_per_s"]
    batched = result["batched"]
    assert [r["episodes"] for r in batched["rows"]] == [1, 3]
    for row in batched["rows"]:
        assert row["in_process"]["steps"] > 0 and row["server"]["steps"] > 0
        assert row["ratio_steps_per_s"] > 0
    pools = batched["pools"]
    assert pools["episodes"] == 3 and pools["http_pool"]["steps"] > 0
    assert pools["requests"]["step_batch"] > 0 and "step" not in pools["requests"]
    # the batch target is measured at 64 episodes only: not in this run
    assert [t["target"].split(":")[0] for t in record["targets"]] == ["TextCraft"]
    table = capsys.readouterr().out
    assert "| TextCraft-v0 | server | 2 | 3 |" in table and "in process x2" in table
    assert "| TextCraft-v0 | 3 |" in table and "| TextCraft-v0 | 3, pools |" in table


def test_the_batch_target_is_read_from_the_64_episode_row() -> None:
    results = [
        {
            "env_id": "TextCraft-v0",
            "server": [],
            "batched": {
                "rows": [
                    {"episodes": 16, "ratio_steps_per_s": 0.9},
                    {"episodes": serve_speed.BATCH_TARGET_EPISODES, "ratio_steps_per_s": 0.49},
                ]
            },
        }
    ]
    (target,) = serve_speed.targets(results)
    assert target["measured_ratio"] == 0.49 and target["met"] is False
    assert "64 episodes in step batches" in target["target"]
