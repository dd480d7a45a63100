"""benchmarks/serve_speed.py on a tiny setting: it runs, measures every row it promises and
writes its JSON (no timed assertion: the targets are reported, not asserted)."""

from __future__ import annotations

import json

from agentenvs.benchmarks import serve_speed


def test_serve_speed_tiny(tmp_path, capsys) -> None:
    out = tmp_path / "serve_speed.json"
    assert serve_speed.main(["TextCraft-v0", "--seconds", "0.2", "--clients", "1,3",
                             "--workers", "1,2", "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["machine"]["cpus"] and record["date"]
    (result,) = record["results"]
    assert set(result["in_process"]) == {"1", "2"}
    rows = {(r["workers"], r["clients"]): r for r in result["server"]}
    assert set(rows) == {(1, 1), (1, 3), (2, 3)}
    for row in rows.values():
        assert row["steps"] > 0 and row["p50_ms"] > 0 and row["p99_ms"] >= row["p50_ms"]
        assert 0 < row["ratio_steps_per_s"]
    assert [t["target"].split(":")[0] for t in record["targets"]] == ["TextCraft"]
    table = capsys.readouterr().out
    assert "| TextCraft-v0 | server | 2 | 3 |" in table and "in process x2" in table
